"""Prefix reuse in the LM server (the official ``openai`` client): requests sharing a system
prompt get the tokens and log-probabilities of the server with reuse off, exactly, and
/metrics counts the hits and the tokens reused; a LoRA adapter's rows never start from the
base's or another adapter's prefix (their keys differ)."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest

from decoderkit.generation.lm.prefix import PREFIX_BLOCK
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from serve.lm.lm_serving import TEXT, LiveServer, tiny_lm
from serve.lm.test_adapters import save_adapters
from serve.lm.test_metrics import scrape

openai = pytest.importorskip("openai")
NAME = "tiny"
LIMITS = LMLimits(max_batch=16, max_queue=64, max_work_tokens=8192)
SYSTEM = TEXT[:240]  # the shared start of every prompt
ASKED = ["To be, or not", "A stitch in", "The quick brown", "All that", "Not gold", "Nine"]


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                         timeout=120)


def ask(client, i: int, model: str = NAME):
    """Request i: greedy or seeded draws, with log-probs."""
    kwargs = dict(temperature=0) if i % 2 else dict(temperature=0.9, seed=5 + i)
    out = client.completions.create(model=model, prompt=SYSTEM + ASKED[i % len(ASKED)],
                                    max_tokens=10, logprobs=2, **kwargs)
    (choice,) = out.choices
    return choice.text, choice.logprobs.token_logprobs, choice.logprobs.top_logprobs


def answers(served) -> tuple[list, dict]:
    """The first request alone, then the others at once; and /metrics after."""
    with LiveServer(create_lm_app(served, LIMITS)) as live:
        client = client_of(live)
        first = ask(client, 0)
        with ThreadPoolExecutor(len(ASKED) - 1) as pool:
            rest = list(pool.map(lambda i: ask(client, i), range(1, len(ASKED))))
        return [first, *rest], scrape(live)


def test_requests_sharing_a_system_prompt_equal_the_server_without_reuse():
    model, tokenizer = tiny_lm(context=256)
    shared = len(tokenizer.encode_prompt(SYSTEM))
    assert shared >= 2 * PREFIX_BLOCK  # two blocks and more
    reused, metrics = answers(from_lm(copy.deepcopy(model), tokenizer, NAME))
    whole, off = answers(from_lm(model, tokenizer, NAME, prefix_cache_mb=None))
    assert reused == whole
    hits = metrics[("decoderkit_prefix_cache_hits_total", ())]
    tokens = metrics[("decoderkit_prefix_cache_reused_tokens_total", ())]
    assert hits == len(ASKED) - 1 and tokens >= hits * (shared - PREFIX_BLOCK)
    assert tokens % PREFIX_BLOCK == 0
    assert metrics[("decoderkit_prefix_cache_bytes", ())] > 0
    assert off[("decoderkit_prefix_cache_hits_total", ())] == 0


def test_an_adapters_rows_start_from_its_own_prefixes_alone(tmp_path):
    model, tokenizer = tiny_lm(context=256)
    dirs = save_adapters(tmp_path, model)
    order = [NAME, "a", "b", "a", NAME]

    def served(reuse: bool):
        return from_lm(copy.deepcopy(model), tokenizer, NAME, adapters=dirs,
                       prefix_cache_mb=1024 if reuse else None)

    got = {}
    for reuse in (True, False):
        with LiveServer(create_lm_app(served(reuse), LIMITS)) as live:
            got[reuse] = [ask(client_of(live), 1, m) for m in order]  # greedy, one prompt
            metrics = scrape(live)
        if reuse:
            assert metrics[("decoderkit_prefix_cache_hits_total", ())] == 2  # "a", the base
    assert got[True] == got[False]
    assert len({text for text, _, _ in got[True]}) == 3  # each model continues otherwise
