"""Training tokens/s: our EncoderDecoder beside ``nn.Transformer`` with the same weights.

One training step = ``decoderkit.training.objective.train_step``: forward, label-smoothed loss
over the real target tokens, backward, Adam. Both models share the same embedding, positional
and generator code (copies of ours), so the comparison is the Transformer body; the torch body
comes from ``decoderkit.interop.torch_nn.to_torch``. Steps are timed interleaved (ours, torch,
ours, ...) in one run and the medians reported with the ratio. Goal: ours / torch tokens/s >= 1.0.

    .venv/bin/python benchmarks/train_step.py [--threads 2] [--repeats 7] [--device cpu]

Legend: B batch, S source length, T target length, d = d_model, V vocabulary size.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import Tensor, nn

from decoderkit import make_model
from decoderkit.interop.torch_nn import TransformerCore, to_torch
from decoderkit.nn.masks import causal_mask, to_torch_mask
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.training.seq2seq.data import Batch, make_batch
from decoderkit.training.objective import LabelSmoothingLoss, make_optimizer, train_step
from decoderkit.training.seq2seq.objective import TeacherForced


class TorchSeq2Seq(nn.Module):
    """Our embeddings and generator around an ``nn.Transformer`` body with our weights."""

    def __init__(self, ours: EncoderDecoder):
        super().__init__()
        for name in ("src_embed", "tgt_embed", "src_pos", "tgt_pos", "generator"):
            setattr(self, name, copy.deepcopy(getattr(ours, name)))
        self.body = to_torch(TransformerCore(ours.encoder, ours.decoder))

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
        """Our ``EncoderDecoder.forward`` signature: ids and our masks -> features (B, T, d)."""
        src_blocked = to_torch_mask(src_mask[:, 0])  # (B, S), True = padding
        causal = to_torch_mask(causal_mask(tgt.size(1), tgt.device))  # (T, T)
        return self.body(self.src_pos(self.src_embed(src)), self.tgt_pos(self.tgt_embed(tgt)),
                         tgt_mask=causal, src_key_padding_mask=src_blocked,
                         tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src_blocked,
                         tgt_is_causal=True)


def step_fn(model: nn.Module, batch: Batch, d_model: int):
    """One ``train_step`` on ``batch`` (no clipping), as the training loop runs it."""
    module = TeacherForced(model, LabelSmoothingLoss(0.1, ignore_index=0, reduction="sum"))
    optimizer, scheduler = make_optimizer(model, d_model, warmup=4000)
    return lambda: train_step(module, [batch], optimizer, scheduler, clip=None,
                              total_tokens=batch.n_tokens)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--len", type=int, default=32, help="source and target length")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved timing rounds")
    p.add_argument("--iters", type=int, default=3, help="steps per timing round")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    ours = make_model(a.vocab, a.vocab, a.layers, a.d_model, a.d_ff, a.heads, dropout=0.0)
    theirs = TorchSeq2Seq(ours)
    ours, theirs = ours.to(a.device).train(), theirs.to(a.device).train()
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(3, a.vocab, (a.len,), generator=g).tolist(),
              torch.randint(3, a.vocab, (a.len - 1,), generator=g).tolist())
             for _ in range(a.batch)]  # target + EOS = len tokens
    batch = make_batch(pairs, 0, 1, 2).to(a.device)
    with torch.no_grad():
        args = (batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        diff = (ours.generator(ours(*args)) - theirs.generator(theirs(*args))).abs().max().item()
    print(f"max |torch - ours| log-prob before training = {diff:.2e}")

    runs = {"ours": step_fn(ours, batch, a.d_model),
            "nn.Transformer": step_fn(theirs, batch, a.d_model)}
    for fn in runs.values():  # warm-up
        fn()
    times = {name: [] for name in runs}
    for _ in range(a.repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            for _ in range(a.iters):
                fn()
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / a.iters)

    tokens = batch.n_tokens
    print(f"training step: N={a.layers} d={a.d_model} h={a.heads} f={a.d_ff} B={a.batch} "
          f"S=T={a.len} V={a.vocab}, dropout 0, fp32, {torch.get_num_threads()} threads, "
          f"{a.device}, torch {torch.__version__}; {a.repeats} interleaved rounds x "
          f"{a.iters} steps, medians")
    rate = {name: tokens / statistics.median(ts) for name, ts in times.items()}
    for name, r in rate.items():
        print(f"  {name:15s} {r:10.0f} target tokens/s")
    print(f"  ratio ours / nn.Transformer: {rate['ours'] / rate['nn.Transformer']:.3f} "
          f"(goal >= 1.0)")


if __name__ == "__main__":
    main()
