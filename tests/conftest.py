"""Shared test helpers: independent float64 NumPy references and weight copying to PyTorch peers.

The references are written from the textbook formulas, not from the library's code, so a
test comparing against them can fail.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from hypothesis import settings
from torch import nn

from decoderkit import make_model
from decoderkit.training.seq2seq.checkpoint import save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer

# Test tensors are tiny: intra-op threads only contend (a 3x8 layer norm took 60x longer with
# two threads on the shared 2-core machine). One thread per test process, and the same in the
# subprocesses tests start, so a run split across processes reduces in the same order.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)

# Property tests: few examples, no per-example deadline (CPU time is shared).
PROPERTY = settings(max_examples=25, deadline=None)

F64 = dict(rtol=1e-12, atol=1e-12)  # float64 comparison tolerance

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def seeded() -> None:
    """Seed torch's global generator, for tests that build modules with random init."""
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def np_layer_norm(x, gamma, beta, eps=1e-5):
    """gamma (x - mean) / sqrt(var + eps) + beta per row; population variance."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).sum(-1, keepdims=True) / x.shape[-1]
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def np_softmax(scores, visible=None):
    """Row softmax with max subtraction; blocked entries 0; a row with nothing visible -> 0."""
    scores = np.asarray(scores, dtype=np.float64)
    if visible is None:
        visible = np.ones(scores.shape, dtype=bool)
    visible = np.broadcast_to(visible, scores.shape)
    shifted = np.where(visible, scores, -np.inf)
    row_max = shifted.max(-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(visible, np.exp(shifted - row_max), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def np_attention(q, k, v, visible=None):
    """softmax(q k^T / sqrt(d_k), visible) v -> (output, weights)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    weights = np_softmax(scores, visible)
    return weights @ v, weights


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """A seeded float64 standard-normal tensor."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def as_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.float64).numpy()


def copy_attention(ours, peer: nn.MultiheadAttention) -> None:
    """Our packed in_proj / out_proj -> nn.MultiheadAttention's in_proj_weight/bias, out_proj."""
    with torch.no_grad():
        peer.in_proj_weight.copy_(ours.in_proj.weight)
        peer.in_proj_bias.copy_(ours.in_proj.bias)
        peer.out_proj.weight.copy_(ours.out_proj.weight)
        peer.out_proj.bias.copy_(ours.out_proj.bias)


def copy_norm(ours, peer: nn.LayerNorm) -> None:
    with torch.no_grad():
        peer.weight.copy_(ours.weight)
        peer.bias.copy_(ours.bias)


def copy_ffn(ours, peer) -> None:
    """Our PositionwiseFeedForward -> a torch Transformer layer's linear1 / linear2."""
    with torch.no_grad():
        for mine, theirs in ((ours.w_1, peer.linear1), (ours.w_2, peer.linear2)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Fill every parameter with N(0, 0.5^2) so norms and biases are not at their (1, 0) init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def rig_padding(head: torch.Tensor, n: int) -> None:
    """A head (n + 2d, d) whose rows past the first n (padding past a tokenizer's n tokens)
    win every argmax: rows +-K e_i for each dimension i, K past sqrt(d) times the longest of
    the first n rows (max_i K |h_i| >= K |h| / sqrt(d) beats every real logit)."""
    d = head.size(1)
    assert head.size(0) == n + 2 * d, (head.shape, n)
    with torch.no_grad():
        k = 2 * d ** 0.5 * float(head[:n].norm(dim=1).max())
        head[n::2], head[n + 1::2] = k * torch.eye(d), -k * torch.eye(d)


def assert_picture(path, min_px: int = 150) -> None:
    import matplotlib.image as mpimg  # only the figure tests need matplotlib

    """A PNG that opens, is at least min_px on each side and shows more than one colour."""
    img = mpimg.imread(path)
    assert img.shape[0] >= min_px and img.shape[1] >= min_px, img.shape
    assert float(img[..., :3].std()) > 0.05, "blank image"


def tiny_checkpoint(directory, seed: int = 0):
    """A random 1+1-layer model over a character vocabulary, saved as a checkpoint."""
    tok = Tokenizer.characters(["0123456789 -/.NovDec"])
    torch.manual_seed(seed)
    model = make_model(tok.vocab_size, tok.vocab_size, N=1, d_model=16, d_ff=32, h=2,
                       dropout=0.0, max_len=64)
    return save_checkpoint(directory, model, tok, tok, step=0)


def openai_gpt_files(directory, text: str):
    """A small GPT-1-format vocab.json and merges.txt (lowercased symbols, ``</w>`` at word
    ends, ``<unk>``, a ``#version`` line first), learned here from ``text`` with `tokenizers`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    hf.normalizer = normalizers.BertNormalizer(lowercase=True)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    alphabet = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()&")
    hf.train_from_iterator([text * 3, "i'll don't you've 123 4567 (a) - b; c!"],
                           trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                               special_tokens=["<unk>"], initial_alphabet=alphabet,
                                               end_of_word_suffix="</w>"))
    model = json.loads(hf.to_str())["model"]
    (directory / "vocab.json").write_text(json.dumps(model["vocab"]), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                         encoding="utf-8")
    return directory / "vocab.json", directory / "merges.txt", model["vocab"], merges


# Two engines, or two precisions, round differently: a comparison of their tokens holds only
# where the reference's choice is decided by more than the two can differ. One rule, used by
# every engine/precision comparison: a step is decided where the reference's margin (top-1 minus
# top-2 log-probability, or the gap between two ranked hypotheses' scores) exceeds twice the
# comparison's stated bound on a log-probability's (or a score's) error, since each side of the
# gap may move by the bound.

# A float32 log-probability, or a beam score, computed by two float32 engines (ours, HF,
# CTranslate2, ONNX Runtime) on these small models: they differ by rounding only (at most a few
# 1e-6, on any CPU and kernel); the comparisons' bound.
FLOAT32_ENGINES = 1e-5


def decided(margin: float, bound: float) -> bool:
    """Whether a reference margin of ``margin`` fixes the other side's choice (error <= bound)."""
    return margin > 2 * bound


def assert_tokens_agree_where_decided(ref, got, margins, bound: float, *, at_least: int) -> int:
    """Token sequences, one per row: ``got`` equals ``ref`` up to the row's first undecided step
    (``margins[row][t]`` the reference's top-1 minus top-2 log-prob at step t), the whole row,
    its end included, when every step is decided; beyond an undecided step the two may part.
    Asserts that at least ``at_least`` rows were decided throughout (so the comparison compares
    something); returns that number."""
    assert len(ref) == len(got) == len(margins), (len(ref), len(got), len(margins))
    whole = 0
    for row, (r, g, m) in enumerate(zip(ref, got, margins, strict=True)):
        r, g = list(r), list(g)
        k = next((t for t, x in enumerate(m[:len(r)]) if not decided(float(x), bound)), None)
        if k is None:
            assert g == r, f"row {row}: every step decided (bound {bound}), {g} != {r}"
            whole += 1
        else:
            assert g[:k] == r[:k], f"row {row}: first {k} steps decided, {g[:k]} != {r[:k]}"
    assert whole >= at_least, f"{whole} rows decided throughout, fewer than {at_least}"
    return whole


def assert_ranked_agree_where_decided(ref, ref_scores, got, got_scores, bound: float, *,
                                      at_least: int) -> int:
    """Ranked hypotheses (beam search's n best), per row a list best first with its scores: the
    scores agree rank by rank within ``bound``, and the hypothesis at a rank is the same where
    the reference's score gaps to its neighbours are decided. Asserts that at least
    ``at_least`` ranks were decided; returns that number."""
    count = 0
    for row, (r, rs, g, gs) in enumerate(zip(ref, ref_scores, got, got_scores, strict=True)):
        rs, gs = [float(s) for s in rs], [float(s) for s in gs]
        assert max(abs(a - b) for a, b in zip(rs, gs, strict=True)) <= bound, \
            f"row {row}: scores {gs} vs {rs} (bound {bound})"
        for i in range(len(rs)):
            gaps = [rs[j] - rs[j + 1] for j in (i - 1, i) if 0 <= j < len(rs) - 1]
            if all(decided(abs(x), bound) for x in gaps):
                assert list(g[i]) == list(r[i]), f"row {row} rank {i}: {g[i]} != {r[i]}"
                count += 1
    assert count >= at_least, f"{count} ranks decided, fewer than {at_least}"
    return count


def step_margins(top_logprobs) -> list[float]:
    """Top-1 minus top-2 log-prob of each step, from per step its sorted top log-probs (one
    alone, a forced token: infinitely decided)."""
    return [float(t[0]) - float(t[1]) if len(t) > 1 else float("inf") for t in top_logprobs]


def generation_margins(gen) -> list[list[float]]:
    """Per row of a ``Generation`` decoded with ``explain`` >= 2: its steps' margins."""
    return [step_margins(s.top_logprobs[b] for s in gen.steps[:int(gen.lengths[b])])
            for b in range(len(gen.lengths))]


def translation_margins(results) -> list[list[float]]:
    """Per ``Translation`` (``explain`` >= 2): its steps' margins."""
    return [step_margins([a["logprob"] for a in s["alternatives"]] for s in r.steps)
            for r in results]


def beam_margins(results) -> list[list[float]]:
    """Per ``Translation`` of a beam search with ``n_best`` >= 2: [best minus second score], the
    margin of its one decision (which hypothesis is returned)."""
    return [[r.nbest[0]["score"] - r.nbest[1]["score"]] for r in results]
