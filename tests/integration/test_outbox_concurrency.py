"""Two API instances draining the decisions outbox at the same moment: the row one of them is
publishing is skipped by the other, so a decision is published once.

No API runs in this module: nothing else drains the outbox, so the test sets the moment where
both meet instead of hoping for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg_pool import AsyncConnectionPool

from refund_bench import topics as t
from refund_bench.codec import Codec
from refund_bench.topics import Topic
from services.api.metrics import ApiMetrics
from services.api.outbox import Outbox, review_decided
from services.api.publisher import KafkaPublisher, Publisher
from services.api.store import DECISIONS, DecisionRecord, Store
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    decoder,
    delete_dispute,
    event_codec,
    insert_unpublished_decision,
    seed_article_dispute,
)
from tests.kafka_helpers import read_to_end

pytestmark = pytest.mark.stack


class _Gate:
    """A real publisher whose publishes first wait for ``opened``: a drain holding a row's lock
    stops there, as one whose broker is slow to answer does."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    def start(self) -> None:
        self._publisher.start()

    async def publish(self, topic: Topic, key: str, value: Mapping[str, Any]) -> None:
        self.reached.set()
        await self.opened.wait()
        await self._publisher.publish(topic, key, value)

    async def check(self, timeout_s: float) -> None:
        await self._publisher.check(timeout_s)

    def close(self) -> None:
        self._publisher.close()


def _store(database_url: str) -> tuple[Store, list[AsyncConnectionPool[Any]]]:
    """A store on pools of its own, as each API instance has."""
    main = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    publishing = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    return Store(main, publishing, publish_wait_s=10.0), [main, publishing]


def _decisions(store: Store, publisher: Publisher) -> Outbox[DecisionRecord]:
    """The decisions outbox of an API instance on ``store``."""
    return Outbox(
        store,
        DECISIONS,
        t.REVIEW_DECIDED,
        review_decided,
        publisher,
        ApiMetrics(CollectorRegistry()),
    )


async def _drain_what_is_left(stack: Stack, codec: Codec) -> None:
    """Publish what an earlier run left unpublished: the drains below take the oldest row."""
    store, pools = _store(stack.database_url)
    publisher = KafkaPublisher(stack.kafka, codec)
    publisher.start()
    for pool in pools:
        await pool.open(wait=True, timeout=30)
    try:
        await asyncio.wait_for(_decisions(store, publisher).drain(), 60)
    finally:
        publisher.close()
        for pool in pools:
            await pool.close()


def test_two_instances_draining_at_once_publish_a_decision_once(stack: Stack) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    codec = event_codec(stack)
    asyncio.run(_drain_what_is_left(stack, codec))
    seed_article_dispute(stack.database_url, dispute_id)
    review_id = insert_unpublished_decision(stack.database_url, dispute_id)

    async def drain_together() -> tuple[int, int, int]:
        first_store, first_pools = _store(stack.database_url)
        second_store, second_pools = _store(stack.database_url)
        pools = [*first_pools, *second_pools]
        publisher = KafkaPublisher(stack.kafka, codec)
        publisher.start()
        gate = _Gate(publisher)
        for pool in pools:
            await pool.open(wait=True, timeout=30)
        try:
            first = _decisions(first_store, gate)
            second = _decisions(second_store, publisher)
            draining = asyncio.create_task(first.drain())
            # The first instance holds the row's lock and is publishing it.
            await asyncio.wait_for(gate.reached.wait(), 30)
            while_held = await asyncio.wait_for(second.drain(), 30)
            gate.opened.set()
            by_first = await asyncio.wait_for(draining, 30)
            after = await asyncio.wait_for(second.drain(), 30)
            return by_first, while_held, after
        finally:
            publisher.close()
            for pool in pools:
                await pool.close()

    try:
        by_first, while_held, after = asyncio.run(drain_together())
        # The second drain skipped the locked row (it did not wait for it, nor publish it),
        # and found it published once the first committed.
        assert (by_first, while_held, after) == (1, 0, 0)
        records = read_to_end(
            stack.kafka,
            t.REVIEW_DECIDED.name,
            timeout_s=60,
            decode=decoder(codec, t.REVIEW_DECIDED.name),
        )
        published = [r.value["review_id"] for r in records if r.value["dispute_id"] == dispute_id]
        assert published == [review_id]
        with psycopg.connect(stack.database_url) as conn:
            row = conn.execute(
                "SELECT published FROM review_decisions WHERE review_id = %s", (review_id,)
            ).fetchone()
        assert row == (True,)
    finally:
        delete_dispute(stack.database_url, dispute_id)
