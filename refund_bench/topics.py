"""The topics of the flow, their contracts, and provisioning as code.

Every topic is keyed by dispute_id and has the same partition count, so all events of a
dispute meet in the same partition number of each; the one exception is an audit record no
stage joins, with one partition (:data:`COMPLAINT_EXTRACTED`). Each stage input has a
``<input>.dlq``; state stores have compacted ``<stage>.<store>.changelog`` topics. Creating
them twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

DLQ_SCHEMA = "dead_letter"
DEFAULT_PARTITIONS = 12


@dataclass(frozen=True)
class Topic:
    """A topic and the contract (``schemas/avro/<schema>.avsc``) of its values."""

    name: str
    schema: str
    partitions: int | None = None
    """Its own partition count; None: the flow's (``TOPIC_PARTITIONS``)."""

    @property
    def dlq(self) -> Topic:
        """The dead-letter topic for records of this topic that cannot be processed."""
        return Topic(f"{self.name}.dlq", DLQ_SCHEMA)


COMPLAINT_RECEIVED = Topic("complaint.received", "complaint.received")
GRIEVANCE_EXTRACTED = Topic("grievance.extracted", "grievance.extracted")
COMPLAINT_EXTRACTED = Topic("complaint.extracted", "complaint.extracted", partitions=1)
"""One partition: each partition an extractor's transaction writes costs the broker a produce
request, a check with the transaction coordinator and a commit marker. Spread over the flow's
twelve, this one record per complaint took about a twentieth of the pipeline's throughput on a
shared two-core machine (docs/benchmarks.md). No stage joins it: only the recorder reads it,
keeping the first record of each dispute, so an operator may add partitions later without
moving anything a stage relies on."""
RULING_CAST = Topic("ruling.cast", "ruling.cast")
VERDICT_DECIDED = Topic("verdict.decided", "verdict.decided")
REVIEW_DECIDED = Topic("review.decided", "review.decided")
REFUND_PRICED = Topic("refund.priced", "refund.priced")
REPLY_PUBLISHED = Topic("reply.published", "reply.published")
PAYOUT_REQUESTED = Topic("payout.requested", "payout.requested")
PAYOUT_COMPLETED = Topic("payout.completed", "payout.completed")
PAYOUT_FAILED = Topic("payout.failed", "payout.failed")

FLOW_TOPICS: tuple[Topic, ...] = (
    COMPLAINT_RECEIVED,
    GRIEVANCE_EXTRACTED,
    COMPLAINT_EXTRACTED,
    RULING_CAST,
    VERDICT_DECIDED,
    REVIEW_DECIDED,
    REFUND_PRICED,
    REPLY_PUBLISHED,
    PAYOUT_REQUESTED,
    PAYOUT_COMPLETED,
    PAYOUT_FAILED,
)

STAGE_INPUTS: tuple[Topic, ...] = (
    COMPLAINT_RECEIVED,
    GRIEVANCE_EXTRACTED,
    COMPLAINT_EXTRACTED,
    RULING_CAST,
    VERDICT_DECIDED,
    REVIEW_DECIDED,
    REFUND_PRICED,
    PAYOUT_REQUESTED,
    PAYOUT_COMPLETED,
    PAYOUT_FAILED,
)
"""The topics a stage reads (each has a ``<topic>.dlq``). ``reply.published`` is read by no
stage (analysts and the customer-facing services consume it), so it has no dead-letter topic."""

CHANGELOGS: tuple[str, ...] = ("tally.benches.changelog", "pricing.disputes.changelog")


CHANGELOG_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(3600 * 1000),
    "max.compaction.lag.ms": str(3600 * 1000),
}
"""A changelog is compacted, rolls its segment hourly and compacts a closed segment within the
hour. Compaction never touches the active segment (by default a week of writes; tally writes
twelve records per complaint), and by default waits until half the log is dirty; so a restore
reads the live keys plus about the last two hours of writes, instead of up to a week's."""


def min_insync_replicas(replication_factor: int) -> int:
    """2 from 3 replicas up (producers use acks=all: a write then survives the loss of one
    broker, and writes go on with one broker down); 1 below that."""
    return 2 if replication_factor >= 3 else 1


def changelog_topic(stage: str, store: str) -> str:
    """Name of the compacted changelog of ``store`` of ``stage``."""
    return f"{stage}.{store}.changelog"


def restore_group(changelog: str) -> str:
    """The consumer group id a stage restores ``changelog`` with (it joins no group and commits
    nothing, but a broker that enforces ACLs checks the id)."""
    return f"{changelog}.restore"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    compacted: bool = False
    partitions: int | None = None
    """Its own partition count; None: the count :func:`ensure_topics` is given."""


def all_topic_specs() -> list[TopicSpec]:
    """Every topic the flow needs: flow topics, one DLQ per stage input, the changelogs."""
    specs = [TopicSpec(t.name, partitions=t.partitions) for t in FLOW_TOPICS]
    specs += [TopicSpec(t.dlq.name) for t in STAGE_INPUTS]
    specs += [TopicSpec(name, compacted=True) for name in CHANGELOGS]
    return specs


def ensure_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec],
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: Mapping[str, str] | None = None,
) -> list[str]:
    """Create the topics that do not exist yet, with ``partitions`` each unless their spec
    names its own; returns the names created. Idempotent: a topic that exists is left as it is.
    ``security``: how to sign in (``StackSettings.kafka_security_config()``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(security or {})})
    new = [
        NewTopic(
            spec.name,
            num_partitions=spec.partitions or partitions,
            replication_factor=replication_factor,
            config={
                **(CHANGELOG_CONFIG if spec.compacted else {}),
                "min.insync.replicas": str(min_insync_replicas(replication_factor)),
            },
        )
        for spec in specs
    ]
    if not new:
        return []
    created: list[str] = []
    for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    _wait_for_metadata(admin, {t.topic: t.num_partitions for t in new}, timeout_s)
    return created


def _wait_for_metadata(admin: AdminClient, partitions: Mapping[str, int], timeout_s: float) -> None:
    """Block until the broker reports every topic named with at least its partitions, leaders
    elected."""
    import time

    deadline = time.monotonic() + timeout_s
    pending = set(partitions)
    while pending:
        meta = admin.list_topics(timeout=timeout_s)
        for name in list(pending):
            topic = meta.topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) >= partitions[name]
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"topics not ready after {timeout_s}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
