"""Configs saved as JSON beside every checkpoint: the round trip every config class shares."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic


class JsonConfig:
    """For a frozen dataclass: to_dict / from_dict (unknown or missing fields refused, the
    values then checked by the class itself) / save (atomic) / load. ``KIND`` names the config
    in messages ("model", "LM")."""

    KIND = "config"

    def to_dict(self) -> dict:
        """Field name -> value (what ``save`` writes as JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        """A validated config from a dict; unknown or missing fields are an error."""
        if not isinstance(data, dict):
            raise UsageError(f"a {cls.KIND} config must be a JSON object, "
                             f"got {type(data).__name__}")
        fields = dataclasses.fields(cls)
        unknown = set(data) - {f.name for f in fields}
        if unknown:
            raise UsageError(f"unknown {cls.KIND} config field(s): {sorted(unknown)}")
        missing = {f.name for f in fields if f.default is dataclasses.MISSING} - set(data)
        if missing:
            raise UsageError(f"missing {cls.KIND} config field(s): {sorted(missing)}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        """Write JSON to a temporary name, then rename (never a half-written file)."""
        text = json.dumps(self.to_dict(), indent=2)
        write_atomic(path, lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, path: str | Path):
        """A config read from the JSON written by ``save``."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}: not a valid {cls.KIND} config JSON ({err})") from None
        return cls.from_dict(data)


def replace_given(config, changes: dict):
    """``dataclasses.replace(config, ...)`` with those ``changes`` that are not None: the
    keyword forms of ``lm_preset`` and ``make_model``, where None keeps the config's value.
    The result is checked as a whole, once (no half-changed config is ever built)."""
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
