"""Text in, text out: batches of lines through a checkpoint's tokenizers and a decoding method.

``translate_lines`` is the library call behind ``decoderkit translate``; every line of a batch
is decoded exactly as it would be alone (padding is masked, each row stops at its own EOS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.generation.decoding import check_sampling, decode_step, greedy_decode, sample
from decoderkit.generation.search import beam_search
from decoderkit.nn.masks import pad_ids


@dataclass(frozen=True)
class DecodeOptions:
    """How to pick tokens: greedy (beam 1), beam search, or sampling."""

    beam: int = 1  # beam size; 1 = greedy decoding
    length_penalty: float = 1.0  # beam ranking: log p / length ** length_penalty
    sample: bool = False  # ancestral sampling instead of argmax / beam search
    temperature: float = 1.0  # sampling: softmax(logp / temperature)
    top_k: int = 0  # sampling: keep the k most likely tokens (0: all)
    top_p: float = 1.0  # sampling: keep the smallest set with this much probability
    seed: int | None = None  # sampling: generator seed (None: fresh)
    max_len: int | None = None  # most generated tokens (None: 2 * source + 16, capped)
    explain: int = 0  # alternatives recorded per step, with attention weights (0: off)
    compile: bool = False  # steps through torch.compile (generation.compiled); compiles first
    autotune: bool = False  # with compile: inductor's max-autotune GEMMs (compiles longer)

    def __post_init__(self):
        if self.sample and self.beam != 1:
            raise UsageError(f"sampling and beam search exclude each other, got beam={self.beam}")
        check_sampling(self.temperature, self.top_k, self.top_p)
        if self.autotune and not self.compile:
            raise UsageError("autotune applies to a compiled step: set compile=True too")


@dataclass
class Translation:
    """One line's result; ``steps`` is the JSON-ready trace when ``explain`` > 0."""

    source: str
    source_tokens: list[str]
    text: str
    score: float
    stop_reason: str
    steps: list[dict] | None = None

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return dict(vars(self))


def translate_lines(ckpt, lines: list[str], options: DecodeOptions,
                    batch_size: int = 32) -> list[Translation]:
    """Translate each line with ``ckpt`` (a ``decoderkit.training.checkpoint.Checkpoint``)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
    c, src_tok, tgt_tok = ckpt.config, ckpt.src_tokenizer, ckpt.tgt_tokenizer
    encoded = [src_tok.encode(line) for line in lines]
    longest = max((len(ids) for ids in encoded), default=0)
    if longest > c.max_len:
        raise UsageError(f"a line has {longest} tokens, more than the model's max_len {c.max_len}")
    max_len = options.max_len or min(c.max_len, 2 * longest + 16)  # one bound for every batch
    results: list[Translation | None] = [None] * len(lines)
    todo = [i for i, ids in enumerate(encoded) if ids]  # empty lines translate to ""
    for i in set(range(len(lines))) - set(todo):
        results[i] = Translation(lines[i], [], "", 0.0, "eos", [] if options.explain else None)
    device = next(ckpt.model.parameters()).device
    step = decode_step
    if options.compile:  # imported here: torch.compile's machinery adds about 1 s to start-up
        from decoderkit.generation.compiled import compile_step

        step = compile_step(ckpt.model, options.autotune)
    for start in range(0, len(todo), batch_size):
        rows = todo[start:start + batch_size]
        src = pad_ids([encoded[i] for i in rows], c.pad_id)  # (B, S)
        seed = None if options.seed is None else options.seed + start  # a stream per batch
        out = _decode(ckpt.model, src.to(device), max_len, seed, options, step)
        for b, i in enumerate(rows):
            ids = out.tokens[b, :int(out.lengths[b])].tolist()
            steps = out.explain(b, lambda t: tgt_tok.tokens([t])[0]) if options.explain else None
            results[i] = Translation(lines[i], src_tok.tokens(encoded[i]), tgt_tok.decode(ids),
                                     float(out.scores[b]), out.stop_reasons[b], steps)
    return results


def write_json(results: list[Translation], path: str | Path) -> None:
    """All results, traces included, as one JSON list; written to a temporary name, renamed."""
    text = json.dumps([r.to_dict() for r in results])
    write_atomic(path, lambda tmp: tmp.write_text(text))


def _decode(model, src, max_len: int, seed: int | None, o: DecodeOptions, step):
    if o.sample:
        return sample(model, src, None, max_len=max_len, temperature=o.temperature,
                      top_k=o.top_k, top_p=o.top_p, seed=seed, explain=o.explain, step=step)
    if o.beam > 1:
        return beam_search(model, src, None, beam_size=o.beam, max_len=max_len,
                           length_penalty=o.length_penalty, explain=o.explain, step=step)
    return greedy_decode(model, src, None, max_len=max_len, explain=o.explain, step=step)
