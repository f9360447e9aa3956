"""Prometheus metrics of the API, on a registry passed in (never the global one).

HTTP metrics are labelled by the matched route *template* (``/disputes/{dispute_id}``), method
and status, never by an id, a customer or any other request value.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "api_http_requests_total",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "api_http_request_duration_seconds",
            "HTTP request latency by route template and method.",
            ["route", "method"],
            registry=registry,
        )
        self.complaints = Counter(
            "api_complaints_total",
            "POST /complaints outcomes: accepted, replayed, conflict, rejected, unpublished, busy.",
            ["outcome"],
            registry=registry,
        )
        self.decisions = Counter(
            "api_review_decisions_total",
            "Review decisions by kind and outcome (recorded, conflict).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.published = Counter(
            "api_events_published_total",
            "Events acknowledged by Kafka.",
            ["topic"],
            registry=registry,
        )
        self.publish_failures = Counter(
            "api_publish_failures_total",
            "Events Kafka did not acknowledge in time.",
            ["topic"],
            registry=registry,
        )
        self.stripe_events = Counter(
            "api_stripe_events_total",
            "Stripe webhook events by outcome: recorded, already_failed, now_final,"
            " now_refunded, failed_again, refunded_after_settled, already_paid,"
            " refund_not_found, not_settled, unknown_round, other_refund, ignored, invalid,"
            " not_configured, stripe_unavailable, stripe_key_refused, own_refund_not_found,"
            " busy.",
            ["outcome"],
            registry=registry,
        )
        self.stripe_events_waiting = Gauge(
            "api_stripe_events_waiting",
            "Stripe webhook events waiting for one of the STRIPE_WEBHOOK_CONCURRENCY slots.",
            registry=registry,
        )
        self.logins = Counter(
            "api_desk_logins_total",
            "Review desk sign-ins by outcome.",
            ["outcome"],
            registry=registry,
        )


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpMetricsMiddleware:
    """Counts every HTTP request once, after routing has set ``scope["route"]``."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        started = time.perf_counter()

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path_format", None) or "unmatched"
            method = str(scope.get("method", ""))
            method = method if method in _METHODS else "OTHER"
            self._metrics.requests.labels(template, method, str(status["code"])).inc()
            self._metrics.latency.labels(template, method).observe(time.perf_counter() - started)
