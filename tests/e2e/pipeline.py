"""The whole pipeline on the real stack, for end-to-end tests: all stages as processes.

``Pipeline`` publishes complaints like an upstream service would, and reads each dispute's
story back from PostgreSQL (the recorder's projection) and the LLM stand-in's call counts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from refund_bench.db.orders import upsert_orders
from refund_bench.disputes import Story, load_story
from refund_bench.launcher import Launcher, start_at_the_end
from refund_bench.provision import provision_stack
from refund_bench.publish import ComplaintPublisher
from refund_bench.samples import SAMPLE_ORDERS, own_copy
from tests.conftest import Stack, unavailable
from tests.fakes.counting_proxy import CountingProxy, Forwarded

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@dataclass
class Pipeline:
    stack: Stack
    launcher: Launcher
    stripe: CountingProxy
    """What the stages sent Stripe (stripe-mock behind a proxy that records each request)."""

    def __post_init__(self) -> None:
        self._publisher = ComplaintPublisher(self.stack.kafka, self.stack.registry_url)

    @property
    def database_url(self) -> str:
        return self.stack.database_url

    def submit(
        self,
        order_id: str,
        customer_id: str,
        text: str,
        dispute_id: str | None = None,
        *,
        own_order: bool = True,
    ) -> str:
        """Publish complaint.received (as an upstream service does); returns the dispute id.

        With ``own_order``, a sample order's id is replaced by a fresh copy of that order (see
        :func:`own_copy`): one payment is refunded for one dispute only, and the tests share
        the database. ``own_order=False`` complains about ``order_id`` itself.
        """
        dispute_id = dispute_id or f"d-{uuid.uuid4().hex[:16]}"
        if own_order:
            order_id = self.own_order(order_id)
        self._publisher.publish(dispute_id, order_id, customer_id, text)
        self._publisher.flush()
        return dispute_id

    def own_order(self, order_id: str) -> str:
        """A fresh copy of the sample order ``order_id`` in the order store (its id), or
        ``order_id`` itself if it is no sample order."""
        sample = next((o for o in SAMPLE_ORDERS if o.order_id == order_id), None)
        if sample is None:
            return order_id
        copy = own_copy(sample, uuid.uuid4().hex[:12])
        with psycopg.connect(self.database_url) as conn:
            upsert_orders(conn, [copy])
        return copy.order_id

    def story(self, dispute_id: str) -> Story:
        with psycopg.connect(self.database_url) as conn:
            return load_story(conn, dispute_id)

    def wait_final(
        self,
        dispute_id: str,
        timeout_s: float = 90.0,
        round_: int | None = None,
        *,
        whole: bool = True,
    ) -> Story:
        """Poll PostgreSQL until the dispute's (latest or given) round is final (``whole``:
        :meth:`~refund_bench.disputes.Story.is_final`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            story = self.story(dispute_id)
            if story.is_final(round_, whole=whole):
                return story
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dispute_id} not final after {timeout_s}s: {story.priced}")
            time.sleep(0.2)

    def wait_for_payout(self, dispute_id: str, round_: int, timeout_s: float = 90.0) -> Story:
        deadline = time.monotonic() + timeout_s
        while True:
            story = self.story(dispute_id)
            if any(p["round"] == round_ for p in story.payouts):
                return story
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dispute_id}: no payout for round {round_} in {timeout_s}s")
            time.sleep(0.2)

    def wait_extraction(self, dispute_id: str, timeout_s: float = 90.0) -> dict[str, Any]:
        """Poll PostgreSQL until the dispute's ``complaint.extracted`` is recorded."""
        deadline = time.monotonic() + timeout_s
        while True:
            extraction = self.story(dispute_id).extraction
            if extraction is not None:
                return extraction
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dispute_id}: no extraction recorded in {timeout_s}s")
            time.sleep(0.2)

    def _standin(self) -> str:
        return self.stack.llm_base_url.removesuffix("/v1")

    def llm_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self._standin()}/stats", timeout=5).json()
        return stats

    def llm_calls(self, dispute_id: str) -> int:
        return int(self.llm_stats()["by_dispute"].get(dispute_id, 0))

    def set_llm_faults(self, **faults: Any) -> None:
        httpx.post(f"{self._standin()}/admin/faults", json=faults, timeout=5).raise_for_status()

    def stripe_refunds(self, payment_reference: str | None = None) -> list[Forwarded]:
        """The refund requests that reached Stripe (for one payment, or all)."""
        return [
            r
            for r in self.stripe.requests
            if (r.method, r.path) == ("POST", "/v1/refunds")
            and payment_reference in (None, r.form.get("payment_intent"))
        ]

    def restart(self, *, kill: bool = False) -> None:
        """Stop every service (SIGTERM, or SIGKILL with ``kill``) and start them again."""
        self.launcher.stop(kill=kill)
        self.launcher.start()
        self.launcher.wait_ready()


@pytest.fixture(scope="package")
def pipeline(stack: Stack) -> Iterator[Pipeline]:
    """The six stages and the recorder, started once for the end-to-end tests and stopped
    after the last of them (not kept running under the integration tests, which publish to the
    same topics)."""
    for address, part in (
        (stack.database_url, "PostgreSQL (DATABASE_URL)"),
        (stack.redis_url, "Redis (REDIS_URL)"),
        (stack.stripe_api_base, "stripe-mock (STRIPE_API_BASE)"),
        (stack.llm_base_url, "the LLM stand-in (LLM_BASE_URL)"),
    ):
        if not address:
            unavailable(f"{part}, which the pipeline needs,")
    provision_stack(stack.kafka, stack.database_url)
    # Records earlier runs left (decisions other tests published for disputes no stage knows)
    # are not this session's: the stages start after them.
    start_at_the_end(stack.kafka)
    # The stages reach stripe-mock through a proxy that records what they sent.
    stripe = CountingProxy(stack.stripe_api_base)
    launcher = Launcher(
        log_dir=ARTIFACTS / "pipeline-logs",
        env={
            "KAFKA_BOOTSTRAP_SERVERS": stack.kafka,
            "SCHEMA_REGISTRY_URL": stack.registry_url,
            "DATABASE_URL": stack.database_url,
            "REDIS_URL": stack.redis_url,
            "STRIPE_API_BASE": stripe.url,
            "LLM_BASE_URL": stack.llm_base_url,
            "LOG_LEVEL": "INFO",
            # Short enough that the stand-in's hung requests become client-side timeouts.
            "LLM_TIMEOUT_SECONDS": "5",
        },
    )
    with stripe:
        launcher.start()
        try:
            launcher.wait_ready()
            yield Pipeline(stack, launcher, stripe)
        finally:
            launcher.stop()
