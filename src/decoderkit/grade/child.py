"""The child side of ``decoderkit grade``: runs ONE learner file, never inside the grader.

Run as a script (``python -I child.py WORKDIR LEARNER_FILE``); it imports nothing of
decoderkit. It loads ``WORKDIR/plan.json`` and ``WORKDIR/inputs.pt``, imports the learner's
file, runs every planned call, and writes one ``WORKDIR/result_<id>.pt`` per call (plain
tensors, numbers, strings, lists and dicts, read back with ``weights_only=True``).
``WORKDIR/status.json`` says whether the file imported, and what it took from decoderkit
(its answers may then be the reference's own: the report says so). The learner's
prints go to a capped buffer; each call has an alarm so one endless loop costs one item.
The scripted decoding models live here too: the grader imports ``scripted_next`` to know
which token a correct loop must produce.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import sys
import types

CALL_SECONDS = 4  # default alarm per call: an endless loop fails that call, not the file
PRINT_CAP = 4000  # characters of the learner's prints kept for the report


def scripted_next(prefix: list[int], vocab: int, eos_at: int) -> int:
    """The token a scripted model predicts after ``prefix``: depends on the whole prefix,
    and is EOS (2) exactly when the prefix has ``eos_at`` tokens (never when eos_at < 1)."""
    if len(prefix) == eos_at:
        return 2
    return 3 + (sum((i + 1) * t for i, t in enumerate(prefix)) * 7 + len(prefix)) % (vocab - 3)


def scripted_logits(prefix: list[int], vocab: int, torch):
    """(vocab,) float32 logits a scripted LM gives after ``prefix``: spread out (so that
    temperature and top-k matter), a function of the whole prefix, from a private generator
    (the global one is left to the learner's sampling)."""
    seed = sum((i + 1) * (t + 1) * 7919 for i, t in enumerate(prefix)) + len(prefix)
    g = torch.Generator().manual_seed(seed % 2**31)
    return 2.0 * torch.randn(vocab, generator=g)


class ScriptedLM:
    """A GPT's interface for a generate loop: ``model(idx)`` -> logits (B, T, V) (nanoGPT's
    method gets ``(logits, None)``), ``block_size`` and ``config.block_size``; refuses more
    than block_size positions, as nanoGPT's forward does."""

    def __init__(self, torch, vocab, block_size, pair):
        self.torch, self.vocab, self.block_size, self.pair = torch, vocab, block_size, pair
        self.config = type("Config", (), {"block_size": block_size, "vocab_size": vocab})()

    def __call__(self, idx, targets=None):
        idx = self.torch.as_tensor(idx)
        if idx.size(-1) > self.block_size:
            raise ValueError(f"{idx.size(-1)} positions, more than block_size "
                             f"{self.block_size} (crop the context)")
        ids = idx.reshape(-1, idx.size(-1)).tolist()
        logits = self.torch.stack([self.torch.stack([scripted_logits(row[:t + 1], self.vocab,
                                                                     self.torch)
                                                     for t in range(len(row))]) for row in ids])
        return (logits, None) if self.pair else logits

    forward = __call__


def cached_logits(seen: list[list[int]], vocab: int, torch):
    """(vocab,) logits a scripted cached LM gives after the (token, position) pairs seen."""
    return scripted_logits([t * 1000 + p for t, p in seen], vocab, torch)


class ScriptedCachedLM:
    """A KV-cached LM's interface: ``model(idx, cache, start)`` -> (logits (1, T, V), cache)
    for T new tokens at positions start, start + 1, ...; the logits depend on every token
    seen and on the positions claimed, as a real model's position embeddings make them."""

    def __init__(self, torch, vocab):
        self.torch, self.vocab = torch, vocab

    def __call__(self, idx, cache=None, start=0):
        ids = [int(t) for t in self.torch.as_tensor(idx).reshape(-1)]
        seen = [] if cache is None else [list(pair) for pair in cache]
        logits = []
        for i, token in enumerate(ids):
            seen.append([token, int(start) + i])
            logits.append(cached_logits(seen, self.vocab, self.torch))
        return self.torch.stack(logits)[None], seen

    forward = __call__


class _CappedText(io.TextIOBase):
    """A text sink that keeps the first PRINT_CAP characters and counts the rest."""

    def __init__(self):
        self.kept, self.total = [], 0

    def write(self, text):
        self.total += len(text)
        room = PRINT_CAP - sum(len(k) for k in self.kept)
        if room > 0:
            self.kept.append(text[:room])
        return len(text)

    def writable(self):
        return True


def _from_decoderkit(space) -> list[str]:
    """What the learner's names take from decoderkit ("f from decoderkit.nn.attention"),
    or ["decoderkit"] when it was imported but no name holds it (inside a function, say)."""
    def ours(module) -> bool:
        return isinstance(module, str) and module.partition(".")[0] == "decoderkit"

    found = []
    for name, value in list(space.items()):
        try:
            module = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(value, "__module__", None)
        except BaseException:  # noqa: B036 - a learner's object may raise anything
            continue
        if ours(module):
            found.append(f"{name} from {module}")
    if not found and any(ours(m) for m in list(sys.modules)):
        found.append("decoderkit")
    return sorted(found)


def _alarm(signum, frame):
    raise TimeoutError("did not return in time (an endless loop?)")


def _plain(value, torch, depth=0):
    """The learner's value as plain data the grader can load safely."""
    if depth > 4:
        return {"__type__": "nested too deep"}
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().as_subclass(torch.Tensor).clone()
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        import numpy as np
        return torch.from_numpy(np.array(value, copy=True))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value) if isinstance(value, float) else int(value)
    if isinstance(value, (list, tuple)) and len(value) <= 10000:
        return [_plain(v, torch, depth + 1) for v in value]
    if isinstance(value, dict) and len(value) <= 10000 and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _plain(v, torch, depth + 1) for k, v in value.items()}}
    return {"__type__": type(value).__name__}


def _perturb(module, seed, torch):
    """Seeded, non-trivial values for every parameter (ones/zeros would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if p.dim() == 1 and name.rsplit(".", 1)[-1] in ("weight", "a_2", "gamma", "scale"):
                p.copy_(1.0 + 0.3 * noise)
            elif p.dim() == 1:
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


def _describe(module):
    """(name, class, a few attributes) for each submodule: the grader reads the layout."""
    rows = []
    for name, m in module.named_modules():
        attrs = {k: getattr(m, k) for k in ("eps", "num_heads", "batch_first", "h", "d_k",
                                            "approximate")
                 if isinstance(getattr(m, k, None), (int, float, bool, str))}
        rows.append([name, type(m).__name__, attrs])
    return rows


class ScriptedTranslator:
    """seed 004's interface: encode(src) -> enc_out; decode_step(tgt, enc_out) -> (1, T, V)."""

    def __init__(self, torch, vocab, eos_at):
        self.torch, self.vocab, self.eos_at, self.seen = torch, vocab, eos_at, []

    def encode(self, src):
        return self.torch.zeros(1, src.shape[-1], 4)

    def decode_step(self, tgt, enc_out):
        ids = [int(t) for t in self.torch.as_tensor(tgt).reshape(-1)]
        self.seen.append(ids)
        logits = self.torch.zeros(1, len(ids), self.vocab)
        logits[0, -1, scripted_next(ids, self.vocab, self.eos_at)] = 5.0
        return logits


class ScriptedEncoderDecoder:
    """The Annotated Transformer's interface: encode, decode(memory, src_mask, ys, tgt_mask),
    generator(out) -> log-probabilities; records each tgt_mask it is given."""

    def __init__(self, torch, vocab, eos_at):
        self.torch, self.vocab, self.eos_at, self.seen, self.masks = torch, vocab, eos_at, [], []

    def encode(self, src, src_mask):
        return self.torch.zeros(1, src.shape[-1], 4)

    def decode(self, memory, src_mask, ys, tgt_mask):
        ids = [int(t) for t in self.torch.as_tensor(ys).reshape(-1)]
        self.seen.append(ids)
        self.masks.append(self.torch.as_tensor(tgt_mask).detach().clone())
        out = self.torch.zeros(1, len(ids), self.vocab)
        out[0, -1, scripted_next(ids, self.vocab, self.eos_at)] = 5.0
        return out

    def generator(self, x):
        return self.torch.log_softmax(x, dim=-1)


def _sublayer(torch, weight):
    """A fixed sublayer function for SublayerConnection: h -> tanh(h W)."""
    return lambda h: torch.tanh(h @ weight.to(h.dtype))


def _arg(spec, inputs, torch):
    if "t" in spec:
        return inputs[spec["t"]].clone()
    if "tdict" in spec:  # a state dict: name -> input key
        return {name: inputs[key].clone() for name, key in spec["tdict"].items()}
    if "sublayer" in spec:
        return _sublayer(torch, inputs[spec["sublayer"]])
    return spec["v"]


def _lookup(space, name):
    """A planned name in the learner's namespace: 'GPT' or a method, 'GPT.generate'."""
    value = space[name.split(".")[0]]
    for part in name.split(".")[1:]:
        value = getattr(value, part)
    return value


def _init(spec, space):
    """A constructor argument: a literal, or the learner's config class built from fields
    ({"config": "GPTConfig", "fields": {...}}, nanoGPT's layout)."""
    if isinstance(spec, dict) and "config" in spec:
        return _lookup(space, spec["config"])(**spec["fields"])
    return spec


def _run(call, space, inputs, torch):
    """One planned call -> a plain result dict."""
    target = _lookup(space, call["name"])
    args = [_arg(a, inputs, torch) for a in call.get("args", [])]
    if call["kind"] == "call":
        value = _plain(target(*args), torch)
        mutated = [spec["t"] for spec, a in zip(call.get("args", []), args, strict=True)
                   if "t" in spec and not torch.equal(a, inputs[spec["t"]])]
        return {"value": value, "mutated": mutated}
    if call["kind"] == "module":
        torch.manual_seed(call["seed"])
        module = target(*[_init(a, space) for a in call["init"]])
        if not isinstance(module, torch.nn.Module):
            return {"error": f"{call['name']}(...) is a {type(module).__name__}, "
                             f"not an nn.Module"}
        if call.get("perturb", True):
            _perturb(module, call["seed"], torch)
        module.eval()
        outs = []
        with torch.no_grad():
            for method, margs in call["forwards"]:
                fn = module if method == "forward" else getattr(module, method)
                outs.append(_plain(fn(*[_arg(a, inputs, torch) for a in margs]), torch))
        attrs = {k: _plain(getattr(module, k), torch) for k in call.get("attrs", [])
                 if hasattr(module, k)}
        params = [n for n, _ in module.named_parameters()]
        state = {k: v.detach().cpu().as_subclass(torch.Tensor).clone()
                 for k, v in module.state_dict().items()}
        return {"value": outs, "state": state, "layout": _describe(module),
                "parameters": params, "attrs": attrs}
    if call["kind"] == "generate_cached":  # args: idx, max_new_tokens
        return {"value": _plain(target(ScriptedCachedLM(torch, call["vocab"]), *args), torch)}
    if call["kind"] == "generate":  # args: idx, max_new_tokens, temperature, top_k
        model = ScriptedLM(torch, call["vocab"], call["block"], "." in call["name"])
        torch.manual_seed(call["seed"])
        return {"value": _plain(target(model, *args), torch)}
    model_type = ScriptedTranslator if call["kind"] == "decode004" else ScriptedEncoderDecoder
    model = model_type(torch, call["vocab"], call["eos_at"])
    value = _plain(target(model, *args), torch)
    return {"value": value, "seen": model.seen, "masks": getattr(model, "masks", [])}


def execute(space, calls, inputs, torch, save, seconds: int = CALL_SECONDS,
            labels=frozenset()) -> None:
    """Run each planned call whose name the learner defines; ``save(id, result)`` each."""
    signal.signal(signal.SIGALRM, _alarm)
    for call in calls:
        if not _defines(space, call["name"]):
            continue
        try:
            signal.alarm(seconds)
            result = _run(call, space, inputs, torch)
        except BaseException as err:  # noqa: B036 - SystemExit, KeyboardInterrupt included
            result = {"error": _describe_error(err, space.get("__file__", ""), labels)}
        finally:
            signal.alarm(0)
        save(call["id"], result)


def _defines(space, name) -> bool:
    try:
        _lookup(space, name)
    except (KeyError, AttributeError):
        return False
    return True


def main(workdir: str, learner: str) -> None:
    import torch  # after the limits are in place; the learner's file imports it too
    torch.set_num_threads(1)
    plan = json.loads(open(f"{workdir}/plan.json").read())
    seconds = int(plan.get("call_seconds", CALL_SECONDS))
    inputs = torch.load(f"{workdir}/inputs.pt", weights_only=True)
    captured = _CappedText()
    real_out = sys.stdout
    sys.stdout = sys.stderr = captured
    module = types.ModuleType("learner_solution")  # registered while it runs: @dataclass
    module.__file__ = learner  # (and anything else) looks its module up in sys.modules
    sys.modules[module.__name__] = module
    space = module.__dict__
    sources = plan.get("sources") or [
        [learner, open(learner, encoding="utf-8", errors="replace").read()]]
    labels = {name for name, _ in sources} - {learner}  # notebook cells: "cell 3"
    status = {"imported": True}
    signal.signal(signal.SIGALRM, _alarm)
    try:
        signal.alarm(2 * seconds)  # the file's own top-level code
        for name, source in sources:  # a file, or a notebook's cells in order
            exec(compile(source, name, "exec"), space)
    except BaseException as err:  # noqa: B036 - the learner's code may raise anything
        status = {"imported": False, "error": _describe_error(err, learner, labels)}
    finally:
        signal.alarm(0)
    status["found"] = sorted(n for n in plan["names"] if _defines(space, n))
    status["decoderkit"] = _from_decoderkit(space)
    calls = plan["calls"] if status["imported"] else []
    _write_status(workdir, status)  # already known, should a call hang or kill the process

    def save(call_id, result):
        sys.stdout = sys.stderr = captured  # the learner may have replaced them
        torch.save(result, f"{workdir}/result_{call_id}.pt")

    execute(space, calls, inputs, torch, save, seconds, labels)
    status.update(printed=captured.total, print_head="".join(captured.kept), finished=True,
                  decoderkit=_from_decoderkit(space))
    _write_status(workdir, status)
    real_out.flush()


def _write_status(workdir: str, status: dict) -> None:
    with open(f"{workdir}/status.tmp", "w") as f:
        json.dump(status, f)
    os.replace(f"{workdir}/status.tmp", f"{workdir}/status.json")


def _describe_error(err: BaseException, learner: str, labels=frozenset()) -> str:
    """``Type: message`` plus the learner-file line (or notebook cell and line) it came
    from, when there is one."""
    tb, where = err.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if learner and name == learner or name in labels:
            where = f" ({_place(name, tb.tb_lineno, labels)})"
        tb = tb.tb_next
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__}: {err.msg} ({_place(err.filename, err.lineno, labels)})"
    text = str(err).splitlines()[0][:300] if str(err).strip() else ""
    return f"{type(err).__name__}{': ' + text if text else ''}{where}"


def _place(name: str, line, labels) -> str:
    """'line 7' in the file, 'cell 3, line 7' in a notebook cell."""
    return f"{name}, line {line}" if name in labels else f"line {line}"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
