"""The sizes every Week 3 item is judged at, and the learner's config its modules are built
from in nanoGPT's layout (``GPTConfig(block_size, vocab_size, n_layer, n_head, n_embd,
dropout, bias)``, which the file or notebook defines)."""

from __future__ import annotations

from decoderkit.grade.judge.judging import Tolerance

SEED = "w3"  # no seed text: nanoGPT's model.py and GPT-2 are the references
V, L, D, H, N = 23, 12, 16, 2, 2  # vocab, block_size, width, heads, layers (all distinct)
F = 4 * D  # GPT's MLP width
TOL = Tolerance(atol=1e-4, rtol=1e-4)  # the learner's module runs in float32
CONFIG_CLASS = "GPTConfig"  # nanoGPT's config class, which the file (or notebook) defines
CONFIG = {"config": CONFIG_CLASS, "fields": dict(block_size=L, vocab_size=V, n_layer=N,
                                                 n_head=H, n_embd=D, dropout=0.0, bias=True)}
