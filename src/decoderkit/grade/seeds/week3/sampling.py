"""Week 3's loops: sampling (``GPT.generate``, nanoGPT's method, or a free ``generate``:
temperature, top-k) and greedy decoding with a key/value cache (``generate_cached``). They
run on scripted LMs: sampling after ``torch.manual_seed``, one ``torch.multinomial`` draw per
step, as nanoGPT does; the cached LM's logits depend on the positions each call claims.
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge.items import Inputs, Item, results_for
from decoderkit.grade.judge.judging import TokenCase, judge_tokens
from decoderkit.grade.reference import gpt
from decoderkit.grade.run.sandbox import Call
from decoderkit.grade.seeds.week3.config import SEED, V

SAMPLE_MISTAKES = ("temperature_after_softmax", "top_k_wrong_count")
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


_SAMPLE_SPEC = ("crop idx to the last block_size ids, logits[:, -1] / temperature, keep the "
                "top_k largest (v = topk; logits < v[:, [-1]] -> -inf), softmax, "
                "torch.multinomial(probs, 1), append; returns (B, T + max_new_tokens) ids")
ITEMS = (
    Item("GPT.generate", SEED, "GPT.generate(self, idx, max_new_tokens, temperature=1.0, "
         "top_k=None)", _SAMPLE_SPEC + "; self(idx) returns (logits, loss)",
         "exact ids (on a scripted LM, seeded)", SAMPLE_MISTAKES, sampling_item("GPT.generate")),
    Item("generate", SEED, "generate(model, idx, max_new_tokens, temperature=1.0, top_k=None)",
         _SAMPLE_SPEC + "; model(idx) returns logits (B, T, V)",
         "exact ids (on a scripted LM, seeded)", SAMPLE_MISTAKES, sampling_item("generate")),
    Item("generate_cached", SEED, "generate_cached(model, idx, max_new_tokens)",
         "greedy decoding with a key/value cache: logits, cache = model(idx, None, 0) for the "
         "prompt, then model(next_token (1, 1), cache, start) with start the number of tokens "
         "already seen; argmax of the last logits each step; returns (1, T + max_new_tokens)",
         "exact ids (on a scripted cached LM whose logits depend on the positions claimed)",
         ("cache_position_not_advanced",), prepare_cached),
)
