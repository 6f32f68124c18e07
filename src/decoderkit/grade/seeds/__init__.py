"""The one registry of seeds and their items: what ``decoderkit grade`` (``--exercise``,
``--list``) and ``grade(obj)`` know is exactly what ``REGISTRY`` lists.

A seed is one module or package here whose ``SEED`` (``judge.items.Seed``) holds its items;
adding a seed is that package and its line below; adding an item is one entry in its seed's
items. Nothing outside ``seeds/`` names a seed or an item.
"""

from decoderkit.grade.judge.items import Item, Seed, check_registry
from decoderkit.grade.seeds import seed000, seed001, seed002, seed004, week3

REGISTRY: tuple[Seed, ...] = check_registry((  # in the course's order: --list, reports
    seed000.SEED,
    seed001.SEED,
    seed002.SEED,
    seed004.SEED,
    week3.SEED,
))
SEEDS: tuple[str, ...] = tuple(seed.name for seed in REGISTRY)  # the --exercise values
ITEMS: tuple[Item, ...] = tuple(item for seed in REGISTRY for item in seed.items)
BY_SEED: dict[str, Seed] = {seed.name: seed for seed in REGISTRY}
