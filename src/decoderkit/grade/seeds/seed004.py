"""Seed 004's milestones: ``build_causal_mask``, the post-norm ``DecoderBlock`` on
nn.MultiheadAttention (masks True = blocked), ``autoregressive_decode`` (stops at EOS) and
``DecoderStack``. Blocks with the lesson's layout (two nn.MultiheadAttention, two nn.Linear,
three nn.LayerNorm) get their weights copied into decoderkit's ``DecoderLayer``; other
layouts are judged by black-box properties (shape kept, causal, batch rows independent; a
block's rows those of a final LayerNorm, as post-norm asks).
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge import layout
from decoderkit.grade.reference import blocks, pieces
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.judge.items import Inputs, Item, Seed, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Outcome, TokenCase, Tolerance, judge, judge_tokens
from decoderkit.grade.judge.modules import (
    ModuleItem,
    builds,
    causal_properties,
    module_item,
    post_norm_properties,
)
from decoderkit.grade.run.sandbox import Call
from decoderkit.nn.layers import BlockSpec, DecoderLayer
from decoderkit.nn.masks import from_torch_mask

TOL = Tolerance(atol=1e-4, rtol=1e-4)  # the learner's module runs in float32
D, H, F, V = 16, 2, 32, 20
NORM_MISTAKES = ("pre_norm_for_post", "pre_norm_for_post_in_self_attn",
                 "pre_norm_for_post_in_cross_attn", "pre_norm_for_post_in_ffn")
BLOCK_MISTAKES = (*NORM_MISTAKES, "mask_flipped", "cross_causal", "enc_normalised",
                  "extra_final_norm", "relu_missing", "relu_after_output", "ffn_gelu_for_relu",
                  "ffn_swish_for_relu")
STACK_MISTAKES = ("causal_no_diagonal", "mask_flipped", "mask_not_bool", *NORM_MISTAKES,
                  "cross_causal")


def blocked(T: int) -> torch.Tensor:
    """Seed 004's causal mask: (T, T) bool, True = blocked (j > i)."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def prepare_mask(inputs: Inputs):
    sizes = (1, 4, 5)
    calls = [Call(id=f"bcm{n}", name="build_causal_mask", kind="call", args=({"v": s},))
             for n, s in enumerate(sizes)]
    variants = {"causal_no_diagonal": lambda s: torch.ones(s, s, dtype=torch.bool).triu(0),
                "mask_flipped": lambda s: ~blocked(s)}

    def judge_results(results):
        cases, not_bool = [], False
        for size, r in zip(sizes, results_for(results, calls), strict=True):
            value = r.get("value")
            if isinstance(value, torch.Tensor) and value.shape == (size, size) \
                    and value.dtype != torch.bool:
                not_bool = not_bool or torch.equal(value != 0, blocked(size))
                r = {"value": (value != 0).double()}
            cases.append(Case(f"build_causal_mask({size})", r, blocked(size).double(),
                              lambda m, s=size: [variants[m](s).double()]))
        outcome = judge("build_causal_mask", "004", cases, tuple(variants),
                        Tolerance(1e-12, 0.0))
        if not_bool and outcome.status == "pass":
            return Outcome("build_causal_mask", "004", "FAIL", "the pattern is right but the "
                           "dtype is not bool", diagnoses=[("mask_not_bool", 0.0)])
        return outcome

    return calls, judge_results


def _block_inputs(seed: int, B: int, T: int, S: int) -> tuple[torch.Tensor, ...]:
    g = generator(seed)
    return randn(g, B, T, D).float(), randn(g, B, S, D).float(), blocked(T)


def _with_changes(x: torch.Tensor, z: torch.Tensor, mask: torch.Tensor):
    """The property probes: the last position changed; batch row 1 changed."""
    later, other = x.clone(), x.clone()
    later[:, -1] += 1.0
    other[1:] = other[1:].flip(-1)
    return [(later, z, mask), (other, z, mask)]


_x, _z, _mask = _block_inputs(50, 2, 4, 6)
BLOCK_INPUTS = [("main", a) for a in [(_x, _z, _mask), _block_inputs(51, 1, 1, 3),
                                      _block_inputs(52, 2, 5, 2)] + _with_changes(_x, _z, _mask)]


def our_layer(weights: blocks.BlockWeights, eps: float) -> DecoderLayer:
    """decoderkit's post-norm DecoderLayer holding a learner block's weights (float64)."""
    spec = BlockSpec(D, weights.self_attn.heads, weights.w1.size(1), dropout=0.0)
    layer = DecoderLayer(spec).double()
    with torch.no_grad():
        blocks.load_attention(layer.self_attn, weights.self_attn)
        blocks.load_attention(layer.cross_attn, weights.cross_attn)
        for lin, w, b in ((layer.ffn.w_1, weights.w1.T, weights.b1),
                          (layer.ffn.w_2, weights.w2.T, weights.b2)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        for res, (gamma, beta) in zip((layer.res1, layer.res2, layer.res3), weights.norms,
                                      strict=True):
            res.norm.weight.copy_(gamma)
            res.norm.bias.copy_(beta)
            res.norm.eps = eps
    return layer.eval()


def read_block(result: dict, under: str, d: int) -> tuple[blocks.BlockWeights, float]:
    """The lesson's block below ``under``: two nn.MultiheadAttention (self, then cross), an FFN
    of two nn.Linear, three nn.LayerNorm, in registration order. -> (weights, LN eps)."""
    state = {k: v for k, v in result["state"].items() if k.startswith(under)}
    mhas = layout.modules_of(result, "MultiheadAttention", under)
    lins = layout.modules_of(result, "Linear", under)
    norms = layout.modules_of(result, "LayerNorm", under)
    if len(mhas) != 2 or len(lins) != 2 or len(norms) != 3:
        raise layout.LayoutError(f"expected 2 nn.MultiheadAttention, 2 nn.Linear and 3 "
                                 f"nn.LayerNorm, found {len(mhas)}, {len(lins)} and {len(norms)}")
    heads = [layout.attrs_of(result, m).get("num_heads") for m in mhas]
    if any(not layout.attrs_of(result, m).get("batch_first", False) for m in mhas):
        raise layout.LayoutError("nn.MultiheadAttention without batch_first=True")
    (w1, b1), (w2, b2) = (layout.linear(state, n) for n in lins)
    if w1.shape[1] != d:
        raise layout.LayoutError(f"the first nn.Linear maps {w1.shape[1]} features, not "
                                 f"d={d}")
    zero = torch.zeros
    weights = blocks.BlockWeights(
        norms=tuple(layout.norm_pair(state, d, f"{n}.") for n in norms),
        w1=w1.T, b1=zero(w1.shape[0], dtype=torch.float64) if b1 is None else b1,
        w2=w2.T, b2=zero(d, dtype=torch.float64) if b2 is None else b2,
        self_attn=layout.mha_projections(state, mhas[0], heads[0]),
        cross_attn=layout.mha_projections(state, mhas[1], heads[1]))
    return weights, float(layout.attrs_of(result, norms[0]).get("eps", 1e-5))


def _post(eps: float) -> blocks.Spec:
    return blocks.Spec(norm="post", ln_eps_value=eps)


def _block_variant(x, z, w, base, name):
    specs = blocks.placements(base, BY_NAME[name].changes)
    return [blocks.decoder_block(x, z, w, s, blocks.visibility(x.size(-2), x.size(-2),
                                                               s.causal), base) for s in specs]


def _block_cases(r, raw):
    weights, eps = read_block(r, "", D)
    layer = our_layer(weights, eps)
    cases = []
    for x, z, mask in raw:
        x, z = x.double(), z.double()
        expected = layer(x, z, None, from_torch_mask(mask)).detach()
        cases.append((f"x {tuple(x.shape)}, z {tuple(z.shape)}, mask {tuple(mask.shape)}",
                      expected, lambda m, x=x, z=z: _block_variant(x, z, weights, _post(eps),
                                                                    m)))
    return cases


def _stack_inputs():
    g = generator(53)
    tgt = torch.randint(0, V, (2, 5), generator=g)
    enc = randn(g, 2, 6, D).float()
    later, other = tgt.clone(), tgt.clone()
    later[:, -1] = (later[:, -1] + 1) % V
    other[1] = other[1].flip(0)
    return [("main", (tgt, enc)), ("T=1", (tgt[:, :1], enc)), ("later", (later, enc)),
            ("other", (other, enc))]


STACK_INPUTS = _stack_inputs()


def _stack_cases(r, raw):
    state = r["state"]
    tables = [k for k, v in state.items() if tuple(v.shape) == (V, D)]
    mhas = layout.modules_of(r, "MultiheadAttention")
    if len(tables) != 2 or len(mhas) % 2:
        raise layout.LayoutError("expected an nn.Embedding, blocks of two nn.MultiheadAttention "
                                 "and an nn.Linear head")
    embed, head = state[tables[0]].double(), layout.linear(state, tables[1].rsplit(".", 1)[0])
    prefixes = [m.rsplit(".", 1)[0] + "." for m in mhas[::2]]
    parts = [read_block(r, p, D) for p in prefixes]
    layers = [our_layer(w, eps) for w, eps in parts]
    cases = []
    for tgt, enc in raw:
        T, enc = tgt.size(1), enc.double()

        def run(block, tgt=tgt, enc=enc):
            x = embed[tgt]  # (B, T, d): the lesson's stack adds no scale and no positions
            for n in range(len(parts)):
                x = block(n, x, enc)
            return x @ head[0].T + head[1]  # (B, T, V)

        expected = run(lambda n, x, e, T=T: layers[n](x, e, None, from_torch_mask(blocked(T))))

        def variant(m, run=run):
            return [run(lambda n, x, e, s=s: blocks.decoder_block(
                x, e, parts[n][0], s, blocks.visibility(x.size(-2), x.size(-2), s.causal),
                _post(parts[n][1]))) for s in blocks.placements(_post(parts[0][1]),
                                                                 BY_NAME[m].changes)]
        cases.append((f"tgt {tuple(tgt.shape)}, enc_out {tuple(enc.shape)}", expected.detach(),
                      variant))
    return cases


def prepare_decode(inputs: Inputs):
    cases = ((8, 4), (5, 0))  # (max_len, eos_at): EOS as the 4th new token; never
    calls = [Call(id=f"ad{n}", name="autoregressive_decode", kind="decode_step",
                  args=(inputs.ref(f"ad{n}_src", torch.tensor([[3, 7, 12, 5, 9]])),
                        {"v": max_len}), vocab=V, eos_at=eos_at)
             for n, (max_len, eos_at) in enumerate(cases)]
    mistakes = ("decode_ignores_eos", "decode_drops_last", "decode_last_token_only")

    def judge_results(results):
        token_cases = []
        for (max_len, eos_at), r in zip(cases, results_for(results, calls), strict=True):
            expected = pieces.decode_tokens(pieces.BOS, max_len, V, eos_at, True)
            shorter = pieces.decode_tokens(pieces.BOS, max_len - 1, V, eos_at, True)
            accepted = () if expected[-1] == pieces.EOS else (
                (shorter, "max_len counts the BOS token here (the seed's loop runs max_len "
                          "steps after BOS); both readings are accepted"),)
            eos = f"EOS as token {eos_at}" if eos_at else "no EOS"
            token_cases.append(TokenCase(
                f"autoregressive_decode(scripted model, {eos}, max_len={max_len})",
                r, expected, lambda m, a=(max_len, eos_at): pieces.decode_tokens(
                    pieces.BOS, a[0], V, a[1], True, m), accepted))
        return judge_tokens("autoregressive_decode", "004", token_cases, mistakes)

    return calls, judge_results


ITEMS = (
    Item("build_causal_mask", "004", "build_causal_mask(T)",
         "(T, T) bool, True above the diagonal (blocked, nn.MultiheadAttention's convention)",
         "exact", ("causal_no_diagonal", "mask_flipped", "mask_not_bool"), prepare_mask),
    Item("DecoderBlock", "004", "DecoderBlock(d, H, d_ff).forward(x, z, mask=None)",
         "post-norm: x1 = LN(x + SelfAttn(x, mask)), x2 = LN(x1 + CrossAttn(x1, z)), "
         "LN(x2 + FFN(x2)); nn.MultiheadAttention(batch_first=True), mask True = blocked",
         "exact with the lesson's layout (weights copied into decoderkit's DecoderLayer), "
         "otherwise black-box properties", BLOCK_MISTAKES,
         module_item(ModuleItem("004", "DecoderBlock", builds([(D, H, F)], BLOCK_INPUTS),
                                _block_cases, BLOCK_MISTAKES, TOL,
                                properties=post_norm_properties))),
    Item("autoregressive_decode", "004", "autoregressive_decode(model, src, max_len=8)",
         "[BOS=1], then argmax of model.decode_step(prefix, enc_out)[0, -1] appended until "
         "EOS=2 (kept) or max_len tokens", "exact (on a scripted model)",
         ("decode_ignores_eos", "decode_drops_last", "decode_last_token_only"), prepare_decode),
    Item("DecoderStack", "004", "DecoderStack(V, d, H, d_ff, n_layers).forward(tgt, enc_out)",
         "embed (unscaled, no positions) -> n DecoderBlocks with the causal mask -> linear "
         "head: logits (B, T, V)", "exact with the lesson's layout, otherwise black-box "
         "properties", STACK_MISTAKES,
         module_item(ModuleItem("004", "DecoderStack",
                                builds([(V, D, H, F, 2), (V, D, H, F, 1)], STACK_INPUTS),
                                _stack_cases, STACK_MISTAKES, TOL,
                                properties=causal_properties))),
)

SEED = Seed("004", "The decoder block with nn.MultiheadAttention: causal mask, post-norm b"
            "lock, greedy decoding, the stack", ITEMS)
