"""Week 3, the decoder-only model (``--exercise w3``; no seed text: nanoGPT's ``model.py``
and GPT-2 are the references): the modules (``modules``), the sampling and cached loops
(``sampling``), the GPT-2 weight conversion (``convert``), GPT-1's fine-tuning pieces
(``transfer``), the Llama family's blocks (``llama``), LoRA (``lora``). A file that
defines one of these items is a decoder-only model file (nanoGPT's ``model.py``): with no
``--exercise`` only its Week 3 items are judged, so its own helpers (nanoGPT's
``LayerNorm(ndim, bias)``) are not taken for seed 001's items of the same name.
"""

from decoderkit.grade.judge.items import Seed
from decoderkit.grade.seeds.week3 import convert, llama, lora, modules, sampling, transfer
from decoderkit.grade.seeds.week3.config import CONFIG_CLASS
from decoderkit.grade.seeds.week3.config import SEED as NAME

SEED = Seed(NAME, "Week 3: the decoder-only model (GPT), its sampling loops, GPT-2's "
            "weights, GPT-1's fine-tuning, the Llama family's blocks and LoRA", modules.ITEMS
            + sampling.ITEMS + convert.ITEMS + transfer.ITEMS + llama.ITEMS
            + lora.ITEMS,
            exclusive="a Week 3 file: only its Week 3 items are judged (--exercise picks "
                      "another seed)", companions=(CONFIG_CLASS,))
