"""The scripted models a decode or sampling loop is run on: their next token (or logits)
is a known function of the whole prefix, so the grader knows what a correct loop returns
(``reference.pieces`` and ``reference.gpt`` import these same functions). Each class has the
interface one course loop calls; ``torch`` is passed in (this package imports nothing).
"""

from __future__ import annotations


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


class ScriptedTranslator:
    """A translator with ``encode(src)`` -> enc_out and ``decode_step(tgt, enc_out)`` ->
    logits (1, T, V); records each prefix it is given."""

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
