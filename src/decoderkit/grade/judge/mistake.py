"""What a named mistake is (``Mistake``), and one mistake made in each sublayer of a block
separately (``in_each_sublayer``); ``catalogue`` lists them all."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mistake:
    """One known mistake, as a learner reads it."""

    name: str  # stable id, used in --json and in tests
    title: str  # one line: what the code does
    explanation: str  # why it is wrong and what it changes
    formula: str  # the spec's formula for the part that is wrong
    source: str  # the seed section the formula comes from
    changes: dict = field(default_factory=dict)  # blocks.Spec switches (block family only)


def in_each_sublayer(m: Mistake, sublayers: tuple[tuple[str, str], ...]) -> tuple[Mistake, ...]:
    """``m`` (made in every sublayer), then ``m`` made in one sublayer only, one mistake each
    (``<name>_in_<key>``; a block-family mistake's ``changes`` pin the stage as ``only``): the
    diagnosis names the sublayer."""
    return (m, *(Mistake(f"{m.name}_in_{key}", f"{m.title}, in the {label} sublayer only",
                         f"{m.explanation} Here only the {label} sublayer is arranged so; the "
                         "others are right.", m.formula, m.source,
                         {**m.changes, "only": i} if m.changes else {})
                 for i, (key, label) in enumerate(sublayers)))
