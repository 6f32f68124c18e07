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

from decoderkit.grade import blocks, gpt, layout
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
    ours = blocks.load_attention(MultiHeadAttention(D, H).double().eval(), p)
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


CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BUFFERS = (".attn.bias", ".attn.masked_bias")  # HF's attention buffers, not weights


def hf_gpt2_state(seed: int = 62) -> dict[str, torch.Tensor]:
    """A random one-block GPT2LMHeadModel state dict as Hugging Face writes it: Conv1D
    weights (in, out), the ``transformer.`` prefix, the attention buffers of older files."""
    g, d = generator(seed), D
    shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (L, d)}
    for name, shape in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.bias", (1, 1, L, L)),
                        ("attn.masked_bias", ()), ("attn.c_attn.weight", (d, 3 * d)),
                        ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)),
                        ("attn.c_proj.bias", (d,)), ("ln_2.weight", (d,)), ("ln_2.bias", (d,)),
                        ("mlp.c_fc.weight", (d, F)), ("mlp.c_fc.bias", (F,)),
                        ("mlp.c_proj.weight", (F, d)), ("mlp.c_proj.bias", (d,))):
        shapes[f"transformer.h.0.{name}"] = shape
    shapes |= {"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,),
               "lm_head.weight": (V, d)}
    return {k: randn(g, *shape).float() if shape else torch.tensor(-1e4)
            for k, shape in shapes.items()}


def prepare_convert(inputs: Inputs):
    sd = hf_gpt2_state()
    spec = {"tdict": {k: inputs.ref(f"w3_sd_{k}", v)["t"] for k, v in sd.items()}}
    calls = [Call(id="w3_convert", name="convert_gpt2_state_dict", kind="call", args=(spec,))]
    expected = {k: v.T if k.endswith(CONV1D) else v for k, v in sd.items()
                if not k.endswith(BUFFERS)}

    def judge_results(results):
        (r,) = results_for(results, calls)
        value = r.get("value")
        name = "convert_gpt2_state_dict"
        if "error" in r or not isinstance(value, dict) or "__dict__" not in value:
            return Outcome(name, SEED, "FAIL", r.get("error") or "returned "
                           f"{value.get('__type__') if isinstance(value, dict) else value!r:.40}"
                           ", expected a dict of tensors")
        got = value["__dict__"]
        wrong = sorted(set(expected) ^ set(got))
        if wrong:
            return Outcome(name, SEED, "FAIL", f"keys differ from nanoGPT's: {wrong[:3]} "
                           f"({len(wrong)} in all; the attention buffers {BUFFERS} are dropped)")
        cases = [Case(key, {"value": got[key]}, want.double(), lambda m, k=key, w=want: [
            w, sd[k].double()]) for key, want in expected.items()]
        return judge(name, SEED, cases, ("conv1d_not_transposed",), Tolerance(1e-12, 0.0))

    return calls, judge_results


CACHED = ((4, [5, 9, 2, 14]), (6, [7]))  # (max_new_tokens, prompt)


def prepare_cached(inputs: Inputs):
    calls = [Call(id=f"w3_gc{n}", name="generate_cached", kind="generate_cached", vocab=V,
                  args=(inputs.ref(f"w3_gc{n}_idx", torch.tensor([prompt])), {"v": steps}))
             for n, (steps, prompt) in enumerate(CACHED)]

    def judge_results(results):
        cases = [TokenCase(f"generate_cached(scripted cached LM, idx {prompt}, "
                           f"max_new_tokens={steps})", r, gpt.cached_greedy(prompt, steps, V),
                           lambda m, a=(prompt, steps): [gpt.cached_greedy(*a, V, restart)
                                                         for restart in (0, len(a[0]))])
                 for (steps, prompt), r in zip(CACHED, results_for(results, calls),
                                               strict=True)]
        return judge_tokens("generate_cached", SEED, cases, ("cache_position_not_advanced",))

    return calls, judge_results


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
    Item("convert_gpt2_state_dict", SEED, "convert_gpt2_state_dict(sd_hf) -> dict",
         "a Hugging Face GPT2LMHeadModel state dict -> nanoGPT's GPT state dict: the same "
         "names, the attention buffers (attn.bias, attn.masked_bias) dropped, the four Conv1D "
         "weights (c_attn, attn.c_proj, c_fc, mlp.c_proj) transposed to nn.Linear's (out, in)",
         "exact, tensor by tensor", ("conv1d_not_transposed",), prepare_convert),
    Item("generate_cached", SEED, "generate_cached(model, idx, max_new_tokens)",
         "greedy decoding with a key/value cache: logits, cache = model(idx, None, 0) for the "
         "prompt, then model(next_token (1, 1), cache, start) with start the number of tokens "
         "already seen; argmax of the last logits each step; returns (1, T + max_new_tokens)",
         "exact ids (on a scripted cached LM whose logits depend on the positions claimed)",
         ("cache_position_not_advanced",), prepare_cached),
    Item("generate", SEED, "generate(model, idx, max_new_tokens, temperature=1.0, top_k=None)",
         _SAMPLE_SPEC + "; model(idx) returns logits (B, T, V)",
         "exact ids (on a scripted LM, seeded)", SAMPLE_MISTAKES, sampling_item("generate")),
)
