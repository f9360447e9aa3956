"""Topics are created with the flow's partition count unless their spec names their own, on
the local broker (which topics name their own: ``tests/unit/test_topic_specs.py``)."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient

from refund_bench.topics import TopicSpec, ensure_topics


def test_a_spec_with_its_own_count_gets_it_and_the_others_the_flows(kafka: str) -> None:
    run = uuid.uuid4().hex[:12]
    own, flows = f"own-{run}", f"flows-{run}"
    created = ensure_topics(kafka, [TopicSpec(own, partitions=1), TopicSpec(flows)], partitions=3)
    assert sorted(created) == sorted([own, flows])
    meta = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10)
    assert {name: len(meta.topics[name].partitions) for name in (own, flows)} == {
        own: 1,
        flows: 3,
    }
