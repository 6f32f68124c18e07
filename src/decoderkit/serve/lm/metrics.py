"""The LM server's Prometheus metrics (``prometheus_client``): one registry per app, every
value read from the worker's ``Counts`` at each scrape."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from decoderkit.serve.lm.worker import Counts

GAUGES = (("decoderkit_requests_running", "requests whose rows are being stepped", "running"),
          ("decoderkit_requests_waiting", "requests waiting to join", "waiting"),
          ("decoderkit_rows_running", "rows (prompt x n) being stepped", "rows_running"),
          ("decoderkit_rows_waiting", "rows waiting to join", "rows_waiting"))
COUNTERS = (("decoderkit_generated_tokens", "tokens generated", "generated"),
            ("decoderkit_steps", "batched steps run", "steps"),
            ("decoderkit_requests_dropped", "requests whose client left before the end",
             "dropped"))


class Metrics:
    """A registry whose one collector reports ``counts``."""

    CONTENT_TYPE = CONTENT_TYPE_LATEST

    def __init__(self, counts: Counts):
        self.counts = counts
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self):
        for name, text, attr in GAUGES:
            yield GaugeMetricFamily(name, text, value=getattr(self.counts, attr))
        for name, text, attr in COUNTERS:  # exposed as NAME_total
            yield CounterMetricFamily(name, text, value=getattr(self.counts, attr))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
