"""What the GPT explorer page shows of one prompt: its tokens, every layer's and head's
attention, the next-token logits (the page applies temperature, top-k and top-p to them) and
the logit lens (each layer's output through the final norm and the head: its guess of the
next token). Everything is recorded in the call's own ``AttentionRecord``, never on the model
(no hooks), so explorers and the worker's steps run the one model side by side.

Legend: T prompt tokens, N layers, h heads, V vocabulary.
"""

from __future__ import annotations

import torch

from decoderkit.generation.lm.choose import usable_logits, usable_vocab
from decoderkit.nn.modes import evaluating
from decoderkit.nn.layers import AttentionRecord
from decoderkit.serve.fields import FieldError
from decoderkit.serve.lm.limits import MAX_EXPLORE_TOKENS

LENS_TOP = 5  # the logit lens's guesses per layer
TOP_TOKENS = 50  # next tokens named (the bars: filters only cut this order, never change it)


def explore(model, tokenizer, ids: list[int]) -> dict:
    """The page's view of ``ids`` (1..MAX_EXPLORE_TOKENS tokens, else a 400 naming prompt);
    logits and guesses over the tokenizer's ids alone (``usable_vocab``: no padded row)."""
    most = min(MAX_EXPLORE_TOKENS, model.config.max_len)
    if not 0 < len(ids) <= most:
        raise FieldError("prompt", f"the explorer takes 1 to {most} tokens, got {len(ids)}")
    V = usable_vocab(model.config.vocab_size, tokenizer.vocab_size)
    bad = [i for i in ids if i >= V]
    if bad:
        raise FieldError("prompt", f"token id {bad[0]} is outside the vocabulary [0, {V})")
    record = AttentionRecord()  # this call's own: each layer's attention and output
    with evaluating(model), torch.inference_mode():
        h = model.features(torch.tensor([ids]), record=record)  # (1, T, d), normed
        logits = usable_logits(model.logits(h[0, -1]), V)  # (V,)
        last = torch.stack([out[0, -1] for out in record.outputs])  # (N, d)
        lens = usable_logits(model.logits(model.blocks.norm(last)), V).log_softmax(-1)  # (N, V)
    piece = tokenizer.decode
    top = lens.topk(min(LENS_TOP, lens.size(-1)))
    return {
        "tokens": [piece([i]) for i in ids],
        "ids": ids,
        "attention": [[[[round(w, 4) for w in row] for row in head] for head in layer[0]]
                      for layer in (a.tolist() for a in record.self_attn)],  # N x h x T x T
        "logits": [round(v, 4) for v in logits.tolist()],  # (V,) raw, the last position's
        "top": [{"id": i, "token": piece([i])} for i in logits.topk(
            min(TOP_TOKENS, logits.numel())).indices.tolist()],  # by logit, best first
        "lens": [[{"id": i, "token": piece([i]), "logprob": round(p, 4)}
                  for i, p in zip(ids_, ps, strict=True)]
                 for ids_, ps in zip(top.indices.tolist(), top.values.tolist(), strict=True)],
    }
