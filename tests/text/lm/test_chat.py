"""Chat templates: the prompt ids equal transformers' apply_chat_template on every shape
(ChatML as SmolLM2 and Qwen2.5 write it, Llama 3's headers, Mistral's [INST], Zephyr's), with a
system message and without, multi-turn, one BOS where the template writes it and none where it
does not; the template found in chat_template.jinja or tokenizer_config.json; malformed
messages and the template's own exceptions refused by name."""

from __future__ import annotations

import json

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.text.lm.chat import ChatTemplate, check_messages, no_template
from decoderkit.text.lm.sandbox import TemplateFailed
from decoderkit.text.lm.tokenizer import LMTokenizer
from text.lm.chat_dirs import SHAPES, chat_directory

transformers = pytest.importorskip("transformers")

SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "To be, or not to be?"}
ANSWER = {"role": "assistant", "content": "That is the question."}
AGAIN = {"role": "user", "content": [{"type": "text", "text": "All that"},
                                     {"type": "text", "text": "glitters?"}]}
CHATS = {"user": [USER], "system": [SYSTEM, USER], "multi-turn": [SYSTEM, USER, ANSWER, AGAIN]}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def shape_dir(request, tmp_path_factory):
    in_config = request.param in ("qwen", "mistral")  # the template in tokenizer_config.json
    path = chat_directory(tmp_path_factory.mktemp(request.param), request.param, in_config)
    return request.param, path


def _hf_chat(messages: list[dict]) -> list[dict]:
    """transformers takes the text, as our rule reads a list of text parts."""
    return [m | {"content": "\n".join(p["text"] for p in m["content"])}
            if isinstance(m["content"], list) else m for m in messages]


@pytest.mark.parametrize("chat", sorted(CHATS))
def test_prompt_ids_equal_transformers_apply_chat_template(shape_dir, chat):
    shape, path = shape_dir
    messages = CHATS[chat]
    if shape == "mistral":
        messages = [m for m in messages if m["role"] != "system"]
    reference = transformers.AutoTokenizer.from_pretrained(path)
    want = reference.apply_chat_template(_hf_chat(messages), add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
    template = ChatTemplate.find(path)
    tokenizer = LMTokenizer.load(path / "tokenizer.json")
    got = template.encode(tokenizer, messages)
    assert got == want
    bos = SHAPES[shape][1]
    if bos is not None:  # the template writes BOS: once, though the tokenizer adds one too
        bos_id = tokenizer.hf.token_to_id(bos)
        assert got.count(bos_id) == 1 and got[0] == bos_id
        assert tokenizer.hf.encode("x").ids[0] == bos_id  # (its post-processor does)
    else:  # none: the template writes none, and none is added
        assert not {tokenizer.hf.token_to_id(t) for t in ("<s>", "<|begin_of_text|>")} & set(got)


def test_the_template_is_found_where_transformers_reads_it(tmp_path):
    path = chat_directory(tmp_path / "jinja", "chatml")
    assert ChatTemplate.find(path).where.endswith("chat_template.jinja")
    config = path / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    config.write_text(json.dumps(settings | {"chat_template": "IGNORED"}))
    assert "IGNORED" not in ChatTemplate.find(path).render([USER])  # the file comes first
    (path / "chat_template.jinja").unlink()
    assert ChatTemplate.find(path).render([USER]) == "IGNORED"
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    config.write_text(json.dumps(settings | {"chat_template": named}))
    assert ChatTemplate.find(path).render([USER]) == "D"
    config.write_text(json.dumps(settings | {"chat_template": named[:1]}))
    with pytest.raises(UsageError, match="none named 'default'"):
        ChatTemplate.find(path)
    config.write_text(json.dumps(settings))
    assert ChatTemplate.find(path) is None and ChatTemplate.find(config) is None
    assert "no chat_template.jinja" in no_template(path)


DIALOGPT = "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}"


@pytest.mark.parametrize("settings", [
    {},  # DialoGPT's config: no class, no token: GPT2Tokenizer's own <|endoftext|>
    {"tokenizer_class": "GPT2TokenizerFast", "eos_token": None},  # a null stays unset
    {"tokenizer_class": "PreTrainedTokenizerFast"},  # a class without defaults
    {"tokenizer_class": "GPT2Tokenizer",
     "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "special": True}},
])
def test_special_tokens_are_transformers_own(tmp_path, settings):
    path = chat_directory(tmp_path / "d", "chatml")
    (path / "chat_template.jinja").unlink()
    (path / "tokenizer_config.json").write_text(json.dumps(settings | {"chat_template":
                                                                       DIALOGPT}))
    reference = transformers.AutoTokenizer.from_pretrained(path)
    want = reference.apply_chat_template(CHATS["system"], tokenize=False)
    assert ChatTemplate.find(path).render(CHATS["system"], add_generation_prompt=False) == want


def test_a_syntax_error_names_the_file_and_line(tmp_path):
    path = chat_directory(tmp_path / "d", "chatml")
    (path / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m['role'] }\n")
    with pytest.raises(UsageError, match="chat_template.jinja: line 2: "):
        ChatTemplate.find(path)


@pytest.mark.parametrize("messages, field", [
    ([], "messages: give at least one"),
    ([{"content": "hi"}], r"messages\[0\].role: .* got no role"),
    ([USER, {"role": "tool", "content": "x"}], r"messages\[1\].role: .* got 'tool'"),
    ([{"role": "user", "content": 3}], r"messages\[0\].content: .* got int"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], r"messages\[0\].content"),
    ("hello", "messages: give at least one"),
])
def test_malformed_messages_are_refused_naming_the_field(messages, field):
    with pytest.raises(UsageError, match=field):
        check_messages(messages)


def test_raise_exception_is_the_templates_message(tmp_path):
    template = ChatTemplate.find(chat_directory(tmp_path / "d", "mistral"))
    with pytest.raises(TemplateFailed, match="Conversation roles must alternate") as err:
        template.render([USER, USER])
    assert err.value.field == "messages"
