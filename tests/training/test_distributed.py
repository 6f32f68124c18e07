"""Two CPU processes under torchrun (gloo): replicas stay identical and the loss falls."""

import os
import subprocess
import sys
import textwrap

import torch
from safetensors.torch import load_file

from decoderkit.training import distributed
from decoderkit.training.seq2seq.checkpoint import load_checkpoint

WORKER = textwrap.dedent("""
    import os
    import sys

    from safetensors.torch import save_file
    from decoderkit.training.seq2seq.fit import DataConfig, TrainConfig, fit, prepare_data
    from decoderkit.nn.seq2seq.model import ModelConfig

    out = sys.argv[1]
    data = prepare_data(DataConfig(task="copy", train_size=256, valid_size=8, seed=0))
    config = ModelConfig(data.src_tokenizer.vocab_size, data.tgt_tokenizer.vocab_size, 1, 16,
                         2, 32, 0.1, max_len=32)
    cfg = TrainConfig(batch_size=16, max_steps=24, warmup=10, lr_factor=0.2, valid_every=8)
    result = fit(config, cfg, data, out + "/run", device="cpu", progress=False, show=0)
    save_file(result.model.state_dict(), f"{out}/rank{os.environ['RANK']}.safetensors")
""")


def test_two_processes_keep_identical_replicas_and_learn(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(script), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    r0 = load_file(tmp_path / "rank0.safetensors")
    r1 = load_file(tmp_path / "rank1.safetensors")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    ckpt = load_checkpoint(tmp_path / "run")  # written by rank 0 only
    assert all(torch.equal(v, r0[k]) for k, v in ckpt.model.state_dict().items())
    losses = [h["loss"] for h in ckpt.meta["history"]]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert not list(tmp_path.glob("run.*"))  # no stray temporary checkpoint from rank 1


def test_single_process_context_is_a_no_op():
    ctx = distributed.setup("cpu")
    assert distributed.launched_rank() == 0  # no torchrun environment
    assert (ctx.rank, ctx.world, ctx.device.type, ctx.is_main) == (0, 1, "cpu", True)
    module = torch.nn.Linear(2, 2)
    assert distributed.wrap(module, ctx) is module
    assert distributed.all_sum(3.5, ctx) == 3.5 and distributed.any_true(False, ctx) is False


def test_a_note_is_said_by_rank_0_alone(monkeypatch, capsys):
    for rank, said in ((None, "note\n"), ("0", "note\n"), ("1", "")):
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", rank)
        distributed.say("note")
        assert capsys.readouterr().err == said, rank
