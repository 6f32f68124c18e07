"""A GGUF file given where decoderkit expects a model: the one opener names it (its
architecture read from the keys at its start, as gguf's own reader reads it) and what runs it
instead, in one line from every command; a truncated or garbage GGUF is still named as one,
and a file that is no GGUF is refused as before."""

from __future__ import annotations

import numpy as np
import pytest
from interop import gguf_helpers as h
from interop.gguf_helpers import gguf

from decoderkit.cli import main
from decoderkit.interop.checkpoints import family_of, identify
from decoderkit.interop.gguf.detect import SCALARS, architecture
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.writer import FILE


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


def instead(file) -> str:
    """What the refusal of a GGUF ``file`` names to use instead."""
    return (f"decoderkit reads no GGUF weights: run it with llama.cpp (`llama-cli -m {file}`) or "
            f"llama-cpp-python (`Llama(model_path='{file}')`), or give decoderkit the Hugging "
            "Face or decoderkit directory it was exported from")


def test_a_gguf_file_we_write_is_named_with_its_architecture(export, capsys):
    file = export / FILE
    found = identify(file)
    assert (found.what, found.family, found.engine, family_of(file)) == (
        "a GGUF file (llama.cpp's format, architecture 'qwen3')", None, "gguf", None)
    assert identify(export).what == ("a GGUF export (decoderkit lm export --to gguf: "
                                     "llama.cpp's format, architecture 'qwen3')")
    for argv in (["lm", "sample", "--checkpoint", str(file), "--prompt", "a"],
                 ["translate", "--checkpoint", str(file), "hi"], ["serve", "--checkpoint",
                                                                   str(file)]):
        line = one_line(capsys, argv)
        assert line.endswith(f"error: --checkpoint {file} is {found.what}, not a checkpoint; "
                             f"{instead(file)}"), line
    line = one_line(capsys, ["lm", "sample", "--checkpoint", str(export), "--prompt", "a"])
    assert line.endswith(f"not a checkpoint; {instead(file)}"), line
    line = one_line(capsys, ["translate", "--engine", "ctranslate2", "--model", str(file), "hi"])
    assert line.endswith(f"is {found.what}, not an export for --engine ctranslate2; "
                         f"{instead(file)}"), line


def test_a_truncated_or_garbage_gguf_is_named_as_one(export, tmp_path, capsys):
    data = (export / FILE).read_bytes()
    garbage = b"GGUF" + np.random.default_rng(0).bytes(4096)
    for name, content, arch in (
            ("cut.gguf", data[:5000], "architecture 'qwen3'"),  # its keys' start is there
            ("header.gguf", data[:24], UNREAD), ("magic.gguf", b"GGUF", UNREAD),
            ("garbage.bin", garbage, UNREAD)):
        (tmp_path / name).write_bytes(content)
        line = one_line(capsys, ["lm", "sample", "--checkpoint", str(tmp_path / name),
                                 "--prompt", "a"])
        assert f"is a GGUF file (llama.cpp's format, {arch}), not a checkpoint; " \
               f"{instead(tmp_path / name)}" in line, line


UNREAD = "no general.architecture among its first keys: truncated or damaged"


def test_the_architecture_is_read_as_ggufs_reader_reads_it(tmp_path):
    sizes = gguf.GGUFReader.gguf_scalar_to_np
    assert SCALARS == {int(t): np.dtype(sizes[t]).itemsize for t in sizes}
    for i, (before, found) in enumerate((
            ({"a.u8": (1, "UINT8"), "a.f64": (0.5, "FLOAT64"), "a.s": ("xyz", "STRING"),
              "a.b": (True, "BOOL")}, "qwen2"),
            ({"a.list": ([1, 2], "ARRAY")}, None))):  # keys past an array are not looked for
        writer = gguf.GGUFWriter(tmp_path / f"{i}.gguf", "qwen2")
        keys = writer.kv_data[0]
        writer.kv_data[0] = {k: gguf.GGUFValue(v, getattr(gguf.GGUFValueType, t))
                             for k, (v, t) in before.items()} | keys  # general.* after them
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
        reader = gguf.GGUFReader(tmp_path / f"{i}.gguf")
        assert list(reader.fields)[3:] == [*before, *keys]
        assert reader.fields["general.architecture"].contents() == "qwen2"
        assert architecture(tmp_path / f"{i}.gguf") == found


def test_what_is_no_gguf_is_refused_as_before(tmp_path, capsys):
    for name, content in (("ggu.gguf", b"GGU"), ("empty.gguf", b""), ("other.gguf", b"GGML" * 9)):
        (tmp_path / name).write_bytes(content)
        assert identify(tmp_path / name) is None
        line = one_line(capsys, ["lm", "sample", "--checkpoint", str(tmp_path / name),
                                 "--prompt", "a"])
        assert f"--checkpoint {tmp_path / name}: no checkpoint in it" in line, line
