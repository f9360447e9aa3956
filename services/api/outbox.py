"""Publishing rows the API recorded (the tables are the outboxes): review decisions as
``review.decided``, refunds Stripe reported failed as ``payout.failed``, refunds it reported
refunded after a wait for the customer as ``payout.completed``.

A row is published right after it is recorded; if Kafka does not acknowledge it (or every
publishing connection is busy), it stays ``published = false`` and :meth:`Outbox.drain`
publishes it at startup and then every ``OUTBOX_INTERVAL_S``. Publishing holds the row lock, so
a row is not published twice by two workers; a crash after the acknowledgement and before the
commit re-publishes the same row, which its consumers apply at most once (pricing by
``review_id``, the recorder by dispute, round and revision).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from refund_bench import events as ev
from refund_bench import topics as t
from services.api.metrics import ApiMetrics
from services.api.publisher import Publisher, PublishError
from services.api.store import (
    DecisionRecord,
    Locked,
    OutboxTable,
    PublishersBusy,
    Store,
    decision_event_fields,
)

log = logging.getLogger(__name__)


class Publishable(Protocol):
    @property
    def published(self) -> bool: ...


R = TypeVar("R", bound=Publishable)


class Outbox(Generic[R]):
    """Publishes the rows of ``table`` to ``topic``; ``event`` gives a row's record key and
    Avro value."""

    def __init__(
        self,
        store: Store,
        table: OutboxTable[R],
        topic: t.Topic,
        event: Callable[[R], tuple[str, Mapping[str, Any]]],
        publisher: Publisher,
        metrics: ApiMetrics,
    ) -> None:
        self._store = store
        self._table = table
        self._topic = topic
        self._event = event
        self._publisher = publisher
        self._metrics = metrics

    @property
    def name(self) -> str:
        """The topic it publishes to."""
        return self._topic.name

    async def _send(self, locked: Locked[R]) -> None:
        topic = self._topic
        key, value = self._event(locked.row)
        try:
            await self._publisher.publish(topic, key, value)
        except PublishError:
            self._metrics.publish_failures.labels(topic.name).inc()
            raise
        self._metrics.published.labels(topic.name).inc()
        await locked.mark_published()

    async def publish(self, key: str) -> bool:
        """Publish row ``key`` unless it already was; False if Kafka did not acknowledge."""
        try:
            async with self._store.lock_row(self._table, key) as locked:
                if not locked.row.published:
                    await self._send(locked)
        except (PublishError, PublishersBusy) as exc:
            log.warning("%s %s not published yet: %s", self.name, key, exc)
            return False
        return True

    async def drain(self) -> int:
        """Publish every unpublished row, oldest first; returns how many were published.

        Stops at the first one Kafka does not acknowledge (the next drain tries again).
        """
        count = 0
        while True:
            try:
                async with self._store.next_unpublished(self._table) as locked:
                    if locked is None:
                        return count
                    await self._send(locked)
                    count += 1
            except (PublishError, PublishersBusy) as exc:
                log.warning("outbox %s: not published, retrying later: %s", self.name, exc)
                return count

    async def run(self, interval_s: float) -> None:
        """Drain at once (what an earlier process left), then every ``interval_s``, until
        cancelled; failures are logged, never fatal."""
        first = True
        while True:
            try:
                published = await self.drain()
                if first and published:
                    log.info("outbox %s: published %d left from before", self.name, published)
            except Exception:
                log.exception("outbox %s: drain failed; retrying in %.1fs", self.name, interval_s)
            first = False
            await asyncio.sleep(interval_s)


def review_decided(row: DecisionRecord) -> tuple[str, Mapping[str, Any]]:
    """The ``review.decided`` record of a recorded decision."""
    decided = ev.ReviewDecided.model_validate(decision_event_fields(row))
    return decided.dispute_id, decided.to_avro()
