"""base.text: the one text reader both families use (corpora by line, an LM's text whole),
the file checked before a byte is read."""

from __future__ import annotations

import os

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.text import JSON_DEPTH, json_depth, read_file, read_json, read_lines, read_text


def test_lines_and_whole_text_of_one_file(tmp_path):
    file = tmp_path / "t.txt"
    file.write_bytes("\ufeffone\r\ntwo\u2028still two\n\nthree".encode())
    assert read_lines(file) == ["one", "two\u2028still two", "", "three"]
    assert read_text(file) == "one\r\ntwo\u2028still two\n\nthree"


def test_not_utf8_names_the_line_or_the_offset(tmp_path):
    file = tmp_path / "bad.txt"
    file.write_bytes(b"ok\nca\xe9\n")
    with pytest.raises(UsageError, match=r"bad.txt:2: not UTF-8 \(byte 0xe9 at column 3\)"):
        read_lines(file)
    with pytest.raises(UsageError, match=r"bad.txt: not UTF-8 \(byte 0xe9 at byte offset 5\)"):
        read_text(file)
    file.write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(UsageError, match="bad.txt: empty text"):
        read_text(file)


@pytest.mark.parametrize("reader", [read_file, read_lines, read_text])
def test_a_device_a_pipe_a_directory_or_nothing_is_refused_unread(reader, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for path, kind in (("/dev/zero", "is a character device, not a regular file"),
                       (tmp_path / "pipe", "is a named pipe, not a regular file"),
                       (tmp_path, "is a directory"), (tmp_path / "none", "does not exist")):
        with pytest.raises(UsageError, match=f"^--text {path} {kind}"):
            reader(path, "--text")


def test_json_errors_name_the_file_line_and_column(tmp_path):
    file = tmp_path / "config.json"
    file.write_text('{"a": 1,\n "b": 2,,}')
    with pytest.raises(UsageError, match=r"config.json: not valid JSON \(Expecting property name "
                                         r"enclosed in double quotes at line 2 column 9\)$"):
        read_json(file)
    file.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="config.json: JSON nested too deeply to read"):
        read_json(file)
    file.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(UsageError, match=r"config.json: not valid JSON \(not UTF-8: byte "
                                         r"0xe9 at byte offset 7\)$"):
        read_json(file)
    file.write_text('{"a": [1, 2]}')
    assert read_json(file) == {"a": [1, 2]}
    with pytest.raises(UsageError, match="is a character device, not a regular file"):
        read_json("/dev/zero")


@pytest.mark.parametrize("text,found", [("ab\udcff", "byte 0xff, not UTF-8, at character 3"),
                                        ("\ud800x", "a lone surrogate U+D800 at character 1")])
def test_check_text_names_a_byte_that_is_not_utf8(text, found):
    from decoderkit.base.text import check_text

    with pytest.raises(UsageError) as caught:
        check_text(text, "--prompt")
    assert str(caught.value) == f"--prompt is not Unicode text: {found}"
    assert check_text("héllo ✓") == "héllo ✓"
    with pytest.raises(TypeError):
        check_text(b"bytes")


def test_json_nested_past_the_depth_limit_is_refused_whatever_python_could_parse(tmp_path):
    file = tmp_path / "config.json"
    for depth in (JSON_DEPTH + 1, 900):  # parses in Python, yet a repr of it might not
        file.write_text('{"n_layers": ' + "[" * depth + "]" * depth + "}")
        with pytest.raises(UsageError, match=f"config.json: JSON nested too deeply to read "
                                             rf"\(more than {JSON_DEPTH} levels"):
            read_json(file)
    file.write_text("[" * (JSON_DEPTH - 1) + "]" * (JSON_DEPTH - 1))
    assert json_depth(read_json(file)) == JSON_DEPTH - 1
    file.write_text("null")
    assert read_json(file) is None
