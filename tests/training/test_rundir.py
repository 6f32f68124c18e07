"""The output directory of a run: refused when it is a file, holds other files, holds a
checkpoint without --resume/--overwrite, or another run is writing into it (the lock)."""

import subprocess
import sys

import pytest

from conftest import tiny_checkpoint
from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import FILES, load_checkpoint
from decoderkit.training.rundir import check_out, locked

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--max-len", "40",
        "--batch-size", "16", "--train-size", "64", "--valid-size", "8", "--warmup", "2",
        "--max-steps", "2", "--valid-every", "2", "--quiet", "--show", "0"]


def one_line(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_out_naming_a_file_is_refused_and_left_alone(tmp_path, capsys):
    file = tmp_path / "results"
    file.write_text("mine")
    assert "is a file" in one_line(capsys, ["train", "--task", "copy", "--out", str(file), *TINY])
    assert file.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_a_directory_with_other_files_is_refused_naming_them_even_with_overwrite(tmp_path,
                                                                                 capsys):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"\xff\xd8")
    for extra in ([], ["--overwrite"]):
        err = one_line(capsys, ["train", "--task", "copy", "--out", str(out), *TINY, *extra])
        assert "cat.jpg" in err and "not part of a decoderkit checkpoint" in err
    assert [p.name for p in out.iterdir()] == ["cat.jpg"]


LM_TINY = ["--max-steps", "1", "--block-size", "8", "--batch-size", "2", "--layers", "1",
           "--d-model", "8", "--heads", "1"]


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "meta.json", "trainer.pt"])
@pytest.mark.parametrize("family", ["lm", "seq2seq"])
def test_a_checkpoints_file_names_without_a_checkpoint_are_the_users_and_kept(
        tmp_path, capsys, name, family):
    """A folder holding a user's own config.json (or another of the format's names) but no
    model: refused, --overwrite or not, both families (every save writes a whole checkpoint,
    so no run left them)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my own")
    text = tmp_path / "t.txt"
    text.write_text("hello world, a little text to train on. " * 50)
    argv = (["lm", "train", "--text", str(text), "--out", str(out), *LM_TINY] if family == "lm"
            else ["train", "--task", "copy", "--out", str(out), *TINY])
    for extra in ([], ["--overwrite"]):
        err = one_line(capsys, [*argv, *extra])
        assert name in err and ("no checkpoint" in err or "not part of" in err)
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == "my own"


def test_overwrite_replaces_a_checkpoint_and_an_empty_directory_is_fine(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["train", "--task", "copy", "--out", str(empty), *TINY]) == 0
    assert "already holds a checkpoint" in one_line(
        capsys, ["train", "--task", "copy", "--out", str(empty), *TINY])
    assert main(["train", "--task", "copy", "--out", str(empty), "--overwrite", *TINY]) == 0
    assert "exclude each other" in one_line(
        capsys, ["train", "--task", "copy", "--out", str(empty), "--overwrite", "--resume",
                 *TINY])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".empty.decoderkit-lock", "empty"]


def test_a_second_run_into_the_same_directory_is_refused_at_start(tmp_path, capsys):
    out = tmp_path / "run"
    with locked(out):
        with pytest.raises(UsageError, match="another decoderkit run is writing into"):
            check_out(out, resume=False, overwrite=False, files=FILES)
        err = one_line(capsys, ["train", "--task", "copy", "--out", str(out), *TINY])
        assert "another decoderkit run" in err and not out.exists()
    check_out(out, resume=False, overwrite=False, files=FILES)  # released


def test_the_lock_holds_across_processes(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom decoderkit.training.rundir import locked"
         f"\nwith locked({str(out)!r}):\n    print('held', flush=True)\n    sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match="another decoderkit run"):
            check_out(out, resume=False, overwrite=False, files=FILES)
    finally:
        holder.communicate("", timeout=60)
    check_out(out, resume=False, overwrite=False, files=FILES)


def test_resume_without_a_checkpoint_and_resume_with_one(tmp_path, capsys):
    assert "no checkpoint in" in one_line(
        capsys, ["train", "--task", "copy", "--out", str(tmp_path / "none"), "--resume", *TINY])
    tiny_checkpoint(tmp_path / "ckpt")
    check_out(tmp_path / "ckpt", resume=True, overwrite=False, files=FILES)


def test_out_through_a_symlink_trains_and_resumes_into_the_target_and_keeps_the_link(
        tmp_path, capsys):
    real = tmp_path / "disk" / "run"
    real.parent.mkdir()
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    assert "dangling symlink" in one_line(  # the target must exist: nothing made for it
        capsys, ["train", "--task", "copy", "--out", str(link), *TINY])
    assert not real.exists()
    real.mkdir()
    assert main(["train", "--task", "copy", "--out", str(link), *TINY]) == 0
    assert link.is_symlink() and link.readlink() == real
    assert (real / "model.safetensors").is_file()
    steps = [*TINY[:TINY.index("--max-steps")], "--max-steps", "4",
             *TINY[TINY.index("--max-steps") + 2:]]
    assert main(["train", "--task", "copy", "--out", str(link), "--resume", *steps]) == 0
    assert link.is_symlink() and link.readlink() == real
    assert load_checkpoint(real).step == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "latest"]
    assert sorted(p.name for p in real.parent.iterdir()) == [".run.decoderkit-lock", "run"]


def test_no_alias_of_a_directory_escapes_its_lock(tmp_path, monkeypatch):
    out = tmp_path / "runs" / "a"
    out.parent.mkdir()
    (tmp_path / "link").symlink_to(out.parent, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    aliases = ["runs/a", "./runs/../runs/a", str(tmp_path / "link" / "a"), "link/a/"]
    with locked(out):
        for alias in aliases:
            with pytest.raises(UsageError, match="another decoderkit run"):
                check_out(alias, resume=False, overwrite=False, files=FILES)
    assert sorted(p.name for p in out.parent.iterdir()) == [".a.decoderkit-lock"]


@pytest.mark.parametrize("out,message", [
    (".", "is the working directory"),
    ("", "expected a path, got ''"),  # refused as it is parsed (cli.args.pathname)
    ("loop", "cannot resolve"),
    ("dangling", "dangling symlink"),
    ("x" * 250, "name too long"),
    ("sub/" + "y" * 300, "name too long"),
])
def test_out_paths_that_cannot_be_a_run_directory_are_refused_before_training(
        tmp_path, capsys, monkeypatch, out, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    err = one_line(capsys, ["train", "--task", "copy", "--out", out, *TINY])
    assert "--out" in err and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "loop"]


def test_a_run_killed_mid_save_leaves_a_partial_copy_that_the_next_run_names_and_removes(
        tmp_path, capsys):
    out = tmp_path / "run"
    tiny_checkpoint(out)
    partial = tmp_path / ".run.decoderkit-00112233aabb"  # what a kill during fill leaves
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    check_out(out, resume=True, overwrite=False, files=FILES)
    err = capsys.readouterr().err
    assert "removed 1 partial copy(ies)" in err and partial.name in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.decoderkit-lock", "run"]


def test_under_torchrun_the_other_processes_check_without_the_lock(tmp_path, monkeypatch):
    """Rank 0 holds the lock while it removes a killed run's copies (and from the start of the
    job); the other ranks' check_out makes the same refusals without it and leaves the copies
    to rank 0 (taking the lock, a rank 1 checking meanwhile failed the whole job)."""
    out = tmp_path / "run"
    tiny_checkpoint(out)
    partial = tmp_path / ".run.decoderkit-00112233aabb"
    partial.mkdir()
    monkeypatch.setenv("RANK", "1")
    with locked(out):
        check_out(out, resume=True, overwrite=False, files=FILES)
        with pytest.raises(UsageError, match="already holds a checkpoint"):
            check_out(out, resume=False, overwrite=False, files=FILES)
    assert partial.exists()
    monkeypatch.setenv("RANK", "0")
    with locked(out), pytest.raises(UsageError, match="another decoderkit run"):
        check_out(out, resume=True, overwrite=False, files=FILES)
