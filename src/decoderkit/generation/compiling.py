"""What both families' compiled steps share: a function compiled with ``torch.compile`` for one
model (TorchInductor, the weights frozen into the compiled code), refused once the weights
change, with room for the kinds of call a decoder makes.

Freezing lets Inductor pack each float32 linear's weight for its own GEMM and fuse the small
per-step operations (norms, residual adds, head reshapes, the cache writes) around them;
``autotune`` also times Inductor's generated C++ GEMMs against ATen's for every linear and keeps
the faster (max-autotune; measured in ``benchmarks/log/``). The first calls compile (tens of
seconds on a small CPU; a C++ compiler is needed), and so does each new kind of call: up to
``RECOMPILE_LIMIT`` graphs, past which new kinds run eagerly (same results).

Frozen weights are for inference: a weight changed in place after compiling (an optimiser
step, ``load_state_dict``) makes the call raise instead of computing with the old values.

A later start compiles from PyTorch's own caches (Inductor's FX graph cache, on by default, in
``$TORCHINDUCTOR_CACHE_DIR``; ``use_compile_cache`` points it at a directory): only the
tracing and the freezing passes run again, not the code generation and the C++ compiler.
Two settings make that work for frozen weights: Inductor's oneDNN weight prepacking is off
(oneDNN's packed tensors cannot be pickled: the cache skipped every graph holding one, seen
as ``fxgraph_cache_bypass``; with ``autotune`` Inductor's own GEMM templates pack the weights
themselves), and each call's cache key is tagged with the fingerprint of the model's weights:
the key holds only the frozen weights' shapes, and a graph's own constants (an autotuned
GEMM's packed weights) are stored in its entry, which another model of the same shape must
not load. The tag also names the vector ISA Inductor generates for (``$ATEN_CPU_CAPABILITY``
picks it): the cache's key does not, and a graph generated for AVX-512 then built with AVX2's
flags decodes garbage (seen when the tests ran held to AVX2 on a cache an unheld run had filled).
"""

from __future__ import annotations

import hashlib
import os
import types
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo.config
import torch._inductor.config
import torch.compiler.config
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.packing import Prepacked

RECOMPILE_LIMIT = 64  # graphs one compiled step may hold; past it new kinds of call run eagerly
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # where PyTorch's compile caches live (read at each use)


def default_compile_cache() -> Path:
    """$TORCHINDUCTOR_CACHE_DIR if set, else decoderkit's directory in the user's cache
    directory ($XDG_CACHE_HOME, or ~/.cache): torch's own default is under /tmp, shared by
    every user of the machine and emptied at reboot."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "decoderkit" / "torch-compile"


def use_compile_cache(directory: str | Path | None, flag: str = "--compile-cache") -> Path:
    """Point PyTorch's compile caches (``$TORCHINDUCTOR_CACHE_DIR``) at ``directory`` (None:
    ``default_compile_cache()``), made if missing; one that is a file, or cannot be made or
    written, is refused naming ``flag``. Returns the directory."""
    path = Path(directory) if directory is not None else default_compile_cache()
    path = path.expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: expected a directory for torch.compile's caches, "
                         f"got a file")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot make the directory ({err.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: the directory is not writable")
    os.environ[CACHE_ENV] = str(path)
    return path


def weights_fingerprint(model: nn.Module) -> str:
    """A digest of every parameter and buffer of ``model`` (names, dtypes, shapes, bytes):
    the compile caches' key tag, so that a cached graph holding packed weights serves only
    the weights it was compiled from (about 1 GB/s: 0.5 s for the SmolLM2-135M shape)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        t = t.detach().contiguous()
        digest.update(f"{name} {t.dtype} {tuple(t.shape)};".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def compile_tag(model: nn.Module) -> str:
    """The compile caches' key tag for ``model`` here: its weights' fingerprint and the vector
    ISA Inductor picks (``avx512`` or ``avx2``, as ``$ATEN_CPU_CAPABILITY`` and the CPU allow)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = str(pick_vec_isa()).replace(" ", "+") or "none"
    return f"{weights_fingerprint(model)}-{isa}"


def check_compiler(model: nn.Module) -> None:
    """Inductor's code for the CPU is C++: a model on the CPU without a C++ compiler to build
    it is refused in one line (not at the first step, with the compiler's traceback)."""
    p = next(model.parameters(), None)
    if p is None or p.device.type != "cpu":
        return
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        raise UsageError("--compile needs a C++ compiler (g++ or clang++, or one named by $CXX) "
                         "for the CPU code torch.compile generates; none was found") from None


def weights_version(params: list[Tensor]) -> int:
    """Sum of the parameters' in-place update counters: changes whenever a weight does."""
    return sum(p._version for p in params)


class Compiled:
    """``fn`` compiled for ``model`` alone; ``call(model, *args)`` runs it."""

    def __init__(self, model: nn.Module, fn: Callable, autotune: bool = False):
        if any(isinstance(m, Prepacked) for m in model.modules()):
            raise UsageError("compiling takes a model without prepacked linears (prepack(), "
                             "rowwise()): the compiler packs the frozen weights itself")
        check_compiler(model)
        self.model = model
        # collected once: walking model.parameters() every step cost 0.65 ms, this list 17 us
        self.params = list(model.parameters())
        self.version = weights_version(self.params)
        self.tag = compile_tag(model)  # the compile caches' key: these weights, this ISA
        # inductor settings, applied around each call; no oneDNN prepacking: its packed
        # weights kept every graph out of the FX graph cache
        self.inductor = {"freezing": True, "cpp.weight_prepack": False}
        if autotune:  # time inductor's own C++ GEMM kernels against ATen's for every linear
            self.inductor.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN",
                                 autotune_num_choices_displayed=0,  # no timing tables printed
                                 max_autotune_report_choices_stats=False)
        # torch.compile keeps compiled code per code object, guarded by the model's identity
        # but not its weights' values: a private copy of fn's code keeps an earlier compile
        # of this model (with other frozen weights) from being reused
        fresh = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                                   fn.__defaults__)
        self.fn = torch.compile(fresh)

    def check(self, model: nn.Module) -> None:
        """Refuse another model, or this one once its weights changed."""
        if model is not self.model:
            raise UsageError("this compiled step was made for another model: "
                             "compile it for this one")
        if weights_version(self.params) != self.version:
            raise UsageError("the model's weights changed after compiling froze them: "
                             "compile again (or decode without compiling)")

    def call(self, model: nn.Module, *args) -> Tensor:
        """``fn(model, *args)`` compiled, after ``check(model)``."""
        self.check(model)
        # settings for these calls only: freezing through the config (compile(options=...)
        # ignores it), and room for each kind of call's graphs (first step, later steps, new
        # batch shapes, beam search) past dynamo's default of 8 per function
        with torch._inductor.config.patch(self.inductor), \
                torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT), \
                torch.compiler.config.patch(cache_key_tag=self.tag):
            return self.fn(model, *args)
