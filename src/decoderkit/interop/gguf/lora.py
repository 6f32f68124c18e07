"""A LoRA adapter alone as llama.cpp's LoRA GGUF (``llama-cli --lora``, llama-cpp-python's
``Llama(model_path, lora_path=...)``), as llama.cpp's ``convert_lora_to_gguf.py`` writes one.

The file: ``general.architecture`` the base's (llama.cpp checks it against the model's),
``general.type`` "adapter", ``adapter.type`` "lora", ``adapter.lora.alpha``; for each adapted
linear, the base tensor's GGUF name (``blk.N.attn_q.weight``...) with ``.lora_a`` (A: r x in)
and ``.lora_b`` (B: out x r). llama.cpp scales by alpha / r, r read from B: an rsLoRA adapter's
alpha is written as s r, so that it applies the same s. The converter runs each (A, B) through
the base architecture's own tensor changes, which for a ``llama`` are the q and k rows' permutation
from rotate-half to interleaved pairs (``interop.gguf.llama.to_interleaved``): the rows of B,
A untouched. GPT-2's fused ``attn_qkv`` and the MLP take A and B as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.interop.artifacts import MANIFEST, import_extra, write_directory
from decoderkit.interop.gguf.llama import INTERLEAVED, to_interleaved
from decoderkit.interop.gguf.writer import ENGINE, numpy32
from decoderkit.interop.lm import architectures
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.lora import adapted
from decoderkit.nn.lora import LoRAConfig

FILE = "adapter.gguf"
GPT2 = {"attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "mlp.c_fc": "ffn_up",
        "mlp.c_proj": "ffn_down"}  # GPT-2's linears -> llama.cpp's gpt2 names (blk.N.<name>)


def lora_tensors(model: DecoderOnlyLM) -> tuple[str, dict[str, np.ndarray]]:
    """(the base's llama.cpp architecture, GGUF name -> float32 array) of ``model``'s
    adapters (unmerged ``LoRALinear`` parts)."""
    c = model.config
    arch = architectures.architecture_of(c).name
    names = None
    if arch != architectures.GPT2:
        gguf = import_extra("gguf")
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], c.n_layers)
    tensors = {}
    for hf_name, (layer, part) in adapted(model).items():
        a, b = numpy32(layer.lora_A[part]), numpy32(layer.lora_B[part])
        if names is None:
            block, _, rest = hf_name.removeprefix("transformer.h.").partition(".")
            name = f"blk.{block}.{GPT2[rest]}.weight"
        else:
            name = names.get_name(hf_name + ".weight", try_suffixes=(".weight",))
        if name is None:
            raise UsageError(f"llama.cpp's {arch} architecture has no tensor for {hf_name}")
        if arch in INTERLEAVED and part in ("q_proj", "k_proj"):
            b = to_interleaved(b, c.n_heads if part == "q_proj" else c.kv_heads)
        tensors[name + ".lora_a"], tensors[name + ".lora_b"] = a, np.ascontiguousarray(b)
    if not tensors:
        raise UsageError("this model has no LoRA adapter to export")
    return arch, tensors


def export_lora_gguf(model: DecoderOnlyLM, lora: LoRAConfig, out: str | Path,
                     overwrite: bool = False) -> Path:
    """Write ``out``/adapter.gguf (float32) of ``model``'s adapters (``lora``'s settings)
    and decoderkit's manifest, atomically; ``overwrite`` replaces only an earlier export."""
    gguf = import_extra("gguf")
    arch, tensors = lora_tensors(model)

    def fill(tmp: Path) -> None:
        writer = gguf.GGUFWriter(tmp / FILE, arch)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(lora.scale * lora.r))
        for name, array in tensors.items():
            writer.add_tensor(name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        record = {"engine": ENGINE, "file": FILE, "type": "float32", "adapter": "lora",
                  "config": model.config.to_dict()}
        write_atomic(tmp / MANIFEST, lambda f: f.write_text(json.dumps(record, indent=2)))

    return write_directory(out, overwrite, fill)
