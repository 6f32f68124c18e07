"""Seed 001, the Annotated Transformer: its functions and LabelSmoothing (``functions``),
its modules (``modules``) and its whole model (``model``), each in the seed's own convention
(masks True/1 = may attend, -1e9 for blocked scores; LayerNorm with the sample std)."""

from decoderkit.grade.judge.items import Seed
from decoderkit.grade.seeds.seed001 import functions, model, modules

SEED = Seed("001", "The Annotated Transformer: attention, masks, its modules, the whole model, "
            "label smoothing, the warm-up rate, greedy decoding",
            functions.ITEMS + modules.ITEMS + model.ITEMS)
