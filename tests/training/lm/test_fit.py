"""The LM recipe on the shared loop: two CPU processes under torchrun (gloo) keep identical
replicas, draw different windows and learn; only rank 0 writes; the run's refusals."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import LMConfig
from decoderkit.training.lm.checkpoint import load_lm_checkpoint
from decoderkit.training.lm.data import load_text
from decoderkit.training.lm.fit import LMTrainConfig, lm_fit

HAMLET = Path(__file__).parents[2] / "fixtures" / "shakespeare_hamlet.txt"

WORKER = textwrap.dedent("""
    import os
    import sys

    import torch
    from decoderkit.nn.lm.model import LMConfig
    from decoderkit.training.lm.data import load_text
    from decoderkit.training.lm.fit import LMTrainConfig, lm_fit

    out, text = sys.argv[1], sys.argv[2]
    data = load_text([text], 16)
    config = LMConfig(vocab_size=data.tokenizer.vocab_size, n_layers=1, d_model=16, n_heads=2,
                      d_ff=32, max_len=16, dropout=0.1)
    cfg = LMTrainConfig(block_size=16, batch_size=8, max_steps=24, warmup=2, lr=3e-3,
                        valid_every=8, eval_blocks=64)
    result = lm_fit(config, cfg, data, out + "/run", device="cpu", progress=False, show=False)
    torch.save(result.model.state_dict(), f"{out}/rank{os.environ['RANK']}.pt")
""")


def test_two_processes_keep_identical_replicas_and_learn(tmp_path):
    text = tmp_path / "hamlet.txt"
    text.write_text(HAMLET.read_text()[:20000])
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(script), str(tmp_path), str(text)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    ckpt = load_lm_checkpoint(tmp_path / "run")
    model, meta = ckpt.model, ckpt.meta  # written by rank 0 only
    losses = [h["loss"] for h in meta["history"]]
    assert len(losses) == 3 and losses[-1] < losses[0]
    if meta["step"] == 24:  # the last state was the best: the replicas' own weights
        assert all(torch.equal(v, r0[k]) for k, v in model.state_dict().items())
    assert not list(tmp_path.glob("run.*"))  # no stray temporary checkpoint from rank 1


def test_the_model_must_hold_the_block_and_the_vocabulary(tmp_path):
    data = load_text([HAMLET], 16)
    config = LMConfig(vocab_size=data.tokenizer.vocab_size, n_layers=1, d_model=16, n_heads=2,
                      d_ff=32, max_len=8)
    with pytest.raises(UsageError, match="block_size 16 exceeds the model's context max_len=8"):
        lm_fit(config, LMTrainConfig(block_size=16), data, tmp_path / "run", progress=False)
    small = LMConfig(vocab_size=10, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=16)
    with pytest.raises(UsageError, match="the tokenizer has .* tokens but the model's "
                       "vocab_size is 10"):
        lm_fit(small, LMTrainConfig(block_size=16), data, tmp_path / "run", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_each_process_draws_its_own_windows_and_a_resume_the_same_ones():
    from decoderkit.training.distributed import Context
    from decoderkit.training.lm.fit import LanguageModel

    data = load_text([HAMLET], 16)
    config = LMConfig(vocab_size=data.tokenizer.vocab_size, n_layers=1, d_model=16, n_heads=2,
                      d_ff=32, max_len=16)
    recipe = LanguageModel(config, LMTrainConfig(block_size=16, batch_size=4), data)
    cpu = torch.device("cpu")
    rank0, rank1 = (recipe.batches(0, Context(r, 2, cpu)) for r in (0, 1))
    firsts = [(next(rank0).ids, next(rank1).ids) for _ in range(3)]
    assert all(not torch.equal(a, b) for a, b in firsts)
    later = recipe.batches(2, Context(0, 2, cpu))  # from micro-batch 2, as a resume starts
    assert torch.equal(next(later).ids, firsts[2][0])
