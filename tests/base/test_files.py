"""Atomic writes never touch a user's file of a similar name, and leave nothing behind on
failure; lines are split on newlines only and decoded with the failing byte named."""

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.files import (
    MARK_WINDOW,
    check_output_file,
    output_mark,
    temp_sibling,
    write_atomic,
    write_output,
)
from decoderkit.base.text import decode_line, split_lines


def test_write_atomic_leaves_a_users_tmp_file_alone(tmp_path):
    target = tmp_path / "out.json"
    users = {name: f"user's {name}" for name in ("out.json.tmp", ".out.json.tmp", "out.json.old")}
    for name, text in users.items():
        (tmp_path / name).write_text(text)
    seen = []
    write_atomic(target, lambda tmp: (seen.append(tmp), tmp.write_text("new")))
    assert target.read_text() == "new"
    assert {name: (tmp_path / name).read_text() for name in users} == users
    assert seen[0].parent == tmp_path and seen[0].name.startswith(".out.json.decoderkit-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*users, "out.json"])


def test_write_atomic_failure_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_temp_names_are_unique_hidden_and_new(tmp_path):
    names = {temp_sibling(tmp_path / "x") for _ in range(50)}
    assert len(names) == 50
    assert all(n.name.startswith(".x.decoderkit-") and not n.exists() for n in names)


def test_split_lines_on_newlines_only():
    data = "a\u2028b\tc\r\nd\x0ce\x1cf\n\ng\u0085h".encode()
    assert split_lines(data) == ["a\u2028b\tc".encode(), "d\x0ce\x1cf".encode(), b"",
                                 "g\u0085h".encode()]
    assert split_lines(b"") == [] and split_lines(b"\n") == [b""]
    assert len(data.decode().splitlines()) == 8  # what str.splitlines did: 8 lines


def test_decode_line_drops_a_bom_only_first_and_names_a_bad_byte():
    assert decode_line("\ufeffhé".encode(), first=True) == "hé"
    assert decode_line("\ufeffhé".encode()) == "\ufeffhé"
    with pytest.raises(UsageError, match=r"not UTF-8 \(byte 0xff at column 3\)"):
        decode_line("hé\xff".encode("utf-8")[:3] + b"\xff")


def test_an_output_file_replaces_only_an_earlier_output_of_its_command(tmp_path):
    mark = output_mark("grade")
    new = tmp_path / "new.json"
    assert check_output_file(new, "--json", "grade") == new  # new: fine, nothing made
    assert not new.exists()
    write_output(new, "--json", "grade", lambda tmp: tmp.write_text(f'{{"by": "{mark}"}}'))
    write_output(new, "--json", "grade", lambda tmp: tmp.write_text(f'{{"by": "{mark}", "n": 2}}'))
    assert '"n": 2' in new.read_text()
    users = tmp_path / "notes.json"
    users.write_text('{"mine": true}')
    with pytest.raises(UsageError, match=r"--json .*notes.json exists and was not written by "
                                         r"decoderkit grade; refusing to replace it"):
        write_output(users, "--json", "grade", lambda tmp: tmp.write_text("x"))
    with pytest.raises(UsageError, match="not written by decoderkit translate"):  # another's
        check_output_file(new, "--explain-out", "translate")
    (tmp_path / "late.json").write_bytes(b" " * MARK_WINDOW + mark.encode())  # mark too late
    link = tmp_path / "link.json"
    link.symlink_to(new)
    for path, message in ((tmp_path / "late.json", "not written by"), (link, "is a symlink"),
                          (tmp_path, "not a regular file"), ("", "must name a file")):
        with pytest.raises(UsageError, match=message):
            check_output_file(path, "--json", "grade")
    assert users.read_text() == '{"mine": true}' and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.json", "link.json", "new.json",
                                                          "notes.json"]


def test_write_directory_swaps_in_a_complete_directory_or_leaves_the_old_one(tmp_path):
    from decoderkit.base.files import write_directory

    out = tmp_path / "out"
    refused = []

    def check(real):
        refused.append(real)

    write_directory(out, "--out", lambda tmp: (tmp / "a").write_text("1"), check, (".old", "x"))
    assert (out / "a").read_text() == "1" and refused == [out.resolve()]

    def broken(tmp):
        (tmp / "a").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_directory(out, "--out", broken, check, (".old", "x"))
    assert (out / "a").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_foreign_entries_are_what_this_program_did_not_write(tmp_path):
    from decoderkit.base.files import foreign_entries

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_text("x")
    (tmp_path / "mine.json").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "mine.json")
    assert foreign_entries(tmp_path, ["mine.json", "sub/w.bin"]) == ["link", "notes.txt"]
    assert foreign_entries(tmp_path, ["mine.json"]) == ["link", "notes.txt", "sub", "sub/w.bin"]


FULL = [OSError(28, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0"),
        RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")]


@pytest.mark.parametrize("error", FULL, ids=["ENOSPC", "torch-pos", "torch-write"])
def test_a_full_disk_is_one_line_naming_the_directory_and_leaves_no_temporary(tmp_path, error):
    from decoderkit.base.files import write_directory

    def full(tmp):
        (tmp / "part").write_bytes(b"half") if tmp.is_dir() else tmp.write_bytes(b"half")
        raise error

    for write in (lambda: write_atomic(tmp_path / "x.json", full),
                  lambda: write_directory(tmp_path / "out", "--out", full, lambda real: None,
                                          (".old", "x"))):
        with pytest.raises(UsageError) as caught:
            write()
        assert str(caught.value).startswith(f"no space left on {tmp_path} (the partial write "
                                            "was removed")
        assert list(tmp_path.iterdir()) == []


def test_other_write_errors_keep_their_type(tmp_path):
    from decoderkit.base.files import out_of_space

    assert out_of_space(OSError(13, "Permission denied"), tmp_path) is None
    assert out_of_space(UsageError("no space left on x"), tmp_path) is None  # already one
    assert out_of_space(KeyboardInterrupt(), tmp_path) is None
