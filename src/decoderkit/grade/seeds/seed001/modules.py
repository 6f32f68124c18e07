"""Seed 001's modules: ``LayerNorm``, ``SublayerConnection``, ``MultiHeadedAttention``,
``PositionwiseFeedForward``, ``Embeddings`` and ``PositionalEncoding``. The learner's module is
built under a seed, its parameters replaced by seeded random values, run in eval mode; its
weights are copied into decoderkit's layer (the reference) and into the mistake variants.
A module whose weights cannot be read is judged by its output's shape and finiteness only.
"""

from __future__ import annotations

import math

import torch

from decoderkit.grade.judge import layout
from decoderkit.grade.reference import blocks, pieces
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Outcome, Tolerance
from decoderkit.grade.judge.modules import ModuleItem, builds
from decoderkit.grade.judge.modules import module_item as _module_item
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.embeddings import PositionalEncoding
from decoderkit.nn.ffn import PositionwiseFeedForward
from decoderkit.nn.norms import AnnotatedLayerNorm

FALLBACK = "; if its weights cannot be read: shape and finiteness only"
AT_LN = blocks.Spec(ln_var="sample", ln_eps="std", ln_eps_value=1e-6)  # the AT's LayerNorm
AT_ATT = blocks.Spec(blocked=-1e9)
TOL = Tolerance(atol=1e-4, rtol=1e-4)  # the learner's module runs in float32


def module_item(name, init, forwards, build, mistakes, perturb=True):
    """A seed-001 module item's ``prepare``: one build, float32 tolerance (``judge.modules``)."""
    return _module_item(ModuleItem("001", name, builds([init], forwards), build, mistakes, TOL,
                                   perturb))


def _changes(name: str, base: blocks.Spec) -> blocks.Spec:
    return base.but(**BY_NAME[name].changes)


def _x(seed: int, *shape: int, flat_row: bool = False) -> torch.Tensor:
    g = generator(seed)
    x = randn(g, *shape)
    if flat_row:  # std 1e-3: where eps goes decides this row
        x.view(-1, shape[-1])[1] = 0.5 + 1e-3 * randn(g, shape[-1])
    return x.float()


# LayerNorm(features, eps=1e-6): a_2 (x - mean) / (std + eps) + b_2, std over D - 1
LN_D = 6
LN_INPUTS = [("x", (_x(40, 2, 3, LN_D, flat_row=True),)), ("x", (_x(41, 4, LN_D),))]
LN_MISTAKES = ("at_ln_population", "at_ln_eps_in_root", "ln_eps_after_division")


def _layer_norm_cases(r, raw):
    gamma, beta = layout.norm_pair(r["state"], LN_D)
    ref = AnnotatedLayerNorm(LN_D).double()
    with torch.no_grad():
        ref.weight.copy_(gamma)
        ref.bias.copy_(beta)
    return [(f"x {tuple(x.shape)}", ref(x.double()).detach(),
             lambda m, x=x: [blocks.layer_norm(x.double(), gamma, beta, _changes(m, AT_LN))])
            for (x,) in raw]


# SublayerConnection(size, dropout): x + dropout(sublayer(norm(x))), sublayer = tanh(h W)
SC_W = randn(generator(42), LN_D, LN_D) / math.sqrt(LN_D)
SC_INPUTS = [("x", (_x(43, 2, 4, LN_D, flat_row=True), {"sublayer": "SublayerConnection_w"}))]
SC_MISTAKES = ("post_norm_for_pre", "residual_on_normed") + LN_MISTAKES


def _sublayer_cases(r, raw):
    gamma, beta = layout.norm_pair(r["state"], LN_D)
    cases = []
    for x, _ in raw:
        x = x.double()

        def run(spec, x=x):
            return blocks.residual_stage(x, lambda u: blocks.layer_norm(u, gamma, beta, spec),
                                         lambda h: torch.tanh(h @ SC_W), spec)
        cases.append((f"x {tuple(x.shape)}, sublayer tanh(h W)", run(AT_LN),
                      lambda m, run=run: [run(_changes(m, AT_LN))]))
    return cases


def _sublayer_prepare(inputs: Inputs):
    inputs.ref("SublayerConnection_w", SC_W.float())
    return module_item("SublayerConnection", (LN_D, 0.0), SC_INPUTS, _sublayer_cases,
                       SC_MISTAKES)(inputs)


# MultiHeadedAttention(h, d_model, dropout): four nn.Linear, masks True = may attend, -1e9
H, D = 2, 8
_self_mask = torch.ones(1, 4, 4, dtype=torch.bool).tril()
_pad_mask = torch.ones(2, 1, 5, dtype=torch.bool)
_pad_mask[1, :, -2:] = False
_xs, _m = _x(44, 2, 4, D), _x(45, 2, 5, D)
_q = _x(46, 2, 3, D)
MHA_INPUTS = [("self", (_xs, _xs, _xs, _self_mask)), ("cross", (_q, _m, _m, _pad_mask))]
MHA_MISTAKES = ("no_scale", "scale_no_root", "scale_d_model", "mask_flipped",
                "mask_after_softmax", "softmax_wrong_axis", "heads_reshape_only")


def _mha_cases(r, raw):
    p = layout.linear_projections(r["state"], layout.modules_of(r, "Linear"), H)
    ours = blocks.load_attention(MultiHeadAttention(D, H).double().eval(), p)
    cases = []
    for q, k, _, mask in raw:
        q, k = q.double(), k.double()
        expected = ours(q, k, mask=mask)[0].detach()

        def variant(m, q=q, k=k, mask=mask):
            changes = dict(BY_NAME[m].changes)
            allowed = ~mask if changes.pop("causal", None) == "flipped" else mask
            return [blocks.multi_head(q, k, allowed, p, AT_ATT.but(**changes))]
        cases.append((f"query {tuple(q.shape)}, key/value {tuple(k.shape)}, "
                      f"mask {tuple(mask.shape)}", expected, variant))
    return cases


# PositionwiseFeedForward(d_model, d_ff, dropout): w_2(relu(w_1(x)))
FF_D, FF_F = 6, 10
FF_MISTAKES = ("relu_missing", "relu_after_output", "ffn_gelu_for_relu", "ffn_swish_for_relu")
FF_INPUTS = [("x", (_x(47, 2, 3, FF_D),))]


def _ffn_cases(r, raw):
    lins = layout.modules_of(r, "Linear")
    if len(lins) != 2:
        raise layout.LayoutError(f"expected two nn.Linear, found {len(lins)}")
    (w1, b1), (w2, b2) = (layout.linear(r["state"], n) for n in lins)
    for b, which in ((b1, "b1_omitted"), (b2, "b2_omitted")):
        if b is None:
            raise _Structural(which)
    ours = PositionwiseFeedForward(FF_D, FF_F).double()
    with torch.no_grad():
        for lin, w, b in ((ours.w_1, w1, b1), (ours.w_2, w2, b2)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
    return [(f"x {tuple(x.shape)}", ours(x.double()).detach(),
             lambda m, x=x: [blocks.feed_forward(x.double(), w1.T, b1, w2.T, b2,
                                                 _changes(m, blocks.Spec()))])
            for (x,) in raw]


class _Structural(layout.LayoutError):
    """A weight the spec has is missing: the diagnosis is the mistake itself."""


def _ffn_prepare(inputs: Inputs):
    calls, judge_results = module_item("PositionwiseFeedForward", (FF_D, FF_F, 0.0), FF_INPUTS,
                                       _ffn_cases, FF_MISTAKES)(inputs)

    def judged(results):
        r = results_for(results, calls)[0]
        try:
            if "error" not in r:
                _ffn_cases(r, [a for _, a in FF_INPUTS])
        except _Structural as missing:
            return Outcome("PositionwiseFeedForward", "001", "FAIL",
                           f"a feed-forward layer has no bias ({BY_NAME[str(missing)].title})",
                           diagnoses=[(str(missing), 0.0)])
        except layout.LayoutError:
            pass
        return judge_results(results)

    return calls, judged


# Embeddings(d_model, vocab): lut(x) * sqrt(d_model)
EMB_D, EMB_V = 8, 11
EMB_INPUTS = [("ids", (torch.tensor([[1, 5, 3, 10], [0, 2, 7, 7]]),))]


def _embedding_cases(r, raw):
    tables = [v.double() for v in r["state"].values() if tuple(v.shape) == (EMB_V, EMB_D)]
    if len(tables) != 1:
        raise layout.LayoutError(f"expected one ({EMB_V}, {EMB_D}) embedding table, "
                                 f"found {len(tables)}")
    lut = tables[0]
    return [(f"ids {tuple(ids.shape)}", lut[ids] * pieces.embedding_scale(EMB_D),
             lambda m, ids=ids: [lut[ids] * pieces.embedding_scale(EMB_D, m)]) for (ids,) in raw]


# PositionalEncoding(d_model, dropout, max_len=5000): x + PE[:L], in eval mode
PE_D = 8
PE_INPUTS = [("x", (_x(48, 2, 7, PE_D),))]
PE_MISTAKES = ("pe_swapped", "pe_not_interleaved", "pe_frequency")


def _pe_cases(r, raw):
    reference = PositionalEncoding(PE_D, 0.0, 64)
    return [(f"x {tuple(x.shape)}", reference(x).double(),
             lambda m, x=x: [x.double() + pieces.positional_table(x.size(1), PE_D, m)])
            for (x,) in raw]


ITEMS = (
    Item("LayerNorm", "001", "LayerNorm(features, eps=1e-6)",
         "a_2 (x - mean) / (std + eps) + b_2 over the last axis, std with D - 1 (x.std)",
         "exact (its scale and shift copied into decoderkit's AnnotatedLayerNorm)" + FALLBACK,
         LN_MISTAKES, module_item("LayerNorm", (LN_D,), LN_INPUTS, _layer_norm_cases,
                                  LN_MISTAKES)),
    Item("SublayerConnection", "001", "SublayerConnection(size, dropout)",
         "forward(x, sublayer) = x + dropout(sublayer(norm(x))), norm the seed's LayerNorm "
         "(pre-norm)", "exact (its norm's weights; sublayer tanh(h W) given)" + FALLBACK,
         SC_MISTAKES, _sublayer_prepare),
    Item("MultiHeadedAttention", "001", "MultiHeadedAttention(h, d_model, dropout=0.1)",
         "four nn.Linear (q, k, v, output); split heads by view + transpose; attention with "
         "mask True = may attend (unsqueezed over heads)", "exact (weights copied into "
         "decoderkit's MultiHeadAttention)" + FALLBACK, MHA_MISTAKES,
         module_item("MultiHeadedAttention", (H, D, 0.0), MHA_INPUTS, _mha_cases, MHA_MISTAKES)),
    Item("PositionwiseFeedForward", "001", "PositionwiseFeedForward(d_model, d_ff, dropout=0.1)",
         "w_2(dropout(relu(w_1(x))))", "exact (weights copied into decoderkit's "
         "PositionwiseFeedForward)" + FALLBACK, (*FF_MISTAKES, "b1_omitted", "b2_omitted"),
         _ffn_prepare),
    Item("Embeddings", "001", "Embeddings(d_model, vocab)", "lut(x) * sqrt(d_model)",
         "exact (its table)" + FALLBACK, ("embed_not_scaled", "embed_divided"),
         module_item("Embeddings", (EMB_D, EMB_V), EMB_INPUTS, _embedding_cases,
                     ("embed_not_scaled", "embed_divided"))),
    Item("PositionalEncoding", "001", "PositionalEncoding(d_model, dropout, max_len=5000)",
         "x + PE[:L]: sin on even channels, cos on odd, w_i = 10000^(-2i/d); a buffer",
         "exact (against decoderkit's PositionalEncoding)", PE_MISTAKES,
         module_item("PositionalEncoding", (PE_D, 0.0), PE_INPUTS, _pe_cases, PE_MISTAKES,
                     perturb=False)),
)
