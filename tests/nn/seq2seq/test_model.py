"""EncoderDecoder, ModelConfig and make_model: wiring, initialisation, tying, masks end to end."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from conftest import F64, PROPERTY
from decoderkit import (
    AnnotatedLayerNorm,
    EncoderDecoder,
    LayerNorm,
    ModelConfig,
    MultiHeadAttention,
    PositionwiseFeedForward,
    causal_mask,
    count_parameters,
    make_model,
    padding_mask,
    target_mask,
)

from decoderkit.base.errors import UsageError
from decoderkit.nn.layers import AttentionRecord

pytestmark = pytest.mark.usefixtures("seeded")

V_SRC, V_TGT, PAD = 13, 11, 0


def tiny(seed=0, **overrides) -> EncoderDecoder:
    """A float64, dropout-free 2-layer model in eval mode."""
    torch.manual_seed(seed)
    kw = dict(N=2, d_model=8, d_ff=16, h=2, dropout=0.0, max_len=16) | overrides
    return make_model(V_SRC, V_TGT, **kw).double().eval()


shared_tiny = functools.cache(tiny)  # for property tests, which only run forward passes


def features(model, src, tgt, src_mask=None, tgt_mask=None):
    src_mask = padding_mask(src, PAD) if src_mask is None else src_mask
    tgt_mask = target_mask(tgt, PAD) if tgt_mask is None else tgt_mask
    return model(src, tgt, src_mask, tgt_mask)


def ids(rows):
    return torch.tensor(rows, dtype=torch.long)


# ---- construction and config ----

def test_make_model_maps_paper_names_to_config():
    model = make_model(V_SRC, V_TGT, N=3, d_model=16, d_ff=24, h=4, dropout=0.2,
                       norm_first=True, layer_norm="annotated", activation="gelu",
                       max_len=40, pad_id=3, bos_id=4, eos_id=5)
    c = model.config
    assert (c.src_vocab, c.tgt_vocab, c.n_layers, c.d_model, c.d_ff, c.n_heads) == \
        (V_SRC, V_TGT, 3, 16, 24, 4)
    assert (c.dropout, c.norm_first, c.layer_norm, c.activation, c.max_len) == \
        (0.2, True, "annotated", "gelu", 40)
    assert (c.pad_id, c.bos_id, c.eos_id) == (3, 4, 5)
    assert len(model.encoder.layers) == len(model.decoder.layers) == 3
    assert model.encoder.layers[0].self_attn.n_heads == 4
    assert model.decoder.layers[0].ffn.w_1.out_features == 24
    assert model.src_pos.pe.shape == (40, 16)


def test_make_model_builds_a_config_with_the_paper_names_replaced():
    """Its defaults are ModelConfig's (one statement of the base model), a config is taken
    whole, each hyper-parameter given replaces its field, and every keyword is a field."""
    import inspect

    from decoderkit.nn.seq2seq.model import PAPER_NAMES

    assert make_model(5, 7).config == ModelConfig(5, 7)
    tiny = ModelConfig(5, 7, n_layers=1, d_model=8, n_heads=2, d_ff=16, scale_embeddings=False)
    assert make_model(config=tiny).config == tiny
    assert make_model(config=tiny, N=2, h=4, dropout=0.0).config == dataclasses.replace(
        tiny, n_layers=2, n_heads=4, dropout=0.0)
    assert make_model(2, 2, N=1, d_model=8, d_ff=16, h=2, bos_id=0, eos_id=1).config.eos_id == 1
    with pytest.raises(UsageError, match="make_model needs src_vocab and tgt_vocab"):
        make_model(N=2)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    keywords = set(inspect.signature(make_model).parameters) - {"config"}
    assert {PAPER_NAMES.get(k, k) for k in keywords} <= fields


def test_config_choices_reach_the_modules():
    annotated = make_model(V_SRC, V_TGT, N=1, d_model=8, d_ff=16, h=2, layer_norm="annotated")
    norms = [m for m in annotated.modules() if isinstance(m, (LayerNorm, AnnotatedLayerNorm))]
    assert norms and all(isinstance(m, AnnotatedLayerNorm) for m in norms)
    plain = make_model(V_SRC, V_TGT, N=1, d_model=8, d_ff=16, h=2, bias=False)
    for m in plain.modules():
        if isinstance(m, (MultiHeadAttention, PositionwiseFeedForward)):
            assert all(lin.bias is None for lin in m.modules() if isinstance(lin, nn.Linear))
    assert plain.generator.proj.bias is not None
    gelu = make_model(V_SRC, V_TGT, N=1, d_model=8, d_ff=16, h=2, activation="gelu")
    assert gelu.decoder.layers[0].ffn.activation is torch.nn.functional.gelu


def test_config_is_frozen_and_round_trips(tmp_path):
    config = ModelConfig(V_SRC, V_TGT, n_layers=1, d_model=8, n_heads=2, d_ff=4, pad_id=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 16
    path = tmp_path / "config.json"
    config.save(path)
    assert ModelConfig.load(path) == config
    assert json.loads(path.read_text())["pad_id"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary left behind
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_config_load_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a valid model config JSON"):
        ModelConfig.load(bad)
    with pytest.raises(ValueError, match=r"unknown model config field\(s\): \['heads'\]"):
        ModelConfig.from_dict({"src_vocab": 5, "tgt_vocab": 5, "heads": 2})
    with pytest.raises(ValueError, match=r"missing model config field\(s\): \['tgt_vocab'\]"):
        ModelConfig.from_dict({"src_vocab": 5})


BAD_CONFIGS = [
    (dict(src_vocab=0), "src_vocab must be an integer in [1, 1048576], got 0"),
    (dict(d_model=8.0), "d_model must be an integer in [1, 65536], got 8.0"),
    (dict(n_layers=True), "n_layers must be an integer in [1, 512], got True"),
    (dict(max_len=65537), "max_len must be an integer in [1, 65536], got 65537"),
    (dict(d_model=2**16, n_heads=8, d_ff=2**18, n_layers=100), "about 1.2e+13 parameters"),
    (dict(d_model=10, n_heads=4), "d_model must be divisible by n_heads, got d_model=10, "
                                  "n_heads=4"),
    (dict(d_model=9, n_heads=3), "d_model must be even for sinusoidal positions, got 9"),
    (dict(dropout=1.0), "dropout must be a finite number in [0.0, 1.0), got 1.0"),
    (dict(dropout=-0.1), "dropout must be a finite number in [0.0, 1.0), got -0.1"),
    (dict(dropout="0.1"), "dropout must be a finite number in [0.0, 1.0), got '0.1'"),
    (dict(dropout=float("nan")), "dropout must be a finite number in [0.0, 1.0), got nan"),
    (dict(attention_dropout=1.0), "attention_dropout must be a finite number in [0.0, 1.0), "
                                  "got 1.0"),
    (dict(ffn_dropout=-0.1), "ffn_dropout must be a finite number in [0.0, 1.0), got -0.1"),
    (dict(norm_first="yes"), "norm_first must be a bool, got 'yes'"),
    (dict(layer_norm="rms"), "layer_norm must be one of"),
    (dict(activation="swiglu"), "activation must be one of"),
    (dict(tie_embeddings=True), "tie_embeddings needs src_vocab == tgt_vocab, got 13 and 11"),
    # each special id checked against its own vocabulary, named (target: 11, source: 13)
    (dict(pad_id=11), "pad_id must be an integer in [0, 10] (an id of tgt_vocab 11), got 11"),
    (dict(bos_id=-1), "bos_id must be an integer in [0, 10] (an id of tgt_vocab 11), got -1"),
    (dict(eos_id=2.0), "eos_id must be an integer in [0, 10] (an id of tgt_vocab 11), got 2.0"),
    (dict(src_pad_id=13), "src_pad_id must be an integer in [0, 12] (an id of src_vocab 13), "
                          "got 13"),
    (dict(src_pad_id=True), "src_pad_id must be an integer in [0, 12] (an id of src_vocab 13), "
                            "got True"),
    (dict(src_vocab=9, pad_id=10), "pad_id (also the source's pad: src_pad_id is None) must be "
                                   "an integer in [0, 8] (an id of src_vocab 9), got 10"),
]


def test_each_side_pads_with_an_id_of_its_own_vocabulary():
    """Marian's separate vocabularies: the target pads (and starts) at its V, the source at
    its own; an id beyond the other side's vocabulary is no error."""
    c = ModelConfig(src_vocab=9, tgt_vocab=11, d_model=8, n_heads=2, pad_id=10, bos_id=10,
                    src_pad_id=8)
    assert (c.source_pad_id, c.pad_id) == (8, 10)
    assert ModelConfig.from_dict(c.to_dict()) == c
    assert ModelConfig(src_vocab=13, tgt_vocab=11, d_model=8, n_heads=2, pad_id=3
                       ).source_pad_id == 3  # None: pad_id pads both


@pytest.mark.parametrize("fields,message", BAD_CONFIGS)
def test_config_validation(fields, message):
    args = dict(src_vocab=V_SRC, tgt_vocab=V_TGT, d_model=8, n_heads=2) | fields
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig(**args)


# ---- initialisation and tying ----

def test_xavier_uniform_init():
    torch.manual_seed(0)
    model = make_model(50, 60, N=1, d_model=64, d_ff=128, h=4)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            assert p.abs().max() <= bound, name
            assert abs(p.std().item() - bound / math.sqrt(3.0)) < 0.08 * bound, name
        elif name.endswith("bias"):
            assert p.eq(0).all(), name
        else:  # layer-norm gains
            assert p.eq(1).all(), name


def test_tying_shares_tensors_and_counts_them_once():
    untied = make_model(20, 20, N=1, d_model=8, d_ff=16, h=2)
    emb = make_model(20, 20, N=1, d_model=8, d_ff=16, h=2, tie_embeddings=True)
    both = make_model(20, 20, N=1, d_model=8, d_ff=16, h=2, tie_embeddings=True,
                      tie_generator=True)
    assert emb.src_embed.lut.weight is emb.tgt_embed.lut.weight
    assert both.generator.proj.weight is both.tgt_embed.lut.weight is both.src_embed.lut.weight
    assert count_parameters(untied) - count_parameters(emb) == 20 * 8
    assert count_parameters(untied) - count_parameters(both) == 2 * 20 * 8
    # a tied model trains one tensor: a gradient step on it moves both uses
    src, tgt = ids([[3, 4, 5]]), ids([[1, 6, 7]])
    logp = both.generator(features(both, src, tgt))
    logp.sum().backward()
    assert both.src_embed.lut.weight.grad is both.generator.proj.weight.grad


def test_tie_generator_with_different_vocabularies():
    model = make_model(9, 14, N=1, d_model=8, d_ff=16, h=2, tie_generator=True)
    assert model.generator.proj.weight is model.tgt_embed.lut.weight
    assert model.generator.proj.weight.shape == (14, 8)


# ---- the forward pass ----

def test_forward_returns_features_generator_is_separate():
    """Seed 001: forward gives decoder features (B, T, d); the generator is called separately."""
    model = tiny()
    src, tgt = ids([[3, 4, 5, 6], [7, 8, 0, 0]]), ids([[1, 5, 6], [1, 9, 0]])
    out = features(model, src, tgt)
    assert out.shape == (2, 3, 8)
    logp = model.generator(out)
    assert logp.shape == (2, 3, V_TGT)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64), **F64)
    memory = model.encode(src, padding_mask(src, PAD))
    torch.testing.assert_close(
        model.decode(memory, padding_mask(src, PAD), tgt, target_mask(tgt, PAD)), out, **F64)


@pytest.mark.parametrize("norm_first", [False, True])
def test_pre_norm_model_ends_stacks_with_norm(norm_first):
    model = tiny(norm_first=norm_first)
    for stack in (model.encoder, model.decoder):
        assert isinstance(stack.norm, LayerNorm) == norm_first


def test_broadcast_target_masks_agree():
    model = tiny()
    src, tgt = ids([[3, 4, 5], [6, 7, 8]]), ids([[1, 2, 3, 4], [1, 5, 6, 7]])
    full = features(model, src, tgt)
    for mask in (causal_mask(4), causal_mask(4)[None]):
        torch.testing.assert_close(features(model, src, tgt, tgt_mask=mask), full, **F64)


def test_attention_weights_on_request():
    model = tiny()
    src, tgt = ids([[3, 4, 5, 0, 0]]), ids([[1, 2, 3]])
    src_mask = padding_mask(src, PAD)
    enc, dec = AttentionRecord(), AttentionRecord()
    memory = model.encode(src, src_mask, enc)
    model.decode(memory, src_mask, tgt, target_mask(tgt, PAD), record=dec)
    n = model.config.n_layers
    assert len(enc.self_attn) == len(dec.self_attn) == len(dec.cross_attn) == n
    assert enc.cross_attn == [] and enc.self_attn[0].shape == (1, 2, 5, 5)
    cross = dec.cross_attn[-1]
    assert cross.shape == (1, 2, 3, 5) and cross[..., 3:].eq(0).all()


def test_token_ids_are_checked():
    model = tiny()
    src = ids([[3, 4]])
    with pytest.raises(ValueError, match=r"token id 13 is outside the vocabulary \[0, 13\)"):
        model.encode(torch.tensor([[3, 13]]))
    with pytest.raises(ValueError, match=r"token id 11 is outside the vocabulary \[0, 11\)"):
        features(model, src, torch.tensor([[1, 11]]))
    with pytest.raises(TypeError, match="ids must hold integer token ids"):
        model.encode(src.double())


def test_mask_errors_reach_the_caller():
    model = tiny()
    src, tgt = ids([[3, 4, 5]]), ids([[1, 2, 3, 4]])
    with pytest.raises(ValueError, match=r"mask of shape \(1, 3, 3\) does not broadcast to "
                                         r"\(1, 4, 4\)"):
        features(model, src, tgt, tgt_mask=causal_mask(3)[None])
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        features(model, src, tgt, src_mask=padding_mask(src, PAD).long())


def test_cached_decoding_matches_full_pass():
    model = tiny()
    src, tgt = ids([[3, 4, 5, 6], [7, 8, 0, 0]]), ids([[1, 5, 6, 2], [1, 9, 3, 0]])
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    full = model.decode(memory, src_mask, tgt, target_mask(tgt, PAD))
    cache = model.new_cache(memory, max_len=4)
    steps = []
    for t in range(4):
        step_mask = target_mask(tgt[:, :t + 1], PAD)[:, -1:]  # (B, 1, t + 1)
        steps.append(model.decode(memory, src_mask, tgt[:, t:t + 1], step_mask, cache,
                                  at=cache.self_kv.at(t)))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **F64)


# ---- properties (hypothesis) ----

token_rows = st.lists(st.integers(3, V_TGT - 1), min_size=2, max_size=6)


@PROPERTY
@given(token_rows, st.data())
def test_future_targets_never_change_earlier_outputs(row, data):
    model = shared_tiny()
    cut = data.draw(st.integers(1, len(row) - 1))
    new_tail = data.draw(st.lists(st.integers(3, V_TGT - 1), min_size=len(row) - cut,
                                  max_size=len(row) - cut))
    src = ids([[3, 4, 5]])
    a = features(model, src, ids([row]))
    b = features(model, src, ids([row[:cut] + new_tail]))
    torch.testing.assert_close(a[:, :cut], b[:, :cut], **F64)


@PROPERTY
@given(st.lists(st.integers(3, V_SRC - 1), min_size=1, max_size=5), st.integers(1, 4),
       st.lists(st.integers(1, V_SRC - 1), min_size=4, max_size=4))
def test_padded_source_tokens_change_nothing(row, n_pad, junk):
    model = shared_tiny()
    src = ids([row + [PAD] * n_pad])
    src_mask = padding_mask(src, PAD)
    changed = src.clone()
    changed[0, len(row):] = torch.tensor(junk[:n_pad])  # masked positions now hold real tokens
    tgt = ids([[1, 5, 6]])
    torch.testing.assert_close(features(model, changed, tgt, src_mask=src_mask),
                               features(model, src, tgt), **F64)


@PROPERTY
@given(st.lists(st.integers(3, V_SRC - 1), min_size=1, max_size=5),
       st.lists(st.integers(3, V_TGT - 1), min_size=1, max_size=5),
       st.booleans())
def test_sequence_alone_equals_sequence_in_padded_batch(src_row, tgt_row, norm_first):
    model = shared_tiny(norm_first=norm_first)
    alone = features(model, ids([src_row]), ids([tgt_row]))
    batch_src = ids([[4] * 6, src_row + [PAD] * (6 - len(src_row))])
    batch_tgt = ids([[5] * 6, tgt_row + [PAD] * (6 - len(tgt_row))])
    batched = features(model, batch_src, batch_tgt)
    torch.testing.assert_close(batched[1:, :len(tgt_row)], alone, **F64)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fully_padded_rows_give_no_nan(norm_first):
    model = tiny(norm_first=norm_first).train()  # dropout 0, but the training code path
    src = ids([[3, 4, 5], [PAD, PAD, PAD]])
    tgt = ids([[1, 5, 6], [PAD, PAD, PAD]])
    out = model.generator(features(model, src, tgt))
    assert torch.isfinite(out).all()
    out[0].sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@PROPERTY
@given(st.lists(st.lists(st.sampled_from([PAD, 3, 4]), min_size=4, max_size=4), min_size=1,
                max_size=3),
       st.lists(st.lists(st.sampled_from([PAD, 5, 6]), min_size=3, max_size=3), min_size=3,
                max_size=3))
def test_any_padding_pattern_gives_finite_outputs_and_gradients(src_rows, tgt_rows):
    """Padding anywhere, rows fully padded included: no NaN forward or backward."""
    model = shared_tiny()
    src, tgt = ids(src_rows), ids(tgt_rows[:len(src_rows)])
    x = model.tgt_pos(model.tgt_embed(tgt)).detach().requires_grad_()
    memory = model.encode(src, padding_mask(src, PAD))
    out = model.decoder(x, memory, padding_mask(src, PAD), target_mask(tgt, PAD))
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("sizes", [
    dict(src_vocab=50257, tgt_vocab=50257, n_layers=48, d_model=1600, n_heads=25, d_ff=6400,
         max_len=1024),  # GPT-2 xl's sizes
    dict(src_vocab=58101, tgt_vocab=58101, n_layers=6, d_model=512, n_heads=8, d_ff=2048,
         max_len=512),  # Marian opus-mt
    dict(src_vocab=32000, tgt_vocab=32000),  # nn.Transformer's defaults (6, 512, 8, 2048)
])
def test_the_size_bounds_admit_real_models(sizes):
    assert ModelConfig(**sizes).to_dict().items() >= sizes.items()  # built, nothing refused
