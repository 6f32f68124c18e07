"""Text in, text out: batches of lines through a checkpoint's tokenizers and a decoding method.

``translate_lines`` is the library call behind ``decoderkit translate``; every line of a batch
is decoded exactly as it would be alone: padding is masked, each row stops at its own EOS or
its own length bound (``limits.default_max_len`` of its own source), and a sampled line draws
from its own generator, seeded from (seed, the line's text). A line the model cannot take
(longer than its max_len) gets an error result; the other lines are translated.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from decoderkit.base.checks import LENGTH_PENALTY
from decoderkit.base.errors import UsageError
from decoderkit.base.files import output_mark, write_output
from decoderkit.base.families import SEQ2SEQ
from decoderkit.generation.engines import check_engine
from decoderkit.generation.seq2seq.decoding import STOP_EOS, greedy_decode, sample
from decoderkit.generation.limits import (
    check_int,
    check_sampling,
    check_seed,
    logits_dtype,
)
from decoderkit.generation.seq2seq.bounds import default_max_len
from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.generation.seq2seq.step import Engine, decode_step
from decoderkit.generation.seq2seq.workers import check_workers, shared_threads
from decoderkit.nn.masks import pad_ids

# checkpoint origin -> its beam rule: a Marian model (a Hugging Face directory, or Marian's own
# .npz: measured closer to Marian's translator than "stay", docs/bible.md) retires
BEAM_RULES = {None: "stay", "marian": "retire", "marian-npz": "retire"}
STOP_ERROR = "error"  # a Translation's stop_reason when the line could not be decoded
JSON_COMMAND = "translate"  # the command whose mark ``write_json`` files carry


@dataclass(frozen=True)
class DecodeOptions:
    """How to pick tokens: greedy (beam 1), beam search, or sampling."""

    beam: int = 1  # beam size; 1 = greedy decoding
    n_best: int = 1  # beam search: hypotheses returned per line, best first (1..beam)
    length_penalty: float = 1.0  # beam ranking: log p / length ** length_penalty (in [0, 10])
    sample: bool = False  # ancestral sampling instead of argmax / beam search
    temperature: float = 1.0  # sampling: softmax(logp / temperature) (a normal of its dtype)
    top_k: int = 0  # sampling: keep the k most likely tokens (0: all)
    top_p: float = 1.0  # sampling: keep the smallest set with this much probability
    seed: int | None = None  # sampling: each line's generator from (seed, line) (None: fresh)
    max_len: int | None = None  # most generated tokens (None: limits.default_max_len per line)
    explain: int = 0  # alternatives recorded per step, with attention weights (0: off)
    compile: bool = False  # torch.compile steps (generation.seq2seq.compiled); compiles first
    autotune: bool = False  # with compile: inductor's max-autotune GEMMs (compiles longer)
    int8: bool = False  # linears in int8, each activation row its own scale (generation.int8)
    beam_rule: str | None = None  # "stay" (ours) or "retire" (HF's: beam_search(retire=True));
    # None: the checkpoint's own (BEAM_RULES)
    forced_eos: bool = False  # a line's last allowed token is EOS (HF's forced_eos_token_id)
    ban_unk: bool = False  # the target's <unk> is never generated (Marian's translator
    # without --allow-unk)

    def __post_init__(self):
        check_int("beam", self.beam, 1)
        check_int("n_best", self.n_best, 1, self.beam)
        LENGTH_PENALTY.check("length_penalty", self.length_penalty)
        for name in ("sample", "compile", "autotune", "int8", "forced_eos", "ban_unk"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.sample and self.beam != 1:
            raise UsageError(f"sampling and beam search exclude each other, got beam={self.beam}")
        check_sampling(self.temperature, self.top_k, self.top_p)  # the model's dtype: later
        check_seed(self.seed)
        if self.max_len is not None:
            check_int("max_len", self.max_len, 1)
        check_int("explain", self.explain, 0)
        if self.autotune and not self.compile:
            raise UsageError("autotune applies to a compiled step: set compile=True too")
        if self.beam_rule not in (None, *BEAM_RULES.values()):
            raise UsageError(f"beam_rule must be None or one of {sorted(set(BEAM_RULES.values()))}"
                             f", got {self.beam_rule!r}")


def beam_rule(options: DecodeOptions, meta: dict) -> str:
    """The beam rule a call uses: the options', else the one of the checkpoint's origin (a
    Marian model decodes as Hugging Face's ``generate`` and Marian's translator do) unless
    ``explain`` asks for the steps (traced by our rule only), else ours."""
    if options.beam_rule is not None:
        return options.beam_rule
    return BEAM_RULES[None] if options.explain else \
        BEAM_RULES.get(meta.get("origin"), BEAM_RULES[None])


@dataclass
class Translation:
    """One line's result; ``steps`` is the JSON-ready trace when ``explain`` > 0, ``tokens``
    the output's tokens (EOS included), ``nbest`` beam search's ``n_best`` hypotheses (dicts of
    text, tokens, score; None unless n_best > 1).

    ``error`` is None when the line was translated; otherwise why it could not be (text "",
    score 0.0, stop_reason "error").
    """

    source: str
    source_tokens: list[str]
    text: str
    score: float
    stop_reason: str
    steps: list[dict] | None = None
    error: str | None = None
    tokens: list[str] = field(default_factory=list)
    nbest: list[dict] | None = None

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return dict(vars(self))


def line_seed(seed: int, line: str) -> int:
    """A line's sampling seed: from ``seed`` and the line's text only, so the line samples
    the same whatever else is in the call; different lines get unrelated streams."""
    digest = hashlib.sha256(f"{seed}\n{line}".encode()).digest()
    return int.from_bytes(digest[:4], "little")  # within base.checks.SEED


def translate_lines(ckpt, lines: list[str], options: DecodeOptions,
                    batch_size: int = 32, workers: int = 1) -> list[Translation]:
    """Translate each line with ``ckpt`` (a ``decoderkit.training.seq2seq.checkpoint.Checkpoint``).

    One result per line, in order; a line longer than the model's max_len gets a result with
    ``error`` set, an empty line translates to "". ``workers`` > 1: that many batches decoded
    at once, each on its own thread, torch's threads shared among them (``shared_threads``).
    A step of a small model is hundreds of small operations that one thread runs about as fast
    as two, so two batches at once on two cores are faster (1.7x at the Bible model's beam
    search, benchmarks/log/); each batch decodes as it would alone with its threads.
    """
    check_int("batch_size", batch_size, 1)
    if not isinstance(options, DecodeOptions):
        raise TypeError(f"options must be DecodeOptions, got {type(options).__name__}")
    check_workers(check_int("workers", workers, 1), options.compile)
    c, src_tok, tgt_tok = ckpt.config, ckpt.src_tokenizer, ckpt.tgt_tokenizer
    if options.max_len is not None:
        check_int("max_len", options.max_len, 1, c.max_len)
    if options.sample:  # a float32 model cannot sample at 1e-300, a float64 one can
        check_sampling(options.temperature, options.top_k, options.top_p,
                       logits_dtype(ckpt.model))
    encoded = [src_tok.encode(line) for line in lines]
    results, todo = unbatched(lines, encoded, c.max_len, src_tok, options)
    model, step = _model_and_step(ckpt.model, options)
    device = "cpu" if isinstance(model, Engine) else next(model.parameters()).device
    retire = beam_rule(options, getattr(ckpt, "meta", {})) == "retire"
    banned = (unk_id(tgt_tok),) if options.ban_unk else ()

    def run(rows: list[int]) -> None:  # one batch: its lines' results
        src = pad_ids([encoded[i] for i in rows], c.source_pad_id)  # (B, S)
        limits = [options.max_len or default_max_len(len(encoded[i]), c.max_len) for i in rows]
        seeds = None if options.seed is None else [line_seed(options.seed, lines[i])
                                                   for i in rows]
        out = _decode(model, src.to(device), limits, seeds, options, step, retire, banned)
        for b, i in enumerate(rows):
            ids = out.tokens[b, :int(out.lengths[b])].tolist()
            steps = out.explain(b, lambda t: tgt_tok.tokens([t])[0],
                                len(encoded[i])) if options.explain else None
            results[i] = Translation(lines[i], src_tok.tokens(encoded[i]), tgt_tok.decode(ids),
                                     float(out.scores[b]), out.stop_reasons[b], steps,
                                     tokens=tgt_tok.tokens(ids),
                                     nbest=_nbest(out, b, tgt_tok, c))

    todo.sort(key=lambda i: len(encoded[i]))  # batches of similar lengths (Marian's
    # maxi-batch): little padding, and a batch's rows end at about the same step
    batches = [todo[start:start + batch_size] for start in range(0, len(todo), batch_size)]
    if workers == 1 or len(batches) < 2:
        for rows in batches:
            run(rows)
    else:
        with shared_threads(workers), ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, batches))  # (re-raises a batch's error)
    return results


def unbatched(lines: list[str], encoded: list[list[int]], max_len: int, src_tok,
              options: DecodeOptions) -> tuple[list[Translation | None], list[int]]:
    """The results of the lines that are not decoded (empty: ""; longer than ``max_len``: an
    error), None for the others, and the indices of those others: every engine's."""
    results: list[Translation | None] = [None] * len(lines)
    todo = []
    for i, ids in enumerate(encoded):
        if not ids:  # empty lines translate to ""
            results[i] = Translation(lines[i], [], "", 0.0, STOP_EOS,
                                     [] if options.explain else None)
        elif len(ids) > max_len:
            results[i] = Translation(lines[i], src_tok.tokens(ids), "", 0.0, STOP_ERROR,
                                     error=f"the line has {len(ids)} tokens, more than the "
                                           f"model's max_len {max_len}")
        else:
            todo.append(i)
    return results, todo


# an option an engine may lack (``generation.engines``) -> whether ``DecodeOptions`` ask it
ASKS = {"sampling": lambda o: o.sample, "explain": lambda o: o.explain > 0,
        "n_best": lambda o: o.n_best > 1, "compile": lambda o: o.compile,
        "int8": lambda o: o.int8}


def asked(options: DecodeOptions) -> list[str]:
    """The options of ``generation.engines``' table that ``options`` ask for."""
    return [name for name, on in ASKS.items() if on(options)]


def _model_and_step(model, options: DecodeOptions):
    """(model, decoding step) for ``options``: an exported model's own step (what its engine
    lacks refused), else an int8 copy and a compiled step when asked."""
    if isinstance(model, Engine):  # an exported model in another runtime: its own step
        check_engine(SEQ2SEQ, model.engine, asked(options))
        return model, model.step
    if options.int8:  # a quantized copy, made once per call
        from decoderkit.generation.seq2seq.int8 import quantize_int8

        model = quantize_int8(model)
    if options.compile:  # imported here: torch.compile's machinery adds about 1 s to start-up
        from decoderkit.generation.seq2seq.compiled import compile_step

        return model, compile_step(model, options.autotune)
    return model, decode_step


def write_json(results: list[Translation], path: str | Path, flag: str = "--explain-out"
               ) -> None:
    """All results, traces included, as one JSON object ``{"written_by", "results": [...]}``,
    written atomically; ``path`` may only be new or an earlier such file
    (``base.files.check_output_file``)."""
    text = json.dumps({"written_by": output_mark(JSON_COMMAND),
                       "results": [r.to_dict() for r in results]})
    write_output(path, flag, JSON_COMMAND, lambda tmp: tmp.write_text(text))


def _nbest(out, row: int, tgt_tok, c) -> list[dict] | None:
    """Beam search's hypotheses for ``row``, each cut after its EOS or before the pad that
    follows a hypothesis ended by its length bound (pad is never generated); None for
    greedy/sampling or n_best 1."""
    if out.nbest_tokens is None or out.nbest_tokens.size(1) < 2:
        return None
    hyps = []
    for ids, score in zip(out.nbest_tokens[row].tolist(), out.nbest_scores[row].tolist(),
                          strict=True):
        if c.eos_id in ids:
            ids = ids[:ids.index(c.eos_id) + 1]
        if c.pad_id in ids:
            ids = ids[:ids.index(c.pad_id)]
        hyps.append({"text": tgt_tok.decode(ids), "tokens": tgt_tok.tokens(ids), "score": score})
    return hyps


def _decode(model, src, limits: list[int], seeds: list[int] | None, o: DecodeOptions, step,
            retire: bool, banned: tuple[int, ...]):
    if o.sample:
        return sample(model, src, None, max_len=limits, temperature=o.temperature,
                      top_k=o.top_k, top_p=o.top_p, seed=seeds, explain=o.explain, step=step,
                      forced_eos=o.forced_eos, banned=banned)
    if o.beam > 1:
        return beam_search(model, src, None, beam_size=o.beam, max_len=limits,
                           length_penalty=o.length_penalty, n_best=o.n_best, explain=o.explain,
                           retire=retire, step=step, forced_eos=o.forced_eos, banned=banned)
    return greedy_decode(model, src, None, max_len=limits, explain=o.explain, step=step,
                         forced_eos=o.forced_eos, banned=banned)


def unk_id(tokenizer) -> int:
    """The id of ``tokenizer``'s unknown token (``ban_unk`` bans it)."""
    return tokenizer.tokens(range(tokenizer.vocab_size)).index(tokenizer.unk_token)
