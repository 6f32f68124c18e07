"""Weights both ways between decoderkit modules and PyTorch's ``nn.Transformer`` family.

``from_torch(module)`` / ``to_torch(module)`` convert, with the same forward results:
  nn.TransformerEncoderLayer <-> EncoderLayer    nn.TransformerEncoder <-> Encoder
                              (to_torch: also an LM's SelfAttentionLayer)
  nn.TransformerDecoderLayer <-> DecoderLayer    nn.TransformerDecoder <-> Decoder
  nn.Transformer             <-> TransformerCore (an Encoder + Decoder pair, below)
Weights are copied into new tensors on the source's dtype and device; train/eval mode
carries. Our modules are batch-first: a ``batch_first=False`` torch source converts (the
weights do not depend on the layout) and then takes (B, T, d) inputs; ``to_torch`` always
builds ``batch_first=True``.
Masks convert with ``decoderkit.nn.masks.to_torch_mask`` / ``from_torch_mask``.

Parameter names, torch -> ours (everything else is spelled the same):
  in_proj_weight/in_proj_bias -> in_proj.weight/in_proj.bias (rows q, k, v in both)
  multihead_attn -> cross_attn;  linear1, linear2 -> ffn.w_1, ffn.w_2;  normK -> resK.norm
Each LayerNorm keeps its own eps and bias presence on the way across.

Legend: B batch, S source length, T target length, d = d_model.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.ffn import ACTIVATIONS
from decoderkit.nn.layers import (
    BlockSpec,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    SelfAttentionLayer,
)
from decoderkit.nn.norms import LayerNorm

_RENAME = {"in_proj_weight": "in_proj.weight", "in_proj_bias": "in_proj.bias",
           "multihead_attn": "cross_attn", "linear1": "ffn.w_1", "linear2": "ffn.w_2",
           "norm1": "res1.norm", "norm2": "res2.norm", "norm3": "res3.norm"}
_NORM_SLOTS = ("norm", "norm1", "norm2", "norm3")  # where torch's modules hold a LayerNorm


class TransformerCore(nn.Module):
    """Our counterpart of ``nn.Transformer``: an ``Encoder`` and a ``Decoder`` on embedded inputs.

    forward(src_x (B, S, d), tgt_x (B, T, d), src_mask (B, 1, S), tgt_mask (B, T, T)) ->
    (B, T, d). src_mask (True = may attend) serves the encoder's self-attention and the
    decoder's cross-attention, as torch's src_key_padding_mask and memory_key_padding_mask.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        if not isinstance(encoder, Encoder):
            raise TypeError(f"encoder must be a decoderkit Encoder, got {type(encoder).__name__}")
        if not isinstance(decoder, Decoder):
            raise TypeError(f"decoder must be a decoderkit Decoder, got {type(decoder).__name__}")
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, src_x: Tensor, tgt_x: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None) -> Tensor:
        """src_x (B, S, d), tgt_x (B, T, d), src_mask (B, 1, S), tgt_mask (B, T, T) -> (B, T, d):
        decoder(tgt_x, encoder(src_x)); a mask of None masks nothing."""
        memory = self.encoder(src_x, src_mask)  # (B, S, d)
        return self.decoder(tgt_x, memory, src_mask, tgt_mask)  # (B, T, d)


def our_name(torch_name: str) -> str:
    """A torch parameter or module name -> ours, e.g. 'layers.0.norm1' -> 'layers.0.res1.norm'."""
    return ".".join(_RENAME.get(part, part) for part in torch_name.split("."))


def from_torch(module: nn.Module) -> nn.Module:
    """A torch Transformer module -> the equivalent decoderkit module (weights copied)."""
    ours = _our_skeleton(module)
    ref = _first_parameter(module)
    _mirror_norms(module, ours, into_torch=False)
    ours.to(device=ref.device, dtype=ref.dtype)
    _load(ours, {our_name(k): v for k, v in module.state_dict().items()})
    return ours.train(module.training)


def to_torch(module: nn.Module) -> nn.Module:
    """A decoderkit module -> the equivalent torch Transformer module (weights copied)."""
    ref = _first_parameter(module)
    theirs = _torch_skeleton(module, dict(device=ref.device, dtype=ref.dtype))
    _mirror_norms(theirs, module, into_torch=True)
    torch_names = {our_name(k): k for k in theirs.state_dict()}
    _load(theirs, {torch_names.get(k, k): v for k, v in module.state_dict().items()})
    return theirs.train(module.training)


def _our_skeleton(module: nn.Module) -> nn.Module:
    """Our module shaped like the torch one, weights still to be copied."""
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        s = _torch_spec(module)
        cls = EncoderLayer if isinstance(module, nn.TransformerEncoderLayer) else DecoderLayer
        return cls(s)
    if isinstance(module, (nn.TransformerEncoder, nn.TransformerDecoder)):
        is_encoder = isinstance(module, nn.TransformerEncoder)
        layer_type = nn.TransformerEncoderLayer if is_encoder else nn.TransformerDecoderLayer
        s = _stack_spec(module.layers, layer_type, _torch_spec)
        return (Encoder if is_encoder else Decoder)(s, len(module.layers),
                                                    final_norm=module.norm is not None)
    if isinstance(module, nn.Transformer):
        _check_type(module.encoder, nn.TransformerEncoder, "nn.Transformer.encoder")
        _check_type(module.decoder, nn.TransformerDecoder, "nn.Transformer.decoder")
        return TransformerCore(_our_skeleton(module.encoder), _our_skeleton(module.decoder))
    raise TypeError("from_torch expects nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, "
                    f"nn.TransformerEncoder, nn.TransformerDecoder or nn.Transformer, "
                    f"got {type(module).__name__}")


def _torch_skeleton(module: nn.Module, factory: dict) -> nn.Module:
    """The torch module shaped like ours (batch_first=True), weights still to be copied."""
    if isinstance(module, (SelfAttentionLayer, DecoderLayer)):  # an LM's block too
        s = _our_spec(module)
        is_encoder = isinstance(module, SelfAttentionLayer)
        cls = nn.TransformerEncoderLayer if is_encoder else nn.TransformerDecoderLayer
        return cls(s.d_model, s.n_heads, s.d_ff, s.dropout, s.activation, batch_first=True,
                   norm_first=s.norm_first, bias=s.bias, **factory)
    if isinstance(module, (Encoder, Decoder)):
        is_encoder = isinstance(module, Encoder)
        s = _stack_spec(module.layers, EncoderLayer if is_encoder else DecoderLayer, _our_spec)
        layer = _torch_skeleton(module.layers[0], factory)
        norm = None if isinstance(module.norm, nn.Identity) else nn.LayerNorm(s.d_model, **factory)
        if is_encoder:  # no nested-tensor fast path: padded positions keep their values, as ours
            return nn.TransformerEncoder(layer, len(module.layers), norm,
                                         enable_nested_tensor=False)
        return nn.TransformerDecoder(layer, len(module.layers), norm)
    if isinstance(module, TransformerCore):
        s = _our_spec(module.encoder.layers[0])
        return nn.Transformer(s.d_model, s.n_heads,
                              custom_encoder=_torch_skeleton(module.encoder, factory),
                              custom_decoder=_torch_skeleton(module.decoder, factory),
                              batch_first=True, **factory)
    raise TypeError("to_torch expects a decoderkit EncoderLayer (or SelfAttentionLayer), "
                    "DecoderLayer, Encoder, Decoder or TransformerCore, "
                    f"got {type(module).__name__}")


def _torch_spec(layer: nn.Module) -> BlockSpec:
    """The block a torch layer is (one dropout rate everywhere; norm eps and bias travel per
    norm: ``_mirror_norms``)."""
    attn = layer.self_attn
    attentions = {"self_attn": attn}
    if isinstance(layer, nn.TransformerDecoderLayer):
        attentions["multihead_attn"] = layer.multihead_attn
    for name, a in attentions.items():
        _check_type(a, nn.MultiheadAttention, name)
        if not a.kdim == a.vdim == a.embed_dim or a.bias_k is not None or a.add_zero_attn:
            raise UsageError(f"{name}: only plain attention converts (kdim = vdim = embed_dim, "
                             "no add_bias_kv, no add_zero_attn)")
        if (a.embed_dim, a.num_heads) != (attn.embed_dim, attn.num_heads):
            raise UsageError(f"{name} has embed_dim={a.embed_dim}, num_heads={a.num_heads}; "
                             f"self_attn has {attn.embed_dim}, {attn.num_heads}")
    return BlockSpec(attn.embed_dim, attn.num_heads, layer.linear1.out_features,
                     _dropout(layer), layer.norm_first, activation=_torch_activation(
                         layer.activation), bias=layer.linear1.bias is not None)


def _our_spec(layer: nn.Module) -> BlockSpec:
    """The block one of our layers is, as far as a torch layer can be (its norms: by
    ``_mirror_norms``)."""
    attn = layer.self_attn
    cross = getattr(layer, "cross_attn", attn)
    if cross.n_heads != attn.n_heads:
        raise UsageError(f"cross_attn has n_heads={cross.n_heads}, self_attn {attn.n_heads}")
    placement = {m.norm_first for m in layer.modules() if hasattr(m, "norm_first")}
    if len(placement) != 1:
        raise UsageError("the layer's residual sublayers mix pre-norm and post-norm")
    names = [k for k, f in ACTIVATIONS.items() if f is layer.ffn.activation]
    if not names:
        raise TypeError(f"ffn.activation must be one of {tuple(ACTIVATIONS)}, "
                        f"got {layer.ffn.activation!r}")
    return BlockSpec(attn.d_model, attn.n_heads, layer.ffn.w_1.out_features, _dropout(layer),
                     placement.pop(), activation=names[0], bias=attn.in_proj.bias is not None)


def _stack_spec(layers: nn.ModuleList, layer_type: type, spec) -> BlockSpec:
    """The one spec shared by every layer of a stack (a torch stack can hold unlike layers)."""
    for i, layer in enumerate(layers):
        _check_type(layer, layer_type, f"layers[{i}]")
    specs = {spec(layer) for layer in layers}
    if len(specs) != 1:
        raise UsageError(f"all layers of a stack must share one configuration, got {specs}")
    return specs.pop()


def _torch_activation(activation) -> str:
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    exact_gelu = isinstance(activation, nn.GELU) and activation.approximate == "none"
    if activation is F.gelu or exact_gelu:
        return "gelu"
    raise TypeError(f"activation must be relu or gelu ('relu', F.relu, nn.ReLU(), 'gelu', "
                    f"F.gelu, nn.GELU()), got {activation!r}")


def _dropout(layer: nn.Module) -> float:
    """The layer's dropout probability; torch's and ours both keep one value in several places."""
    ps = {m.p for m in layer.modules() if isinstance(m, nn.Dropout)}
    ps |= {m.dropout for m in layer.modules()
           if isinstance(m, (nn.MultiheadAttention, MultiHeadAttention))}
    if len(ps) != 1:
        raise UsageError(f"the layer's dropouts must share one probability, got {sorted(ps)}")
    return ps.pop()


def _mirror_norms(theirs: nn.Module, ours: nn.Module, into_torch: bool) -> None:
    """Rebuild each target LayerNorm with its source's eps and bias presence (torch's
    constructors take one eps and tie the norm bias to ``bias``; ours may differ per norm)."""
    for name, torch_norm in list(theirs.named_modules()):
        if name.rpartition(".")[2] not in _NORM_SLOTS:
            continue
        our_norm = ours.get_submodule(our_name(name))
        source = our_norm if into_torch else torch_norm
        if not isinstance(source, nn.LayerNorm) or not source.elementwise_affine:
            where = our_name(name) if into_torch else name
            raise TypeError(f"{where}: only an affine LayerNorm has a counterpart, "
                            f"got {type(source).__name__}")
        d, eps, bias = source.normalized_shape[0], source.eps, source.bias is not None
        if into_torch:
            w = source.weight
            theirs.set_submodule(name, nn.LayerNorm(d, eps, bias=bias, device=w.device,
                                                    dtype=w.dtype))
        else:
            ours.set_submodule(our_name(name), LayerNorm(d, eps, bias))


def _load(target: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` into target's own tensors; every parameter must be matched both ways."""
    expected = set(target.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise UsageError(f"parameters do not correspond: missing {missing}, "
                         f"unexpected {unexpected}")
    target.load_state_dict(state)


def _first_parameter(module: nn.Module) -> Tensor:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    p = next(module.parameters(), None)
    if p is None:
        raise UsageError(f"module {type(module).__name__} has no parameters to convert")
    return p


def _check_type(module, expected: type, name: str) -> None:
    if not isinstance(module, expected):
        raise TypeError(f"{name} must be {expected.__module__}.{expected.__name__}, "
                        f"got {type(module).__name__}")
