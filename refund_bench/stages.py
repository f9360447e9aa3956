"""What each stage reads and writes in Kafka: one table, from which the stages take their
inputs and outputs (:meth:`refund_bench.runtime.StageSpec.of`) and the Kafka access rules are
made (:mod:`refund_bench.kafka_acls`), so a stage can never need a topic its rules leave out.

Besides its inputs and outputs a stage writes the dead-letter topic of each input, and a
stateful stage reads and writes its store's changelog. Its consumer group is its name, and
its transactional ids begin with ``<name>-`` (``StageSettings.instance_id``).
"""

from __future__ import annotations

from dataclasses import dataclass

from refund_bench import topics as t
from refund_bench.topics import Topic, changelog_topic


@dataclass(frozen=True)
class StageTopics:
    name: str
    inputs: tuple[Topic, ...]
    outputs: tuple[Topic, ...]
    store: str | None = None

    @property
    def changelog(self) -> str | None:
        """The compacted topic of the stage's state store, if it has one."""
        return None if self.store is None else changelog_topic(self.name, self.store)

    @property
    def dead_letters(self) -> tuple[Topic, ...]:
        return tuple(topic.dlq for topic in self.inputs)


EXTRACTOR = StageTopics(
    "extractor",
    (t.COMPLAINT_RECEIVED,),
    (t.GRIEVANCE_EXTRACTED, t.REFUND_PRICED, t.COMPLAINT_EXTRACTED),
)
"""``refund.priced`` too: a complaint with no checkable grievance is priced at once; and one
``complaint.extracted`` per complaint, with the answers it was read from (for audit)."""
JUDGE = StageTopics("judge", (t.GRIEVANCE_EXTRACTED,), (t.RULING_CAST,))
TALLY = StageTopics("tally", (t.RULING_CAST,), (t.VERDICT_DECIDED,), store="benches")
PRICING = StageTopics(
    "pricing", (t.VERDICT_DECIDED, t.REVIEW_DECIDED), (t.REFUND_PRICED,), store="disputes"
)
SETTLER = StageTopics("settler", (t.REFUND_PRICED,), (t.REPLY_PUBLISHED, t.PAYOUT_REQUESTED))
PAYOUT = StageTopics("payout", (t.PAYOUT_REQUESTED,), (t.PAYOUT_COMPLETED, t.PAYOUT_FAILED))
RECORDER = StageTopics(
    "recorder",
    (
        t.GRIEVANCE_EXTRACTED,
        t.COMPLAINT_EXTRACTED,
        t.RULING_CAST,
        t.VERDICT_DECIDED,
        t.REFUND_PRICED,
        t.PAYOUT_COMPLETED,
        t.PAYOUT_FAILED,
        t.REVIEW_DECIDED,
    ),
    (),
)
"""Projects the flow into PostgreSQL; writes no topic but its inputs' dead letters."""

STAGES: tuple[StageTopics, ...] = (EXTRACTOR, JUDGE, TALLY, PRICING, SETTLER, PAYOUT, RECORDER)

API_WRITES: tuple[Topic, ...] = (
    t.COMPLAINT_RECEIVED,
    t.REVIEW_DECIDED,
    t.PAYOUT_FAILED,
    t.PAYOUT_COMPLETED,
)
"""What the API publishes: complaints (intake), reviewers' decisions (the desk), refunds Stripe
reports failed, and refunds it reports refunded after they waited for the customer (its
webhook). It reads no topic."""
