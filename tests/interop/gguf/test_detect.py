"""Where a model path names a GGUF file: the file by its magic whatever its name (an Ollama
blob), a directory holding one (two refused naming them), an Ollama model name looked up in a
store built here (``OLLAMA_MODELS``); a translation command names the LM command instead, and
what is no GGUF file is refused as before."""

from __future__ import annotations

import json
import shutil

import pytest
from interop import gguf_helpers as h

from decoderkit.cli import main
from decoderkit.interop.checkpoints import family_of, identify, load_checkpoint
from decoderkit.interop.gguf.detect import gguf_path, is_gguf
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.ollama import MODEL_LAYER, TEMPLATE_LAYER
from decoderkit.interop.gguf.writer import FILE

DIGEST = "ab" * 32


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An lm export --to gguf of a tiny Qwen3-shaped model."""
    out = tmp_path_factory.mktemp("gguf") / "out"
    return export_gguf(h.llama(qk_norm=True), h.bpe_tokenizer(), out)


def one_line(capsys, argv: list[str]) -> str:
    """The single error line of a refused command (exit 2)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def store(root, name: str, tag: str, blob: bytes | None, layers: list | None = None,
          digest: str = DIGEST):
    """A fake Ollama store under ``root``: the manifest of ``name:tag`` and its model blob."""
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = layers if layers is not None else [
        {"mediaType": TEMPLATE_LAYER, "digest": "sha256:" + "cd" * 32, "size": 10},
        {"mediaType": MODEL_LAYER, "digest": f"sha256:{digest}", "size": 1}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    (root / "blobs").mkdir(exist_ok=True)
    if blob is not None:
        (root / "blobs" / f"sha256-{digest}").write_bytes(blob)
    return root / "blobs" / f"sha256-{digest}"


def test_a_gguf_file_is_named_by_its_magic_and_its_directory_by_holding_one(export, tmp_path):
    blob = tmp_path / f"sha256-{DIGEST}"  # Ollama's blobs have no suffix
    shutil.copy(export / FILE, blob)
    for path in (export / FILE, export, blob):
        assert is_gguf(path) and family_of(path) == "lm", path
        assert identify(path).use == "decoderkit lm sample --checkpoint"
    assert gguf_path(export) == export / FILE
    shutil.copy(export / FILE, tmp_path / "two.gguf")
    shutil.copy(export / FILE, tmp_path / "one.gguf")
    with pytest.raises(Exception, match=r"holds 2 GGUF files \(one.gguf, two.gguf\): give one"):
        load_checkpoint(tmp_path)


def test_a_translation_command_names_the_lm_command(export, capsys):
    line = one_line(capsys, ["translate", "--checkpoint", str(export / FILE), "hi"])
    assert "is not a translation model: it is a GGUF file" in line
    assert "use `decoderkit lm sample`" in line, line


def test_an_ollama_name_opens_its_blob(export, tmp_path, monkeypatch):
    root = tmp_path / "ollama"
    blob = store(root, "smollm2", "135m", (export / FILE).read_bytes())
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    assert is_gguf("smollm2:135m") and gguf_path("smollm2:135m") == blob
    want = load_checkpoint(export).model.state_dict()
    got = load_checkpoint("smollm2:135m").model.state_dict()
    assert all((got[k] == v).all() for k, v in want.items())
    assert not is_gguf("smollm2:360m") and not is_gguf("../x:1") and not is_gguf("runs/x")
    store(root, "gone", "latest", None, digest="ef" * 32)  # its blob is not there
    with pytest.raises(Exception, match=r"gone: Ollama's manifest names the blob .* which "
                                        r"does not exist"):
        load_checkpoint("gone")
    store(root, "bad", "latest", None, layers=[{"mediaType": MODEL_LAYER, "digest": "md5:x"}])
    with pytest.raises(Exception, match=r"1 model layers .* with a sha256 digest"):
        load_checkpoint("bad")


def test_without_a_store_a_name_is_no_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    assert not is_gguf("smollm2:135m")
    line = one_line(capsys, ["lm", "sample", "--checkpoint", "smollm2:135m", "--prompt", "a"])
    assert "--checkpoint smollm2:135m: no such file or directory" in line, line


def test_what_is_no_gguf_is_refused_as_before(tmp_path, capsys):
    for name, content in (("ggu.gguf", b"GGU"), ("empty.gguf", b""), ("other.gguf", b"GGML" * 9)):
        (tmp_path / name).write_bytes(content)
        assert identify(tmp_path / name) is None
        line = one_line(capsys, ["lm", "sample", "--checkpoint", str(tmp_path / name),
                                 "--prompt", "a"])
        assert f"--checkpoint {tmp_path / name}: no checkpoint in it" in line, line


def test_a_damaged_gguf_is_refused_in_one_line_by_every_command(export, tmp_path, capsys):
    (tmp_path / "cut.gguf").write_bytes((export / FILE).read_bytes()[:5000])
    for argv in (["lm", "sample", "--prompt", "a"], ["lm", "eval", "--text", "abc"],
                 ["serve"], ["params"]):
        line = one_line(capsys, [*argv[:2], "--checkpoint", str(tmp_path / "cut.gguf"),
                                 *argv[2:]] if argv[0] == "lm" else
                        [*argv, "--checkpoint", str(tmp_path / "cut.gguf")])
        assert f"{tmp_path / 'cut.gguf'}: key " in line and "truncated or damaged" in line, line
