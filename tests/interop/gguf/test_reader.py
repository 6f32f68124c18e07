"""Hostile and damaged GGUF files, checked before trusted: each lie of the header (magic,
version, counts, string and array lengths, value and tensor types, dimensions, offsets,
overlaps, a truncated file) is one line naming the field, found in bounded memory before
anything it claims is allocated; a well-formed header reads as gguf's own reader reads it."""

from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest
from interop import gguf_helpers as h
from interop.gguf_helpers import gguf

from decoderkit.base.errors import UsageError
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.reader import read_header
from decoderkit.interop.gguf.writer import FILE

U32, F32, STR, ARR = 4, 6, 8, 9  # GGUF value types
Q8_0, IQ2_XXS = 8, 16  # ggml tensor types


def s(text: str | bytes) -> bytes:
    """A GGUF string: its 64-bit length, then its bytes."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", kind) + payload


def tensor(name: str, dims: list[int], kind: int, offset: int) -> bytes:
    return s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + \
        struct.pack("<IQ", kind, offset)


def raw_gguf(path, keys: list[bytes], tensors: list[bytes], data: bytes = b"",
             counts: tuple[int, int] | None = None, version: int = 3, magic: bytes = b"GGUF"):
    """A GGUF file of the given parts (``counts``: the tensor and key counts it claims)."""
    n_tensors, n_keys = counts or (len(tensors), len(keys))
    head = magic + struct.pack("<IQQ", version, n_tensors, n_keys) + b"".join(keys) + \
        b"".join(tensors)
    path.write_bytes(head + b"\0" * (-len(head) % 32) + data)
    return path


ARCH = kv("general.architecture", STR, s("llama"))
F32_4 = tensor("a", [4], 0, 0)  # four float32 values at the data's start


def refused(path) -> str:
    """The one-line refusal of reading ``path``'s header, in bounded memory (< 1 MB)."""
    tracemalloc.start()
    try:
        with pytest.raises(UsageError) as err:
            read_header(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return message.removeprefix(f"{path}: ")


@pytest.mark.parametrize("parts, says", [
    (dict(keys=[ARCH], tensors=[], magic=b"GGML"), "starts with b'GGML', not GGUF's magic"),
    (dict(keys=[ARCH], tensors=[], version=1), "GGUF version 1; decoderkit reads versions 2, 3"),
    (dict(keys=[ARCH], tensors=[], version=3 << 24), "(big-endian: a file for another byte"),
    (dict(keys=[ARCH], tensors=[], counts=(1 << 40, 1)),
     "its tensor count is 1,099,511,627,776, more than the 65,536 read"),
    (dict(keys=[ARCH], tensors=[], counts=(0, 5000)),
     "its key count is 5,000, more than its"),
    (dict(keys=[kv("k", STR, struct.pack("<Q", 1 << 62))], tensors=[]),
     "key 'k''s value claims 4,611,686,018,427,387,904 bytes, more than the 1,048,576"),
    (dict(keys=[kv("k", STR, struct.pack("<Q", 1000) + b"abc")], tensors=[]),
     "key 'k''s value needs 1,000 bytes at offset"),
    (dict(keys=[kv("k", ARR, struct.pack("<IQ", U32, 1 << 40))], tensors=[]),
     "key 'k' claims 1,099,511,627,776 items, more than the 4,194,304 a GGUF array may hold"),
    (dict(keys=[kv("k", ARR, struct.pack("<IQ", STR, 1 << 20))], tensors=[]),
     "key 'k' claims 1,048,576 items, more than the"),
    (dict(keys=[kv("k", 13, b"\0" * 8)], tensors=[]),
     "key 'k' has value type 13, which GGUF does not define"),
    (dict(keys=[kv("k", ARR, struct.pack("<IQ", ARR, 1) + b"\0" * 12)], tensors=[]),
     "key 'k' has an array of arrays"),
    (dict(keys=[kv("k", 7, b"\x05")], tensors=[]), "key 'k' holds 5 as a bool"),
    (dict(keys=[ARCH, ARCH], tensors=[]), "key 'general.architecture' appears twice"),
    (dict(keys=[kv("k", STR, s(b"\xff\xfe"))], tensors=[]), "key 'k''s value is not UTF-8"),
    (dict(keys=[kv("general.alignment", U32, struct.pack("<I", 24))], tensors=[]),
     "general.alignment must be a power of two up to 2**20, got 24"),
    (dict(keys=[ARCH], tensors=[tensor("a", [32], IQ2_XXS, 0)]),
     "tensor 'a' has ggml type IQ2_XXS, which decoderkit does not dequantize"),
    (dict(keys=[ARCH], tensors=[tensor("a", [32], 99, 0)]), "tensor 'a' has ggml type 99"),
    (dict(keys=[ARCH], tensors=[tensor("a", [1] * 5, 0, 0)]), "tensor 'a' has 5 dimensions"),
    (dict(keys=[ARCH], tensors=[tensor("a", [4, 0], 0, 0)]),
     "tensor 'a' has dimensions [4, 0]: each must be >= 1"),
    (dict(keys=[ARCH], tensors=[tensor("a", [33], Q8_0, 0)], data=b"\0" * 64),
     "tensor 'a''s rows of 33 values are no whole number of Q8_0's blocks of 32"),
    (dict(keys=[ARCH], tensors=[tensor("a", [4], 0, 8)], data=b"\0" * 64),
     "tensor 'a''s offset 8 is not a multiple of the alignment 32"),
    (dict(keys=[ARCH], tensors=[F32_4], data=b"\0" * 15),
     "tensor 'a''s 16 bytes at data offset 0 run past the end of the file"),
    (dict(keys=[ARCH], tensors=[tensor("a", [1 << 30, 1 << 10], 0, 0)], data=b"\0" * 16),
     "tensor 'a''s 4,398,046,511,104 bytes at data offset 0 run past the end"),
    (dict(keys=[ARCH], tensors=[tensor("a", [16], 0, 0), tensor("b", [4], 0, 32)],
          data=b"\0" * 64), "tensors 'a' and 'b' overlap (bytes"),
    (dict(keys=[ARCH], tensors=[F32_4, F32_4], data=b"\0" * 64),
     "tensor 'a' is described twice"),
    (dict(keys=[ARCH], tensors=[F32_4], counts=(2, 1), data=b"\0" * 40),
     "tensor '' has 0 dimensions (1 to 4)"),  # a second description read from the padding
])
def test_each_lie_is_one_line_naming_the_field(tmp_path, parts, says):
    assert says in refused(raw_gguf(tmp_path / "m.gguf", **parts))


def test_a_file_cut_anywhere_in_its_header_is_refused_in_one_line(tmp_path):
    data = (export_gguf(h.llama(), h.bpe_tokenizer(), tmp_path / "x") / FILE).read_bytes()
    header = read_header(tmp_path / "x" / FILE)
    start = min(t.offset for t in header.tensors.values())
    for cut in sorted({*range(0, 64, 7), *np.linspace(64, start, 40).astype(int).tolist(),
                       start + 8, len(data) - 1}):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        refused(tmp_path / "cut.gguf")


def test_a_written_header_reads_as_ggufs_reader_reads_it(tmp_path):
    file = export_gguf(h.llama(qk_norm=True), h.bpe_tokenizer(), tmp_path / "x",
                       kind="q8_0") / FILE
    ours, theirs = read_header(file), gguf.GGUFReader(file)
    fields = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.fields.keys() == fields.keys()
    for key, value in fields.items():  # a float32 as the shortest decimal it rounds from
        same = np.float32(value) == np.float32(ours.fields[key]) if isinstance(value, float) \
            else value == ours.fields[key]
        assert same, (key, value, ours.fields[key])
    assert ours.fields["qwen3.attention.layer_norm_rms_epsilon"] == 1e-6
    assert {t.name: (t.tensor_type.name, tuple(int(n) for n in reversed(t.shape)),
                     int(t.data_offset), int(t.n_bytes)) for t in theirs.tensors} == \
        {t.name: (t.kind, t.shape, t.offset, t.nbytes) for t in ours.tensors.values()}
