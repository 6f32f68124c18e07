"""A conversation kept turn by turn: the history grows by each message and its reply (shown
piece by piece), a reply ends at the template's eos_token, an interrupted reply is kept as
far as it was shown, a message the template refuses leaves the history as it was."""

from __future__ import annotations

import signal

import pytest

from decoderkit.generation.lm.row import Settings
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.generation.lm.conversation import INTERRUPTED, Conversation
from decoderkit.text.lm.sandbox import TemplateFailed
from text.lm.chat_dirs import chat_directory, interrupt_step


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    path = chat_directory(tmp_path_factory.mktemp("c") / "mistral", "mistral")
    ckpt = load_checkpoint(path)
    return for_inference(ckpt.model), ckpt.tokenizer, ChatTemplate.find(path)


def test_the_history_keeps_each_message_and_reply(parts):
    chat = Conversation(*parts, Settings(5, greedy=True))
    pieces = []
    first = chat.say("To be?", pieces.append)
    assert "".join(pieces) == first.text and first.finish_reason in ("stop", "length")
    chat.say("Again?")
    assert [m["role"] for m in chat.messages] == ["user", "assistant"] * 2
    assert chat.messages[1]["content"] == first.text


def test_a_reply_ends_at_the_templates_eos_token(parts):
    model, tokenizer, template = parts
    eos = tokenizer.hf.token_to_id("</s>")
    chat = Conversation(model, tokenizer, template,
                        Settings(5, greedy=True, logit_bias=((eos, 100.0),)))
    reply = chat.say("To be?")
    assert reply.text == "" and reply.finish_reason == "stop"


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as a script in a terminal or a notebook has it (the
    caller this test stands for). A test process started in the background has none: bash
    starts a ``&`` job with SIGINT ignored, Python then installs no handler, and the SIGINT
    passed unseen (the reply ran to its length; seen in a fresh-clone CI run so started)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_reply_is_kept_as_shown(parts, monkeypatch, python_sigint):
    interrupt_step(monkeypatch, at=3)
    chat = Conversation(*parts, Settings(8, greedy=True))
    pieces = []
    reply = chat.say("To be?", pieces.append)
    assert reply.finish_reason == INTERRUPTED and len(pieces) == 2
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(pieces)}


def test_a_refused_message_leaves_the_history(parts):
    chat = Conversation(*parts, Settings(3, greedy=True), system="no system role here")
    with pytest.raises(TemplateFailed, match="roles must alternate"):
        chat.say("To be?")
    assert chat.messages == [{"role": "system", "content": "no system role here"}]


def test_a_padded_vocabulary_replies_with_the_tokenizers_ids(tmp_path):
    """64 rows past the tokenizer's, rigged to win every argmax: the reply is still text
    (a padded id would stop it: "token id N is outside the vocabulary")."""
    import torch

    path = chat_directory(tmp_path / "padded", "chatml", padded=True)
    ckpt = load_checkpoint(path)
    chat = Conversation(for_inference(ckpt.model), ckpt.tokenizer, ChatTemplate.find(path),
                        Settings(6, greedy=True))
    prompt = chat.template.encode(ckpt.tokenizer, [{"role": "user", "content": "To be?"}])
    with torch.no_grad():
        assert int(ckpt.model(torch.tensor([prompt]))[0, -1].argmax()) >= ckpt.vocab
    reply = chat.say("To be?")
    assert reply.finish_reason in ("stop", "length") and reply.text


@pytest.fixture(scope="module")
def llama_parts(tmp_path_factory):
    path = chat_directory(tmp_path_factory.mktemp("c") / "llama", "chatml", llama=True)
    ckpt = load_checkpoint(path)
    return for_inference(ckpt.model), ckpt.tokenizer, ChatTemplate.find(path)


@pytest.mark.parametrize("settings", [Settings(10, greedy=True),
                                      Settings(10, seed=4, temperature=0.8, top_k=40)])
def test_turns_from_the_kept_prefix_equal_turns_prefilled_whole(llama_parts, settings):
    """Four turns on a tiny random Llama: the replies with prefix reuse are the replies
    prefilling every turn's conversation whole, id by id; and fewer positions are prefilled
    (those the store reused)."""
    said = ["To be, or not to be?", "That is the question.", "A stitch in time?",
            "All that glitters is not gold."]
    kept = Conversation(*llama_parts, settings, system="You are a helpful assistant.")
    whole = Conversation(*llama_parts, settings, system="You are a helpful assistant.",
                         prefix_cache_mb=None)
    for text in said:
        reply = kept.say(text)
        assert reply.ids == whole.say(text).ids and reply.ids
    assert kept.messages == whole.messages
    assert kept.prefixes.hits == len(said) - 1 and kept.prefixes.reused > 100
    assert whole.prefilled - kept.prefilled == kept.prefixes.reused


def test_one_rows_serves_every_turn_and_an_interrupted_reply_leaves_it(llama_parts, python_sigint,
                                                                        monkeypatch):
    """The conversation's ``Rows`` (its cache allocated once) serves each turn; a reply
    interrupted mid-way leaves no row running in it, and the next turn's reply is the one a
    conversation prefilling whole gives after the same history."""
    kept = Conversation(*llama_parts, Settings(8, greedy=True))
    rows = kept.rows
    interrupt_step(monkeypatch, at=3)
    assert kept.say("To be?").finish_reason == INTERRUPTED
    monkeypatch.undo()
    assert kept.rows is rows and rows.running == []
    whole = Conversation(*llama_parts, Settings(8, greedy=True), prefix_cache_mb=None)
    whole.messages = list(kept.messages)
    reply = kept.say("Again?")
    assert reply.ids == whole.say("Again?").ids and reply.ids
    assert kept.rows is rows and rows.running == [] and kept.prefixes.hits == 1
