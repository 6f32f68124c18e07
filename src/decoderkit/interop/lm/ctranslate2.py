"""CTranslate2's ``Generator`` as rows of continuous batching, for the LM server: a converted
``lm export`` directory (``ct2-transformers-converter --model EXPORT --output_dir DIR``).

CTranslate2 fixes a batch once it has started, so its rows are not stepped as one batch: each
row is its own ``generate_tokens`` stream, and a step takes the next token of each (a row
joins and leaves between steps as with the PyTorch engines, and a dropped row's stream is
closed). What it cannot give is refused by name (``generation.engines``' table): per-request
seeds (its random seed is process-wide), OpenAI's presence/frequency penalties and logit bias,
token log-probabilities with alternatives (and so echo scoring), and the explorer. The ids past
a row's ``usable_vocab`` (a model's padded rows past its tokenizer's: the converter's
``<extra_id_N>`` tokens) are its ``suppress_sequences``, each one token long: never generated.
"""

from __future__ import annotations

import json
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.base.families import LM
from decoderkit.generation.engines import check_engine
from decoderkit.generation.lm.row import FINISH_LENGTH, Row, asked

ENGINE = "ctranslate2"  # its row of generation.engines.UNAVAILABLE (family lm)
VOCABULARY = "vocabulary.json"


class CT2Rows:
    """``Rows``' join / step / drop on a Generator, one token stream per row."""

    def __init__(self, generator, vocabulary: list[str], context: int):
        self.generator, self.vocabulary, self.context = generator, vocabulary, context
        self.running: list[Row] = []
        self._streams: dict[int, object] = {}

    def join(self, row: Row) -> None:
        s = row.settings
        if s.max_new_tokens == 0:
            row.finish_reason = FINISH_LENGTH
            return
        check_engine(LM, ENGINE, asked(s))
        prompt = [self.vocabulary[i] for i in row.context(self.context)]
        self._streams[id(row)] = self.generator.generate_tokens(
            prompt, max_length=s.max_new_tokens, sampling_topk=1 if s.greedy else s.top_k,
            sampling_topp=s.top_p, sampling_temperature=s.temperature,
            end_token=[self.vocabulary[i] for i in s.eos_ids] or None,
            suppress_sequences=[[token] for token in self.vocabulary[s.usable_vocab:]]
            if s.usable_vocab is not None else None)
        self.running.append(row)

    def drop(self, row: Row) -> None:
        if row in self.running:
            self.running.remove(row)
            self._streams.pop(id(row)).close()

    def step(self, on_chosen=None) -> list[tuple[Row, object]]:
        """One token from each row's stream (``Rows.step``'s contract)."""
        events = []
        for row in list(self.running):
            result = next(self._streams[id(row)], None)
            if result is None:  # the stream ended without its end token: at its max_length
                token = row.end(FINISH_LENGTH)
            else:
                token = row.take(result.token_id)
            events.append((row, token))
            if row.finish_reason is not None:
                self.drop(row)
        if on_chosen is not None:
            on_chosen(events)
        return events


def open_generator(directory: str | Path, vocab_size: int, threads: int = 0):
    """(``ctranslate2.Generator``, its vocabulary) of the conversion in ``directory`` of a
    model of ``vocab_size`` tokens, checked to be that model's conversion."""
    ctranslate2 = import_extra("ctranslate2")
    directory = Path(directory)
    if not (directory / VOCABULARY).is_file():
        raise UsageError(f"{directory}: no {VOCABULARY} (--model must be a CTranslate2 "
                         f"conversion of the --checkpoint export)")
    vocabulary = json.loads((directory / VOCABULARY).read_text(encoding="utf-8"))
    if len(vocabulary) != vocab_size:
        raise UsageError(f"{directory / VOCABULARY} has {len(vocabulary)} tokens, the "
                         f"--checkpoint model {vocab_size}: not its conversion")
    config = json.loads((directory / "config.json").read_text(encoding="utf-8")) \
        if (directory / "config.json").is_file() else {}
    if isinstance(config, dict) and "eos_token" in config and config["eos_token"] is None:
        raise UsageError(f"{directory / 'config.json'}: eos_token is null: the converted "
                         "model's tokenizer has no end-of-text token, which CTranslate2's "
                         "Generator needs (a Llama-shaped model exports one only where its "
                         "vocabulary holds <|endoftext|>)")
    return ctranslate2.Generator(str(directory), device="cpu", intra_threads=threads), vocabulary
