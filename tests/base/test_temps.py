"""What a killed write leaves (hidden temporaries of ours) is removed by the next write of the
same output and named; nothing else: a user's look-alike, a live writer's temporary, the only
copy of a replaced checkpoint."""

import fcntl
import os

from decoderkit.base.files import write_atomic, write_directory
from decoderkit.base.temps import leftovers, remove_leftovers

TOKEN = "0123456789ab"  # 12 hex digits, as temp_sibling makes


def test_a_killed_writes_partial_copies_are_removed_and_named_by_the_next_write(tmp_path, capsys):
    out = tmp_path / "run"
    partial = tmp_path / f".run.decoderkit-{TOKEN}"  # a directory being filled when killed
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    stale_file = tmp_path / f".x.json.decoderkit-{TOKEN}.tmp"
    stale_file.write_text("half")
    users = [tmp_path / ".run.decoderkit-notmine", tmp_path / "run.tmp",
             tmp_path / f".run.decoderkit-{TOKEN}x"]  # not our names: never touched
    for path in users:
        path.write_text("the user's")
    write_directory(out, "--out", lambda tmp: (tmp / "a").write_text("1"), lambda real: None,
                    (".old", "x"))
    err = capsys.readouterr().err
    assert f"removed 1 partial copy(ies) that an interrupted decoderkit write left beside {out}"\
        in err and partial.name in err and not partial.exists()
    write_atomic(tmp_path / "x.json", lambda tmp: tmp.write_text("{}"))
    assert stale_file.name in capsys.readouterr().err and not stale_file.exists()
    assert all(p.read_text() == "the user's" for p in users)


def test_a_holder_is_kept_while_it_is_the_only_copy_and_a_live_writers_temporary_always(
        tmp_path):
    out = tmp_path / "run"
    holder = tmp_path / f".run.decoderkit-{TOKEN}-previous"  # a crash between the renames
    (holder / "checkpoint").mkdir(parents=True)
    assert leftovers(out) == []  # run/ is missing: the holder is the checkpoint now
    out.mkdir()
    assert leftovers(out) == [holder]  # the new one is in place: the holder is stale
    live = tmp_path / f".run.decoderkit-{'f' * 12}"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as base.temps.held does for a write in progress
    try:
        assert live not in leftovers(out)
        assert remove_leftovers(out) == [holder.name] and live.exists()
    finally:
        os.close(fd)
