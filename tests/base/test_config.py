"""The JSON round trip every config class shares (base.config.JsonConfig)."""

from dataclasses import dataclass

import pytest

from decoderkit.base.config import JsonConfig
from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import LMConfig
from decoderkit.nn.seq2seq.model import ModelConfig


@dataclass(frozen=True)
class Toy(JsonConfig):
    KIND = "toy"

    width: int
    name: str = "a"


def test_round_trip_is_exact_and_kind_is_not_a_field(tmp_path):
    toy = Toy(width=3)
    toy.save(tmp_path / "c.json")
    assert Toy.load(tmp_path / "c.json") == toy
    assert toy.to_dict() == {"width": 3, "name": "a"}
    assert list(tmp_path.iterdir()) == [tmp_path / "c.json"]  # no temporary left


@pytest.mark.parametrize("data,match", [
    ([1, 2], r"a toy config must be a JSON object, got list"),
    ({"width": 3, "depth": 1}, r"unknown toy config field\(s\): \['depth'\]"),
    ({"name": "b"}, r"missing toy config field\(s\): \['width'\]"),
])
def test_bad_dicts_are_refused_naming_the_fields(data, match):
    with pytest.raises(UsageError, match=match):
        Toy.from_dict(data)


def test_bad_json_names_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match=r"c.json: not a valid toy config JSON"):
        Toy.load(path)


@pytest.mark.parametrize("cls,kind", [(ModelConfig, "model"), (LMConfig, "LM")])
def test_both_model_families_use_it(cls, kind):
    with pytest.raises(UsageError, match=f"unknown {kind} config field"):
        cls.from_dict({"nonsense": 1})
