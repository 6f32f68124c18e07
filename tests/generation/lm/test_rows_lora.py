"""generation.lm.rows with LoRA adapters: rows of two adapters and of the base step in one
batch (prefilled together, joining and leaving at other steps), each row's tokens and
log-probs bit for bit those of its adapter served alone on the rowwise engine, and those of
the adapter's own ``LoRALinear`` model (float64, where its margin decides)."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import assert_tokens_agree_where_decided
from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.nn.rowwise import rowwise
from generation.lm.lora_helpers import V, served_and_alone

PROMPTS = {None: [3, 14, 15, 9, 26], "a": [5, 3, 5, 8, 9, 7, 9], "b": [2, 7, 1, 8, 2, 8]}


def settings(i: int) -> Settings:
    return [Settings(20, greedy=True, logprobs=2),
            Settings(20, seed=7 + i, temperature=0.9, top_k=20, logprobs=1)][i % 2]


def run(model, rows_of: list[tuple[str | None, list[int], Settings]], stagger: bool = False):
    """Each row's (token, log-prob) pairs, the rows joining at once or one a step."""
    rows, runs = Rows(model), [Row(p, s, adapter=a) for a, p, s in rows_of]
    seen = {id(r): [] for r in runs}
    for row in runs:
        rows.join(row)
        if stagger:
            for r, t in rows.step():
                seen[id(r)].append((t.id, t.logprob, t.top))
    while rows.running:
        for r, t in rows.step():
            seen[id(r)].append((t.id, t.logprob, t.top))
    return [seen[id(r)] for r in runs]


@pytest.mark.engines
@pytest.mark.parametrize("stagger", [False, True], ids=["prefilled-together", "staggered"])
def test_rows_of_two_adapters_and_the_base_equal_each_served_alone(stagger):
    model, _ = served_and_alone()
    served = rowwise(model)
    asked = [(a, p, settings(i)) for i, (a, p) in enumerate(PROMPTS.items())]
    asked += [(a, p[::-1], settings(i + 1)) for i, (a, p) in enumerate(PROMPTS.items())]
    mixed = run(served, asked, stagger)
    for got, one in zip(mixed, asked, strict=True):
        assert got == run(served, [one])[0]
    same = [run(served, [(a, PROMPTS[None], Settings(20, greedy=True))])[0]
            for a in PROMPTS]  # one prompt: each adapter continues it otherwise
    assert len({tuple(t for t, _, _ in s) for s in same}) == 3


@pytest.mark.engines
def test_an_adapters_rows_are_its_lora_models_greedy_where_the_margin_decides():
    """The reference: the adapter's own LoRALinear model (unmerged, float64), greedy on whole
    forwards; the served rows (float32, rowwise, routed) agree wherever its margin is over
    twice 1e-4."""
    model, alone = served_and_alone()
    served = rowwise(model)
    for name, prompt in PROMPTS.items():
        ref, ids, margins = alone[name].double(), list(prompt), []
        with torch.no_grad():
            for _ in range(20):
                logp = ref(torch.tensor([ids]))[0, -1].log_softmax(-1)
                top = logp.topk(2).values
                margins.append(float(top[0] - top[1]))
                ids.append(int(logp.argmax()))
        got = run(served, [(name, prompt, Settings(20, greedy=True))])[0]
        assert_tokens_agree_where_decided([ids[len(prompt):]], [[t for t, _, _ in got]],
                                          [margins], 1e-4, at_least=1)


def test_a_row_naming_an_adapter_the_model_lacks_is_refused():
    model, _ = served_and_alone()
    with pytest.raises(UsageError, match=r"adapter 'c' is not one of this model's \(a, b\)"):
        Rows(rowwise(model)).join(Row([1, 2], Settings(3), adapter="c"))
    assert V == 50


def test_bfloat16_rows_pick_their_adapter():
    """--dtype bfloat16 (no rowwise copy: rows may differ from alone by rounding): each row
    of a routed batch is its adapter's LoRALinear model in bfloat16 to rounding, several
    times closer to it than to the other models."""
    from decoderkit.generation.bfloat16 import native_bf16
    from decoderkit.generation.lm.rowwise import for_inference
    from decoderkit.nn.lora import routed

    if not native_bf16():
        pytest.skip("no native bfloat16 on this CPU")
    model, alone = served_and_alone()
    ids = torch.tensor([PROMPTS["a"][:5], PROMPTS["b"][:5], PROMPTS[None][:5]])
    names = ["a", "b", None]
    with torch.no_grad():
        want = {a: copy.deepcopy(m).to(torch.bfloat16)(ids) for a, m in alone.items()}
        with routed(served := for_inference(model, dtype=torch.bfloat16),
                    [n for n in names for _ in range(5)]):
            got = served(ids)
    for i, name in enumerate(names):
        err = (got[i] - want[name][i]).abs().max()
        others = min((got[i] - want[o][i]).abs().max() for o in want if o != name)
        assert err * 20 < others, (name, float(err), float(others))
