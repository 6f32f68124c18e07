"""interop.artifacts: an export directory replaces only what its previous manifest lists, and
a symlink --out keeps pointing at its target, the real directory being what is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import MANIFEST, write_directory


def fill(version: str):
    """A stand-in engine's export: a manifest, a weights file and one in a sub-folder."""
    def write(tmp: Path) -> None:
        (tmp / MANIFEST).write_text(json.dumps({"engine": "test", "version": version}))
        (tmp / "model.bin").write_text(version)
        (tmp / "vocab").mkdir()
        (tmp / "vocab" / "src.txt").write_text(version)
    return write


def version(out: Path) -> str:
    return json.loads((out / MANIFEST).read_text())["version"]


def test_overwrite_replaces_an_export_holding_only_its_listed_files(tmp_path):
    out = write_directory(tmp_path / "out", False, fill("1"))
    assert json.loads((out / MANIFEST).read_text())["files"] == [
        MANIFEST, "model.bin", "vocab/src.txt"]
    write_directory(out, True, fill("2"))
    assert version(out) == "2" and (out / "vocab" / "src.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


@pytest.mark.parametrize("made", ["folder", "nested folder", "symlink to a folder",
                                  "symlink to a file", "symlink in place of a listed file"])
def test_what_a_user_put_inside_out_survives_and_is_named(tmp_path, made):
    out = write_directory(tmp_path / "out", False, fill("1"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.txt").write_text("mine")
    name = {"folder": "notes", "nested folder": "vocab/extra", "symlink to a folder": "link",
            "symlink to a file": "link.txt", "symlink in place of a listed file": "model.bin"}[
        made]
    if made.endswith("folder") and not made.startswith("symlink"):
        (out / name).mkdir()
    else:
        if (out / name).exists():
            (out / name).unlink()
        target = mine if made == "symlink to a folder" else mine / "data.txt"
        (out / name).symlink_to(target)
    with pytest.raises(UsageError, match=name) as caught:
        write_directory(out, True, fill("2"))
    assert "--overwrite" in str(caught.value)
    assert version(out) == "1"
    assert os.path.lexists(out / name) and (mine / "data.txt").read_text() == "mine"


def test_out_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "exports" / "ct2"
    real.parent.mkdir()
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(UsageError, match="dangling symlink"):  # a link to nothing: refused
        write_directory(link, False, fill("0"))
    write_directory(real, False, fill("1"))
    write_directory(link, True, fill("2"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert version(real) == "2" and version(link) == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "latest"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["ct2"]


@pytest.mark.parametrize("out", ["", "."])
def test_empty_and_working_directory_out_are_refused(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="--out"):
        write_directory(out, True, fill("1"))
    assert list(tmp_path.iterdir()) == []


# ---- a damaged or edited export: one clear line naming the file, never a crash or garbage


@pytest.fixture(scope="module")
def ct2_export(tmp_path_factory):
    """A small CTranslate2 export (copied per test before it is damaged)."""
    pytest.importorskip("ctranslate2")
    from interop.export_helpers import random_checkpoint

    from decoderkit.interop.seq2seq.ctranslate2 import export_ctranslate2

    root = tmp_path_factory.mktemp("ct2")
    ckpt = random_checkpoint(root / "ckpt", norm_first=False, tied=False)
    return export_ctranslate2(ckpt, root / "export")


@pytest.fixture()
def export(ct2_export, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(ct2_export, tmp_path / "export"))


def reseal(out: Path) -> None:
    """Record the current bytes of every file in the manifest (a consistent edit)."""
    from decoderkit.base.files import file_sha256

    manifest = json.loads((out / MANIFEST).read_text())
    manifest["sha256"] = {f: file_sha256(out / f) for f in manifest["files"] if f != MANIFEST}
    (out / MANIFEST).write_text(json.dumps(manifest))


def opened(out: Path, *needles: str) -> None:
    """Opening the export in CTranslate2 fails with one line holding every needle."""
    from decoderkit.interop.engines import open_export

    with pytest.raises(UsageError) as caught:
        open_export("ctranslate2", out)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_an_export_records_and_verifies_the_checksum_of_every_file(export):
    from decoderkit.interop.engines import open_export

    manifest = json.loads((export / MANIFEST).read_text())
    assert sorted(manifest["sha256"]) == sorted(f for f in manifest["files"] if f != MANIFEST)
    open_export("ctranslate2", export)  # intact: loads
    data = bytearray((export / "model.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte deep inside the weights
    (export / "model.bin").write_bytes(bytes(data))
    opened(export, f"{export / 'model.bin'}: checksum mismatch")


@pytest.mark.parametrize("content,needle", [
    (b"{not json", "not valid JSON (Expecting property name enclosed in double quotes at line 1 "
     "column 2)"),
    (b'{"engine": "ctranslate2", "config": \xff}', "not valid JSON (not UTF-8: byte 0xff at "
     "byte offset 36)"),
    (b"[" * 100_000, "JSON nested too deeply to read"),
    (b"[1, 2]", "expected a JSON object, got list"),
    (b'{"engine": "ctranslate2", "weights": "float32"}', "no 'config'"),
    (b'{"engine": "ctranslate2", "weights": "float32", "config": 5}', "'config' must be"),
    (b'{"engine": "ctranslate2", "weights": "float32", "config": {"src_vocab": 1e9}}',
     "bad 'config'"),
])
def test_a_damaged_manifest_is_one_line_naming_it(export, content, needle):
    (export / MANIFEST).write_bytes(content)
    opened(export, str(export / MANIFEST), needle)


def test_damaged_weights_with_a_consistent_manifest_are_named_by_the_engine(export):
    (export / "model.bin").write_bytes(b"\x00" * 64)
    reseal(export)
    opened(export, f"{export / 'model.bin'}: CTranslate2 cannot load it")


def test_weights_replaced_by_a_pipe_are_refused_without_blocking(export):
    (export / "model.bin").unlink()
    os.mkfifo(export / "model.bin")
    opened(export, str(export / "model.bin"), "is a named pipe")


def test_a_tokenizer_whose_size_does_not_match_the_config_is_named(export):
    from decoderkit.text.seq2seq.tokenizer import Tokenizer

    Tokenizer.characters(["abc"]).save(export / "src_tokenizer.json")
    reseal(export)
    opened(export, str(export / "src_tokenizer.json"), "has 7 tokens but", "gives a model of")


def test_translate_on_a_damaged_export_is_one_line_and_exit_2(export, capsys):
    from decoderkit.cli import main

    (export / MANIFEST).write_text("[]")
    assert main(["translate", "--engine", "ctranslate2", "--model", str(export), "12"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "expected a JSON object" in captured.err


@pytest.mark.parametrize("listed, needle", [
    ("../../outside", "lists '../../outside', a name outside the export"),
    ("/etc/passwd", "lists '/etc/passwd', a name outside the export"),
    ("sub/../../x", "lists 'sub/../../x', a name outside the export"),
    ("a\0b", "lists 'a\\x00b', a name outside the export"),
    ("out", "out (listed in decoderkit.json) is a symlink; an export holds regular files only"),
    ("zero", "zero (listed in decoderkit.json) is a symlink"),
    ("pipe", "pipe (listed in decoderkit.json) is a named pipe; an export holds regular files"),
    ("linked/f", "linked (listed in decoderkit.json) is a symlink"),
])
def test_manifest_names_outside_the_export_are_refused_unread(export, tmp_path, listed, needle,
                                                              capsys):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "f").write_text("x")
    os.symlink(tmp_path / "secret" / "f", export / "out")
    os.symlink("/dev/zero", export / "zero")
    os.symlink(tmp_path / "secret", export / "linked")
    os.mkfifo(export / "pipe")
    manifest = json.loads((export / MANIFEST).read_text())
    manifest["files"].append(listed)
    (export / MANIFEST).write_text(json.dumps(manifest))
    opened(export, needle, "refusing to read it")
    from decoderkit.cli import main

    assert main(["translate", "--engine", "ctranslate2", "--model", str(export), "12"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_shortened_vocabulary_or_edited_special_tokens_are_named(export, capsys):
    from decoderkit.cli import main

    vocab_file = export / "shared_vocabulary.json"
    vocab = json.loads(vocab_file.read_text())
    vocab_file.write_text(json.dumps(vocab[:-3]))
    reseal(export)  # checksums updated: only the content check can tell
    opened(export, f"{vocab_file} holds {len(vocab) - 3} tokens, but decoderkit.json gives a "
                   f"source vocabulary of {len(vocab)}")
    for command in ("translate", "serve"):  # refused before any line or request is taken
        argv = [command, "--engine", "ctranslate2", "--model", str(export)]
        assert main(argv + (["12"] if command == "translate" else ["--port", "1"])) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{vocab_file} holds {len(vocab) - 3} tokens" in err
    vocab_file.write_text(json.dumps(vocab[::-1]))
    reseal(export)
    opened(export, f"{vocab_file}: token 0 is {vocab[-1]!r}, but the source tokenizer has "
                   f"{vocab[0]!r}")
    vocab_file.write_text(json.dumps(vocab))
    settings = json.loads((export / "config.json").read_text())
    (export / "config.json").write_text(json.dumps(settings | {"eos_token": "<unk>"}))
    reseal(export)
    opened(export, f"{export / 'config.json'}: eos_token is '<unk>', but decoderkit.json's "
                   "config gives '<eos>'")
    manifest = json.loads((export / MANIFEST).read_text())
    manifest["files"].remove("model.bin")
    (export / MANIFEST).write_text(json.dumps(manifest))
    opened(export, "decoderkit.json does not list model.bin, a file of every ctranslate2 export")


@pytest.mark.parametrize("key, value, needle", [
    ("n_layers", 3, "model.bin: encoder of 2 layers, but the config in decoderkit.json gives "
     "n_layers=3"),
    ("n_heads", 8, "model.bin: encoder of 4 heads, but the config in decoderkit.json gives "
     "n_heads=8"),
    ("d_ff", 128, "model.bin: encoder/layer_0/ffn/linear_0/weight has the shape (64, 32), but "
     "the config in decoderkit.json gives (128, 32)"),
])
def test_a_manifest_config_that_is_not_the_engines_model_is_named(export, key, value, needle):
    manifest = json.loads((export / MANIFEST).read_text())
    assert (manifest["config"]["n_layers"], manifest["config"]["n_heads"]) == (2, 4)
    manifest["config"][key] = value
    (export / MANIFEST).write_text(json.dumps(manifest))
    opened(export, needle)
