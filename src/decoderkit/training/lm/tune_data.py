"""What ``lm tune`` learns from: each example a token sequence and which of its tokens carry
the loss (torchtune's ``masking_strategy``, TRL's ``assistant_only_loss``).

Three kinds of file (``read_examples`` tells them by their first line):

- chat JSONL, one ``{"messages": [...]}`` conversation a line (OpenAI's and Hugging Face's
  convention), rendered by the model's own chat template in the sandbox; ``loss`` "assistant"
  (the default: every assistant turn, its end-of-turn mark included), "last" (the last
  assistant turn only) or "all" (every token). The assistant's characters are the template's
  ``{% generation %}`` blocks where it has them (transformers'
  ``return_assistant_tokens_mask``), else found by rendering prefixes: turn i's text is what
  the conversation through turn i adds to the conversation before it with the generation
  prompt (a template that rewrites earlier turns is refused: no prefix to find);
- prompt / completion JSONL, ``{"prompt": ..., "completion": ...}``: the loss on the
  completion and the end of text after it;
- plain text: windows of the context, every token trained.

A token carries the loss where its characters overlap an assistant span (the tokenizer's
offsets). Refused, naming the file and line: a line that is not such JSON, a conversation with
no assistant turn (nothing to learn), an example longer than the context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from decoderkit.base.checks import check_choice
from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_lines, read_text
from decoderkit.text.lm.chat import ChatTemplate, check_messages
from decoderkit.text.lm.tokenizer import LMTokenizer

LOSSES = ("assistant", "all", "last")  # torchtune's train_on_assistant / _all / _last
CHAT, COMPLETION, TEXT = "chat", "prompt/completion", "text"
IGNORE = -100  # the label of a token without loss (cross_entropy's ignore_index)


@dataclass(frozen=True)
class Example:
    """One training sequence: its ids and, for each, whether predicting it carries loss."""

    ids: tuple[int, ...]
    trained: tuple[bool, ...]  # trained[j]: the loss includes -log p(ids[j] | ids[:j])

    @property
    def labels(self) -> list[int]:
        """The next-token labels of ids[:-1]: ids[1:], ``IGNORE`` where untrained."""
        return [t if keep else IGNORE for t, keep in zip(self.ids[1:], self.trained[1:],
                                                         strict=True)]


def token_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
               ) -> tuple[bool, ...]:
    """True for each token whose characters (start, end) overlap one of ``spans``."""
    return tuple(any(s < end and e > start for start, end in spans) for s, e in offsets)


def assistant_spans(template: ChatTemplate, messages: list[dict], loss: str
                    ) -> tuple[str, list[tuple[int, int]]]:
    """(the conversation's text, the characters of its assistant turns: all of them, or the
    last alone for ``loss`` "last")."""
    if template.marks_generation:
        text, spans = template.render_marked(messages)
    else:
        text, spans = template.render(messages, add_generation_prompt=False), []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = template.render(messages[:i], add_generation_prompt=True) if i else ""
            through = template.render(messages[:i + 1], add_generation_prompt=False)
            if not (through.startswith(before) and text.startswith(through)):
                raise UsageError("the chat template does not write the conversation turn after "
                                 "turn (an earlier turn renders differently later), so the "
                                 "assistant's tokens cannot be found: use --loss all, or a "
                                 "template with {% generation %} blocks")
            spans.append((len(before), len(through)))
    return text, spans[-1:] if loss == "last" else spans


def chat_example(template: ChatTemplate, tokenizer: LMTokenizer, messages: list[dict],
                 loss: str) -> Example:
    """A conversation as an ``Example`` with ``loss``'s tokens trained."""
    check_choice("loss", loss, LOSSES)
    messages = check_messages(messages)
    if not any(m["role"] == "assistant" for m in messages):
        raise UsageError("no assistant message (nothing to learn)")
    if loss == "all":
        ids = tokenizer.encode(template.render(messages, add_generation_prompt=False))
        return Example(tuple(ids), (True,) * len(ids))
    text, spans = assistant_spans(template, messages, loss)
    ids, offsets = tokenizer.encode_offsets(text)
    return Example(tuple(ids), token_mask(offsets, spans))


def completion_example(tokenizer: LMTokenizer, prompt: str, completion: str) -> Example:
    """prompt + completion + end of text, the loss on the completion and the end."""
    first, second = tokenizer.encode(prompt), tokenizer.encode(completion)
    end = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    ids = first + second + end
    return Example(tuple(ids), (False,) * len(first) + (True,) * (len(second) + len(end)))


def kind_of(first: str) -> str:
    """The file's kind by its first line: chat or prompt/completion JSONL, else text."""
    try:
        value = json.loads(first)
    except ValueError:
        return TEXT
    if isinstance(value, dict) and "messages" in value:
        return CHAT
    if isinstance(value, dict) and {"prompt", "completion"} <= value.keys():
        return COMPLETION
    return TEXT


def read_examples(path: str | Path, tokenizer: LMTokenizer, template: ChatTemplate | None,
                  loss: str, context: int) -> tuple[str, list[Example]]:
    """(the file's kind, its examples), each at most ``context`` tokens (see the module
    docstring); ``template``: the model's chat template (None: it has none, and a chat file
    is refused)."""
    check_choice("loss", loss, LOSSES)
    lines = read_lines(path, "--data")
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise UsageError(f"--data {path}: no examples in it (an empty file)")
    kind = kind_of(first)
    if kind == TEXT:
        return kind, text_examples(read_text(path, "--data"), tokenizer, context)
    examples = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            example = _line_example(line, kind, tokenizer, template, loss)
        except UsageError as err:
            raise UsageError(f"{path}:{number}: {err}") from None
        if len(example.ids) > context:
            raise UsageError(f"{path}:{number}: the example is {len(example.ids)} tokens, longer "
                             f"than the model's context of {context}")
        if not any(example.trained[1:]):
            raise UsageError(f"{path}:{number}: no token of the example carries the loss "
                             f"(--loss {loss}): nothing to learn")
        examples.append(example)
    return kind, examples


def _line_example(line: str, kind: str, tokenizer: LMTokenizer, template: ChatTemplate | None,
                  loss: str) -> Example:
    try:
        value = json.loads(line)
    except ValueError as err:
        raise UsageError(f"not JSON ({err})") from None
    keys = ("messages",) if kind == CHAT else ("prompt", "completion")
    if not isinstance(value, dict) or not set(keys) <= value.keys():
        raise UsageError(f"expected an object with {' and '.join(keys)}, as the file's first "
                         "line has")
    if kind == COMPLETION:
        for key in keys:
            if not isinstance(value[key], str):
                raise UsageError(f"{key} must be a string, got {type(value[key]).__name__}")
        return completion_example(tokenizer, value["prompt"], value["completion"])
    if template is None:
        raise UsageError("a chat example, but the model has no chat template")
    return chat_example(template, tokenizer, value["messages"], loss)


def text_examples(text: str, tokenizer: LMTokenizer, context: int) -> list[Example]:
    """Plain text as consecutive windows of ``context`` tokens, every token trained."""
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise UsageError("the text is shorter than two tokens: nothing to learn")
    return [Example(tuple(ids[i:i + context]), (True,) * len(ids[i:i + context]))
            for i in range(0, len(ids) - 1, context) if len(ids[i:i + context]) > 1]


@dataclass
class TuneBatch:
    """Padded examples: inputs (B, T) and labels (B, T), ``IGNORE`` where no loss."""

    ids: Tensor
    labels: Tensor
    n_tokens: int  # the labels that carry loss

    @property
    def inputs(self) -> tuple[Tensor, Tensor]:
        return self.ids, self.labels

    def to(self, device: torch.device | str) -> TuneBatch:
        return TuneBatch(self.ids.to(device), self.labels.to(device), self.n_tokens)


def collate(examples: Sequence[Example], pad_id: int = 0) -> TuneBatch:
    """Examples right-padded to the longest (a causal model never sees the padding)."""
    length = max(len(e.ids) for e in examples) - 1
    ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), IGNORE, dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, :len(e.ids) - 1] = torch.tensor(e.ids[:-1])
        labels[row, :len(e.ids) - 1] = torch.tensor(e.labels)
    return TuneBatch(ids, labels, int((labels != IGNORE).sum()))
