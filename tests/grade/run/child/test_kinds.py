"""The call kinds: every kind an item plans has its function in the one table, and a plan
naming another kind gets an error result, not a crash."""

import torch

from decoderkit.grade import grader
from decoderkit.grade.run.child.kinds import KINDS, run


def test_every_planned_kind_is_in_the_table():
    calls, _, _ = grader.plan(grader.ITEMS)
    assert {c.kind for c in calls} == set(KINDS)  # and no kind in the table goes unused


def test_an_unknown_kind_is_an_error_result():
    space = {"f": lambda: 1}
    result = run({"kind": "teleport", "name": "f"}, space, {}, torch)
    assert result["error"].startswith("unknown call kind 'teleport' (known: call, module")


def test_a_missing_config_class_is_named_for_the_next_build():
    space = {"Net": torch.nn.Linear}
    call = {"kind": "module", "name": "Net", "init": [{"config": "NetConfig", "fields": {}}],
            "seed": 0, "forwards": []}
    result = run(call, space, {}, torch)
    assert result == {"error": "NameError: NetConfig is not defined (building Net from it)",
                      "undefined": "NetConfig"}
