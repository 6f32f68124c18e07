"""Week 3's modules: ``CausalSelfAttention``, ``Block`` and ``GPT`` (tokens -> logits).

Each is built in nanoGPT's layout (from the file's own ``GPTConfig``) or, when that fails,
in the course's (plain ints); their weights, read by classes and shapes (``layout``), go into
decoderkit's ``DecoderOnlyLM`` (the reference), and into ``reference.gpt``'s re-derivation
for the mistakes. Masks: causal, position i sees j <= i (decoderkit's True = may attend).
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge.items import Item, generator, randn
from decoderkit.grade.judge.modules import Build, ModuleItem, causal_properties, module_item
from decoderkit.grade.reference import blocks, gpt
from decoderkit.grade.seeds.week3 import layout
from decoderkit.grade.seeds.week3.config import CONFIG, CONFIG_CLASS, SEED, TOL, D, H, L, N, V
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.masks import causal_mask

CHANGES = {  # mistake -> the gpt.GSpec switches that make its variant
    "lm_not_causal": {"causal": "none"}, "causal_no_diagonal": {"causal": "no_diagonal"},
    "no_scale": {"scale": "none"}, "scale_d_model": {"scale": "sqrt_dmodel"},
    "gelu_tanh_for_exact": {"gelu": "tanh"}, "gelu_exact_for_tanh": {"gelu": "erf"},
    "gpt_residual_before_norm": {"norm": "post"}, "residual_on_normed": {"norm": "pre_on_normed"},
    "gpt_residual_before_norm_in_attn": {"norm": "post", "only": 0},
    "gpt_residual_before_norm_in_mlp": {"norm": "post", "only": 1},
    "gpt_no_final_norm": {"final_norm": False}, "gpt_embed_scaled": {"embed_scale": True},
    "mask_flipped": {"causal": "flipped"}, "scale_no_root": {"scale": "dk"},
    "gpt_no_positions": {"positions": False},
}
# Week 2's mistakes are named here too: mask polarity, the score scale, norm placement
ATTN_MISTAKES = ("lm_not_causal", "causal_no_diagonal", "mask_flipped", "no_scale",
                 "scale_no_root", "scale_d_model")
BLOCK_MISTAKES = ATTN_MISTAKES + ("gelu_tanh_for_exact", "gelu_exact_for_tanh",
                                  "gpt_residual_before_norm", "gpt_residual_before_norm_in_attn",
                                  "gpt_residual_before_norm_in_mlp", "residual_on_normed")
GPT_MISTAKES = BLOCK_MISTAKES + ("gpt_no_final_norm", "gpt_embed_scaled", "gpt_no_positions")


def _probes(main: torch.Tensor, change) -> list:
    """main, a T = 1 slice, the last position changed, batch row 1 changed (the last two
    are the black-box probes of ``modules.causal_properties``)."""
    later, other = main.clone(), main.clone()
    later[:, -1] = change(later[:, -1])
    other[1] = other[1].flip(0)
    return [("main", main), ("T=1", main[:, :1].clone()), ("later", later), ("other", other)]


X = _probes(randn(generator(60), 2, 5, D).float(), lambda t: t + 1.0)
IDS = _probes(torch.randint(0, V, (2, 7), generator=generator(61)), lambda t: (t + 1) % V)


def _logits(value):
    """nanoGPT's forward returns (logits, loss): the logits."""
    return value[0] if isinstance(value, list) and value else value


def gpt_module_item(name: str, ints: tuple, inputs_of, cases, mistakes: tuple[str, ...],
                    targets: bool = False):
    """An item's ``prepare``: the module built from the file's GPTConfig, else from ints
    (alternatives: the first that builds is judged). ``targets``: nanoGPT's forward also
    gets targets (so that it returns the full logits)."""
    by_config = tuple((label, (x, x.roll(-1, 1)) if targets else (x,)) for label, x in inputs_of)
    by_ints = tuple((label, (x,)) for label, x in inputs_of)
    return module_item(ModuleItem(
        SEED, name, (Build((CONFIG,), by_config, 11, f"{name}({CONFIG_CLASS})"),
                     Build(ints, by_ints, 11)), cases, mistakes, TOL,
        properties=causal_properties, alternatives=True, output=_logits))


def _spec(base: gpt.GSpec, mistake: str) -> gpt.GSpec:
    return base.but(**CHANGES[mistake])


def _attention_cases(r, raw):
    p = layout.attention(r["state"], "", D, H)
    ours = blocks.load_attention(MultiHeadAttention(D, H).double().eval(), p)
    cases = []
    for x, *_ in raw:
        x = x.double()
        expected = ours(x, mask=causal_mask(x.size(1)))[0].detach()  # (B, T, d)
        cases.append((f"x {tuple(x.shape)}", expected, lambda m, x=x: [
            gpt.causal_attention(x, p, _spec(gpt.GSpec(), m))]))
    return cases


def _block_cases(r, raw):
    b, kind = layout.block(r, "", D, H), layout.gelu_kind(r)
    zero = torch.zeros
    lm = gpt.reference(gpt.GPTW(zero(V, D, dtype=torch.float64), zero(L, D, dtype=torch.float64),
                                (b,), None, zero(V, D, dtype=torch.float64)), kind)
    cases = []
    for x, *_ in raw:
        x = x.double()
        expected = lm.blocks.layers[0](x, causal_mask(x.size(1))).detach()
        cases.append((f"x {tuple(x.shape)}, GELU {kind}", expected, lambda m, x=x: [
            gpt.gpt_block(x, b, _spec(gpt.GSpec(gelu=kind), m))]))
    return cases


def _gpt_cases(r, raw):
    w, kind = layout.model(r, V, L, D, H), layout.gelu_kind(r)
    lm = gpt.reference(w, kind)
    cases = []
    for ids, *_ in raw:
        with torch.no_grad():
            expected = lm(ids)  # (B, T, V)
        cases.append((f"idx {tuple(ids.shape)}, GELU {kind}", expected, lambda m, ids=ids: [
            gpt.gpt_logits(ids, w, _spec(gpt.GSpec(gelu=kind), m))]))
    return cases


_LAYOUTS = "nanoGPT's (from GPTConfig) or the course's (ints)"
ITEMS = (
    Item("CausalSelfAttention", SEED, "CausalSelfAttention(config) | "
         "CausalSelfAttention(d_model, n_heads); forward(x) -> (B, T, d)",
         "multi-head self-attention, scores / sqrt(d_k), causal: position i sees j <= i "
         "(nanoGPT's tril mask, is_causal=True); q, k, v packed in one (3d, d) linear or four "
         "(d, d) ones", f"exact with {_LAYOUTS} layout (weights copied into decoderkit's "
         "MultiHeadAttention), otherwise black-box properties", ATTN_MISTAKES,
         gpt_module_item("CausalSelfAttention", (D, H), X, _attention_cases, ATTN_MISTAKES)),
    Item("Block", SEED, "Block(config) | Block(d_model, n_heads); forward(x) -> (B, T, d)",
         "pre-norm GPT block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), mlp = c_proj(GELU(c_fc "
         "x)) of width 4d; GELU exact (nn.GELU()) unless the module declares "
         "nn.GELU(approximate='tanh')", f"exact with {_LAYOUTS} layout (weights copied into "
         "decoderkit's GPT block), otherwise black-box properties", BLOCK_MISTAKES,
         gpt_module_item("Block", (D, H), X, _block_cases, BLOCK_MISTAKES)),
    Item("GPT", SEED, "GPT(config).forward(idx, targets) -> (logits, loss) | "
         "GPT(vocab_size, block_size, n_layer, n_head, n_embd).forward(idx) -> logits",
         "wte[idx] + wpe[0..T-1] (no sqrt(d) scale), the blocks, ln_f, lm_head: logits "
         "(B, T, V)", f"exact with {_LAYOUTS} layout (weights copied into decoderkit's "
         "DecoderOnlyLM), otherwise black-box properties", GPT_MISTAKES,
         gpt_module_item("GPT", (V, L, N, H, D), IDS, _gpt_cases, GPT_MISTAKES, targets=True)),
)
