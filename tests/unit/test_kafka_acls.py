"""The stage table and the access rules made from it: every topic named exists, and each
internal topic can be written only by the stage that owns it."""

from __future__ import annotations

from refund_bench import topics as t
from refund_bench.kafka_acls import API, Grant, Operation, Resource, client_grants
from refund_bench.stages import STAGES


def _topics(operation: Operation) -> dict[str, set[str]]:
    """Per topic: the clients that may do ``operation`` on it."""
    found: dict[str, set[str]] = {}
    for client, grants in client_grants().items():
        for grant in grants:
            if grant.resource is Resource.TOPIC and grant.operation is operation:
                found.setdefault(grant.name, set()).add(client)
    return found


def test_every_topic_a_client_may_use_is_one_the_flow_creates() -> None:
    created = {spec.name for spec in t.all_topic_specs()}
    named = set(_topics(Operation.READ)) | set(_topics(Operation.WRITE))
    assert named <= created
    assert {s.changelog for s in STAGES if s.changelog} == set(t.CHANGELOGS)
    assert {topic.dlq.name for s in STAGES for topic in s.inputs} <= created


def test_the_flow_creates_a_dead_letter_topic_for_each_topic_a_stage_reads_and_no_other() -> None:
    created = {spec.name for spec in t.all_topic_specs() if spec.name.endswith(".dlq")}
    assert created == {topic.dlq.name for s in STAGES for topic in s.inputs}


def test_each_flow_topic_is_written_by_its_producers_only() -> None:
    writers = _topics(Operation.WRITE)
    assert {topic.name: writers[topic.name] for topic in t.FLOW_TOPICS} == {
        "complaint.received": {API},
        "grievance.extracted": {"extractor"},
        "complaint.extracted": {"extractor"},
        "ruling.cast": {"judge"},
        "verdict.decided": {"tally"},
        "review.decided": {API},
        "refund.priced": {"extractor", "pricing"},
        "reply.published": {"settler"},
        "payout.requested": {"settler"},
        "payout.completed": {"payout", API},
        "payout.failed": {"payout", API},
    }


def test_a_changelog_is_its_stages_alone() -> None:
    readers, writers = _topics(Operation.READ), _topics(Operation.WRITE)
    for stage in STAGES:
        if stage.changelog:
            assert readers[stage.changelog] == writers[stage.changelog] == {stage.name}


def test_a_stage_uses_only_its_own_group_and_transactional_ids() -> None:
    for stage in STAGES:
        grants = client_grants()[stage.name]
        groups = {g.name for g in grants if g.resource is Resource.GROUP}
        assert groups == {stage.name} | (
            {f"{stage.changelog}.restore"} if stage.changelog else set()
        )
        ids = {g for g in grants if g.resource is Resource.TRANSACTIONAL_ID}
        assert ids == {
            Grant(Resource.TRANSACTIONAL_ID, f"{stage.name}-", op, prefixed=True)
            for op in (Operation.WRITE, Operation.DESCRIBE)
        }
    assert not any(g.resource is not Resource.TOPIC for g in client_grants()[API])
