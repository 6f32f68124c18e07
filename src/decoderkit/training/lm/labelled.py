"""Labelled text for fine-tuning a classifier: TSV files, encoded examples, batches, scores.

A TSV line is ``text TAB label`` or, for pairs, ``text TAB text TAB label`` (every line of a
file the same; a blank line is skipped). Every way in (a TSV file, ``lm classify``'s TEXT or
stdin, the library's ``Labelled``) holds to the same rules: one text or a pair, none empty,
every example alike (``Labelled``), and the classifier's own input, one text or a pair
(``check_input``, which ``encode`` applies). Examples are token ids after GPT-1's input
transformation (``nn.lm.classifier.transform``); one longer than the model's context is cut, its
longer text first, from the end (the extract token is kept), and counted. Batches are
right-padded; the head reads each row's last real position.

Legend: B batch, T longest row of the batch, C classes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.nn.modes import evaluating
from decoderkit.nn.lm.classifier import ClassifierConfig, GPTClassifier, transform
from decoderkit.training.lm.data import read_text
from decoderkit.text.lm.tokenizer import LMTokenizer


@dataclass(frozen=True)
class Labelled:
    """The lines of a TSV file: texts (one or two each) and their label names."""

    texts: list[tuple[str, ...]]  # (text,) or (text, text) per example
    labels: list[str]  # the label of each example (none: unlabelled texts to classify)
    file: str  # where they were read

    def __post_init__(self):
        if not self.texts:
            raise UsageError(f"{self.file}: no examples")
        for n, texts in enumerate(self.texts, 1):
            check_example(texts, f"{self.file}: example {n}")
            if len(texts) != len(self.texts[0]):
                raise UsageError(f"{self.file}: example {n} is {len(texts)} text(s), example 1 "
                                 f"{len(self.texts[0])}: give every example as one text or every "
                                 "one as a pair (text TAB text)")
        if self.labels and len(self.labels) != len(self.texts):
            raise UsageError(f"{self.file}: {len(self.labels)} labels for {len(self.texts)} "
                             "examples")

    @property
    def pairs(self) -> bool:
        """True when each example is two texts."""
        return len(self.texts[0]) == 2


def check_example(texts: tuple[str, ...], where: str) -> None:
    """The rule of one example, whichever way it came in: one text or a pair (text TAB text),
    neither empty nor blank; else a ``UsageError`` naming ``where``."""
    if len(texts) not in (1, 2):
        raise UsageError(f"{where}: {len(texts)} tab-separated texts, expected 1 (text) or 2 "
                         "(text TAB text)")
    if not all(t.strip() for t in texts):
        raise UsageError(f"{where}: an empty text")


def check_input(data: Labelled, config: ClassifierConfig) -> None:
    """``data`` must be what the classifier takes: pairs for one fine-tuned on pairs, single
    texts for one fine-tuned on single texts (or without a delimiter token); else refused."""
    pairs = config.takes_pairs
    if pairs is not None and data.pairs != pairs:
        given, taken = ("pairs of texts (text TAB text)", "one text") if data.pairs else \
            ("single texts", "a pair of texts (text TAB text)")
        raise UsageError(f"{data.file}: {given}, but the classifier takes {taken} per example")


def read_tsv(path: str | Path) -> Labelled:
    """The examples of a UTF-8 TSV file; a line with another number of fields than the first,
    or an empty text or label, is a ``UsageError`` naming the file and the line."""
    texts, labels, width = [], [], None
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        width = width or len(fields)
        if len(fields) not in (2, 3) or len(fields) != width:
            raise UsageError(f"{path}:{n}: {len(fields)} tab-separated fields, expected "
                             f"{width if width in (2, 3) else '2 or 3'} (text TAB label or "
                             "text TAB text TAB label)")
        check_example(tuple(fields[:-1]), f"{path}:{n}")
        if not fields[-1].strip():
            raise UsageError(f"{path}:{n}: an empty label")
        texts.append(tuple(fields[:-1]))
        labels.append(fields[-1].strip())
    if not texts:
        raise UsageError(f"{path}: no examples (text TAB label lines)")
    return Labelled(texts, labels, str(path))


def unlabelled(lines: list[str], where: str) -> Labelled:
    """Texts to classify, one example a line (a pair: text TAB text), under ``Labelled``'s
    rules; ``where`` names them in a refusal ("TEXT", "stdin")."""
    return Labelled([tuple(line.split("\t")) for line in lines], [], where)


def label_ids(data: Labelled, labels: tuple[str, ...]) -> list[int]:
    """Each example's class index in ``labels``; a label outside them is refused by name."""
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted(set(data.labels) - index.keys())
    if unknown:
        raise UsageError(f"{data.file}: label(s) {unknown[:5]} not among the model's "
                         f"{list(labels)}")
    return [index[x] for x in data.labels]


@dataclass
class Examples:
    """Encoded examples: ids after the input transformation, and class indices."""

    ids: list[list[int]]
    targets: list[int]
    cut: int  # examples shortened to fit the context


def encode(data: Labelled, tokenizer: LMTokenizer, config: ClassifierConfig, max_len: int,
           targets: list[int] | None = None) -> Examples:
    """Tokenise and transform every example to at most ``max_len`` ids (see module doc);
    examples of another input than the classifier's are refused (``check_input``)."""
    check_input(data, config)
    room = max_len - (3 if data.pairs else 2) * config.transformed  # the new tokens' places
    if room < len(data.texts[0]):
        raise UsageError(f"the model's context of {max_len} tokens leaves no room for "
                         f"{len(data.texts[0])} text(s) and the start/delimiter/extract tokens")
    rows, cut = [], 0
    for n, texts in enumerate(data.texts, 1):
        try:
            parts = [tokenizer.encode(t) for t in texts]
        except UsageError as err:
            raise UsageError(f"{data.file}: example {n}: {err}") from None
        cut += sum(map(len, parts)) > room
        while sum(map(len, parts)) > room:
            longest = max(range(len(parts)), key=lambda i: len(parts[i]))
            parts[longest] = parts[longest][:room - sum(map(len, parts)) + len(parts[longest])]
        rows.append(transform(config, *parts))
    return Examples(rows, targets if targets is not None else [0] * len(rows), cut)


@dataclass
class ClassifierBatch:
    """Right-padded examples; ``n_tokens`` counts examples (the loss is per example)."""

    ids: Tensor  # (B, T) token ids, right-padded (the padding is never read)
    at: Tensor  # (B,) the position the head reads (the extract token)
    targets: Tensor  # (B,) class indices
    lm_mask: Tensor  # (B, T - 1) True where ids[:, 1:] is a real token (the LM predicts it)
    n_tokens: int  # B

    @property
    def inputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """What the objective's forward takes."""
        return self.ids, self.at, self.targets, self.lm_mask

    def to(self, device: torch.device | str) -> ClassifierBatch:
        """The batch on ``device``."""
        return ClassifierBatch(self.ids.to(device), self.at.to(device),
                               self.targets.to(device), self.lm_mask.to(device), self.n_tokens)


def make_batch(rows: list[list[int]], targets: list[int], pad_id: int) -> ClassifierBatch:
    """The rows right-padded with ``pad_id`` (never read: causal attention, masked loss)."""
    lengths = torch.tensor([len(r) for r in rows])  # (B,)
    ids = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)  # (B, T)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    real = torch.arange(ids.size(1))[None, :] < lengths[:, None]  # (B, T)
    return ClassifierBatch(ids, lengths - 1, torch.tensor(targets), real[:, 1:], len(rows))


def epoch_batch(examples: Examples, batch_size: int, seed: int, index: int, pad_id: int
                ) -> ClassifierBatch:
    """Micro-batch ``index`` of epochs of shuffled examples: epoch e's order is a permutation
    seeded by (seed, e); a batch never spans two epochs (an epoch's last one may be smaller)."""
    n = len(examples.ids)
    per_epoch = -(-n // batch_size)
    epoch, k = divmod(index, per_epoch)
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    picks = torch.randperm(n, generator=g)[k * batch_size: (k + 1) * batch_size].tolist()
    return make_batch([examples.ids[i] for i in picks], [examples.targets[i] for i in picks],
                      pad_id)


@dataclass(frozen=True)
class ClassifierMetrics:
    """Held-out classification scores."""

    loss: float  # mean cross-entropy of the true class (nats)
    accuracy: float  # fraction classified right
    macro_f1: float  # mean over the classes of F1 = 2 TP / (2 TP + FP + FN)
    examples: int  # examples scored

    def as_dict(self) -> dict:
        """Field name -> value (one entry of a run's validation history)."""
        return asdict(self)

    def line(self) -> str:
        """The scores on one line for logs."""
        return (f"val loss {self.loss:.4f} | accuracy {self.accuracy:.4f} | "
                f"macro-F1 {self.macro_f1:.4f} | {self.examples} examples")


def macro_f1(predicted: list[int], targets: list[int], classes: int) -> float:
    """Mean over the ``classes`` of 2 TP / (2 TP + FP + FN); a class neither predicted nor
    present scores 0 (scikit-learn's ``f1_score(average="macro", zero_division=0)``)."""
    p, t = torch.tensor(predicted, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
    tp = torch.bincount(t[p == t], minlength=classes).double()  # (C,)
    wrong = (torch.bincount(p, minlength=classes) + torch.bincount(t, minlength=classes)
             ).double() - 2 * tp  # FP + FN
    return float(torch.where(tp > 0, 2 * tp / (2 * tp + wrong).clamp_min(1), 0.0).mean())


def predict(model: GPTClassifier, rows: list[list[int]], *, batch_size: int) -> Tensor:
    """Class logits (N, C) of transformed ``rows``, in eval mode, without gradients."""
    count().check("batch_size", batch_size)
    device = next(model.parameters()).device
    out = []
    with evaluating(model), torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start: start + batch_size]
            b = make_batch(chunk, [0] * len(chunk), chunk[0][0]).to(device)
            out.append(model(b.ids, b.at).float().cpu())
    return torch.cat(out)


def evaluate_classifier(model: GPTClassifier, examples: Examples, *, batch_size: int
                        ) -> ClassifierMetrics:
    """Loss, accuracy and macro-F1 of ``model`` on ``examples``."""
    if not examples.ids:
        raise UsageError("no examples to evaluate")
    logits = predict(model, examples.ids, batch_size=batch_size)  # (N, C)
    targets = torch.tensor(examples.targets)
    predicted = logits.argmax(-1).tolist()
    return ClassifierMetrics(float(F.cross_entropy(logits, targets)),
                             sum(p == t for p, t in zip(predicted, examples.targets,
                                                        strict=True)) / len(predicted),
                             macro_f1(predicted, examples.targets, logits.size(1)),
                             len(predicted))


def classify(model: GPTClassifier, tokenizer: LMTokenizer, data: Labelled, *,
             batch_size: int = 32) -> list[tuple[str, float]]:
    """(label, its probability) that ``model`` gives each example of ``data`` (its labels, if
    any, unused); examples of another input than the classifier's are refused."""
    examples = encode(data, tokenizer, model.config, model.lm.config.max_len)
    probs = predict(model, examples.ids, batch_size=batch_size).softmax(-1)  # (N, C)
    best = probs.max(-1)
    return [(model.config.labels[int(i)], float(p))
            for p, i in zip(best.values, best.indices, strict=True)]
