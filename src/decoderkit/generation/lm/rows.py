"""Continuous batching of a decoder-only LM: rows join, step together and leave.

A ``Row`` (``lm_row``) is one sequence being generated, with its own ``Settings`` and
sampling state (its own ``torch.Generator``, penalty counts, ``StopText``). ``Rows`` steps
every running row at once: one forward of their new tokens on a rowwise ``KVCache`` (row i's
keys and values in slot i, each row of its own length, at the positions ``Rows`` gives), then every
row's next token is chosen from its own logits, all rows in one call (``lm_choose``). A row
joins into the next free slot; the rows that joined since the last step are prefilled at the
start of the next, their prompts end to end in one forward (``KVCache.packed``: the weights
are read once for all of them, not once a prompt). A row leaves when it stops (an
end-of-text id, a stop sequence, its token budget) or is dropped (its client left), and the
last row moves into its slot (the running rows fill the first slots). A row whose cache has
reached the context C continues on the last C tokens, prefilled afresh (nanoGPT's crop, as
``generation.lm``).

Each row's arithmetic is independent of its companions with a ``rowwise`` model or the int8
copy: the linears compute each row (each position, in a prefill) alike for any row count
(``nn.rowwise``; int8: a scale per row, ``generation.int8.RowScaledInt8``), attention
computes each row alike for any companions (a step: ``nn.cache``'s rowwise kernel, batched
matmuls over a window of whole ``ROWS_CHUNK``s, unfilled positions masked; a prefill: each
prompt's own call, as alone), norms and activations are per position, and penalties, filters
and the draw work on the row's own logits with its own generator, op by op row by row (one
uniform number per row): no reduction over the batch. A row's LoRA adapter (``Row.adapter``,
a model holding several: ``nn.lora.MultiLoRALinear``) is routed to its positions in every
forward, its low-rank update computed on its rows alone, so rows of other adapters and of the
base share the step.

A row may start from stored keys and values of its prompt's first positions (``Row.prefix``,
or the longest in the ``PrefixStore`` given: ``generation.lm.prefix``), loaded into its slot
(``KVCache.load_prefix``); only the rest of its prompt is prefilled, and the tokens and
log-probabilities are those of the prompt prefilled whole, bit for bit on the rowwise copy and
int8. Each prompt prefilled is stored in the store's blocks.

Legend: B running rows, L prompt length, C context length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import Tensor

from decoderkit.base.memory import release_freed_memory
from decoderkit.generation.sampling import generators
from decoderkit.generation.limits import check_sampling, logits_dtype
from decoderkit.generation.lm.choose import choose, usable_logits, usable_vocab
from decoderkit.generation.lm.prefix import PrefixStore, reusable
from decoderkit.generation.lm.row import FINISH_LENGTH, Row, Settings, Token, check_prompt
from decoderkit.nn.lora import check_adapter, routed, served_adapters
from decoderkit.nn.modes import evaluating
from decoderkit.nn.lm.model import DecoderOnlyLM

OnChosen = Callable[[list[tuple["Row", "Token"]]], object]  # a step's tokens, once chosen
SCORE_CHUNK = 64  # prompt positions scored per head product (bounds the (chunk, V) logits)
PREFILL_TOKENS = 1024  # prompt positions prefilled in one forward at most (its activations)


class Rows:
    """The running rows of one model; ``join`` (prefill), ``step`` (everyone), ``drop``."""

    def __init__(self, model: DecoderOnlyLM, prefixes: PrefixStore | None = None):
        if not isinstance(model, DecoderOnlyLM):
            raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
        self.model = model
        self.running: list[Row] = []  # running[i]'s keys and values are in slot i
        weight = model.embed.lut.weight
        self.device, self.dtype = weight.device, logits_dtype(model)
        self.cache = model.new_cache(1, model.config.max_len, rowwise=True)
        self.lengths: list[int] = []  # lengths[i]: the positions slot i holds
        self.adapters = served_adapters(model)  # the LoRA adapters a row may name
        self.prefixes = prefixes  # prompts' stored keys and values (None: no reuse)
        self.prefilled = 0  # prompt positions prefilled so far (the rest: reused)
        self._trim = False  # a prefill's activations freed, not yet handed back to the OS

    def join(self, row: Row) -> None:
        """Take ``row`` in: it runs from the next ``step``, which first prefills it with the
        other rows that joined since the last (``_prefill_joined``). A row scoring its prompt
        is prefilled and scored here, alone; with ``max_new_tokens`` 0 it finishes at once."""
        s = row.settings
        check_sampling(s.temperature, s.top_k, s.top_p, None if s.greedy else self.dtype)
        check_prompt(row.prompt, usable_vocab(self.model.config.vocab_size, s.usable_vocab))
        check_adapter(row.adapter, self.adapters)
        prompt, slot = row.context(self.model.config.max_len), len(self.running)
        with evaluating(self.model), torch.inference_mode():
            row.gens = None if s.greedy else generators(s.seed, 1, self.device)
            row.next_logits = None
            if s.max_new_tokens and not s.prompt_logprobs:
                self._hold(slot, 0)  # prefilled by the next step
            elif s.max_new_tokens:
                h = self._prefill([slot], [row], [prompt])
            else:
                with self._routed([row.adapter] * len(prompt)):
                    h = self.model.features(torch.tensor([prompt], device=self.device))[0]
            if s.prompt_logprobs:
                row.prompt_scores = self._score(prompt, h, s)
        self._release()
        if s.max_new_tokens:
            self.running.append(row)
        else:
            row.finish_reason = FINISH_LENGTH

    def warm_up(self) -> None:
        """A throwaway prefill and step, run by the thread that will step the rows (the
        server's worker, at start-up): its OpenMP team and oneDNN's kernels are made before a
        first request would pay for them (about a second here), and a compiled step compiles
        its graphs for one row and for several."""
        rows = [Row([0, 0], Settings(3, greedy=True)) for _ in range(2)]
        for row in rows:  # a step of one row, then of two
            self.join(row)
            self.step()
        for row in rows:
            self.drop(row)

    def drop(self, row: Row) -> None:
        """Take ``row`` out (its client is gone); a no-op for a row not running."""
        if row in self.running:
            with torch.inference_mode():  # the cache's buffers are inference tensors
                self._leave(self.running.index(row))

    def _leave(self, i: int) -> None:
        """Running row i leaves; the last running row takes its place (and slot)."""
        last = len(self.running) - 1
        if i != last:
            self._move(last, i)
            self.running[i] = self.running[last]
        self.running.pop()

    def _hold(self, slot: int, length: int) -> None:
        """Slot ``slot`` now holds ``length`` positions."""
        self.lengths += [0] * (slot + 1 - len(self.lengths))
        self.lengths[slot] = length

    def _move(self, src: int, dst: int) -> None:
        """Slot src's row into slot dst (its filled positions copied)."""
        self.cache.move(src, dst, self.lengths[src])
        self._hold(dst, self.lengths[src])

    def step(self, on_chosen: OnChosen | None = None) -> list[tuple[Row, Token]]:
        """Every running row chooses one token (``lm_choose.choose``: all at once, each from
        its own logits); finished rows leave, the others advance.
        Returns (row, token) for each row that ran, in order; ``on_chosen(events)`` gets
        them as soon as they are chosen, before the forward that prepares the next step (a
        stream shows a token one forward sooner)."""
        with evaluating(self.model), torch.inference_mode():
            self._prefill_joined()
            rows = list(self.running)
            chosen = choose(torch.cat([r.next_logits for r in rows]), [r.settings for r in rows],
                            [r.gens for r in rows],
                            [None if r.counts is None else r.counts[0] for r in rows])
            events = [(row, self._take(row, token))
                      for row, token in zip(rows, chosen, strict=True)]
            if on_chosen is not None:
                on_chosen(events)
            self._release()  # once the tokens are out: not in the time to the first
            for i in reversed(range(len(rows))):
                if rows[i].finish_reason is not None:
                    self._leave(i)
            self._advance()
        return events

    def _take(self, row: Row, token: int) -> Token:
        """The row takes its chosen ``token``: its log-probs if asked, its penalty counts."""
        s, logits = row.settings, row.next_logits
        logprob, top = _logprobs(usable_logits(logits[0], s.usable_vocab), token, s.logprobs) \
            if s.logprobs is not None else (None, None)
        if s.presence_penalty or s.frequency_penalty:
            row.count(token)
        return row.take(token, logprob, top)

    def _advance(self) -> None:
        """The running rows' last tokens through the model: together on the rowwise ``KVCache``;
        a row whose cache is full (the context) moves to the last slots and continues alone
        on its last C tokens."""
        C, lengths = self.model.config.max_len, self.lengths
        B = len(self.running)
        for i in reversed(range(B)):
            if lengths[i] == C:  # to slot B-1, whose row takes slot i (the full one's is redone)
                B -= 1
                if i != B:
                    self._move(B, i)
                    self.running[i], self.running[B] = self.running[B], self.running[i]
                row = self.running[B]
                self._prefill([B], [row], [row.context(self.model.config.max_len)])
        if not B:
            return
        ids = torch.tensor([[r.tokens[-1]] for r in self.running[:B]], device=self.device)
        at = self.cache.at(torch.tensor(lengths[:B], device=self.device)[:, None],
                           window=max(lengths[:B]) + 1)  # each row at its next position
        with self._routed([r.adapter for r in self.running[:B]]):
            logits = self.model.decode_one_token(ids, self.cache, at)  # (B, V)
        self.lengths[:B] = [n + 1 for n in lengths[:B]]
        for i, row in enumerate(self.running[:B]):
            row.next_logits = logits[i:i + 1]

    def _prefill_joined(self) -> None:
        """The running rows not prefilled yet (joined since the last step), each from its
        prefix (``_start``), the rest of their prompts end to end in forwards of at most
        ``PREFILL_TOKENS`` positions (a longer one alone); then each prompt stored."""
        C = self.model.config.max_len
        waiting = [(i, row.context(C)) for i, row in enumerate(self.running)
                   if row.next_logits is None]
        waiting = [(i, p, self._start(i, self.running[i], p)) for i, p in waiting]
        while waiting:
            group, size = [], 0
            while waiting and (not group or size + len(waiting[0][1]) - waiting[0][2]
                               <= PREFILL_TOKENS):
                group.append(waiting.pop(0))
                size += len(group[-1][1]) - group[-1][2]
            slots, rows = [i for i, _, _ in group], [self.running[i] for i, _, _ in group]
            self._prefill(slots, rows, [p[n:] for _, p, n in group], [n for _, _, n in group])
            for (slot, prompt, _), row in zip(group, rows, strict=True):
                if self.prefixes is not None and len(row.prompt) <= C:
                    self.prefixes.add(row.adapter, prompt, lambda a, b, s=slot:
                                      self.cache.read_prefix(s, b, a))

    def _start(self, slot: int, row: Row, prompt: list[int]) -> int:
        """Load ``row``'s prefix (its own, else the store's longest) into ``slot``; the
        positions loaded (``prefix.reusable``: whole blocks, not the last id; none where the
        prompt was cropped to the context, its positions moved)."""
        if len(row.prompt) > self.model.config.max_len:
            return 0
        prefix = row.prefix if row.prefix is not None or self.prefixes is None \
            else self.prefixes.longest(row.adapter, prompt)
        n = 0 if prefix is None else reusable(prefix.length, len(prompt))
        if n:
            self.cache.load_prefix(slot, prefix.keys, prefix.values, n)
        return n

    def _prefill(self, slots: list[int], rows: list[Row], prompts: list[list[int]],
                 starts: list[int] | None = None) -> Tensor:
        """``prompts`` (each at most C ids, from positions ``starts``, default 0) into the
        cache's ``slots`` by one forward, end to end, and each row's next-token logits;
        returns the final hidden states (sum L, d)."""
        starts = [0] * len(slots) if starts is None else starts
        at = self.cache.packed(slots, [len(p) for p in prompts], starts)
        ids = torch.tensor([[t for p in prompts for t in p]], device=self.device)
        with self._routed([r.adapter for r, p in zip(rows, prompts, strict=True) for _ in p]):
            h = self.model.features(ids, self.cache, at)[0]  # (sum L, d)
        for i, p, n in zip(slots, prompts, starts, strict=True):
            self._hold(i, n + len(p))
        self.prefilled += ids.size(1)
        logits = self.model.logits(h[[end - 1 for _, _, end in at.spans]])  # (n, V)
        for j, row in enumerate(rows):
            row.next_logits = logits[j:j + 1]
        self._trim = True  # its activations, which malloc would keep resident: _release
        return h

    def _release(self) -> None:
        """Hand the memory the last prefills freed back to the OS (``release_freed_memory``:
        10-16 ms after a 200-position prefill of 30 layers, so it runs once the step's tokens
        are shown)."""
        if self._trim:
            release_freed_memory()
            self._trim = False

    def _routed(self, adapters: list[str | None]):
        """Each position's adapter for the forward within (``nn.lora.routed``)."""
        return routed(self.model, adapters) if self.adapters else nullcontext()

    def _score(self, prompt: list[int], h: Tensor, s: Settings) -> list[Token]:
        """Each prompt token's log p given the tokens before it (the first has none), from
        the model's log-softmax over the hidden states h (L, d), in chunks of positions; with
        the ``s.logprobs`` most likely, over the ``s.usable_vocab`` ids."""
        scores, top = [Token(prompt[0], "")], s.logprobs
        for start in range(0, len(prompt) - 1, SCORE_CHUNK):
            logits = usable_logits(self.model.logits(h[start:start + SCORE_CHUNK]),
                                   s.usable_vocab)  # (chunk, V)
            for j, row_logits in enumerate(logits[:len(prompt) - 1 - start]):
                token = prompt[start + j + 1]
                logprob, best = _logprobs(row_logits, token, top or 0)
                scores.append(Token(token, "", logprob, best if top is not None else None))
        return scores


def _logprobs(logits: Tensor, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """(log p of ``token``, the ``top`` most likely (id, log p)) from raw logits (V,): over
    the usable ids alone (``usable_logits``), which a draw chooses among."""
    logp = logits.log_softmax(dim=-1)
    values, ids = logp.topk(min(top, logp.numel())) if top else (logp[:0], logp[:0].long())
    return float(logp[token]), list(zip(ids.tolist(), values.tolist(), strict=True))
