"""The grader's two ways of running a learner's file: inside bubblewrap (where this machine
allows it) and with its time and resource limits only (where it does not, forced here)."""

from __future__ import annotations

import pytest

from decoderkit.grade.run import bwrap


@pytest.fixture
def sandbox_on() -> None:
    """Skip, naming the reason, where bwrap cannot run here."""
    reason = bwrap.unusable()
    if reason is not None:
        pytest.skip(f"the grader's sandbox is unusable here: {reason}")


@pytest.fixture
def sandbox_off(monkeypatch) -> None:
    """Grade as on a machine without bubblewrap (the reason is this fixture's)."""
    monkeypatch.setattr(bwrap, "unusable", lambda: "turned off by the test")


@pytest.fixture(params=["sandbox", "limits only"])
def mode(request) -> str:
    """Each way in turn: "sandbox" (skipped where bwrap cannot run) or "limits only"."""
    request.getfixturevalue("sandbox_on" if request.param == "sandbox" else "sandbox_off")
    return request.param
