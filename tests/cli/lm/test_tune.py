"""``decoderkit lm tune`` end to end on a transformers GPT-2 chat directory written in the test:
the run is a PEFT adapter that peft opens on the transformers base with our logits, the base
stays frozen, resume continues it, --full writes a whole model, --checkpoint RUN alone opens the
tuned model through its base's path, two processes under torchrun tune what one does in two
micro-batches, and what is refused is one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cli.lm.helpers import HAMLET, one_line
from decoderkit.cli import main
from decoderkit.interop.checkpoints import identify, load_checkpoint
from decoderkit.training.checkpoint_dir import read_meta
from text.lm.chat_dirs import chat_directory

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

IDS = torch.tensor([[3, 17, 40, 99, 250, 12, 7, 301, 44]])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return chat_directory(tmp_path_factory.mktemp("base") / "base", "chatml")


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    """Twenty conversations of Hamlet's lines: a user's line, the next one as the answer."""
    lines = [x.strip() for x in HAMLET.read_text().splitlines() if len(x.strip()) > 10][:40]
    path = tmp_path_factory.mktemp("data") / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": q[:30]}, {"role": "assistant", "content": a[:30]}]}) + "\n"
        for q, a in zip(lines[::2], lines[1::2], strict=True)))
    return path


TUNE = ["--max-steps", "6", "--valid-every", "3", "--batch-size", "4", "--lr", "1e-2",
        "--warmup", "1", "--rank", "4", "--targets", "c_attn,c_fc", "--quiet", "--threads", "1"]


@pytest.fixture(scope="module")
def run(base, chats, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tuned"
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(chats), "--out",
                 str(out), *TUNE]) == 0
    return out


def test_the_run_is_a_peft_adapter_peft_opens_with_our_logits(base, run):
    config = json.loads((run / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (4, 16.0, "CAUSAL_LM")
    assert sorted(config["target_modules"]) == ["c_attn", "c_fc"]
    tensors = load_file(run / "adapter_model.safetensors")
    assert set(tensors) == {f"base_model.model.transformer.h.{i}.{m}.lora_{x}.weight"
                            for i in range(2) for m in ("attn.c_attn", "mlp.c_fc") for x in "AB"}
    assert any(t.abs().max() > 0 for k, t in tensors.items() if "lora_B" in k)  # trained
    hf = transformers.GPT2LMHeadModel.from_pretrained(base).eval()
    tuned = peft.PeftModel.from_pretrained(hf, run).eval()
    ours = load_checkpoint(base, adapter=run).model  # merged
    alone = load_checkpoint(run).model  # --checkpoint RUN: its base from adapter_config.json
    with torch.no_grad():
        want = tuned(IDS).logits
        with tuned.disable_adapter():
            untuned = tuned(IDS).logits
        assert (ours(IDS) - want).abs().max() <= 1e-4
        assert (alone(IDS) - want).abs().max() <= 1e-4
    assert (untuned - want).abs().max() > 1e-2
    assert identify(run).trains == "decoderkit lm tune"


def test_trainable_tokens_train_those_rows_peft_opens_with_our_logits(base, chats, tmp_path):
    out = tmp_path / "tokens"
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(chats), "--out",
                 str(out), *TUNE, "--trainable-tokens", "5,40"]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["trainable_token_indices"] == {"wte": [5, 40]}
    hf = transformers.GPT2LMHeadModel.from_pretrained(base).eval()
    rows = hf.transformer.wte.weight.detach().clone()
    tuned = peft.PeftModel.from_pretrained(hf, out).eval()
    ours = load_checkpoint(base, adapter=out).model
    changed = (ours.embed.lut.weight - rows).abs().amax(dim=1) > 0
    assert changed.nonzero().flatten().tolist() == [5, 40]  # those rows alone, tied head too
    with torch.no_grad():
        assert (ours(IDS) - tuned(IDS).logits).abs().max() <= 1e-4


def test_a_resume_trains_the_same_rows(capsys, base, chats, tmp_path):
    """--resume with other --trainable-tokens is refused naming both sets (it went on with
    the run's rows, the ids given ignored); left out, they come from the run's command."""
    out = tmp_path / "tokens"
    tune = ["lm", "tune", "--checkpoint", str(base), "--data", str(chats), "--out", str(out),
            *TUNE]
    assert main([*tune, "--trainable-tokens", "5,40"]) == 0
    capsys.readouterr()
    assert main([*tune, "--resume", "--max-steps", "9", "--trainable-tokens", "5,41"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot resume: the rows of tokens [5, 41] are trained here but those of [5, 40]" \
        in err, err
    assert main([*tune, "--resume", "--max-steps", "9"]) == 0
    assert read_meta(out)["history"][-1]["step"] == 9


def test_history_and_resume(base, chats, run, tmp_path):
    meta = read_meta(run)
    assert meta["method"] == "lora" and meta["base"] == str(base.resolve())
    assert [h["step"] for h in meta["history"]] == [3, 6]
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(chats), "--out",
                 str(copy), "--resume", "--max-steps", "9", "--quiet"]) == 0
    assert read_meta(copy)["step"] in (6, 9)  # the best held-out state is kept
    assert [h["step"] for h in read_meta(copy)["history"]] == [3, 6, 9]


def test_full_tuning_writes_an_lm_run(base, chats, tmp_path):
    out = tmp_path / "full"
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(chats), "--out",
                 str(out), "--full", *TUNE[:10], "--lr", "1e-3", "--quiet"]) == 0
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    assert read_meta(out)["method"] == "full"


@pytest.mark.parametrize("flags, says", [
    (["--targets", "q_proj"], r"no linear 'q_proj' \(its linears: c_attn, c_proj, c_fc"),
    (["--rank", "0"], r"argument --rank: expected an integer in \[1, 16384\], got '0'"),
    (["--rank", "40"], r"r must be in \[1, 32\] for transformer.h.0.attn.c_attn"),
    (["--loss", "some"], "argument --loss: invalid choice"),
    (["--trainable-tokens", "5,x"], r"--trainable-tokens: expected comma-separated token ids, "
     r"got '5,x'"),
    (["--trainable-tokens", "5,5"], r"--trainable-tokens: expected distinct ids in \[0, \d+\), "
     r"got '5,5'"),
    (["--trainable-tokens", "99999"], r"expected distinct ids in \[0, \d+\), got '99999'"),
    (["--full", "--trainable-tokens", "5"], "--full trains every row already")])
def test_bad_flags_are_one_line(capsys, base, chats, tmp_path, flags, says):
    err = one_line(capsys, ["lm", "tune", "--checkpoint", str(base), "--data", str(chats),
                            "--out", str(tmp_path / "x"), "--max-steps", "1", *flags])
    assert re.search(says, err), err


def test_a_directory_of_other_files_is_never_overwritten(capsys, base, chats, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    err = one_line(capsys, ["lm", "tune", "--checkpoint", str(base), "--data", str(chats),
                            "--out", str(tmp_path / "mine"), "--max-steps", "1", "--overwrite"])
    assert "notes.txt" in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_lm_export_merge_writes_the_tuned_model_transformers_loads(base, run, tmp_path):
    """--to transformers --merge: the merged model, peft's merge_and_unload's logits."""
    hf = transformers.GPT2LMHeadModel.from_pretrained(base).eval()
    merged = peft.PeftModel.from_pretrained(hf, run).merge_and_unload().eval()
    for given in (["--checkpoint", str(base), "--adapter", str(run)], ["--checkpoint", str(run)]):
        out = tmp_path / f"export-{len(given)}"
        assert main(["lm", "export", "--to", "transformers", *given, "--merge", "--out",
                     str(out)]) == 0
        exported = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
        with torch.no_grad():
            assert (exported(IDS).logits - merged(IDS).logits).abs().max() <= 1e-4


def test_lm_export_to_transformers_of_an_adapter_without_merge_is_refused(capsys, base, run,
                                                                         tmp_path):
    err = one_line(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(base),
                            "--adapter", str(run), "--out", str(tmp_path / "x")])
    assert re.search("with an adapter: give --merge .*already PEFT's format", err), err


def test_lm_export_to_gguf_writes_the_adapter_alone_for_llama_cpp(capsys, base, run, tmp_path):
    """GPT-2's LoRA GGUF: llama.cpp on the base's GGUF with it continues as our merged
    model where our margin decides (llama.cpp's gpt2 kernels: test_gpt2's bound)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from conftest import assert_tokens_agree_where_decided
    from interop import gguf_helpers as h

    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(base), "--out",
                 str(tmp_path / "base")]) == 0
    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(run), "--out",
                 str(tmp_path / "lora")]) == 0  # the run alone: its base from its config
    assert "llama.cpp's LoRA adapter" in capsys.readouterr().out
    llm = llama_cpp.Llama(model_path=str(tmp_path / "base" / "model.gguf"),
                          lora_path=str(tmp_path / "lora" / "adapter.gguf"), n_ctx=64,
                          n_threads=1, n_batch=64, logits_all=True, verbose=False,
                          type_k=h.F32, type_v=h.F32)
    merged = load_checkpoint(run).model
    prompts = [[3, 17, 40], [99, 250, 12, 7], [301], [44, 45]]
    want, margins = h.greedy_with_margins(merged, prompts, 12)
    got = [h.llama_cpp_greedy(llm, p, 12) for p in prompts]
    assert_tokens_agree_where_decided(want, got, margins, 2e-3, at_least=1)


def test_merge_without_an_adapter_and_an_adapter_that_is_none_are_refused(capsys, base,
                                                                        tmp_path):
    err = one_line(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(base),
                            "--merge", "--out", str(tmp_path / "x")])
    assert "--merge merges a LoRA adapter" in err
    err = one_line(capsys, ["lm", "sample", "--checkpoint", str(base), "--adapter", str(base),
                            "--prompt", "To be"])
    assert f"--adapter {base} holds no adapter_config.json" in err


def test_lm_sample_and_eval_take_the_adapter(capsys, base, run, tmp_path):
    """The tuned model's greedy sample and loss, through --adapter and --checkpoint RUN."""
    from decoderkit.generation.lm.complete import generate
    from decoderkit.training.lm.objective import evaluate_lm

    tuned = load_checkpoint(base, adapter=run)
    prompt = tuned.tokenizer.encode_prompt("To be")
    want = tuned.tokenizer.decode(generate(tuned.model, [prompt], max_new_tokens=8,
                                           greedy=True)[0])
    for given in (["--checkpoint", str(base), "--adapter", str(run)], ["--checkpoint", str(run)]):
        assert main(["lm", "sample", *given, "--prompt", "To be", "--max-new-tokens", "8",
                     "--greedy", "--ignore-eos"]) == 0
        assert capsys.readouterr().out.strip() == ("To be" + want).strip()
    text = tmp_path / "text.txt"
    text.write_text(HAMLET.read_text()[:3000])
    assert main(["lm", "eval", "--checkpoint", str(base), "--adapter", str(run), "--text",
                 str(text)]) == 0
    out = capsys.readouterr().out
    ids = torch.tensor(tuned.tokenizer.encode(text.read_text()))
    blocks = [ids[i:i + 129] for i in range(0, len(ids) - 128, 128)]
    assert f"{evaluate_lm(tuned.model, blocks, batch_size=8).loss:.4f}" in out


def test_under_torchrun_two_processes_tune_the_adapter_one_process_tunes_in_two_halves(
        tmp_path):
    """``torchrun --nproc_per_node=2 -m decoderkit lm tune`` (gloo) on a BPE base without an
    end-of-text token (LoRA and its trainable row under DDP): rank 0 alone writes the run, and
    its adapter and history are bit for bit those of one process with --accum 2, as the loop
    promises (process r of 2 draws micro-batches 2k + r, those of one process's step k in two;
    two gradients sum alike in either order, the scales 2 / tokens and 1 / 2 powers of two).
    No dropout (each process draws its own). One process at --accum 1 tunes another adapter
    (rank 1's half of each step counts). The command's notes are printed once, by rank 0."""
    from interop.lm.test_tune_run import WORDS, bpe_base

    base, _ = bpe_base(tmp_path / "base")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"The {w} is", "completion": f" {w}."})
                            + "\n" for w in WORDS * 2))
    tune = ["lm", "tune", "--checkpoint", str(base), "--data", str(data), "--max-steps", "6",
            "--valid-every", "3", "--batch-size", "4", "--lr", "1e-2", "--warmup", "1",
            "--rank", "4", "--dropout", "0", "--quiet"]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", "-m", "decoderkit", *tune, "--out",
                           str(tmp_path / "two")], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for note in ("the base has no end-of-text token", "18 training examples"):
        assert done.stderr.count(note) == 1, done.stderr  # rank 0's, not one per process
    for name, accum in (("one", "2"), ("half", "1")):
        assert main([*tune, "--out", str(tmp_path / name), "--accum", accum,
                     "--threads", "1"]) == 0
    two, one, half = (load_file(tmp_path / n / "adapter_model.safetensors")
                      for n in ("two", "one", "half"))
    assert set(two) == set(one) and all(torch.equal(two[k], one[k]) for k in one)
    assert any("trainable_tokens_delta" in k for k in two)  # the end-of-text row trained too
    assert not all(torch.equal(half[k], one[k]) for k in one)
    history = [read_meta(tmp_path / n)["history"] for n in ("two", "one")]
    assert history[0] == history[1] and history[0][-1]["loss"] < history[0][0]["loss"]
    assert [p.name for p in tmp_path.glob(".two*")] == [".two.decoderkit-lock"]  # no stray copy
