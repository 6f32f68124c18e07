"""What ``--resume`` must find unchanged, checked by every recipe's ``resume`` (and by the
commands before any work): the same model and data (``check_same``), the same training
settings but those that only say how long the run goes on and how it is watched
(``check_settings``). Each refusal names the field, the given and the saved value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from decoderkit.base.errors import UsageError


def check_same(what: str, given: dict, saved: dict, out: Path) -> None:
    """--resume must continue the same model and data: name the first field that differs."""
    for key, value in given.items():
        if key in saved and saved[key] != value:
            raise UsageError(f"cannot resume: {what} field {key!r} is {value!r} here but "
                             f"{saved[key]!r} in the checkpoint {out}")


# What a resumed run may set anew (each recipe's own are named beside it): how long it goes on
# and how it is watched, never what it learns from (the data order, the optimiser, the schedule
# before max_steps).
MAY_CHANGE = ("max_steps", "time_limit", "valid_every", "patience")


def check_settings(cfg, saved: dict, out: Path, may_change: tuple[str, ...] = MAY_CHANGE
                   ) -> None:
    """--resume continues the run's own training settings: a field of the frozen ``cfg``
    other than ``may_change`` that differs from the checkpoint's record (``meta["train"]``,
    ``saved``) is refused, naming its flag, the given and the saved value."""
    for key, value in dataclasses.asdict(cfg).items():
        if key in may_change or key not in saved or saved[key] == value:
            continue
        allowed = ", ".join("--" + k.replace("_", "-") for k in may_change)
        raise UsageError(f"cannot resume: --{key.replace('_', '-')} is {value!r} here but "
                         f"{saved[key]!r} in the run in {out} (a resumed run keeps its "
                         f"settings; only {allowed} may change)")
