"""POST /v1/chat/completions driven by the official ``openai`` client on 127.0.0.1, on a
Hugging Face GPT-2 directory transformers wrote with a ChatML template: the prompt is
transformers' apply_chat_template ids (the usage counts them, greedy replies equal the
library's generation from them), replies stop at each end id, never show special tokens,
stream role first; malformed messages, the template's own exception, a looping template and
a model without a template are 400s naming the field."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from decoderkit.generation.lm.complete import generate
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_ctranslate2, from_lm
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.text.lm.chat import ChatTemplate, no_template
from serve.lm.lm_serving import LiveServer
from text.lm.chat_dirs import CHATML, HUNGRY, chat_directory

openai = pytest.importorskip("openai")
transformers = pytest.importorskip("transformers")
NAME = "chatml"
TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and not loop.first "
            "%}{{ raise_exception('a system message must come first') }}{% endif %}{% endfor %}"
            + CHATML)
CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "To be, or not to be?"},
        {"role": "assistant", "content": "That is the question."},
        {"role": "user", "content": [{"type": "text", "text": "All that glitters?"}]}]
LIMITS = LMLimits(max_batch=16, max_queue=64, max_work_tokens=4096)


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    """The ChatML directory; its generation_config.json ends at <|eot_id|> too (a second end
    of turn, as Llama 3's lists several)."""
    path = chat_directory(tmp_path_factory.mktemp("chat") / NAME, "chatml", template=TEMPLATE)
    hf = transformers.AutoTokenizer.from_pretrained(path)
    config = path / "generation_config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"eos_token_id": [
        hf.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>")]}))
    return path


@pytest.fixture(scope="module")
def served(directory):
    ckpt = load_checkpoint(directory)  # as serve loads it: its chat template and end ids
    return replace(from_lm(ckpt.model, ckpt.tokenizer, NAME), chat=ChatTemplate.find(directory),
                   generation=ckpt.generation)


@pytest.fixture(scope="module")
def client(served):
    with LiveServer(create_lm_app(served, LIMITS)) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                            timeout=120)


def reference_ids(directory) -> list[int]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    chat = [m | {"content": "All that glitters?"} if isinstance(m["content"], list) else m
            for m in CHAT]
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)


def test_greedy_reply_continues_transformers_prompt_ids(client, served, directory):
    ids = reference_ids(directory)
    end = served.eos_ids | served.chat.end_ids(served.tokenizer)
    want = generate(served.model, [ids], max_new_tokens=10, greedy=True)[0]
    want = want[:next((k for k, t in enumerate(want) if t in end), len(want))]
    out = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=10,
                                         temperature=0)
    (choice,) = out.choices
    assert out.object == "chat.completion" and out.usage.prompt_tokens == len(ids)
    assert choice.message.role == "assistant"
    assert choice.message.content == served.tokenizer.decode(want, skip_special=True)


@pytest.mark.parametrize("token", ["<|im_end|>", "<|endoftext|>", "<|eot_id|>"])
def test_a_reply_stops_at_each_end_id(client, served, token):
    tid = served.tokenizer.hf.token_to_id(token)
    out = client.chat.completions.create(model=NAME, messages=CHAT[1:2], max_tokens=5,
                                         logit_bias={str(tid): 100})
    (choice,) = out.choices
    assert choice.finish_reason == "stop" and choice.message.content == ""
    assert out.usage.completion_tokens == 1


def test_special_tokens_never_reach_the_message_and_a_special_stop_stops(client, served):
    start = served.tokenizer.hf.token_to_id("<|im_start|>")
    kwargs = dict(model=NAME, messages=CHAT[1:2], max_tokens=6, temperature=0)
    out = client.chat.completions.create(logit_bias={str(start): 100}, **kwargs).choices[0]
    assert out.finish_reason == "length" and out.message.content == ""  # 6 x <|im_start|>
    out = client.chat.completions.create(logit_bias={str(start): 100}, stop=["<|im_start|>"],
                                         **kwargs)
    assert out.choices[0].finish_reason == "stop" and out.usage.completion_tokens == 1


def test_stream_role_first_then_the_reply(client):
    kwargs = dict(model=NAME, messages=CHAT, max_completion_tokens=12, temperature=0.8,
                  seed=3, n=2)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs,
                                                 stream_options={"include_usage": True}))
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert mine[0].delta.role == "assistant"
        assert "".join(c.delta.content or "" for c in mine) == whole.choices[i].message.content
        assert mine[-1].finish_reason == whole.choices[i].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_logprobs_per_token(client):
    out = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=4,
                                         temperature=0, logprobs=True, top_logprobs=2)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens - (out.choices[0].finish_reason == "stop")
    for entry in content:
        assert len(entry.top_logprobs) == 2 and entry.logprob <= 0
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6  # greedy: the best


@pytest.mark.parametrize("messages, param", [
    ([], "messages"),
    ([{"content": "hi"}], "messages[0].role"),
    ([{"role": "tool", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": 3}], "messages[0].content"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "messages"),
])
def test_bad_messages_are_400_naming_the_field(client, messages, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=NAME, messages=messages, max_tokens=2)
    assert err.value.body["param"] == param
    if param == "messages" and messages:
        assert "a system message must come first" in err.value.body["message"]


def test_max_tokens_and_max_completion_tokens_must_agree(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=2,
                                       max_completion_tokens=3)
    assert err.value.body["param"] == "max_completion_tokens"


def test_no_template_a_looping_or_hungry_one_is_400_and_completions_still_work(served, directory):
    looping = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}"
                           "{% endfor %}{% endfor %}")
    hungry = ChatTemplate(HUNGRY)  # memory past its process's bound: a 400, never a 500
    # the looping one meets the step bound, or on a loaded machine the time bound first
    for chat, says in ((None, "no chat_template.jinja"), (looping, "steps|longer than 2.0 s"),
                       (hungry, "the chat template ran out of memory")):
        app = create_lm_app(replace(served, chat=chat, no_chat=no_template(directory)), LIMITS)
        with TestClient(app) as http:
            r = http.post("/v1/chat/completions", json={"messages": CHAT[1:2]})
            assert r.status_code == 400 and re.search(says, r.json()["error"]["message"]), \
                r.json()
            r = http.post("/v1/completions", json={"prompt": "To be", "max_tokens": 2})
            assert r.status_code == 200 and r.json()["choices"][0]["text"]


@pytest.mark.parametrize("engine", ["int8", "ctranslate2"])
def test_the_other_engines_chat_alike(served, directory, engine, tmp_path):
    ckpt = load_checkpoint(directory)
    if engine == "int8":
        other = from_lm(ckpt.model, ckpt.tokenizer, NAME, int8=True)
    else:
        converters = pytest.importorskip("ctranslate2.converters")
        converters.TransformersConverter(str(directory)).convert(str(tmp_path / "ct2"))
        config = tmp_path / "ct2" / "config.json"  # its converter writes null for a tokenizer
        settings = json.loads(config.read_text())  # without BOS and UNK, which its loader
        config.write_text(json.dumps(settings | {  # refuses: GPT-2's text in their place
            k: "<|endoftext|>" for k in ("bos_token", "unk_token") if settings[k] is None}))
        other = from_ctranslate2(tmp_path / "ct2", ckpt.model, ckpt.tokenizer, NAME, 1)
    with TestClient(create_lm_app(replace(other, chat=served.chat), LIMITS)) as http:
        r = http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 6,
                                                    "temperature": 0})
        assert r.status_code == 200, r.json()
        out = r.json()
        assert out["usage"]["prompt_tokens"] == len(reference_ids(directory))
        assert out["choices"][0]["message"]["role"] == "assistant"
        assert "<|" not in out["choices"][0]["message"]["content"]
        lines = http.post("/v1/chat/completions", json={
            "messages": CHAT, "max_tokens": 6, "temperature": 0, "stream": True}).text
        assert lines.count('"role": "assistant"') == 1 and lines.endswith("data: [DONE]\n\n")
