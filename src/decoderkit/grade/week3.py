"""Week 3, the decoder-only model: ``CausalSelfAttention``, ``Block``, ``GPT`` (tokens ->
logits) and the sampling loop (``GPT.generate``, nanoGPT's method, or a free ``generate``).

Modules are built in nanoGPT's layout (from the file's own ``GPTConfig(block_size,
vocab_size, n_layer, n_head, n_embd, dropout, bias)``) or, when that fails, in the course's
(plain ints); their weights, read by classes and shapes, go into decoderkit's
``DecoderOnlyLM`` (the reference), and into ``gpt``'s re-derivation for the mistakes. Masks:
causal, position i sees j <= i (decoderkit's True = may attend). Sampling runs on a scripted
LM after ``torch.manual_seed``: one ``torch.multinomial`` draw per step, as nanoGPT does.
"""

from __future__ import annotations

import torch

from decoderkit.grade import gpt, layout
from decoderkit.grade.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judging import Case, Outcome, TokenCase, Tolerance, judge, judge_tokens
from decoderkit.grade.modules import causal_properties
from decoderkit.grade.sandbox import Call
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.masks import causal_mask

SEED = "w3"  # no seed text: nanoGPT's model.py and GPT-2 are the references
V, L, D, H, N = 23, 12, 16, 2, 2  # vocab, block_size, width, heads, layers (all distinct)
F = 4 * D  # GPT's MLP width
TOL = Tolerance(atol=1e-4, rtol=1e-4)  # the learner's module runs in float32
CONFIG_CLASS = "GPTConfig"  # nanoGPT's config class, which the file (or notebook) defines
CONFIG = {"config": CONFIG_CLASS, "fields": dict(block_size=L, vocab_size=V, n_layer=N,
                                                 n_head=H, n_embd=D, dropout=0.0, bias=True)}
CHANGES = {  # mistake -> the gpt.GSpec switches that make its variant
    "lm_not_causal": {"causal": "none"}, "causal_no_diagonal": {"causal": "no_diagonal"},
    "no_scale": {"scale": "none"}, "scale_d_model": {"scale": "sqrt_dmodel"},
    "gelu_tanh_for_exact": {"gelu": "tanh"}, "gelu_exact_for_tanh": {"gelu": "erf"},
    "gpt_residual_before_norm": {"norm": "post"}, "residual_on_normed": {"norm": "pre_on_normed"},
    "gpt_no_final_norm": {"final_norm": False}, "gpt_embed_scaled": {"embed_scale": True},
}
ATTN_MISTAKES = ("lm_not_causal", "causal_no_diagonal", "no_scale", "scale_d_model")
BLOCK_MISTAKES = ATTN_MISTAKES[:2] + ("gelu_tanh_for_exact", "gelu_exact_for_tanh",
                                      "gpt_residual_before_norm", "residual_on_normed")
GPT_MISTAKES = BLOCK_MISTAKES + ("gpt_no_final_norm", "gpt_embed_scaled")
SAMPLE_MISTAKES = ("temperature_after_softmax", "top_k_wrong_count")


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


def two_layouts(name: str, ints: tuple, inputs_of, build, mistakes: tuple[str, ...],
                targets: bool = False):
    """An item's ``prepare``: the module built from the file's GPTConfig, and from ints;
    judged on the build that ran, exactly when its weights are read, otherwise by
    black-box properties. ``targets``: nanoGPT's forward also gets targets (full logits)."""
    def prepare(inputs: Inputs):
        def forwards(tag, with_targets):
            return tuple(("forward", tuple(
                inputs.ref(f"w3{name}{tag}{n}_{k}", t) for k, t in enumerate(
                    (x, x.roll(-1, 1)) if with_targets else (x,))))
                for n, (_, x) in enumerate(inputs_of))
        calls = [Call(id=f"w3_{name}_cfg", name=name, kind="module", init=(CONFIG,), seed=11,
                      forwards=forwards("c", targets)),
                 Call(id=f"w3_{name}_int", name=name, kind="module", init=ints, seed=11,
                      forwards=forwards("i", False))]

        def judge_results(results):
            by_config, by_ints = results_for(results, calls)
            r = by_config if "error" not in by_config else by_ints
            if "error" in r:
                no_config = "KeyError: 'GPTConfig'" in by_config["error"]
                return Outcome(name, SEED, "FAIL", by_ints["error"] if no_config
                               else by_config["error"])
            values = [_logits(v) for v in r["value"]]
            raw = [(x,) for _, x in inputs_of]
            try:
                cases = build(r, raw)
            except layout.LayoutError as err:
                outcome = Outcome(name, SEED, "pass", notes=[
                    f"weights not read ({err}): judged by black-box properties only"])
                return causal_properties(outcome, raw, values)
            judged = [Case(f"{name} (weights seed 11, eval mode), {label}", {"value": v}, e,
                           variants) for (label, e, variants), v in zip(cases, values,
                                                                        strict=True)]
            return judge(name, SEED, judged, mistakes, TOL)

        return calls, judge_results

    return prepare


def _spec(base: gpt.GSpec, mistake: str) -> gpt.GSpec:
    return base.but(**CHANGES[mistake])


def _attention_cases(r, raw):
    p = gpt.attention(r["state"], "", D, H)
    ours = MultiHeadAttention(D, H).double().eval()
    with torch.no_grad():
        ours.in_proj.weight.copy_(torch.cat([p.wq, p.wk, p.wv]))
        ours.in_proj.bias.copy_(torch.cat([p.bq, p.bk, p.bv]))
        ours.out_proj.weight.copy_(p.wo)
        ours.out_proj.bias.copy_(p.bo)
    cases = []
    for (x,) in raw:
        x = x.double()
        expected = ours(x, mask=causal_mask(x.size(1)))[0].detach()  # (B, T, d)
        cases.append((f"x {tuple(x.shape)}", expected, lambda m, x=x: [
            gpt.causal_attention(x, p, _spec(gpt.GSpec(), m))]))
    return cases


def _block_cases(r, raw):
    b, kind = gpt.block(r, "", D, H), gpt.gelu_kind(r)
    zero = torch.zeros
    lm = gpt.reference(gpt.GPTW(zero(V, D, dtype=torch.float64), zero(L, D, dtype=torch.float64),
                                (b,), None, zero(V, D, dtype=torch.float64)), kind)
    cases = []
    for (x,) in raw:
        x = x.double()
        expected = lm.blocks.layers[0](x, causal_mask(x.size(1))).detach()
        cases.append((f"x {tuple(x.shape)}, GELU {kind}", expected, lambda m, x=x: [
            gpt.gpt_block(x, b, _spec(gpt.GSpec(gelu=kind), m))]))
    return cases


def _gpt_cases(r, raw):
    w, kind = gpt.model(r, V, L, D, H), gpt.gelu_kind(r)
    lm = gpt.reference(w, kind)
    cases = []
    for (ids,) in raw:
        with torch.no_grad():
            expected = lm(ids)  # (B, T, V)
        cases.append((f"idx {tuple(ids.shape)}, GELU {kind}", expected, lambda m, ids=ids: [
            gpt.gpt_logits(ids, w, _spec(gpt.GSpec(gelu=kind), m))]))
    return cases


SAMPLING = ((0.7, None, 1), (1.4, 5, 2), (1.0, 1, 3))  # (temperature, top_k, seed)
PROMPT, STEPS, BLOCK = [3, 7, 1], 10, 8  # 13 ids > block_size 8: the loop must crop


def _sample_variants(temperature, top_k, seed, mistake):
    """The ids each mistaken loop returns (the reference's where the mistake changes
    nothing: top_k None, temperature 1)."""
    run = lambda t, k: gpt.sample(PROMPT, STEPS, t, k, V, BLOCK, seed)  # noqa: E731
    if mistake == "temperature_after_softmax":
        return [run(1.0, top_k)]
    if top_k is None:
        return [run(temperature, None)]
    return [run(temperature, k) for k in (top_k - 1, top_k + 1) if 1 <= k <= V]


def sampling_item(name: str):
    """``prepare`` for a generate loop called ``name`` ('generate' or 'GPT.generate')."""
    def prepare(inputs: Inputs):
        calls = [Call(id=f"w3_{name}{n}", name=name, kind="generate", seed=seed, vocab=V,
                      block=BLOCK, args=(inputs.ref(f"w3_{name}{n}_idx", torch.tensor(
                          [PROMPT])), {"v": STEPS}, {"v": t}, {"v": k}))
                 for n, (t, k, seed) in enumerate(SAMPLING)]

        def judge_results(results):
            cases = [TokenCase(f"{name}(scripted LM, idx {PROMPT}, max_new_tokens={STEPS}, "
                               f"temperature={t}, top_k={k}, torch.manual_seed({seed}), "
                               f"block_size {BLOCK})", r,
                               gpt.sample(PROMPT, STEPS, t, k, V, BLOCK, seed),
                               lambda m, a=(t, k, seed): _sample_variants(*a, m))
                     for (t, k, seed), r in zip(SAMPLING, results_for(results, calls),
                                                strict=True)]
            return judge_tokens(name, SEED, cases, SAMPLE_MISTAKES)

        return calls, judge_results

    return prepare


_LAYOUTS = "nanoGPT's (from GPTConfig) or the course's (ints)"
_SAMPLE_SPEC = ("crop idx to the last block_size ids, logits[:, -1] / temperature, keep the "
                "top_k largest (v = topk; logits < v[:, [-1]] -> -inf), softmax, "
                "torch.multinomial(probs, 1), append; returns (B, T + max_new_tokens) ids")
ITEMS = (
    Item("CausalSelfAttention", SEED, "CausalSelfAttention(config) | "
         "CausalSelfAttention(d_model, n_heads); forward(x) -> (B, T, d)",
         "multi-head self-attention, scores / sqrt(d_k), causal: position i sees j <= i "
         "(nanoGPT's tril mask, is_causal=True); q, k, v packed in one (3d, d) linear or four "
         "(d, d) ones", f"exact with {_LAYOUTS} layout (weights copied into decoderkit's "
         "MultiHeadAttention), otherwise black-box properties", ATTN_MISTAKES,
         two_layouts("CausalSelfAttention", (D, H), X, _attention_cases, ATTN_MISTAKES)),
    Item("Block", SEED, "Block(config) | Block(d_model, n_heads); forward(x) -> (B, T, d)",
         "pre-norm GPT block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), mlp = c_proj(GELU(c_fc "
         "x)) of width 4d; GELU exact (nn.GELU()) unless the module declares "
         "nn.GELU(approximate='tanh')", f"exact with {_LAYOUTS} layout (weights copied into "
         "decoderkit's GPT block), otherwise black-box properties", BLOCK_MISTAKES,
         two_layouts("Block", (D, H), X, _block_cases, BLOCK_MISTAKES)),
    Item("GPT", SEED, "GPT(config).forward(idx, targets) -> (logits, loss) | "
         "GPT(vocab_size, block_size, n_layer, n_head, n_embd).forward(idx) -> logits",
         "wte[idx] + wpe[0..T-1] (no sqrt(d) scale), the blocks, ln_f, lm_head: logits "
         "(B, T, V)", f"exact with {_LAYOUTS} layout (weights copied into decoderkit's "
         "DecoderOnlyLM), otherwise black-box properties", GPT_MISTAKES,
         two_layouts("GPT", (V, L, N, H, D), IDS, _gpt_cases, GPT_MISTAKES, targets=True)),
    Item("GPT.generate", SEED, "GPT.generate(self, idx, max_new_tokens, temperature=1.0, "
         "top_k=None)", _SAMPLE_SPEC + "; self(idx) returns (logits, loss)",
         "exact ids (on a scripted LM, seeded)", SAMPLE_MISTAKES, sampling_item("GPT.generate")),
    Item("generate", SEED, "generate(model, idx, max_new_tokens, temperature=1.0, top_k=None)",
         _SAMPLE_SPEC + "; model(idx) returns logits (B, T, V)",
         "exact ids (on a scripted LM, seeded)", SAMPLE_MISTAKES, sampling_item("generate")),
)
