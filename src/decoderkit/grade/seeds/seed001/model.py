"""Seed 001's ``make_model``: the learner's whole Annotated Transformer, judged exactly when
its state dict has the notebook's names (its weights mapped onto decoderkit's pre-norm,
annotated-LayerNorm ``EncoderDecoder``), by black-box properties otherwise. Diagnoses come
from the component items (attention, LayerNorm, ...), which are judged on their own.
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge import layout
from decoderkit.grade.judge.items import Item
from decoderkit.grade.judge.judging import Tolerance
from decoderkit.grade.judge.modules import ModuleItem, builds, causal_properties, module_item
from decoderkit.nn.masks import causal_mask
from decoderkit.nn.seq2seq.model import EncoderDecoder, make_model

SRC_V, TGT_V, N, D, F, H = 11, 13, 2, 16, 32, 4


def _inputs():
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]])  # pad id 0
    tgt = torch.tensor([[1, 5, 6, 7], [1, 9, 12, 2]])
    src_mask, tgt_mask = (src != 0)[:, None, :], causal_mask(4)[None]  # (B, 1, S), (1, T, T)
    later, other = tgt.clone(), tgt.clone()
    later[:, -1] = 4
    other[1] = torch.tensor([1, 3, 3, 3])
    return [(name, (src, t, src_mask, tgt_mask)) for name, t in
            (("main", tgt), ("later", later), ("other", other))]


INPUTS = _inputs()


def ours_from_annotated(state: dict) -> EncoderDecoder:
    """decoderkit's model with the weights of the notebook's EncoderDecoder (float64)."""
    model = make_model(SRC_V, TGT_V, N, D, F, H, 0.0, norm_first=True, layer_norm="annotated",
                       max_len=64).double().eval()
    new = {}
    for side, attns in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "src_attn"))):
        for i in range(N):
            at = f"{side}.layers.{i}."
            for a in attns:
                p = layout.linear_projections(state, [f"{at}{a}.linears.{j}" for j in range(4)],
                                              H)
                ours = f"{at}{'cross_attn' if a == 'src_attn' else a}."
                new[ours + "in_proj.weight"] = torch.cat([p.wq, p.wk, p.wv])
                new[ours + "in_proj.bias"] = torch.cat([p.bq, p.bk, p.bv])
                new[ours + "out_proj.weight"], new[ours + "out_proj.bias"] = p.wo, p.bo
            for w in ("w_1", "w_2"):
                weight, bias = layout.linear(state, f"{at}feed_forward.{w}")
                new[f"{at}ffn.{w}.weight"], new[f"{at}ffn.{w}.bias"] = weight, bias
            for j in range(len(attns) + 1):
                gamma, beta = layout.norm_pair(state, D, f"{at}sublayer.{j}.")
                new[f"{at}res{j + 1}.norm.weight"], new[f"{at}res{j + 1}.norm.bias"] = gamma, beta
        new[f"{side}.norm.weight"], new[f"{side}.norm.bias"] = layout.norm_pair(
            state, D, f"{side}.norm.")
    for side in ("src", "tgt"):
        new[f"{side}_embed.lut.weight"] = layout.linear(state, f"{side}_embed.0.lut")[0]
    new["generator.proj.weight"], new["generator.proj.bias"] = layout.linear(state,
                                                                             "generator.proj")
    missing, _ = model.load_state_dict(new, strict=False)
    if any(not name.endswith(".pe") for name in missing):
        raise layout.LayoutError(f"no weights for {missing[0]}")
    return model


def _cases(r, raw):
    model = ours_from_annotated(r["state"])
    out = []
    for src, tgt, src_mask, tgt_mask in raw:
        with torch.no_grad():
            expected = model(src, tgt, src_mask, tgt_mask)  # (B, T, d)
        out.append((f"src {tuple(src.shape)}, tgt {tuple(tgt.shape)}", expected,
                    lambda m: []))
    return out


ITEMS = (
    Item("make_model", "001",
         "make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1)",
         "the notebook's EncoderDecoder (pre-norm sublayers, final norms, scaled embeddings + "
         "positions); forward(src, tgt, src_mask, tgt_mask) -> decoder features (B, T, d)",
         "exact with the notebook's parameter names (weights mapped onto decoderkit's "
         "make_model(norm_first=True, layer_norm='annotated')), otherwise black-box properties "
         "(shape, causal, batch rows independent); diagnoses come from the component items",
         (), module_item(ModuleItem("001", "make_model", builds([(SRC_V, TGT_V, N, D, F, H, 0.0)],
                                                                INPUTS), _cases, (),
                                    Tolerance(atol=1e-4, rtol=1e-4),
                                    properties=causal_properties))),
)
