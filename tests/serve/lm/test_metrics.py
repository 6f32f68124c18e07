"""/metrics after known requests: outcomes, refusals by code, the latency histograms."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from serve.lm.lm_serving import LiveServer, tiny_lm


def scrape(server) -> dict[tuple, float]:
    text = httpx.get(server.url + "/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_outcomes_codes_and_histograms_count_what_was_asked():
    model, tokenizer = tiny_lm(context=256)
    with LiveServer(create_lm_app(from_lm(model, tokenizer, "tiny"))) as server:
        def post(body: dict) -> httpx.Response:
            return httpx.post(server.url + "/v1/completions", json=body, timeout=60)

        greedy = {"prompt": "To be", "max_tokens": 4, "temperature": 0}
        text = post(greedy).json()["choices"][0]["text"]  # length: 4 tokens, 3 gaps
        stopped = post(greedy | {"stop": text[:1]}).json()["choices"][0]
        assert stopped["finish_reason"] == "stop"  # stop: its first token
        assert post(greedy | {"n": 2}).status_code == 200  # length; 2 rows, one job
        assert post(greedy | {"temperature": 5}).status_code == 400
        assert post(greedy | {"model": "other"}).status_code == 404
        with httpx.stream("POST", server.url + "/v1/completions", timeout=60,
                          json={"prompt": "To be", "max_tokens": 200, "stream": True}) as s:
            next(s.iter_lines())  # its first token came: the client leaves
        deadline = time.monotonic() + 60
        while (m := scrape(server))[("decoderkit_requests_total",
                                     (("outcome", "cancelled"),))] < 1:
            assert time.monotonic() < deadline, "the cancelled request was never counted"
            time.sleep(0.05)
    outcome = {o: m[("decoderkit_requests_total", (("outcome", o),))]
               for o in ("stop", "length", "error", "cancelled")}
    assert outcome == {"stop": 1, "length": 2, "error": 0, "cancelled": 1}
    assert m[("decoderkit_http_errors_total", (("code", "400"),))] == 1
    assert m[("decoderkit_http_errors_total", (("code", "404"),))] == 1
    assert m[("decoderkit_time_to_first_token_seconds_count", ())] == 4
    assert m[("decoderkit_time_per_output_token_seconds_count", ())] >= 3 + 3
    assert m[("decoderkit_e2e_request_latency_seconds_count", ())] == 3
