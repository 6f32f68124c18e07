"""Parameter counts: seed 000's closed forms against live modules and torch's own layers.

Large modules are built on the meta device: shapes without memory or initialisation time.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from decoderkit import (
    BlockSpec,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    Generator,
    count_parameters,
    decoder_layer_parameters,
    make_model,
    parameter_breakdown,
)
from decoderkit.report.params import (
    attention_parameters,
    encoder_layer_parameters,
    ffn_parameters,
    output_layer_parameters,
)

pytestmark = pytest.mark.usefixtures("seeded")

META = torch.device("meta")


def test_seed_decoder_layer_numbers():
    """Seed 000 at d = 512, f = 2048: 2,101,248 + 2,099,712 + 3,072 = 4,204,032; six layers
    25,224,192; output layer at V = 37,000: 18,944,000 + 37,000."""
    assert 2 * attention_parameters(512) == 2_101_248
    assert ffn_parameters(512, 2048) == 2_099_712
    assert decoder_layer_parameters(512, 2048) == 4_204_032 == 2_101_248 + 2_099_712 + 3_072
    assert 6 * decoder_layer_parameters(512, 2048) == 25_224_192
    assert output_layer_parameters(512, 37_000) == 18_944_000 + 37_000
    assert output_layer_parameters(512, 37_000, bias=False) == 18_944_000


def test_decoder_layer_module_matches_formula_and_torch():
    with META:
        ours = DecoderLayer(BlockSpec(512, 8, 2048))
        theirs = nn.TransformerDecoderLayer(512, 8, 2048, batch_first=True)
    assert count_parameters(ours) == 4_204_032 == sum(p.numel() for p in theirs.parameters())
    breakdown = parameter_breakdown(ours)
    assert (breakdown["attention"], breakdown["ffn"], breakdown["norms"]) == \
        (2_101_248, 2_099_712, 3_072)
    assert breakdown["total"] == 4_204_032


def test_encoder_layer_module_matches_formula_and_torch():
    with META:
        ours = EncoderLayer(BlockSpec(512, 8, 2048))
        theirs = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    expected = encoder_layer_parameters(512, 2048)
    assert count_parameters(ours) == expected == sum(p.numel() for p in theirs.parameters())


@pytest.mark.parametrize("d,f,h", [(8, 12, 2), (64, 256, 4), (30, 7, 3)])
def test_formulas_match_modules_at_other_sizes(d, f, h):
    assert count_parameters(DecoderLayer(BlockSpec(d, h, f))) == decoder_layer_parameters(d, f)
    assert count_parameters(EncoderLayer(BlockSpec(d, h, f))) == encoder_layer_parameters(d, f)


def test_six_layer_stacks():
    with META:
        post = Decoder(BlockSpec(512, 8, 2048), 6)
        pre = Decoder(BlockSpec(512, 8, 2048, norm_first=True), 6)  # + the final norm
        encoder = Encoder(BlockSpec(512, 8, 2048), 6)
    assert count_parameters(post) == 25_224_192
    assert count_parameters(pre) == 25_224_192 + 2 * 512
    assert count_parameters(encoder) == 6 * encoder_layer_parameters(512, 2048)


def test_output_layer_module():
    with META:
        generator = Generator(512, 37_000)
    assert count_parameters(generator) == 18_944_000 + 37_000


def test_shared_tensors_counted_once():
    linear = nn.Linear(4, 3)
    assert count_parameters(nn.Sequential(linear, nn.ReLU(), linear)) == 4 * 3 + 3
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight
    assert count_parameters(nn.ModuleList([a, b])) == 16 + 4 + 4


@pytest.mark.parametrize("norm_first", [False, True])
def test_model_breakdown_untied(norm_first):
    N, d, f, h, vs, vt = 2, 16, 32, 4, 23, 19
    model = make_model(vs, vt, N, d, f, h, norm_first=norm_first)
    b = parameter_breakdown(model)
    final_norms = 2 * 2 * d if norm_first else 0
    assert b["attention"] == 3 * N * attention_parameters(d)  # encoder 1, decoder 2 per layer
    assert b["ffn"] == 2 * N * ffn_parameters(d, f)
    assert b["norms"] == N * (4 * d + 6 * d) + final_norms
    assert b["embeddings"] == (vs + vt) * d
    assert b["generator"] == output_layer_parameters(d, vt)
    parts = sum(v for k, v in b.items() if k != "total")
    assert parts == b["total"] == count_parameters(model)
    assert b["total"] == (N * (encoder_layer_parameters(d, f) + decoder_layer_parameters(d, f))
                          + final_norms + (vs + vt) * d + output_layer_parameters(d, vt))


def test_model_breakdown_tied_counts_shared_once():
    d, v = 16, 29
    model = make_model(v, v, 1, d, 32, 4, tie_embeddings=True, tie_generator=True)
    b = parameter_breakdown(model)
    assert b["embeddings"] == v * d  # one shared matrix
    assert b["generator"] == v  # only its bias is its own
    assert sum(x for k, x in b.items() if k != "total") == b["total"] == count_parameters(model)


def test_base_model_total():
    """The paper's base configuration with shared 37,000-token embeddings and output matrix:
    about 63M here (seed 000: "approximately 65M", configuration-dependent)."""
    with META:
        model = make_model(37_000, 37_000, tie_embeddings=True, tie_generator=True)
    expected = (6 * encoder_layer_parameters(512, 2048) + 6 * decoder_layer_parameters(512, 2048)
                + 37_000 * 512 + 37_000)
    assert count_parameters(model) == expected == 63_119_496


# ---- decoder-only LMs: closed forms, live modules and Hugging Face's num_parameters() ----

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig  # noqa: E402
from decoderkit.nn.lm.presets import PRESETS, lm_preset  # noqa: E402
from decoderkit.report.params import lm_parameters, parameter_table  # noqa: E402

SMALL = dict(vocab_size=97, n_layers=3, d_model=24, n_heads=4, d_ff=40, max_len=33)


@pytest.mark.parametrize("overrides", [dict(), dict(tie_head=False), dict(bias=False),
                                       dict(norm_first=False), dict(positions="sinusoidal")])
def test_lm_closed_form_equals_the_live_module(overrides):
    config = LMConfig(**SMALL | overrides)
    assert lm_parameters(config) == count_parameters(DecoderOnlyLM(config))


@pytest.mark.parametrize("kind, tie", [("gpt2", True), ("gpt2", False), ("openai-gpt", True)])
def test_lm_counts_equal_transformers_num_parameters(kind, tie):
    transformers = pytest.importorskip("transformers")
    shape = dict(vocab_size=97, n_positions=33, n_embd=24, n_layer=3, n_head=4,
                 tie_word_embeddings=tie)
    if kind == "gpt2":
        theirs = transformers.GPT2LMHeadModel(transformers.GPT2Config(**shape, n_inner=40))
        ours = lm_preset("gpt2", **SMALL, tie_head=tie)
    else:
        theirs = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**shape))
        ours = lm_preset("gpt1", **SMALL | dict(d_ff=96), tie_head=tie)
    assert lm_parameters(ours) == theirs.num_parameters()


@pytest.mark.parametrize("overrides, gpt", [(dict(), True), (dict(bias=False), True),
                                            (dict(norm="rms"), False), (dict(ffn="gated"), False),
                                            (dict(n_kv_heads=2), False)])
def test_an_lm_table_names_gpts_closed_form_for_a_gpt_block_alone(overrides, gpt):
    table = parameter_table(LMConfig(**SMALL | overrides))
    block = next(line for line in table.splitlines() if line.startswith("per block"))
    assert ("d d_k (2h + 2h_kv)" not in block) == gpt, block


@pytest.mark.parametrize("name", PRESETS)
def test_lm_table_of_every_preset(name):
    table = parameter_table(lm_preset(name), name)
    total = int(next(line for line in table.splitlines() if line.startswith("total"))
                .split()[-1].replace(",", ""))
    assert total == lm_parameters(lm_preset(name))
    assert table.startswith(f"{name}: ")
