"""lm tune's examples: which tokens carry the loss, against transformers'
``apply_chat_template(..., return_assistant_tokens_mask=True)`` for templates with
``{% generation %}`` blocks, and for the same templates without them (found by rendering
prefixes); the loss modes, prompt/completion and text files, and the lines refused."""

from __future__ import annotations

import json

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.training.lm.tune_data import (
    CHAT,
    COMPLETION,
    IGNORE,
    TEXT,
    chat_example,
    collate,
    read_examples,
)
from text.lm.chat_dirs import CHATML, LLAMA3, chat_tokenizer

transformers = pytest.importorskip("transformers")

# the same templates with the assistant's turn (its content and end-of-turn mark) in a
# generation block, as SmolLM3's and others' training templates mark it
CHATML_MARKED = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != "
                 "'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named "
                 "SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{% if "
                 "message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
                 "{% generation %}{{ message['content'] + '<|im_end|>' + '\\n' }}"
                 "{% endgeneration %}{% else %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_MARKED = ("{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}"
                 "{% endif %}{{ '<|start_header_id|>' + message['role'] + "
                 "'<|end_header_id|>\\n\\n' }}{% if message['role'] == 'assistant' %}"
                 "{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
                 "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}"
                 "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
                 "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
SPECIAL = {"bos_token": "<|begin_of_text|>"}
CONVERSATION = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "To be, or not to be?"},
                {"role": "assistant", "content": "That is the question."},
                {"role": "user", "content": "All that glitters?"},
                {"role": "assistant", "content": " Is not gold. "}]


def transformers_mask(template: str, messages: list[dict]) -> tuple[list[int], list[int]]:
    """(ids, assistant mask) transformers gives for ``template`` on our tokenizer."""
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=chat_tokenizer().hf,
                                                bos_token=SPECIAL["bos_token"])
    out = fast.apply_chat_template(messages, chat_template=template, tokenize=True,
                                   return_dict=True, return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


@pytest.mark.parametrize("plain, marked", [(CHATML, CHATML_MARKED), (LLAMA3, LLAMA3_MARKED)],
                         ids=["chatml", "llama3"])
@pytest.mark.parametrize("turns", [3, 5])
def test_assistant_tokens_are_transformers_with_and_without_generation_blocks(plain, marked,
                                                                              turns):
    tokenizer, messages = chat_tokenizer(), CONVERSATION[:turns]
    ids, mask = transformers_mask(marked, messages)
    assert sum(mask) > 5 and 0 in mask
    for source in (marked, plain):
        example = chat_example(ChatTemplate(source, SPECIAL), tokenizer, messages, "assistant")
        assert list(example.ids) == ids
        assert [int(t) for t in example.trained] == mask


def test_loss_last_and_all():
    tokenizer, template = chat_tokenizer(), ChatTemplate(CHATML)
    _, mask = transformers_mask(CHATML_MARKED, CONVERSATION)
    last = chat_example(template, tokenizer, CONVERSATION, "last").trained
    first_turn = transformers_mask(CHATML_MARKED, CONVERSATION[:3])[1]
    # the last turn's tokens: the mask of all turns less the first turn's
    assert [int(t) for t in last] == [m - (first_turn[i] if i < len(first_turn) else 0)
                                      for i, m in enumerate(mask)]
    assert all(chat_example(template, tokenizer, CONVERSATION, "all").trained)


def test_labels_predict_the_trained_tokens_only():
    tokenizer, template = chat_tokenizer(), ChatTemplate(CHATML)
    example = chat_example(template, tokenizer, CONVERSATION[:3], "assistant")
    batch = collate([example, chat_example(template, tokenizer, CONVERSATION, "assistant")])
    row = batch.labels[0].tolist()
    assert row[:len(example.ids) - 1] == [t if m else IGNORE for t, m in
                                          zip(example.ids[1:], example.trained[1:], strict=True)]
    assert set(row[len(example.ids) - 1:]) == {IGNORE}  # the padding
    assert tokenizer.decode([t for t in row if t != IGNORE]) == "That is the question.<|im_end|>\n"
    assert batch.n_tokens == sum(e != IGNORE for e in batch.labels.flatten().tolist())


def test_a_template_rewriting_earlier_turns_is_refused_unless_marked():
    rewrites = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] if loop.last else "
                "m['content'][:3] }}\n{% endfor %}")
    with pytest.raises(UsageError, match="turn after turn.*--loss all"):
        chat_example(ChatTemplate(rewrites), chat_tokenizer(), CONVERSATION, "assistant")
    assert all(chat_example(ChatTemplate(rewrites), chat_tokenizer(), CONVERSATION,
                            "all").trained)


def write_lines(path, values):
    path.write_text("".join((v if isinstance(v, str) else json.dumps(v)) + "\n"
                            for v in values))
    return path


def test_files_of_each_kind(tmp_path):
    tokenizer, template = chat_tokenizer(), ChatTemplate(CHATML)
    chat = write_lines(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}] * 2)
    kind, examples = read_examples(chat, tokenizer, template, "assistant", 128)
    assert kind == CHAT and len(examples) == 2
    pairs = write_lines(tmp_path / "pairs.jsonl", [{"prompt": "To be, ", "completion": "or not"}])
    kind, (example,) = read_examples(pairs, tokenizer, template, "assistant", 128)
    assert kind == COMPLETION
    trained = [t for t, m in zip(example.ids, example.trained, strict=True) if m]
    assert tokenizer.decode(trained) == "or not<|endoftext|>"
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 30)
    kind, examples = read_examples(text, tokenizer, template, "assistant", 16)
    assert kind == TEXT and all(len(e.ids) <= 16 and all(e.trained) for e in examples)


@pytest.mark.parametrize("lines, says", [
    ([{"messages": CONVERSATION}, {"messages": CONVERSATION[:2]}],
     r"chat.jsonl:2: no assistant message \(nothing to learn\)"),
    ([{"messages": CONVERSATION}, "", {"messages": CONVERSATION * 8}],
     r"chat.jsonl:3: the example is \d+ tokens, longer than the model's context of 128"),
    ([{"messages": CONVERSATION}, "{not json"], r"chat.jsonl:2: not JSON"),
    ([{"messages": CONVERSATION}, {"prompt": "a", "completion": "b"}],
     r"chat.jsonl:2: expected an object with messages"),
    ([{"messages": [{"role": "robot", "content": "x"}]}], r"chat.jsonl:1: messages\[0\].role")])
def test_bad_lines_are_refused_naming_the_line(tmp_path, lines, says):
    path = write_lines(tmp_path / "chat.jsonl", lines)
    with pytest.raises(UsageError, match=says):
        read_examples(path, chat_tokenizer(), ChatTemplate(CHATML), "assistant", 128)
