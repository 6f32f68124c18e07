"""nn.lm: DecoderOnlyLM, LMConfig and the presets against a float64 NumPy re-derivation of every
option, the cache against the full forward, left padding against the row alone, the published
counts. (Named test_lm_model.py: pytest needs unique test basenames; tests/cli/test_lm.py.)"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conftest import as_np, np_attention, np_layer_norm, randomize
from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lm.presets import PRESETS, PUBLISHED_SHAPES, lm_preset
from decoderkit.report.params import count_parameters

V = 11


def tiny_config(**overrides) -> LMConfig:
    kw = dict(vocab_size=V, n_layers=2, d_model=8, n_heads=2, d_ff=16, max_len=12,
              dropout=0.0) | overrides
    return LMConfig(**kw)


def tiny(seed: int = 0, **overrides) -> DecoderOnlyLM:
    """A float64 eval-mode LM with every parameter random (norms and biases off their init)."""
    torch.manual_seed(seed)
    return randomize(DecoderOnlyLM(tiny_config(**overrides)).double(), seed).eval()


_ERF = np.vectorize(math.erf)
NP_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                   * (x + 0.044715 * x ** 3))),
    "swish": lambda x: x / (1.0 + np.exp(-x)),
}


def np_lm(model: DecoderOnlyLM, ids: list[int]) -> np.ndarray:
    """Logits (T, V) of one sequence from the textbook formulas and the model's raw tensors."""
    c, w = model.config, {k: as_np(v) for k, v in model.state_dict().items()}
    T, h, dk = len(ids), c.n_heads, c.d_model // c.n_heads
    zero = np.zeros(c.d_model)

    def ln(x, name):
        return np_layer_norm(x, w[f"{name}.weight"], w.get(f"{name}.bias", zero))

    def linear(x, name):
        return x @ w[f"{name}.weight"].T + w.get(f"{name}.bias", 0.0)

    x = w["embed.lut.weight"][ids] * (math.sqrt(c.d_model) if c.scale_embeddings else 1.0)
    x = x + (w["pos.table.weight"] if c.positions == "learned" else w["pos.pe"])[:T]
    visible = np.tril(np.ones((T, T), dtype=bool))
    for i in range(c.n_layers):
        p = f"blocks.layers.{i}"

        def attn(a, p=p):
            q, k, v = np.split(linear(a, f"{p}.self_attn.in_proj"), 3, axis=-1)
            heads = [np_attention(q[:, j * dk:(j + 1) * dk], k[:, j * dk:(j + 1) * dk],
                                  v[:, j * dk:(j + 1) * dk], visible)[0] for j in range(h)]
            return linear(np.concatenate(heads, -1), f"{p}.self_attn.out_proj")

        def ffn(a, p=p):
            act = NP_ACTIVATIONS[c.activation]
            return linear(act(linear(a, f"{p}.ffn.w_1")), f"{p}.ffn.w_2")

        for sub, norm in ((attn, f"{p}.res1.norm"), (ffn, f"{p}.res2.norm")):
            x = x + sub(ln(x, norm)) if c.norm_first else ln(x + sub(x), norm)
    if c.norm_first:
        x = ln(x, "blocks.norm")
    head = w["embed.lut.weight"] if c.tie_head else w["generator.proj.weight"]
    return x @ head.T


SEQ = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.mark.parametrize("overrides", [
    dict(),  # GPT-2 shaped: pre-norm, learned, tanh GELU, tied
    dict(norm_first=False),  # GPT-1 shaped: post-norm, no final norm
    dict(positions="sinusoidal", scale_embeddings=True, activation="relu", tie_head=False),
    dict(bias=False, activation="gelu"),  # nanoGPT bias=False: no linear or LayerNorm biases
    dict(activation="swish", n_heads=4),
])
def test_forward_equals_numpy_formulas(overrides):
    model = tiny(**overrides)
    with torch.no_grad():
        got = model(torch.tensor([SEQ]))[0]
    np.testing.assert_allclose(as_np(got), np_lm(model, SEQ), rtol=0, atol=1e-12)


def test_bias_false_has_no_bias_anywhere():
    model = DecoderOnlyLM(tiny_config(bias=False))
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert count_parameters(model) < count_parameters(DecoderOnlyLM(tiny_config()))


def test_tied_head_shares_the_embedding_and_untied_does_not():
    tied, untied = DecoderOnlyLM(tiny_config()), DecoderOnlyLM(tiny_config(tie_head=False))
    assert tied.generator.proj.weight is tied.embed.lut.weight
    assert untied.generator.proj.weight is not untied.embed.lut.weight
    assert count_parameters(untied) - count_parameters(tied) == V * 8
    assert tied.generator.proj.bias is None and untied.generator.proj.bias is None


@pytest.mark.parametrize("overrides", [dict(), dict(norm_first=False, positions="sinusoidal")])
def test_cache_equals_full_forward_at_every_step(overrides):
    model = tiny(**overrides)
    ids = torch.tensor([SEQ, SEQ[::-1]])
    with torch.no_grad():
        full = model(ids)  # (2, T, V)
        cache = model.new_cache(2, len(SEQ))
        prefill = model(ids[:, :3], cache, cache.at(0, 3))  # a prefix, then a token a step
        steps = [model(ids[:, t:t + 1], cache, cache.at(t)) for t in range(3, len(SEQ))]
    got = torch.cat([prefill, *steps], dim=1)
    assert (got - full).abs().max() <= 1e-12


def test_causal_later_tokens_never_change_earlier_logits():
    model = tiny()
    a, b = torch.tensor([SEQ]), torch.tensor([SEQ[:5] + [7, 7, 7]])
    with torch.no_grad():
        assert torch.equal(model(a)[:, :5], model(b)[:, :5])
        assert not torch.equal(model(a)[:, 5:], model(b)[:, 5:])


def test_left_padded_row_equals_the_row_alone():
    model = tiny()
    short, pad = SEQ[:5], 3
    with torch.no_grad():
        alone = model(torch.tensor([short]))[0]  # (5, V)
        cache = model.new_cache(2, 10)
        positions = torch.tensor([list(range(8)), [-1] * pad + list(range(5))])  # -1: padding
        both = model(torch.tensor([SEQ, [0] * pad + short]), cache, cache.at(positions))
        nxt = model(torch.tensor([[2], [2]]), cache,
                    cache.at(torch.tensor([[8], [5]])))[1, 0]  # one more cached step
        alone_next = model(torch.tensor([short + [2]]))[0, -1]
    assert both.isfinite().all()
    assert (both[1, pad:] - alone).abs().max() <= 1e-12
    assert (nxt - alone_next).abs().max() <= 1e-12


def test_context_and_cache_overflow_refused():
    model = tiny()
    with pytest.raises(UsageError, match="exceeds max_len 12"):
        model(torch.zeros(1, 13, dtype=torch.long))
    cache = model.new_cache(1, 4)
    with pytest.raises(UsageError, match="5 positions exceed the cache's 4"):
        model(torch.zeros(1, 5, dtype=torch.long), cache, cache.at(0, 5))
    with pytest.raises(UsageError, match="max_len must be an integer in \\[1, 12\\]"):
        model.new_cache(1, 13)
    with pytest.raises(UsageError, match="outside the vocabulary"):
        model(torch.tensor([[V]]))


@pytest.mark.parametrize("field, value, message", [
    ("vocab_size", 0, "vocab_size must be an integer in"),
    ("vocab_size", 2**21, r"vocab_size must be an integer in \[1, 1048576\]"),
    ("d_model", 2**16, "more than the"),
    ("n_heads", 3, "d_model must be divisible by n_heads"),
    ("dropout", 1.0, "dropout must be"),
    ("positions", "rotary", "positions must be one of"),
    ("activation", "tanh", "activation must be one of"),
    ("bias", 1, "bias must be a bool"),
    ("max_len", True, "max_len must be"),
])
def test_config_refuses_bad_fields(field, value, message):
    with pytest.raises(UsageError, match=message):
        tiny_config(**{field: value})


def test_config_round_trip(tmp_path):
    config = tiny_config(positions="sinusoidal", tie_head=False)
    config.save(tmp_path / "config.json")
    assert LMConfig.load(tmp_path / "config.json") == config
    with pytest.raises(UsageError, match="unknown LM config field"):
        LMConfig.from_dict(config.to_dict() | {"n_embd": 8})
    with pytest.raises(UsageError, match="missing LM config field"):
        LMConfig.from_dict({"n_layers": 2})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UsageError, match="not a valid LM config JSON"):
        LMConfig.load(tmp_path / "bad.json")


# published parameter counts (Hugging Face num_parameters(), tied head)
PUBLISHED = {"gpt1": 116_534_784, "gpt2": 124_439_808, "gpt2-medium": 354_823_168,
             "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_match_published(name):
    with torch.device("meta"):
        model = DecoderOnlyLM(lm_preset(name))
    assert count_parameters(model) == PUBLISHED[name]


def test_presets():
    assert set(PRESETS) == set(PUBLISHED) | {"nanogpt", "llama"} | set(PUBLISHED_SHAPES)
    gpt1, nano = lm_preset("gpt1"), lm_preset("nanogpt")
    assert not gpt1.norm_first and gpt1.activation == "gelu_tanh" and gpt1.max_len == 512
    assert nano.activation == "gelu" and nano.tie_head and nano.vocab_size == 50304
    small = lm_preset("nanogpt", vocab_size=65, n_layers=4, bias=False)
    assert dataclasses.replace(nano, vocab_size=65, n_layers=4, bias=False) == small
    with pytest.raises(UsageError, match="preset must be one of"):
        lm_preset("gpt3")
    with pytest.raises(UsageError, match="d_model must be divisible by n_heads"):
        lm_preset("gpt2", n_heads=7)  # the replaced config is checked as a whole


def test_lm_preset_keywords_are_fields_and_none_keeps_the_presets():
    import inspect

    keywords = set(inspect.signature(lm_preset).parameters) - {"name"}
    assert keywords <= {f.name for f in dataclasses.fields(LMConfig)}
    assert all(lm_preset(name, **dict.fromkeys(keywords)) == lm_preset(name) for name in PRESETS)


def test_init_is_gpt2s():
    torch.manual_seed(0)
    model = DecoderOnlyLM(lm_preset("gpt2", vocab_size=500, n_layers=8, max_len=64))
    block = model.blocks.layers[0]
    assert abs(float(block.ffn.w_1.weight.detach().std()) - 0.02) < 1e-3
    assert abs(float(block.ffn.w_2.weight.detach().std()) - 0.02 / 4) < 3e-4  # 0.02 / sqrt(2 * 8)
    assert float(block.ffn.w_1.bias.detach().abs().max()) == 0.0


def test_rows_cache_step_equals_each_rows_own_cache_and_never_reads_unfilled_positions():
    """Rows of 2, 7 and 4 positions prefilled into slots, then two steps together: each row's
    hidden states equal its own cache's (float64), though NaN was planted in every slot
    beyond its filled positions (zeroed before a step's window covers them)."""
    model = tiny()
    prompts, nxt = [SEQ[:2], SEQ[:7], SEQ[3:7]], [[1, 4], [2, 5], [3, 6]]
    cache = model.new_cache(1, 12, rowwise=True)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            model.features(torch.tensor([p]), cache, cache.packed([i], [len(p)]))
        for t in (cache.keys[0], cache.values[0]):
            t[:, 0, :, 2:], t[:, 1, :, 7:], t[:, 2, :, 4:] = math.nan, math.nan, math.nan
        lengths = [len(p) for p in prompts]
        together = [model.features(torch.tensor([[n[s]] for n in nxt]), cache,
                                   cache.at(torch.tensor(lengths)[:, None] + s))
                    for s in range(2)]  # 2 x (3, 1, d)
        for i, p in enumerate(prompts):
            own = model.new_cache(1, 12)
            model.features(torch.tensor([p]), own, own.at(0, len(p)))
            for s in range(2):
                h = model.features(torch.tensor([[nxt[i][s]]]), own, own.at(len(p) + s))
                assert (together[s][i] - h[0]).abs().max() <= 1e-12
    with pytest.raises(UsageError, match=r"a rowwise cache steps one token a row"):
        cache.at(torch.zeros(3, 2, dtype=torch.long))
