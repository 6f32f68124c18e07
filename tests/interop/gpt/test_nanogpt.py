"""nanoGPT checkpoints: a ckpt.pt written here in nanoGPT's format (its model_args keys, its
parameter names in nn.Linear layout, the _orig_mod. prefix) from the weights of a Hugging Face
GPT2LMHeadModel with exact GELU (nanoGPT's architecture) gives that model's logits; meta.pkl is
read without unpickling objects; the erf/tanh GELU gap is shown apart."""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.gpt.nanogpt import load_nanogpt
from decoderkit.interop.checkpoints import load_pretrained
from decoderkit.nn.lm.model import DecoderOnlyLM

transformers = pytest.importorskip("transformers")

V, BLOCK = 29, 32
IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 7, 1, 8, 2, 8, 1, 8, 28, 0]])
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_gelu_model(random: bool = True, bias: bool = True, activation: str = "gelu"):
    """GPT2LMHeadModel with nanoGPT's arithmetic (exact GELU); float64, weights randomised
    (or HF's small init); bias=False: every bias zero, as a model without them."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=V, n_positions=BLOCK, n_embd=16, n_layer=2,
                                     n_head=4, activation_function=activation)
    model = transformers.GPT2LMHeadModel(config).double().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if random:
                p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            if not bias and name.endswith(".bias"):
                p.zero_()
    return model


def write_ckpt(hf, directory, *, bias=True, compiled=True, **extra):
    """hf's weights as nanoGPT's train.py saves them: nn.Linear layout, tied lm_head stored."""
    state = {}
    for key, value in hf.state_dict().items():
        if not bias and key.endswith(".bias"):
            continue
        value = value.t().contiguous() if key.endswith(CONV1D) else value.clone()
        state[("_orig_mod." if compiled else "") + key] = value
    c = hf.config
    ckpt = {"model": state, "model_args": dict(n_layer=c.n_layer, n_head=c.n_head,
                                               n_embd=c.n_embd, block_size=c.n_positions,
                                               bias=bias, vocab_size=c.vocab_size, dropout=0.0),
            "optimizer": {"state": {}, "param_groups": [{"lr": 6e-4, "params": [0, 1]}]},
            "iter_num": 250, "best_val_loss": torch.tensor(1.47),
            "config": {"dataset": "shakespeare_char", "compile": compiled}} | extra
    directory.mkdir(exist_ok=True)
    torch.save(ckpt, directory / "ckpt.pt")
    return directory / "ckpt.pt"


def diff(ours, hf):
    with torch.no_grad():
        return float((ours(IDS) - hf(IDS).logits).abs().max())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("compiled", [True, False])
def test_logits_equal_gpt2lmheadmodel_with_exact_gelu(tmp_path, bias, compiled):
    hf = hf_gelu_model(bias=bias)
    ours, tokenizer = load_nanogpt(write_ckpt(hf, tmp_path, bias=bias, compiled=compiled))
    assert tokenizer is None  # no meta.pkl beside it
    c = ours.config
    assert (c.activation, c.tie_head, c.bias, c.norm_first) == ("gelu", True, bias, True)
    assert ours.generator.proj.weight is ours.embed.lut.weight
    assert diff(ours, hf) <= 1e-12


def test_erf_and_tanh_gelu_differ_by_a_few_millionths_on_logits(tmp_path):
    """The gpt2 preset (tanh GELU) on nanoGPT weights is close but not equal: keep them apart."""
    hf = hf_gelu_model(random=False)  # GPT-2's own initialisation scale
    nano, _ = load_nanogpt(write_ckpt(hf, tmp_path))
    tanh = DecoderOnlyLM(dataclasses.replace(nano.config, activation="gelu_tanh")).double()
    tanh.load_state_dict(nano.state_dict())
    with torch.no_grad():
        gap = float((nano(IDS) - tanh(IDS)).abs().max())
    assert 1e-8 < gap < 1e-4, gap
    assert diff(nano, hf) <= 1e-12 < gap


def test_directory_with_meta_pkl_and_load_pretrained(tmp_path):
    hf = hf_gelu_model()
    write_ckpt(hf, tmp_path)
    chars = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak."))
    chars += [c for c in "0123456789" if c not in chars][:V - len(chars)]  # the model's V
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)),
            "stoi": {ch: i for i, ch in enumerate(chars)}}
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(meta))
    for path in (tmp_path, tmp_path / "ckpt.pt"):
        model, tokenizer = load_pretrained(path)
        assert diff(model, hf) <= 1e-12
        assert tokenizer.encode("hear me") == [meta["stoi"][c] for c in "hear me"]


@pytest.mark.parametrize("size, needle", [
    (V - 3, f"has {V - 3} characters but the checkpoint's vocab_size is {V}: ids {V - 3}..{V - 1} "
     "would have no character (the meta.pkl of another dataset?)"),
    (V + 1, f"has {V + 1} characters but the checkpoint's vocab_size is {V}: more than"),
])
def test_a_meta_pkl_of_another_size_than_the_model_is_refused_at_load(tmp_path, size, needle):
    write_ckpt(hf_gelu_model(), tmp_path)
    chars = [chr(ord("a") + i) for i in range(size)]
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": size,
                                                      "itos": dict(enumerate(chars))}))
    with pytest.raises(UsageError) as caught:
        load_pretrained(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'meta.pkl'} {needle}"), caught.value


class Planted:
    """Unpickling this opens (creates) a file: what a hostile meta.pkl could do."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return open, (self.target, "w")


@pytest.mark.parametrize("itos, message", [
    ("planted", "refusing to unpickle io.open"),
    ({0: "a", 1: 2.5}, r"meta\['itos'\]\[1\] is a float"),
    ({0: "a", 1: ("b",)}, "is a tuple"),
    ({0: "a", 2: "b"}, "'itos' must map the ids 0..n-1"),
    ({0: "ab"}, "not one character"),
])
def test_hostile_or_malformed_meta_pkl_refused(tmp_path, itos, message):
    write_ckpt(hf_gelu_model(), tmp_path)
    marker = tmp_path / "planted"
    payload = Planted(marker) if itos == "planted" else itos
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 2, "itos": payload}))
    with pytest.raises(UsageError, match=f"meta.pkl: .*{message}"):
        load_nanogpt(tmp_path)
    assert not marker.exists()


class NotWeights:
    pass


def test_checkpoint_errors_name_file_and_key(tmp_path):
    hf = hf_gelu_model()
    write_ckpt(hf, tmp_path, config=NotWeights())
    with pytest.raises(UsageError, match="ckpt.pt: holds more than tensors .* refusing"):
        load_nanogpt(tmp_path)
    ckpt = write_ckpt(hf, tmp_path)
    data = torch.load(ckpt, weights_only=True)
    torch.save({"model": data["model"]}, ckpt)
    with pytest.raises(UsageError, match="needs the keys 'model' and 'model_args'"):
        load_nanogpt(ckpt)
    torch.save(data | {"model_args": data["model_args"] | {"n_embd": 8, "n_head": 2}}, ckpt)
    with pytest.raises(UsageError, match=r"ckpt.pt: tensor '_orig_mod.transformer.wte.weight' "
                                         r"has shape \(29, 16\), but model_args gives a model "
                                         r"expecting \(29, 8\)"):
        load_nanogpt(ckpt)
    model = dict(data["model"])
    del model["_orig_mod.transformer.h.1.mlp.c_fc.weight"]
    torch.save(data | {"model": model}, ckpt)
    with pytest.raises(UsageError, match="tensor 'h.1.mlp.c_fc.weight' .* is missing"):
        load_nanogpt(ckpt)
    torch.save(data | {"model_args": {"n_layer": 2}}, ckpt)
    with pytest.raises(UsageError, match="model_args lacks"):
        load_nanogpt(ckpt)
    ckpt.write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError, match="ckpt.pt: "):
        load_nanogpt(ckpt)


@pytest.mark.parametrize("key, value, needle", [
    ("bias", None, "bias must be a bool, got None (NoneType)"),
    ("bias", 1, "bias must be a bool, got 1 (int)"),
    ("n_layer", 2.0, "n_layer must be an integer in [1, 512], got 2.0 (float)"),
    ("n_embd", "16", "n_embd must be an integer in [1, 65536], got '16' (str)"),
    ("dropout", [0.0], "dropout must be a finite number in [0.0, 1.0), got [0.0] (list)"),
])
def test_model_args_of_another_type_are_refused_not_coerced(tmp_path, key, value, needle):
    ckpt = write_ckpt(hf_gelu_model(random=False), tmp_path)
    data = torch.load(ckpt, weights_only=True)
    torch.save(data | {"model_args": data["model_args"] | {key: value}}, ckpt)
    with pytest.raises(UsageError) as caught:
        load_nanogpt(ckpt)
    assert str(caught.value) == f"{ckpt}: model_args: {needle}"


def test_pickles_nested_100000_deep_are_one_line(tmp_path):
    deep = b"]" * 100_000 + b"a" * 99_999  # EMPTY_LIST, then APPEND: [[[...]]]
    write_ckpt(hf_gelu_model(random=False), tmp_path)
    (tmp_path / "meta.pkl").write_bytes(b"\x80\x02" + deep + b".")
    with pytest.raises(UsageError, match="meta.pkl: nested too deeply for a vocabulary"):
        load_nanogpt(tmp_path)
    (tmp_path / "meta.pkl").unlink()
    ckpt = tmp_path / "ckpt.pt"
    with zipfile.ZipFile(ckpt) as z:  # torch.save's zip, its pickle replaced by a deep one
        members = {n: z.read(n) for n in z.namelist()}
    key = next(n for n in members if n.endswith("/data.pkl"))
    word = b"X\x0a\x00\x00\x00model_args"
    members[key] = b"\x80\x02}(" + word + deep + b"X\x05\x00\x00\x00model}u."
    with zipfile.ZipFile(ckpt, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    with pytest.raises(UsageError, match="ckpt.pt: 'model_args' must be a dict, got list"):
        load_nanogpt(ckpt)


def test_a_meta_pkl_that_is_a_pipe_is_named_not_skipped(tmp_path):
    write_ckpt(hf_gelu_model(random=False), tmp_path)
    os.mkfifo(tmp_path / "meta.pkl")
    with pytest.raises(UsageError, match="meta.pkl is a named pipe, not a regular file"):
        load_nanogpt(tmp_path)
