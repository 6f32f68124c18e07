"""Corpora in: errors name the file and line, a BOM is not text, only newlines end a line,
a TAB inside a field is refused, and pairs dropped for length are counted and reported."""

import os

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.training.seq2seq.data import read_parallel, read_tsv
from decoderkit.training.seq2seq.prepare import DataConfig, prepare_data

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--batch-size", "4",
        "--warmup", "1", "--max-steps", "1", "--valid-every", "1", "--vocab-size", "60",
        "--quiet", "--show", "0"]


def test_undecodable_bytes_name_the_file_line_and_column(tmp_path):
    bad = tmp_path / "pairs.tsv"
    bad.write_bytes(b"one\tun\ntwo\tdeux\nthr\xe9e\ttrois\n")
    with pytest.raises(UsageError, match=r"pairs.tsv:3: not UTF-8 \(byte 0xe9 at column 4\)"):
        read_tsv(bad)
    (tmp_path / "t.txt").write_bytes(b"x\n\xff\n")
    (tmp_path / "s.txt").write_bytes(b"a\nb\n")
    with pytest.raises(UsageError, match=r"t.txt:2: not UTF-8"):
        read_parallel(tmp_path / "s.txt", tmp_path / "t.txt")


def test_a_bom_is_not_part_of_the_first_source(tmp_path):
    tsv = tmp_path / "bom.tsv"
    tsv.write_bytes("\ufeffhello\tbonjour\r\nyes\toui\r\n".encode())
    assert read_tsv(tsv) == [("hello", "bonjour"), ("yes", "oui")]
    (tmp_path / "s.txt").write_bytes("\ufeffa\nb\n".encode())
    (tmp_path / "t.txt").write_bytes("\ufeffx\ny\n".encode())
    assert read_parallel(tmp_path / "s.txt", tmp_path / "t.txt") == [("a", "x"), ("b", "y")]


def test_parallel_files_split_on_newlines_only(tmp_path):
    src = ["one\u2028still one", "two\x0ctwo", "three\x85"]
    tgt = ["un", "deux", "trois"]
    (tmp_path / "s.txt").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    assert read_parallel(tmp_path / "s.txt", tmp_path / "t.txt") == list(zip(src, tgt,
                                                                             strict=True))


def test_a_tab_inside_a_field_is_refused_naming_the_line(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("a\tb\nc\td\te\n")
    with pytest.raises(UsageError, match=r"pairs.tsv:2: 2 TABs; a field may not contain a TAB"):
        read_tsv(tsv)
    (tmp_path / "s.txt").write_text("a\nb\tc\n")
    (tmp_path / "t.txt").write_text("x\ny\n")
    with pytest.raises(UsageError, match=r"s.txt:2: a TAB inside the sentence"):
        read_parallel(tmp_path / "s.txt", tmp_path / "t.txt")


def corpus(tmp_path, long_every: int = 0):
    words = ["cat", "dog", "bird", "fish", "cow", "owl"]
    lines = [f"the {a} sees a {b}\tle {b} voit un {a}" for a in words for b in words]
    if long_every:
        lines = [line + (" and so on" * 20 if i % long_every == 0 else "")
                 for i, line in enumerate(lines)]
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pairs_dropped_for_length_are_counted_and_reported(tmp_path, capsys):
    path = corpus(tmp_path, long_every=4)  # 9 of 36 pairs are long
    data = prepare_data(DataConfig(tsv=str(path), vocab_size=60, max_tokens=30))
    assert sum(data.dropped) == 9
    assert len(data.train) + len(data.valid) == 27
    assert data.dropped[0] == 33 - len(data.train) and data.dropped[1] == 3 - len(data.valid)
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "run"), "--max-len", "32",
                 *TINY]) == 0
    err = capsys.readouterr().err
    assert f"dropped {data.dropped[0]} training and {data.dropped[1]} held-out pairs" in err


@pytest.mark.parametrize("flags,message", [
    (["--data", "{tmp}/none.tsv"], "--data {tmp}/none.tsv does not exist"),
    (["--src", "{tmp}/none.txt", "--tgt", "{tmp}/pairs.tsv"], "none.txt does not exist"),
    (["--data", "{tmp}"], "--data {tmp} is a directory, not a regular file"),
    (["--data", "/dev/null"], "--data /dev/null is a character device, not a regular file"),
    (["--data", "{tmp}/fifo"], "--data {tmp}/fifo is a named pipe, not a regular file"),
    (["--src", "{tmp}/pairs.tsv", "--tgt", "{tmp}/fifo"], "--tgt {tmp}/fifo is a named pipe"),
    (["--data", "{tmp}/dangling"], "--data {tmp}/dangling is a dangling symlink"),
])
def test_input_paths_that_are_not_files_say_what_they_are_and_create_nothing(
        tmp_path, capsys, flags, message):
    """A pipe would block the read forever: refused before anything is opened."""
    corpus(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    message = message.format(tmp=tmp_path)
    argv = ["train", *(f.format(tmp=tmp_path) for f in flags), "--out", str(tmp_path / "run"),
            *TINY]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "fifo", "pairs.tsv"]


def test_data_config_fields_are_checked_naming_the_field():
    for field, value in (("valid_size", 0), ("vocab_size", 4), ("max_tokens", 2.5),
                         ("seed", -1), ("train_size", True)):
        with pytest.raises(UsageError, match=f"{field} must be an integer"):
            DataConfig(task="copy", **{field: value})
    with pytest.raises(UsageError, match="tsv must be a non-empty str"):
        DataConfig(tsv="")
