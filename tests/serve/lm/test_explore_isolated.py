"""The explorer records on its own call, never on the model: its answer does not depend on the
forwards of the same model that run beside it (completions, other explorers)."""

from __future__ import annotations

import threading

import httpx
import torch

from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.explore import explore
from serve.lm.lm_serving import LiveServer, tiny_lm

IDS = [5, 17, 3, 99, 42]


def test_a_forward_inside_the_explorers_own_leaves_its_answer_alone():
    model, tokenizer = tiny_lm()
    alone = explore(model, tokenizer, IDS)
    nested = []

    def other_forward(module, args):  # another request's forward, while explore's runs
        if not nested:
            nested.append("running")
            model.features(torch.tensor([[1, 2, 3]]))

    hook = model.blocks.layers[0].register_forward_pre_hook(other_forward)
    try:
        beside = explore(model, tokenizer, IDS)
    finally:
        hook.remove()
    assert nested and len(beside["lens"]) == model.config.n_layers
    assert beside == alone


def test_concurrent_explorers_and_completions_each_get_what_a_lone_explore_gives():
    model, tokenizer = tiny_lm()
    with LiveServer(create_lm_app(from_lm(model, tokenizer, "tiny"))) as server:
        def post(path: str, body: dict) -> dict:
            r = httpx.post(server.url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        alone = post("/v1/explore", {"prompt": IDS})
        answers, errors = [], []

        def run(path: str, body: dict, times: int) -> None:
            try:
                for _ in range(times):
                    answer = post(path, body)
                    if path == "/v1/explore":
                        answers.append(answer)
            except Exception as err:  # noqa: BLE001 - the test reports it
                errors.append(err)

        threads = [threading.Thread(target=run, args=("/v1/explore", {"prompt": IDS}, 6))
                   for _ in range(3)]
        threads += [threading.Thread(target=run, args=(
            "/v1/completions", {"prompt": "To be", "max_tokens": 40, "n": 2}, 4))
            for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and len(answers) == 18
    assert len(alone["lens"]) == model.config.n_layers
    assert all(answer == alone for answer in answers)
