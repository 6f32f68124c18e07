"""The LM server driven by the official ``openai`` client on 127.0.0.1: completions, streams,
stops, echo scoring, n, seeds and errors against the library's own generation."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from decoderkit.generation.lm.complete import generate
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from serve.lm.lm_serving import LiveServer, tiny_lm

openai = pytest.importorskip("openai")
NAME = "tiny"


@pytest.fixture(scope="module")
def served():
    model, tokenizer = tiny_lm()
    return from_lm(model, tokenizer, NAME)


@pytest.fixture(scope="module")
def client(served):
    app = create_lm_app(served, LMLimits(max_batch=16, max_queue=64, max_work_tokens=4096))
    with LiveServer(app) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                            timeout=120)


def test_greedy_completion_equals_generate(client, served):
    prompt = "To be, or not"
    ids = served.tokenizer.encode(prompt)
    want = generate(served.model, [ids], max_new_tokens=12, greedy=True,
                    eos_id=served.tokenizer.eos_id)[0]
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=12, temperature=0)
    (choice,) = out.choices
    assert choice.text == served.tokenizer.decode([t for t in want
                                                   if t != served.tokenizer.eos_id])
    assert choice.finish_reason in ("length", "stop")
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == len(want)


def test_stream_concatenates_to_the_completion(client):
    kwargs = dict(model=NAME, prompt="The quick", max_tokens=20, temperature=0.8, seed=5,
                  stop=[" the", "ss"])
    whole = client.completions.create(**kwargs).choices[0]
    chunks = list(client.completions.create(stream=True, **kwargs,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_a_stop_never_appears_even_across_tokens(client):
    free = client.completions.create(model=NAME, prompt="All that", max_tokens=24,
                                     temperature=0).choices[0].text
    assert len(free) > 8
    stop = free[4:7]
    out = client.completions.create(model=NAME, prompt="All that", max_tokens=24,
                                    temperature=0, stop=stop).choices[0]
    assert out.text == free[:free.index(stop)] and out.finish_reason == "stop"


def test_echo_logprobs_score_the_prompt_as_the_models_log_softmax(client, served):
    prompt = "A stitch in time saves nine."
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=0, echo=True,
                                    logprobs=2, temperature=0)
    (choice,) = out.choices
    ids = served.tokenizer.encode(prompt)
    with torch.inference_mode():
        logp = served.model(torch.tensor([ids]))[0].double().log_softmax(-1)
    want = [None] + [float(logp[t, ids[t + 1]]) for t in range(len(ids) - 1)]
    got = choice.logprobs.token_logprobs
    assert choice.text == prompt and got[0] is None and len(got) == len(ids)
    assert max(abs(a - b) for a, b in zip(got[1:], want[1:], strict=True)) <= 1e-4
    for token, top in zip(choice.logprobs.tokens[1:], choice.logprobs.top_logprobs[1:],
                          strict=True):
        assert token in top and 2 <= len(top) <= 3  # the 2 best and the chosen token


def test_n_and_seeds_give_reproducible_choices(client):
    kwargs = dict(model=NAME, prompt=["The", "To be"], max_tokens=8, n=3, seed=11,
                  temperature=1.0)
    a = client.completions.create(**kwargs)
    b = client.completions.create(**kwargs)
    assert [c.index for c in a.choices] == list(range(6))
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert len({c.text for c in a.choices}) > 1


def test_a_seeded_request_is_the_same_alone_and_among_15_others(client):
    kwargs = dict(model=NAME, prompt="All that glitters", max_tokens=24, seed=3,
                  temperature=0.9, top_p=0.9)
    alone = client.completions.create(**kwargs).choices[0].text

    def other(i: int) -> str:
        return client.completions.create(model=NAME, prompt=f"The {i}", max_tokens=16 + i,
                                         seed=i, temperature=1.2).choices[0].text

    with ThreadPoolExecutor(16) as pool:
        others = [pool.submit(other, i) for i in range(15)]
        mine = pool.submit(lambda: client.completions.create(**kwargs).choices[0].text)
        assert mine.result() == alone
        assert all(isinstance(o.result(), str) for o in others)


@pytest.mark.parametrize("kwargs, status, param", [
    (dict(max_tokens=-1), 400, "max_tokens"),
    (dict(temperature=3.0), 400, "temperature"),
    (dict(n=99), 400, "n"),
    (dict(logprobs=9), 400, "logprobs"),
    (dict(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    (dict(logit_bias={"x": 1}), 400, "logit_bias"),
    (dict(prompt=[[1, 2], [999999]]), 400, "prompt[1]"),
    (dict(prompt="word " * 80), 400, "prompt"),  # longer than the 64-token context
    (dict(max_tokens=60, n=16, prompt=["a"] * 8), 400, "max_tokens"),  # past --max-work-tokens
    (dict(model="gpt-9"), 404, "model"),
    (dict(extra_body={"best_of": 2}), 400, "best_of"),
])
def test_bad_requests_are_openai_errors_naming_the_field(client, kwargs, status, param):
    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(**(dict(model=NAME, prompt="The", max_tokens=4) | kwargs))
    err = caught.value
    assert err.status_code == status
    assert err.body["param"] == param and err.body["message"].startswith(param)
