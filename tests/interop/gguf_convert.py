"""llama.cpp's own converter, run on a directory built in the test: ``convert_hf_to_gguf.py``
from llama.cpp's sources (the ones llama-cpp-python's source distribution vendors; ``make
llamacpp-src`` puts them in ``.venv/llama.cpp``, or ``$LLAMA_CPP_SOURCE`` names them), in a
subprocess with its own vendored ``gguf``. Its pre-tokenizer name comes from a hash of a
known tokenizer's output, which a tokenizer trained here never matches: the name is given
instead (``get_vocab_base_pre``), the rest is the converter's own. Quantizing is llama.cpp's
``llama_model_quantize``. The tests skip, saying why, where either is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# GGUF's file types by llama.cpp's names (llama_ftype)
FTYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15, "Q6_K": 18}
RUN = """
import json, runpy, sys
src, jobs = sys.argv[1], json.loads(sys.argv[2])
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base
for directory, out, pre, outtype in jobs:
    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer, pre=pre: pre
    sys.argv = [src + "/convert_hf_to_gguf.py", directory, "--outfile", out, "--outtype",
                outtype]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def source() -> Path:
    """llama.cpp's sources holding the converter; the test is skipped where there are none."""
    found = Path(os.environ.get("LLAMA_CPP_SOURCE") or ROOT / ".venv" / "llama.cpp")
    if not (found / "convert_hf_to_gguf.py").is_file():
        pytest.skip(f"llama.cpp's converter is not in {found} (make llamacpp-src, or "
                    "LLAMA_CPP_SOURCE=DIR holding convert_hf_to_gguf.py)")
    return found


def convert_all(jobs: list[tuple[Path, Path, str]], src: Path | None = None,
                outtype: str = "f32") -> None:
    """Each (Hugging Face directory, GGUF file, pre-tokenizer name) converted by llama.cpp's
    converter, all in one subprocess (its imports take most of the time)."""
    spec = json.dumps([(str(d), str(out), pre, outtype) for d, out, pre in jobs])
    run = subprocess.run([sys.executable, "-c", RUN, str(src or source()), spec],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]


def quantize(file: Path, out: Path, kind: str) -> Path:
    """``out``: ``file`` quantized by llama.cpp (``llama_model_quantize``) to ``kind``."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                                    "(the llamacpp extra; see docs/deployment.md)")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(file).encode(), str(out).encode(), params) == 0
    return out
