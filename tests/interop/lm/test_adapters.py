"""interop.lm.adapters: two PEFT adapter directories on one base, each row computing what the
adapter loaded alone (``load_adapter``) computes; an adapter of another base (other widths,
another architecture's names) or a directory that is no adapter refused in one line naming it
and the difference."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.lm.adapters import load_adapters
from decoderkit.interop.lm.peft import load_adapter, write_adapter_files
from decoderkit.nn.lm.lora import add_lora
from decoderkit.nn.lora import routed, served_adapters
from generation.lm.lora_helpers import GPT2, LLAMA, LORAS, base_lm, randomise


def save_adapter(directory, config=LLAMA, lora=LORAS["a"], seed=1):
    """An adapter ``lora`` with random B on ``base_lm(0, config)``, in PEFT's files."""
    model = base_lm(0, config)
    directory.mkdir()
    add_lora(model, lora)
    randomise(model, seed)
    write_adapter_files(directory, model, lora, None)
    return directory


def test_each_row_computes_its_adapter_loaded_alone(tmp_path):
    dirs = {n: save_adapter(tmp_path / n, lora=lora, seed=k + 1)
            for k, (n, lora) in enumerate(LORAS.items())}
    model = base_lm()
    alone = {n: copy.deepcopy(model) for n in dirs}
    for n, d in dirs.items():
        load_adapter(d, alone[n])
    configs = load_adapters(model, dirs)
    assert set(configs) == served_adapters(model) == {"a", "b"}
    assert configs["a"].r == 4 and not any(p.requires_grad for p in model.parameters())
    ids = torch.randint(0, 50, (3, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), routed(model, ["b"] * 6 + [None] * 6 + ["a"] * 6):
        got = model(ids)
    with torch.no_grad():
        torch.testing.assert_close(got[0], alone["b"](ids)[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[2], alone["a"](ids)[2], rtol=1e-5, atol=1e-5)
        assert (got[2] - got[1]).abs().max() > 1e-1


@pytest.mark.parametrize("other,message", [
    (dataclasses.replace(LLAMA, d_model=48), r"has shape \(4, 48\), but r=4 on this model's "
     r"linear needs \(4, 32\)"),
    (dataclasses.replace(LLAMA, n_layers=3), r"model.layers.2.self_attn.q_proj.* the model has "
     r"no such linear \(2 layers"),
    (GPT2, r"target_modules: this model has no linear 'c_attn'"),
], ids=["widths", "layers", "architecture"])
def test_an_adapter_of_another_base_is_refused_naming_the_difference(tmp_path, other, message):
    good = save_adapter(tmp_path / "good")
    lora = dataclasses.replace(LORAS["a"], targets=("c_attn",)) if other is GPT2 else LORAS["a"]
    bad = save_adapter(tmp_path / "bad", other, lora)
    with pytest.raises(UsageError, match=message) as err:
        load_adapters(base_lm(), {"good": good, "bad": bad})
    assert str(err.value).startswith(f"--adapter bad={bad}: ") and "\n" not in str(err.value)


def test_a_directory_that_is_no_adapter_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"--adapter x=.*holds no adapter_config.json"):
        load_adapters(base_lm(), {"x": tmp_path})


def test_an_adapter_that_trains_new_tokens_is_served_merged_only(tmp_path):
    from decoderkit.nn.lm.lora import add_token_rows

    model = base_lm()
    add_lora(model, LORAS["a"])
    add_token_rows(model, [49])
    (tmp_path / "t").mkdir()
    write_adapter_files(tmp_path / "t", model, LORAS["a"], None)
    with pytest.raises(UsageError, match="trains new tokens .* serve it merged"):
        load_adapters(base_lm(), {"t": tmp_path / "t"})
