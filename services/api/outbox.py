"""Publishing recorded review decisions as ``review.decided`` (the decisions table is the outbox).

A decision is published right after it is recorded; if Kafka does not acknowledge it (or every
publishing connection is busy), it stays ``published = false`` and :meth:`DecisionOutbox.drain`
publishes it at startup and then every ``OUTBOX_INTERVAL_S``. Publishing holds the row lock, so
a decision is not published twice by two workers; a crash after the acknowledgement and before
the commit re-publishes the same ``review_id``, which pricing applies at most once.
"""

from __future__ import annotations

import asyncio
import logging

from refund_bench import events as ev
from refund_bench import topics as t
from services.api.metrics import ApiMetrics
from services.api.publisher import Publisher, PublishError
from services.api.store import (
    DecisionRecord,
    Locked,
    PublishersBusy,
    Store,
    decision_event_fields,
)

log = logging.getLogger(__name__)


class DecisionOutbox:
    def __init__(self, store: Store, publisher: Publisher, metrics: ApiMetrics) -> None:
        self._store = store
        self._publisher = publisher
        self._metrics = metrics

    async def _send(self, locked: Locked[DecisionRecord]) -> None:
        event = ev.ReviewDecided.model_validate(decision_event_fields(locked.row))
        try:
            await self._publisher.publish(t.REVIEW_DECIDED, event.dispute_id, event.to_avro())
        except PublishError:
            self._metrics.publish_failures.labels(t.REVIEW_DECIDED.name).inc()
            raise
        self._metrics.published.labels(t.REVIEW_DECIDED.name).inc()
        await locked.mark_published()

    async def publish(self, review_id: str) -> bool:
        """Publish ``review_id`` unless it already was; False if Kafka did not acknowledge."""
        try:
            async with self._store.lock_decision(review_id) as locked:
                if not locked.row.published:
                    await self._send(locked)
        except (PublishError, PublishersBusy) as exc:
            log.warning("review decision %s not published yet: %s", review_id, exc)
            return False
        return True

    async def drain(self) -> int:
        """Publish every unpublished decision, oldest first; returns how many were published.

        Stops at the first one Kafka does not acknowledge (the next drain tries again).
        """
        count = 0
        while True:
            try:
                async with self._store.next_unpublished_decision() as locked:
                    if locked is None:
                        return count
                    await self._send(locked)
                    count += 1
            except (PublishError, PublishersBusy) as exc:
                log.warning("outbox: not published, retrying later: %s", exc)
                return count

    async def run(self, interval_s: float) -> None:
        """Drain every ``interval_s`` until cancelled; failures are logged, never fatal."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.drain()
            except Exception:
                log.exception("outbox drain failed; retrying in %.1fs", interval_s)
