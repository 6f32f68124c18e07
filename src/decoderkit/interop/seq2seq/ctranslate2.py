"""Export to CTranslate2, and translating with the exported model.

``export_ctranslate2`` fills CTranslate2's own Transformer spec (``TransformerSpec.from_config``)
with a checkpoint's weights: our layer count, heads, pre/post-norm, activation and LayerNorm
epsilon; our sinusoidal table passed as explicit position encodings (ours interleaves sin and
cos channels, CTranslate2's built-in table does not); embeddings scaled by sqrt(d_model), as
ours are; tied weights stored once (CTranslate2 aliases equal variables). The vocabularies are
our tokenizers' tokens in id order. The result is checked by loading it.

``Ctranslate2Engine`` translates lines with it under our decoding conventions where
CTranslate2 has the option: EOS counts in ``max_len``, the same per-line bound, pad and BOS
never generated, no minimum length, beam hypotheses ranked by log p / length **
length_penalty, and Hugging Face's forced EOS when asked (``_search``: greedy then equals
``generate`` token for token). An exported Marian directory's own settings (num_beams,
max_length, forced EOS) are in ``meta``, as a checkpoint's, for ``translate`` to use. What it
does not share with ours: its scores are divided by the length (greedy too) and renormalised
over the allowed tokens; its beam search retires a hypothesis that emits EOS and refills the
beam, and stops once its beam has ended, where ours keeps it in the beam with a frozen score,
so beam outputs can differ where a hypothesis ends early (measured on the demo:
``README.md``, Deploy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import STOP_EOS, STOP_MAX_LEN
from decoderkit.generation.seq2seq.bounds import banned_ids, default_max_len
from decoderkit.generation.limits import check_int
from decoderkit.base.families import SEQ2SEQ
from decoderkit.generation.engines import check_engine
from decoderkit.generation.seq2seq.settings import generation_settings
from decoderkit.generation.seq2seq.translate import (
    DecodeOptions,
    Translation,
    asked,
    unbatched,
)
from decoderkit.generation.seq2seq.workers import thread_share
from decoderkit.interop.artifacts import engine_file, import_extra, write_directory
from decoderkit.interop.seq2seq.manifest import read_manifest, write_manifest
from decoderkit.interop.seq2seq.ctranslate2_files import (
    CONFIG,
    check_engine_model,
    check_engine_weights,
    special_tokens,
)
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.training.seq2seq.checkpoint import Checkpoint

ENGINE = "ctranslate2"
QUANTIZATIONS = ("float32", "int8", "int8_float32")  # weight types of an export
MODEL_FILE = "model.bin"  # CTranslate2's weights in an export directory
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "swish": "SWISH"}


def check_expressible(model: EncoderDecoder) -> None:
    """Raise a UsageError naming the first config option CTranslate2 cannot express."""
    c = model.config
    if c.layer_norm != "standard":
        raise UsageError(f"CTranslate2 cannot express layer_norm={c.layer_norm!r} (unbiased "
                         f"std, eps outside the square root): export a model trained with "
                         f"layer_norm='standard'")
    if c.activation not in ACTIVATIONS:
        raise UsageError(f"CTranslate2 cannot express activation={c.activation!r}")


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec, linear: torch.nn.Linear, rows: slice = slice(None)) -> None:
    spec.weight = _np(linear.weight[rows])
    if linear.bias is not None:
        spec.bias = _np(linear.bias[rows])


def _norm(spec, norm) -> None:
    spec.gamma = _np(norm.weight)
    if norm.bias is not None:
        spec.beta = _np(norm.bias)


def _attention(spec, attn: MultiHeadAttention, self_attention: bool) -> None:
    """Our packed q, k, v rows: one fused linear (self) or query + fused key/value (cross)."""
    d = attn.d_model
    if self_attention:
        _linear(spec.linear[0], attn.in_proj)
    else:
        _linear(spec.linear[0], attn.in_proj, slice(0, d))
        _linear(spec.linear[1], attn.in_proj, slice(d, 3 * d))
    _linear(spec.linear[-1], attn.out_proj)


def _inputs(spec, embedding, positions) -> None:
    target = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    target.weight = _np(embedding.lut.weight)
    spec.scale_embeddings = embedding.scale  # ours: lut(ids) * sqrt(d_model), or unscaled
    spec.position_encodings.encodings = _np(positions.pe)  # our table, either layout


def build_spec(ckpt: Checkpoint):
    """CTranslate2's TransformerSpec holding ``ckpt``'s weights and vocabularies."""
    specs = import_extra("ctranslate2.specs")
    model, c = ckpt.model, ckpt.config
    check_expressible(model)
    activation = getattr(specs.common_spec.Activation, ACTIVATIONS[c.activation])
    spec = specs.TransformerSpec.from_config(c.n_layers, c.n_heads, pre_norm=c.norm_first,
                                             activation=activation)
    spec.config.layer_norm_epsilon = model.encoder.layers[0].res1.norm.eps
    for name, token in special_tokens(ckpt.tgt_tokenizer, c).items():
        setattr(spec.config, name, token)
    _inputs(spec.encoder, model.src_embed, model.src_pos)
    _inputs(spec.decoder, model.tgt_embed, model.tgt_pos)
    for stack, ours in ((spec.encoder, model.encoder), (spec.decoder, model.decoder)):
        if c.norm_first:  # pre-norm stacks end with a norm; post-norm ones have none
            _norm(stack.layer_norm, ours.norm)
        for layer_spec, layer in zip(stack.layer, ours.layers, strict=True):
            _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
            _norm(layer_spec.self_attention.layer_norm, layer.res1.norm)
            ffn_norm = layer.res2.norm
            if hasattr(layer, "cross_attn"):
                _attention(layer_spec.attention, layer.cross_attn, self_attention=False)
                _norm(layer_spec.attention.layer_norm, layer.res2.norm)
                ffn_norm = layer.res3.norm
            _norm(layer_spec.ffn.layer_norm, ffn_norm)
            _linear(layer_spec.ffn.linear_0, layer.ffn.w_1)
            _linear(layer_spec.ffn.linear_1, layer.ffn.w_2)
    _linear(spec.decoder.projection, model.generator.proj)
    for tokenizer, register in ((ckpt.src_tokenizer, spec.register_source_vocabulary),
                                (ckpt.tgt_tokenizer, spec.register_target_vocabulary)):
        register(tokenizer.tokens(range(tokenizer.vocab_size)))
    return spec


def export_ctranslate2(ckpt: Checkpoint, out: str | Path, quantization: str = "float32",
                       overwrite: bool = False) -> Path:
    """Write ``ckpt`` as a CTranslate2 model directory ``out`` (weights in ``quantization``),
    with our manifest and tokenizers; load it once to check it, then rename it into place."""
    if quantization not in QUANTIZATIONS:
        raise UsageError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    ctranslate2 = import_extra("ctranslate2")
    spec = build_spec(ckpt)

    def fill(tmp: Path) -> None:
        class _Ours(ctranslate2.converters.Converter):
            def _load(self):
                return spec

        _Ours().convert(str(tmp), quantization=quantization, force=True)
        write_manifest(tmp, ENGINE, quantization, ckpt)
        ctranslate2.Translator(str(tmp), device="cpu")  # the check: CTranslate2 loads it

    return write_directory(out, overwrite, fill)


class Ctranslate2Engine:
    """An exported directory loaded in ``ctranslate2.Translator``; translates lines."""

    def __init__(self, directory: str | Path, int8: bool = False, threads: int = 0,
                 workers: int = 1):
        """``threads``: CTranslate2's intra-op threads (0: its default); ``workers`` > 1: that many
        batches at once (``inter_threads``), sharing the threads (at least one each)."""
        ctranslate2 = import_extra("ctranslate2")
        self.workers = check_int("workers", workers, 1)
        self.manifest, self.config, self.src_tokenizer, self.tgt_tokenizer = read_manifest(
            directory, ENGINE, (MODEL_FILE, CONFIG))
        check_engine_model(Path(directory), self.config, self.src_tokenizer, self.tgt_tokenizer)
        weights = engine_file(directory, MODEL_FILE)
        try:
            self.translator = ctranslate2.Translator(
                str(directory), device="cpu", compute_type="int8" if int8 else "default",
                intra_threads=thread_share(threads, workers),
                inter_threads=workers)
        except (RuntimeError, ValueError, IndexError, KeyError) as err:  # its parse of its files
            raise UsageError(f"{weights}: CTranslate2 cannot load it ({err})") from None
        check_engine_weights(Path(weights), self.config)  # its own parse passed
        vocab = self.tgt_tokenizer.tokens(range(self.tgt_tokenizer.vocab_size))
        self.tgt_ids = {token: i for i, token in enumerate(vocab)}
        generation_settings(self.meta)  # checked once, here

    @property
    def meta(self) -> dict:
        """What ``translate`` reads of a checkpoint's meta: the exported directory's decoding
        defaults (a Hugging Face Marian directory's generation settings), its origin."""
        return {"generation": self.manifest.get("generation", {}),
                "origin": self.manifest.get("origin")}

    def translate_lines(self, lines: list[str], options: DecodeOptions,
                        batch_size: int = 32) -> list[Translation]:
        """Our ``translate_lines`` with CTranslate2 doing the search (greedy or beam): the same
        per-line length bound, results for empty and too-long lines, and banned tokens."""
        check_engine(SEQ2SEQ, ENGINE, asked(options))
        check_int("batch_size", batch_size, 1)
        c, src_tok = self.config, self.src_tokenizer
        encoded = [src_tok.encode(line) for line in lines]
        results, todo = unbatched(lines, encoded, c.max_len, src_tok, options)
        bounds = {i: options.max_len or default_max_len(len(encoded[i]), c.max_len)
                  for i in todo}  # line -> its length bound
        found: dict[int, tuple[list[int], float]] = {}
        forced = options.forced_eos
        if options.beam == 1 and bounds and not forced:  # greedy: one call at the largest; a
            top = max(bounds.values())  # line ending within its own bound got what it gets alone
            calls = self._submit(encoded, list(bounds), top, options, batch_size)
            for i, (ids, score) in self._collect(calls, options).items():
                if bounds[i] == top or (ids[-1:] == [c.eos_id] and len(ids) <= bounds[i]):
                    found[i] = ids, score
        groups: dict[int, list[int]] = {}  # length bound -> lines: one bound per CT2 call
        for i, bound in bounds.items():
            if i not in found:
                groups.setdefault(bound, []).append(i)
        submitted = [self._submit(encoded, todo, bound, options, batch_size, forced)
                     for bound, todo in groups.items()]  # all before any is read (workers)
        for calls in submitted:
            found.update(self._collect(calls, options, forced))
        for i, (ids, score) in found.items():
            reason = STOP_EOS if ids and ids[-1] == c.eos_id else STOP_MAX_LEN
            results[i] = Translation(lines[i], src_tok.tokens(encoded[i]),
                                     self.tgt_tokenizer.decode(ids), score, reason,
                                     tokens=self.tgt_tokenizer.tokens(ids))
        return results

    def _submit(self, encoded: list[list[int]], rows: list[int], bound: int,
                options: DecodeOptions, batch_size: int, forced: bool = False) -> list[tuple]:
        """CTranslate2's greedy or beam search of lines ``rows`` (source ids in ``encoded``) under
        one length bound, ``batch_size`` lines a call: (lines, sources, answers) per call,
        asynchronous with ``workers`` > 1 (its replicas take them at once). ``forced``: the
        bound's last token is EOS (HF's ``forced_eos_token_id``): searched to ``bound - 1``,
        each hypothesis then ends with EOS (``_ended``); at bound 1 no call (answers None)."""
        if forced and bound == 1:
            return [(rows, None, None)]
        banned = [[self.tgt_tokenizer.tokens([t])[0]] for t in banned_ids(self.config)]
        if options.ban_unk:  # a Marian .npz model's translator bans <unk>
            banned.append([self.tgt_tokenizer.unk_token])
        calls = []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            batch = [self.src_tokenizer.tokens(encoded[i]) for i in chunk]
            calls.append((chunk, batch, self.translator.translate_batch(
                batch, beam_size=options.beam, length_penalty=options.length_penalty,
                max_decoding_length=bound - 1 if forced else bound, min_decoding_length=0,
                return_scores=True, return_end_token=True, max_input_length=0,
                suppress_sequences=banned, num_hypotheses=options.beam if forced else 1,
                asynchronous=self.workers > 1)))
        return calls

    def _collect(self, calls: list[tuple], options: DecodeOptions, forced: bool = False,
                 ) -> dict[int, tuple[list[int], float]]:
        """``_submit``'s calls' answers: line -> (output ids, score)."""
        out: dict[int, tuple[list[int], float]] = {}
        for chunk, batch, answers in calls:
            if answers is None:  # forced at bound 1: EOS
                out.update({i: ([self.config.eos_id], 0.0) for i in chunk})
                continue
            for i, source, answer in zip(chunk, batch, answers, strict=True):
                answer = answer.result() if self.workers > 1 else answer
                hyps = [[self.tgt_ids[t] for t in h] for h in answer.hypotheses]
                out[i] = self._ended(source, hyps, options.length_penalty) if forced \
                    else (hyps[0], float(answer.scores[0]))
        return out

    def _ended(self, source: list[str], hyps: list[list[int]], length_penalty: float,
               ) -> tuple[list[int], float]:
        """(ids, score) of the best of a line's hypotheses once each that has no EOS is given
        one (log-prob 0: forced), ranked as HF ranks them: log p / length ** length_penalty,
        log p from CTranslate2's own scoring (``score_batch``)."""
        eos = self.config.eos_id
        natural = [h[-1:] == [eos] for h in hyps]
        scored = self.translator.score_batch(
            [source] * len(hyps), [self.tgt_tokenizer.tokens(h[:-1] if ended else h)
                                   for h, ended in zip(hyps, natural, strict=True)])
        ranked = []
        for h, ended, result in zip(hyps, natural, scored, strict=True):
            ids = h if ended else [*h, eos]
            logp = sum(result.log_probs if ended else result.log_probs[:-1])
            ranked.append((logp / len(ids) ** length_penalty, ids))
        score, ids = max(ranked, key=lambda r: r[0])
        return ids, score
