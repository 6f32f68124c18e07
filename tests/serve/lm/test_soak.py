"""A bounded soak of the LM server on 127.0.0.1: hundreds of requests of varied lengths,
streamed and not, some cancelled. Resident memory stays flat after the warm-up (a loose
bound), each token's text costs a bounded decode whatever the output's length, and the
prefills of every length make a bounded set of oneDNN kernels (structural checks, no timing)."""

from __future__ import annotations

import random
import resource
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

import decoderkit.nn.packing as packing
from decoderkit.generation.lm.stops import StopText
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from serve.lm.lm_serving import TEXT, LiveServer, tiny_lm

REQUESTS, WARM_UP, CLIENTS = 300, 100, 4
GROWTH_MB = 25  # resident memory the last requests may add to the warm-up's (loose)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_a_long_run_stays_bounded(monkeypatch):
    decodes, kernels, lock = [], set(), threading.Lock()
    push, rows_of = StopText.push, packing.kernel_rows

    def counted_push(self, token):  # the ids decoded for this one token
        before = self.decoded
        piece = push(self, token)
        with lock:
            decodes.append((len(self.ids), self.decoded - before))
        return piece

    def counted_rows(rows):
        kernels.add(rows_of(rows))
        return rows_of(rows)

    monkeypatch.setattr(StopText, "push", counted_push)
    monkeypatch.setattr(packing, "kernel_rows", counted_rows)
    model, tokenizer = tiny_lm(context=256)
    app = create_lm_app(from_lm(model, tokenizer, "tiny"), LMLimits(max_batch=16))
    rng = random.Random(0)
    # prompts of 1..131 tokens: with 120 new ones within the 256-token context (the server
    # refuses a prompt and max_tokens past it: serve.lm.limits.check_room)
    bodies = [{"prompt": TEXT[:rng.randint(1, 260)], "max_tokens": rng.choice((1, 8, 40, 120)),
               "stream": i % 3 == 0, "stop": rng.choice((None, "zq", ". T")),
               "seed": i} for i in range(REQUESTS)]
    with LiveServer(app) as server, httpx.Client(timeout=60) as client:
        def send(i: int) -> None:
            body = bodies[i]
            if body["stream"]:
                with client.stream("POST", server.url + "/v1/completions", json=body) as s:
                    for n, _ in enumerate(s.iter_lines()):
                        if i % 2 and n == 2:
                            break  # this client leaves mid-stream
            else:
                r = client.post(server.url + "/v1/completions", json=body)
                assert r.status_code == 200, r.text

        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(send, range(WARM_UP)))
            warm = rss_mb()
            list(pool.map(send, range(WARM_UP, REQUESTS)))
        grown = rss_mb() - warm
        metrics = httpx.get(server.url + "/metrics").text
    assert grown < GROWTH_MB, f"resident memory grew {grown:.0f} MiB after the warm-up"
    assert 'decoderkit_requests_total{outcome="cancelled"}' in metrics
    late = [d for n, d in decodes if n > 60]  # ids decoded per token: flat in the length
    early = [d for n, d in decodes if n <= 20]  # (decoding everything: 60+ against 1..20)
    assert late and sum(late) / len(late) <= 1.5 * sum(early) / len(early)
    assert len(kernels) <= 8 + packing.ROW_STEPS * 5  # rows up to 2^8: the context, 256
