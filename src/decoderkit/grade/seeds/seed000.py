"""Seed 000's code exercise: ``numpy_pe(pos, d)``, the sinusoidal table from scratch
(PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), w_i = 10000^(-2i/d)), judged against
decoderkit's ``sinusoidal_encoding`` in float64.
"""

from __future__ import annotations

import torch

from decoderkit.grade.reference import pieces
from decoderkit.grade.judge.items import Inputs, Item, Seed, results_for
from decoderkit.grade.judge.judging import Case, Tolerance, judge
from decoderkit.grade.run.sandbox import Call
from decoderkit.nn.embeddings import sinusoidal_encoding

CASES = ((list(range(10)), 16), ([0, 3, 7, 50], 6))  # (positions, d)
MISTAKES = ("pe_swapped", "pe_not_interleaved", "pe_frequency")


def prepare(inputs: Inputs):
    calls = [Call(id=f"npe{n}", name="numpy_pe", kind="call", args=({"v": pos}, {"v": d}))
             for n, (pos, d) in enumerate(CASES)]

    def judge_results(results):
        cases = []
        for (pos, d), r in zip(CASES, results_for(results, calls), strict=True):
            index = torch.tensor(pos)
            expected = sinusoidal_encoding(max(pos) + 1, d, torch.float64)[index]
            cases.append(Case(f"numpy_pe(pos={pos}, d={d})", r, expected,
                              lambda m, index=index, d=d: [pieces.positional_table(
                                  int(index.max()) + 1, d, m)[index]]))
        return judge("numpy_pe", "000", cases, MISTAKES, Tolerance(1e-9, 1e-9))

    return calls, judge_results


ITEMS = (
    Item("numpy_pe", "000", "numpy_pe(pos, d)",
         "(len(pos), d) array: sin(p w_i) in even channels, cos(p w_i) in odd ones, "
         "w_i = 10000^(-2i/d)", "exact (float64)", MISTAKES, prepare),
)

SEED = Seed("000", "The numbers: sinusoidal positions from scratch", ITEMS)
