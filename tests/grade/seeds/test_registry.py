"""The one registry of seeds: names used once, each item carrying its seed's name, the
--exercise values in the course's order; a clash is refused naming it."""

import dataclasses

import pytest

from decoderkit.grade import seeds
from decoderkit.grade.judge.items import Seed, check_registry


def test_the_registry_lists_every_seed_and_item_once():
    assert seeds.SEEDS == ("000", "001", "002", "004", "w3")
    assert len({i.name for i in seeds.ITEMS}) == len(seeds.ITEMS) == 35
    for seed in seeds.REGISTRY:
        assert seed.title and seed.items and all(i.seed == seed.name for i in seed.items)
        assert seeds.BY_SEED[seed.name] is seed
    assert [s.name for s in seeds.REGISTRY if s.exclusive] == ["w3"]
    assert seeds.BY_SEED["w3"].companions == ("GPTConfig",)


def test_a_clash_is_refused_naming_it():
    w3 = seeds.BY_SEED["w3"]
    with pytest.raises(ValueError, match="seed name.s. w3 registered twice"):
        check_registry((w3, w3))
    copy = Seed("w4", "a copy", w3.items)
    with pytest.raises(ValueError, match="item name.s. .*GPT.* registered twice"):
        check_registry((w3, dataclasses.replace(copy, items=w3.items)))
    with pytest.raises(ValueError, match="seed w4's items CausalSelfAttention, .* say another"):
        check_registry((copy,))


def test_a_new_seed_is_one_record():
    item = dataclasses.replace(seeds.BY_SEED["000"].items[0], name="numpy_pe2", seed="005")
    extended = check_registry(seeds.REGISTRY + (Seed("005", "a new seed", (item,)),))
    assert [s.name for s in extended][-1] == "005"
