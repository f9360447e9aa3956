"""Stage metrics behind a small Protocol; the Prometheus adapter is the production one.

Labels are the stage and the topic only: never a dispute, order or customer id.
"""

from __future__ import annotations

from typing import Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from refund_bench.retry import OnRetry, retry_kind

CounterName = Literal[
    "records_in",
    "records_out",
    "records_dlq",
    "transactions",
    "retries",
    "llm_calls",
    "state_expired",
    "facts_conflicting",
]
HistogramName = Literal["batch_seconds", "handler_seconds", "batch_records"]
GaugeName = Literal["inflight_handlers", "inflight_llm_calls", "assigned_partitions", "state_keys"]


class Metrics(Protocol):
    def incr(
        self, name: CounterName, value: float = 1.0, *, topic: str = "", kind: str = ""
    ) -> None:
        """Add ``value`` to counter ``name``."""
        ...

    def observe(self, name: HistogramName, value: float) -> None: ...

    def set(self, name: GaugeName, value: float) -> None: ...


class NullMetrics:
    """Metrics that go nowhere (for tools and tests that do not scrape)."""

    def incr(
        self, name: CounterName, value: float = 1.0, *, topic: str = "", kind: str = ""
    ) -> None:
        pass

    def observe(self, name: HistogramName, value: float) -> None:
        pass

    def set(self, name: GaugeName, value: float) -> None:
        pass


_COUNTER_DOCS: dict[CounterName, str] = {
    "records_in": "Input records consumed",
    "records_out": "Output records produced",
    "records_dlq": "Input records sent to the dead-letter topic",
    "transactions": "Transactions (or at-least-once batches) by result",
    "retries": "Retries of transient failures",
    "llm_calls": "LLM calls by kind (made, served from cache, refused by the endpoint, failed"
    " alone) and answers made that could not be read (unreadable)",
    "state_expired": "State-store keys deleted because they outlived the store's retention",
    "facts_conflicting": (
        "Rows the recorder left out because their key holds a row stating other facts (kind:"
        " the table); the stored row stands"
    ),
}
_HISTOGRAM_DOCS: dict[HistogramName, tuple[str, tuple[float, ...]]] = {
    "batch_seconds": (
        "Wall time of one batch/transaction",
        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    ),
    "handler_seconds": (
        "Wall time of one handler call",
        (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    ),
    "batch_records": ("Records per batch", (1, 10, 50, 100, 250, 500, 1000, 2000, 5000)),
}
_GAUGE_DOCS: dict[GaugeName, str] = {
    "inflight_handlers": "Handler calls in flight (async stages)",
    "inflight_llm_calls": "LLM requests in flight, rate-limit waits and backoff included",
    "assigned_partitions": "Input partitions assigned to this instance",
    "state_keys": "Keys held in the stage's state store, over its owned partitions",
}


class PrometheusMetrics:
    """Prometheus metrics for one stage, registered in ``registry`` (never the global one)."""

    def __init__(self, stage: str, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._stage = stage
        self._counters = {
            name: Counter(
                f"refund_bench_{name}", doc, ["stage", "topic", "kind"], registry=registry
            )
            for name, doc in _COUNTER_DOCS.items()
        }
        self._histograms = {
            name: Histogram(
                f"refund_bench_{name}", doc, ["stage"], buckets=buckets, registry=registry
            )
            for name, (doc, buckets) in _HISTOGRAM_DOCS.items()
        }
        self._gauges = {
            name: Gauge(f"refund_bench_{name}", doc, ["stage"], registry=registry)
            for name, doc in _GAUGE_DOCS.items()
        }
        # Labelled children, looked up once: ``labels()`` costs more than the update itself,
        # and the judge updates metrics several times per LLM call.
        self._counter_children: dict[tuple[CounterName, str, str], Counter] = {}
        self._histogram_children = {
            name: metric.labels(stage) for name, metric in self._histograms.items()
        }
        self._gauge_children = {name: metric.labels(stage) for name, metric in self._gauges.items()}

    def incr(
        self, name: CounterName, value: float = 1.0, *, topic: str = "", kind: str = ""
    ) -> None:
        key = (name, topic, kind)
        child = self._counter_children.get(key)
        if child is None:
            child = self._counters[name].labels(self._stage, topic, kind)
            self._counter_children[key] = child
        child.inc(value)

    def observe(self, name: HistogramName, value: float) -> None:
        self._histogram_children[name].observe(value)

    def set(self, name: GaugeName, value: float) -> None:
        self._gauge_children[name].set(value)


def retry_counter(metrics: Metrics) -> OnRetry:
    """An ``on_retry`` that counts each retried failure in ``retries`` by what failed."""
    return lambda exc: metrics.incr("retries", kind=retry_kind(exc))
