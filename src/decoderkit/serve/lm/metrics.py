"""The LM server's Prometheus metrics (``prometheus_client``), one registry per app: the
worker's ``Counts`` read at each scrape, and what a user alerts on, as vLLM exports it:
requests by outcome, refusals by status code, and histograms of the time to the first token,
the time between tokens and the request latency (observed by the worker as it steps); prefix
reuse's hits, tokens reused and bytes held (as vLLM's prefix_cache_hits).

A request's outcome: ``stop`` (every choice ended at an end-of-text or a stop text),
``length`` (a choice ran out of ``max_tokens``), ``error`` (its step failed, or the worker
died), ``cancelled`` (its client left first). A response with a status of 400 or more (a
refusal before the request was queued, or an error after) counts in
``decoderkit_http_errors_total`` under its code.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

GAUGES = (("decoderkit_requests_running", "requests whose rows are being stepped", "running"),
          ("decoderkit_requests_waiting", "requests waiting to join", "waiting"),
          ("decoderkit_rows_running", "rows (prompt x n) being stepped", "rows_running"),
          ("decoderkit_rows_waiting", "rows waiting to join", "rows_waiting"),
          ("decoderkit_prefix_cache_bytes", "bytes of prompts' keys and values kept for "
           "prefix reuse", "prefix_bytes"))
COUNTERS = (("decoderkit_generated_tokens", "tokens generated", "generated"),
            ("decoderkit_steps", "batched steps run", "steps"),
            ("decoderkit_requests_dropped", "requests whose client left before the end",
             "dropped"),
            ("decoderkit_prefix_cache_hits", "rows started from a stored prompt prefix",
             "prefix_hits"),
            ("decoderkit_prefix_cache_reused_tokens", "prompt tokens not prefilled: their "
             "keys and values were stored", "prefix_reused"))
OUTCOMES = ("stop", "length", "error", "cancelled")
# vLLM's buckets (seconds)
FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0)


@dataclass
class Counts:
    """What /health and /metrics read."""

    running: int = 0  # requests with rows being stepped
    waiting: int = 0  # requests waiting to join
    rows_running: int = 0
    rows_waiting: int = 0
    generated: int = 0  # tokens generated so far
    steps: int = 0  # batched steps run
    dropped: int = 0  # requests whose client left before they finished
    prefix_hits: int = 0  # rows started from a stored prefix (``generation.lm.prefix``)
    prefix_reused: int = 0  # prompt positions those rows did not prefill
    prefix_bytes: int = 0  # the prefix store's keys and values


class Metrics:
    """A registry of ``counts`` (a collector) and the request metrics the worker observes."""

    CONTENT_TYPE = CONTENT_TYPE_LATEST

    def __init__(self):
        self.counts = Counts()
        self.registry = CollectorRegistry()
        self.registry.register(self)
        r = self.registry
        self.requests = Counter("decoderkit_requests", "requests ended, by outcome (stop, "
                                "length, error, cancelled)", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.requests.labels(outcome)  # each exported from the start, at 0
        self.http_errors = Counter("decoderkit_http_errors", "responses with a status of 400 "
                                   "or more, by code", ["code"], registry=r)
        self.first_token = Histogram("decoderkit_time_to_first_token_seconds", "from the "
                                     "request's arrival to its first token",
                                     buckets=FIRST_TOKEN_BUCKETS, registry=r)
        self.between_tokens = Histogram("decoderkit_time_per_output_token_seconds", "between "
                                        "a request's successive steps' tokens",
                                        buckets=TOKEN_BUCKETS, registry=r)
        self.latency = Histogram("decoderkit_e2e_request_latency_seconds", "from the "
                                 "request's arrival to its end (not cancelled ones)",
                                 buckets=LATENCY_BUCKETS, registry=r)

    def collect(self):
        for name, text, attr in GAUGES:
            yield GaugeMetricFamily(name, text, value=getattr(self.counts, attr))
        for name, text, attr in COUNTERS:  # exposed as NAME_total
            yield CounterMetricFamily(name, text, value=getattr(self.counts, attr))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


class CountErrors:
    """ASGI middleware: each response of status 400 or more counts in ``metrics.http_errors``
    under its code (whichever layer answered: the guards, the schema, the routes)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.metrics.http_errors.labels(str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)
