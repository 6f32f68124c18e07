"""GPT-1's fine-tuning recipe: the loss against a per-example computation written from the
paper, the schedule, a run that learns and checkpoints, resume checks, the defaults."""

import dataclasses
import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256
from decoderkit.nn.lm.classifier import (
    MAX_LABELS,
    GPTClassifier,
    classifier_config,
    transform,
    with_new_tokens,
)
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.classifier_checkpoint import open_classifier_checkpoint
from decoderkit.training.lm.finetune import (
    FinetuneConfig,
    TransferLoss,
    finetune,
    schedule,
)
from decoderkit.training.lm.labelled import make_batch, read_tsv
from decoderkit.training.lm.objective import warmup_linear
from decoderkit.text.lm.tokenizer import LMTokenizer

TOKENIZER = LMTokenizer.characters("abcdefgh ")


def small_lm(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return DecoderOnlyLM(LMConfig(vocab_size=TOKENIZER.vocab_size, n_layers=1, d_model=16,
                                  n_heads=2, d_ff=32, max_len=20, dropout=dropout))


def test_paper_defaults():
    c = FinetuneConfig()
    assert (c.lr, c.warmup, c.batch_size, c.epochs, c.lm_coef, c.clf_dropout, c.weight_decay,
            c.clip) == (6.25e-5, 0.002, 32, 3, 0.5, 0.1, 0.01, 1.0)
    s = schedule(c, 100)  # 4 batches of 32 an epoch
    assert (s.max_steps, s.valid_every) == (12, 4)
    with pytest.raises(UsageError, match=r"lm_coef must be .* got -1"):
        FinetuneConfig(lm_coef=-1)


def test_warmup_then_linear_decay():
    rates = [warmup_linear(d, 2, 10) for d in range(11)]
    assert rates[:3] == [0.5, 1.0, 1.0] and rates[9] == pytest.approx(1 / 8)
    assert rates[10] == 0.0
    assert all(a >= b for a, b in zip(rates[1:], rates[2:], strict=False))


def test_loss_is_task_plus_lambda_lm_per_example():
    lm = with_new_tokens(small_lm().double(), 3)
    config = classifier_config(small_lm(), ("x", "y"), dropout=0.0)
    model = GPTClassifier(lm, config).double().eval()
    texts = [[1, 2, 3, 4, 5], [6, 2], [3]]
    rows = [transform(config, t) for t in texts]
    targets = [1, 0, 1]
    batch = make_batch(rows, targets, pad_id=config.start_id)
    got = TransferLoss(model, 0.5)(*batch.inputs)
    want = 0.0
    with torch.no_grad():
        for row, target in zip(rows, targets, strict=True):  # one unpadded example at a time
            ids = torch.tensor([row])
            h = lm.features(ids)[0]  # (T, d)
            logp = torch.log_softmax(h[-1] @ model.head.weight.T, -1)
            task = -float(logp[target])
            lm_logp = torch.log_softmax(lm(ids)[0, :-1], -1)  # predicts row[1:]
            lm_loss = -sum(float(lm_logp[i, t]) for i, t in enumerate(row[1:])) / (len(row) - 1)
            want += task + 0.5 * lm_loss
    assert float(got.detach()) == pytest.approx(want, rel=1e-10)
    with torch.no_grad():
        task_only = TransferLoss(model, 0.0)(*batch.inputs)
        direct = F.cross_entropy(model(batch.ids, batch.at), batch.targets, reduction="sum")
    assert float(task_only) == pytest.approx(float(direct), rel=1e-12)


@pytest.fixture
def tsv(tmp_path):
    g = torch.Generator().manual_seed(0)
    lines = []
    for i in range(64):  # "a"-heavy texts are x, "h"-heavy ones y: separable
        label = "x" if i % 2 else "y"
        chars = "abcd" if label == "x" else "efgh"
        idx = torch.randint(4, (8,), generator=g).tolist()
        lines.append("".join(chars[j] for j in idx) + "\t" + label)
    (tmp_path / "train.tsv").write_text("\n".join(lines[:48]) + "\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("\n".join(lines[48:]) + "\n", encoding="utf-8")
    return tmp_path / "train.tsv", tmp_path / "valid.tsv"


def test_finetune_learns_checkpoints_and_leaves_the_pretrained_model(tsv, tmp_path, capsys):
    pretrained = small_lm()
    before = {k: v.clone() for k, v in pretrained.state_dict().items()}
    train, valid = read_tsv(tsv[0]), read_tsv(tsv[1])
    cfg = FinetuneConfig(lr=3e-3, batch_size=8, epochs=4, warmup=0.1)
    result = finetune(pretrained, TOKENIZER, cfg, train, valid, tmp_path / "run",
                      device="cpu", progress=False)
    assert result.step == 24 and result.metrics.accuracy == 1.0  # 6 batches an epoch, 4 epochs
    assert all(torch.equal(before[k], v) for k, v in pretrained.state_dict().items())
    ckpt = open_classifier_checkpoint(tmp_path / "run")
    assert ckpt.step == 24 and ckpt.model.config.labels == ("x", "y")
    assert len(ckpt.meta["history"]) == 4 and ckpt.meta["train"]["max_steps"] == 24
    assert ckpt.meta["examples"] == {"train": 48, "valid": 16, "cut_to_context": 0}
    assert all(torch.equal(v, result.model.state_dict()[k])
               for k, v in ckpt.model.state_dict().items())
    out = capsys.readouterr().out
    assert "accuracy 1.0000" in out and "labels x, y" in out
    with pytest.raises(UsageError, match="cannot resume: model field 'd_model'"):
        other = DecoderOnlyLM(LMConfig(vocab_size=TOKENIZER.vocab_size, n_layers=1,
                                       d_model=8, n_heads=2, d_ff=32, max_len=20))
        finetune(other, TOKENIZER, cfg, train, valid, tmp_path / "run", resume=True,
                 device="cpu", progress=False)
    (tmp_path / "valid.tsv").write_text("abab\tx\nefef\ty\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"cannot resume: the data .* \(sha256 differs\)"):
        finetune(pretrained, TOKENIZER, cfg, train, read_tsv(tmp_path / "valid.tsv"),
                 tmp_path / "run", resume=True, device="cpu", progress=False)


def test_finetune_refusals(tsv, tmp_path):
    (tmp_path / "one.tsv").write_text("ab\tx\ncd\tx\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("ab\tcd\tx\n", encoding="utf-8")
    train, valid = read_tsv(tsv[0]), read_tsv(tsv[1])
    with pytest.raises(UsageError, match="one label only \\('x'\\)"):
        finetune(small_lm(), TOKENIZER, FinetuneConfig(), read_tsv(tmp_path / "one.tsv"),
                 valid, tmp_path / "run", device="cpu")
    with pytest.raises(UsageError, match="differ: one has text pairs"):
        finetune(small_lm(), TOKENIZER, FinetuneConfig(), train,
                 read_tsv(tmp_path / "pairs.tsv"), tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()
    assert math.isfinite(FinetuneConfig().lr)


def test_a_file_of_more_labels_than_a_classifier_takes_is_refused_before_any_work(tsv, tmp_path):
    many = tmp_path / "many.tsv"
    many.write_text("".join(f"ab\tlabel{i}\n" for i in range(MAX_LABELS + 1)), encoding="utf-8")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(many))}: 10,001 distinct labels; a "
                       r"classifier takes at most 10,000 \(MAX_LABELS\)$"):
        finetune(small_lm(), TOKENIZER, FinetuneConfig(), read_tsv(many), read_tsv(tsv[1]),
                 tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()


def test_the_classifier_records_its_input_and_a_run_without_the_record_resumes(tsv, tmp_path):
    (tmp_path / "pairs.tsv").write_text("ab\tcd\tx\nef\tgh\ty\n" * 4, encoding="utf-8")
    data = read_tsv(tmp_path / "pairs.tsv")
    cfg = FinetuneConfig(max_steps=1, batch_size=4)
    finetune(small_lm(), TOKENIZER, cfg, data, data, tmp_path / "run", device="cpu",
             progress=False, show=False)
    assert open_classifier_checkpoint(tmp_path / "run").model.config.pairs is True
    saved = tmp_path / "run" / "classifier.json"  # as an earlier release wrote it
    saved.write_text(json.dumps({k: v for k, v in json.loads(saved.read_text()).items()
                                 if k != "pairs"}))
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    meta["sha256"]["classifier.json"] = file_sha256(saved)
    (tmp_path / "run" / "meta.json").write_text(json.dumps(meta))
    finetune(small_lm(), TOKENIZER, dataclasses.replace(cfg, max_steps=2), data, data,
             tmp_path / "run", resume=True, device="cpu", progress=False, show=False)
    assert open_classifier_checkpoint(tmp_path / "run").step == 2


class Killed(Exception):
    """Raised right after a chosen checkpoint is saved: a crash at a known point."""


def test_an_interrupted_run_resumes_to_identical_weights(tsv, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from decoderkit.training.lm import finetune as ft

    train, valid = read_tsv(tsv[0]), read_tsv(tsv[1])
    cfg = FinetuneConfig(lr=3e-3, batch_size=8, max_steps=12, valid_every=4, warmup=0.1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        finetune(small_lm(dropout=0.1), TOKENIZER, cfg, train, valid, tmp_path / "whole",
                 device="cpu", show=False, progress=False)
        real = ft.save_classifier_checkpoint

        def save_then_die(*args, step, **kwargs):
            real(*args, step=step, **kwargs)
            if step == 8:
                raise Killed

        monkeypatch.setattr(ft, "save_classifier_checkpoint", save_then_die)
        with pytest.raises(Killed):
            finetune(small_lm(dropout=0.1), TOKENIZER, cfg, train, valid, tmp_path / "cut",
                     device="cpu", show=False, progress=False)
        monkeypatch.setattr(ft, "save_classifier_checkpoint", real)
        assert open_classifier_checkpoint(tmp_path / "cut").step == 8
        finetune(small_lm(dropout=0.1), TOKENIZER, cfg, train, valid, tmp_path / "cut",
                 resume=True, device="cpu", show=False, progress=False)
    finally:
        torch.set_num_threads(threads)
    whole = load_file(tmp_path / "whole" / "model.safetensors")
    cut = load_file(tmp_path / "cut" / "model.safetensors")
    assert whole.keys() == cut.keys() and all(torch.equal(whole[k], cut[k]) for k in whole)


WORKER = """
import os, sys
import torch
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.finetune import FinetuneConfig, finetune
from decoderkit.training.lm.labelled import read_tsv
from decoderkit.text.lm.tokenizer import LMTokenizer

out, train, valid = sys.argv[1:4]
tok = LMTokenizer.characters("abcdefgh ")
torch.manual_seed(0)
lm = DecoderOnlyLM(LMConfig(vocab_size=tok.vocab_size, n_layers=1, d_model=16, n_heads=2,
                            d_ff=32, max_len=20, dropout=0.1))
cfg = FinetuneConfig(lr=3e-3, batch_size=4, epochs=2, warmup=0.1)
result = finetune(lm, tok, cfg, read_tsv(train), read_tsv(valid), out + "/run", device="cpu",
                  show=False, progress=False)
torch.save(result.model.state_dict(), f"{out}/rank{os.environ['RANK']}.pt")
"""


def test_two_processes_keep_identical_replicas(tsv, tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(script), str(tmp_path), str(tsv[0]),
                           str(tsv[1])], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    ckpt = open_classifier_checkpoint(tmp_path / "run")  # rank 0's; 48 examples / (4 x 2)
    assert ckpt.step == 12 and ckpt.meta["train"]["max_steps"] == 12
    assert all(torch.equal(v, r0[k]) for k, v in ckpt.model.state_dict().items())
    assert not list(tmp_path.glob("run.*"))
