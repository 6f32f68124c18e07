"""decoderkit.interop.torch_nn: weights both ways between ours and the nn.Transformer family.

The reference is PyTorch's own module, run with the equivalent torch-convention masks.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from conftest import PROPERTY, randomize
from decoderkit.interop.torch_nn import TransformerCore, from_torch, our_name, to_torch
from decoderkit.nn.layers import BlockSpec, Decoder, DecoderLayer, Encoder, EncoderLayer
from decoderkit.nn.masks import (
    causal_mask,
    from_torch_mask,
    padding_mask,
    target_mask,
    to_additive,
    to_torch_mask,
)

D, H, FF, N = 16, 4, 24, 2  # d_model, heads, d_ff, layers per stack
SRC_IDS = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0], [5, 0, 0, 0, 0]])  # pad_id 0
TGT_IDS = torch.tensor([[4, 4, 4, 4, 4, 4], [4, 4, 4, 4, 0, 0], [4, 4, 0, 0, 0, 0]])
KINDS = ["encoder_layer", "decoder_layer", "encoder", "decoder", "transformer"]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

pytestmark = [  # torch's own notes on its nested-tensor encoder path
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
]


def torch_module(kind: str, norm_first: bool, dtype: torch.dtype, **options) -> nn.Module:
    """A torch module of ``kind`` with every parameter random (norms and biases included)."""
    kw = dict(dim_feedforward=FF, dropout=0.1, batch_first=True, norm_first=norm_first,
              dtype=dtype, layer_norm_eps=1e-3, activation="gelu")
    kw.update(options)
    if kind == "transformer":
        m = nn.Transformer(D, H, N, N, **kw)
    else:
        is_encoder = kind.startswith("encoder")
        cls = nn.TransformerEncoderLayer if is_encoder else nn.TransformerDecoderLayer
        layer = cls(D, H, **kw)
        norm = nn.LayerNorm(D, dtype=dtype) if norm_first else None  # both final-norm cases
        if kind == "encoder":  # no nested-tensor path: padded rows keep their values
            m = nn.TransformerEncoder(layer, N, norm, enable_nested_tensor=False)
        elif kind == "decoder":
            m = nn.TransformerDecoder(layer, N, norm)
        else:
            m = layer
    return randomize(m, seed=1).eval()


def our_module(kind: str, norm_first: bool, dtype: torch.dtype) -> nn.Module:
    """Our module of ``kind`` built by our own constructors, every parameter random."""
    spec = BlockSpec(D, H, FF, dropout=0.1, norm_first=norm_first, activation="relu")
    stack = dict(final_norm=not norm_first)  # both final-norm cases
    core = dict(final_norm=True)  # as nn.Transformer
    m = {"encoder_layer": lambda: EncoderLayer(spec),
         "decoder_layer": lambda: DecoderLayer(spec),
         "encoder": lambda: Encoder(spec, N, **stack),
         "decoder": lambda: Decoder(spec, N, **stack),
         "transformer": lambda: TransformerCore(Encoder(spec, N, **core),
                                                Decoder(spec, N, **core))}[kind]()
    return randomize(m.to(dtype), seed=2).eval()


def inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    src = torch.randn(*SRC_IDS.shape, D, generator=g, dtype=dtype)  # (B, S, d)
    tgt = torch.randn(*TGT_IDS.shape, D, generator=g, dtype=dtype)  # (B, T, d)
    return src, tgt


def run_ours(m: nn.Module, kind: str, src, tgt) -> torch.Tensor:
    src_mask, tgt_mask = padding_mask(SRC_IDS, 0), target_mask(TGT_IDS, 0)
    if kind.startswith("encoder"):
        return m(src, src_mask)
    if kind == "transformer":
        return m(src, tgt, src_mask, tgt_mask)
    return m(tgt, src, src_mask, tgt_mask)


def run_torch(m: nn.Module, kind: str, src, tgt) -> torch.Tensor:
    """torch masks: True = blocked, padding as (B, L) key masks, causal as (T, T)."""
    src_pad = to_torch_mask(padding_mask(SRC_IDS, 0)[:, 0])  # (B, S)
    tgt_pad = to_torch_mask(padding_mask(TGT_IDS, 0)[:, 0])  # (B, T)
    causal = to_torch_mask(causal_mask(TGT_IDS.size(1)))  # (T, T)
    if kind.startswith("encoder"):
        return m(src, src_key_padding_mask=src_pad)
    if kind == "transformer":
        return m(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad,
                 tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
    return m(tgt, src, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
             memory_key_padding_mask=src_pad)


def assert_agree(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=TOL[a.dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
def test_outputs_agree_with_causal_and_padding_masks(direction, kind, norm_first, dtype):
    if direction == "from_torch":
        theirs = torch_module(kind, norm_first, dtype)
        ours = from_torch(theirs)
    else:
        ours = our_module(kind, norm_first, dtype)
        theirs = to_torch(ours)
    src, tgt = inputs(dtype)
    assert_agree(run_ours(ours, kind, src, tgt), run_torch(theirs, kind, src, tgt))


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    """Same parameter names in the same order, bitwise-equal values."""
    assert type(a) is type(b)
    for (name, p), (name2, q) in zip(a.state_dict().items(), b.state_dict().items(),
                                     strict=True):
        assert name == name2 and torch.equal(p, q), name


@pytest.mark.parametrize("kind", KINDS)
def test_round_trips_return_the_same_weights(kind):
    ours = our_module(kind, norm_first=True, dtype=torch.float64)
    assert_same_state(from_torch(to_torch(ours)), ours)
    theirs = torch_module(kind, norm_first=False, dtype=torch.float64)
    assert_same_state(to_torch(from_torch(theirs)), theirs)


def test_parameter_names_map_one_to_one():
    theirs = torch_module("transformer", norm_first=False, dtype=torch.float32)
    ours = from_torch(theirs)
    assert sorted(our_name(k) for k in theirs.state_dict()) == sorted(ours.state_dict())
    assert our_name("decoder.layers.1.multihead_attn.in_proj_weight") == \
        "decoder.layers.1.cross_attn.in_proj.weight"
    assert our_name("layers.0.linear2.bias") == "layers.0.ffn.w_2.bias"


def test_weights_are_copied_and_keep_dtype_device_and_mode(device):
    theirs = torch_module("decoder_layer", norm_first=False, dtype=torch.float64).to(device)
    ours = from_torch(theirs)
    assert not ours.training  # each copy takes its source's train/eval mode
    back = to_torch(ours.train())
    assert back.training
    for m in (ours, back):
        for p in m.parameters():
            assert p.dtype == torch.float64 and p.device.type == device
    before = theirs.linear1.weight.clone()
    with torch.no_grad():
        ours.ffn.w_1.weight.add_(1.0)
        back.linear1.weight.mul_(2.0)
    assert torch.equal(theirs.linear1.weight, before)
    assert not torch.equal(back.linear1.weight, ours.ffn.w_1.weight)


def test_carries_eps_dropout_activation_and_bias_free_layers():
    theirs = torch_module("decoder_layer", False, torch.float64, bias=False, dropout=0.25,
                          activation=nn.GELU(), layer_norm_eps=0.5)
    ours = from_torch(theirs)
    assert ours.res3.norm.eps == 0.5 and ours.res3.norm.bias is None
    assert ours.self_attn.in_proj.bias is None and ours.ffn.w_2.bias is None
    assert ours.self_attn.dropout == 0.25 and ours.res1.dropout.p == 0.25
    assert ours.ffn.activation is torch.nn.functional.gelu
    src, tgt = inputs(torch.float64)
    assert_agree(run_ours(ours.eval(), "decoder_layer", src, tgt),
                 run_torch(theirs, "decoder_layer", src, tgt))
    back = to_torch(ours)
    assert back.norm1.eps == 0.5 and back.norm1.bias is None and back.linear1.bias is None
    assert back.dropout.p == back.dropout3.p == back.multihead_attn.dropout == 0.25


@pytest.mark.parametrize("kind,norm_first", [("decoder_layer", False),
                                             ("transformer", True)])
def test_gradients_agree(kind, norm_first):
    theirs = torch_module(kind, norm_first, torch.float64)
    ours = from_torch(theirs)
    src, tgt = inputs(torch.float64)
    g = torch.Generator().manual_seed(4)
    weights = torch.randn(*tgt.shape, dtype=torch.float64, generator=g)  # a random linear loss
    (run_ours(ours, kind, src, tgt) * weights).sum().backward()
    (run_torch(theirs, kind, src, tgt) * weights).sum().backward()
    ours_params = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        torch.testing.assert_close(ours_params[our_name(name)].grad, p.grad, atol=1e-10, rtol=0)


@PROPERTY
@given(h=st.integers(1, 3), d_k=st.integers(1, 4), d_ff=st.integers(1, 6),
       lengths=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=3),
       T=st.integers(1, 5), S=st.integers(1, 5), norm_first=st.booleans(),
       seed=st.integers(0, 1000))
def test_decoder_layers_agree_for_any_sizes_and_padding(h, d_k, d_ff, lengths, T, S,
                                                        norm_first, seed):
    """from_torch then to_torch: both outputs equal torch's, for random sizes and key padding."""
    torch.manual_seed(seed)
    theirs = randomize(nn.TransformerDecoderLayer(
        h * d_k, h, d_ff, batch_first=True, norm_first=norm_first, dtype=torch.float64),
        seed).eval()
    B = len(lengths)
    tgt_len = torch.tensor([min(t, T) for t, _ in lengths])  # >= 1 visible key per row
    src_len = torch.tensor([min(s, S) for _, s in lengths])
    tgt_keep = torch.arange(T) < tgt_len[:, None]  # (B, T), True = real token
    src_keep = torch.arange(S) < src_len[:, None]  # (B, S)
    x = torch.randn(B, T, h * d_k, dtype=torch.float64)
    memory = torch.randn(B, S, h * d_k, dtype=torch.float64)
    expected = theirs(x, memory, tgt_mask=to_torch_mask(causal_mask(T)),
                      tgt_key_padding_mask=~tgt_keep, memory_key_padding_mask=~src_keep)
    ours = from_torch(theirs)
    src_mask, tgt_mask = src_keep[:, None, :], tgt_keep[:, None, :] & causal_mask(T)
    assert_agree(ours(x, memory, src_mask, tgt_mask), expected)
    back = to_torch(ours)
    assert_agree(back(x, memory, tgt_mask=to_torch_mask(causal_mask(T)),
                      tgt_key_padding_mask=~tgt_keep, memory_key_padding_mask=~src_keep),
                 expected)


def test_torch_additive_float_masks_convert():
    theirs = torch_module("decoder_layer", True, torch.float32)
    ours = from_torch(theirs)
    src, tgt = inputs(torch.float32)
    causal = nn.Transformer.generate_square_subsequent_mask(TGT_IDS.size(1))  # 0 / -inf
    src_pad, tgt_pad = (to_additive(padding_mask(ids, 0)[:, 0]) for ids in (SRC_IDS, TGT_IDS))
    assert causal.dtype == src_pad.dtype == torch.float32
    expected = theirs(tgt, src, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad)
    tgt_mask = from_torch_mask(causal) & from_torch_mask(tgt_pad).unsqueeze(1)  # (B, T, T)
    src_mask = from_torch_mask(src_pad).unsqueeze(1)  # (B, 1, S)
    assert torch.equal(tgt_mask, target_mask(TGT_IDS, 0))
    assert_agree(ours(tgt, src, src_mask, tgt_mask), expected)


@pytest.mark.parametrize("kind", ["encoder_layer", "transformer"])
def test_agrees_with_torch_fast_path_under_no_grad(kind):
    """Eval + no_grad lets torch take its fused encoder path (nested tensors in a stack)."""
    theirs = torch_module(kind, norm_first=False, dtype=torch.float32)
    ours = from_torch(theirs)
    src, tgt = inputs(torch.float32)
    with torch.no_grad():
        assert_agree(run_ours(ours, kind, src, tgt), run_torch(theirs, kind, src, tgt))


def test_a_source_row_of_only_padding_gives_no_nan():
    """A query with no visible key: our attention outputs zero; torch's layer must agree."""
    theirs = torch_module("decoder_layer", False, torch.float64)
    ours = from_torch(theirs)
    src, tgt = inputs(torch.float64)
    keep = padding_mask(SRC_IDS, 0)  # (B, 1, S)
    keep[-1] = False  # the last sequence's source is all padding
    got = ours(tgt, src, keep, target_mask(TGT_IDS, 0))
    assert not got.isnan().any()
    expected = theirs(tgt, src, tgt_mask=to_torch_mask(causal_mask(TGT_IDS.size(1))),
                      tgt_key_padding_mask=to_torch_mask(padding_mask(TGT_IDS, 0)[:, 0]),
                      memory_key_padding_mask=to_torch_mask(keep[:, 0]))
    rows = ~expected.isnan().flatten(1).any(1)  # older torch gives NaN for the empty row
    assert rows[:-1].all()
    assert_agree(got[rows], expected[rows])


def test_batch_first_false_source_converts_to_batch_first():
    theirs = torch_module("decoder_layer", False, torch.float64, batch_first=False)
    ours = from_torch(theirs)
    src, tgt = inputs(torch.float64)
    expected = theirs(tgt.transpose(0, 1), src.transpose(0, 1),
                      tgt_mask=to_torch_mask(causal_mask(TGT_IDS.size(1))),
                      tgt_key_padding_mask=to_torch_mask(padding_mask(TGT_IDS, 0)[:, 0]),
                      memory_key_padding_mask=to_torch_mask(padding_mask(SRC_IDS, 0)[:, 0]))
    assert_agree(run_ours(ours, "decoder_layer", src, tgt), expected.transpose(0, 1))
    assert to_torch(ours).self_attn.batch_first


def test_rejects_unsupported_modules():
    with pytest.raises(TypeError, match="from_torch expects .* got Linear"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="to_torch expects .* got MultiHeadAttention"):
        to_torch(DecoderLayer(BlockSpec(D, H, FF)).self_attn)
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        to_torch("layer")
    with pytest.raises(TypeError, match="res1.norm: only an affine LayerNorm .*Annotated"):
        to_torch(DecoderLayer(BlockSpec(D, H, FF, layer_norm="annotated")))
    custom = nn.Transformer(D, H, 1, 1, FF, batch_first=True,
                            custom_encoder=nn.Identity())
    with pytest.raises(TypeError, match="nn.Transformer.encoder must be .*TransformerEncoder"):
        from_torch(custom)


def test_rejects_unsupported_configurations():
    silu = nn.TransformerDecoderLayer(D, H, FF, activation=nn.functional.silu, batch_first=True)
    with pytest.raises(TypeError, match="activation must be relu or gelu"):
        from_torch(silu)
    tanh_gelu = nn.TransformerEncoderLayer(D, H, FF, activation=nn.GELU("tanh"), batch_first=True)
    with pytest.raises(TypeError, match="activation must be relu or gelu"):
        from_torch(tanh_gelu)
    layer = nn.TransformerDecoderLayer(D, H, FF, batch_first=True)
    layer.multihead_attn = nn.MultiheadAttention(D, H, add_bias_kv=True, batch_first=True)
    with pytest.raises(ValueError, match="multihead_attn: only plain attention"):
        from_torch(layer)
    layer.multihead_attn = nn.MultiheadAttention(D, H, kdim=8, vdim=8, batch_first=True)
    with pytest.raises(ValueError, match="multihead_attn: only plain attention"):
        from_torch(layer)
    layer.multihead_attn = nn.MultiheadAttention(D, 2, batch_first=True)
    with pytest.raises(ValueError, match="multihead_attn has embed_dim=16, num_heads=2"):
        from_torch(layer)
    layer = nn.TransformerDecoderLayer(D, H, FF, dropout=0.1, batch_first=True)
    layer.dropout3.p = 0.3
    with pytest.raises(ValueError, match=r"one probability, got \[0.1, 0.3\]"):
        from_torch(layer)
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, batch_first=True), 2,
                                  enable_nested_tensor=False)
    stack.layers[1].norm_first = True
    with pytest.raises(ValueError, match="share one configuration"):
        from_torch(stack)
    stack.layers[1] = nn.TransformerDecoderLayer(D, H, FF, batch_first=True)
    with pytest.raises(TypeError, match=r"layers\[1\] must be .*TransformerEncoderLayer"):
        from_torch(stack)
    stack = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, FF, batch_first=True), 1,
                                  norm=nn.RMSNorm(D))
    with pytest.raises(TypeError, match="norm: only an affine LayerNorm .*, got RMSNorm"):
        from_torch(stack)


def test_the_readme_example_imports_from_interop_and_round_trips():
    """docs/pretrained.md's nn.Transformer example, run as written: the 0.1 import path works,
    ours gives torch's outputs, and ``to_torch`` of ours gives them again."""
    from pathlib import Path

    import decoderkit.interop as interop
    from decoderkit.interop import torch_nn

    assert (interop.from_torch, interop.to_torch) == (torch_nn.from_torch, torch_nn.to_torch)
    manual = (Path(__file__).parents[2] / "docs" / "pretrained.md").read_text()
    (code,) = [block for block in manual.split("```python\n")[1:]
               if "from decoderkit.interop import from_torch" in block]
    namespace: dict = {"print": lambda *args: None}
    torch.manual_seed(0)
    exec(code.split("```")[0], namespace)
    got, want, back = namespace["got"], namespace["want"], namespace["back"]
    assert isinstance(back, nn.Transformer)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    with torch.no_grad():
        again = back(namespace["src_x"], namespace["tgt_x"],
                     tgt_mask=to_torch_mask(namespace["mask"]))
    torch.testing.assert_close(again, want, atol=1e-5, rtol=0)
