"""The per-client access rules (:mod:`refund_bench.kafka_acls`) on the local broker, which
enforces ACLs on its SASL listener (``stack/kafka/server.properties``).

A stage runs on the runtime signed in as a user that has only the rules its stage table entry
makes, restarts and restores its state: the rules are enough. Each client of the flow, signed
in as its own user, may write only its own topics and read only its inputs in its own group:
the rules are no more. Writes into the flow's topics are made in transactions that are aborted,
so no stage ever reads them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from refund_bench import topics as t
from refund_bench.codec import Framing
from refund_bench.kafka_acls import (
    API,
    Grant,
    Operation,
    Resource,
    acl_bindings,
    apply_acls,
    client_grants,
    exact_filter,
    principal_filter,
    provision_grants,
    stage_grants,
    user_grants,
)
from refund_bench.runtime.runner import StageRunner
from refund_bench.runtime.selftest import counter_spec
from refund_bench.service import runtime_config
from refund_bench.stages import STAGES, StageTopics
from refund_bench.topics import TopicSpec, ensure_topics
from tests.conftest import Stack, TopicFactory
from tests.integration.conftest import SASL_ADMIN, sasl_settings
from tests.kafka_helpers import (
    StageThread,
    bench_codec,
    produce_values,
    read_committed,
    read_to_end,
)

pytestmark = pytest.mark.stack

PRINCIPAL_PREFIX = "User:refund-bench-"


def signed_in_as(user: str) -> dict[str, str]:
    return {**SASL_ADMIN, "sasl.username": f"refund-bench-{user}"}


@pytest.fixture(scope="module")
def flow_rules(sasl_bootstrap: str) -> str:
    """The flow's rules applied for the local per-client users (idempotent)."""
    assert apply_acls(sasl_bootstrap, PRINCIPAL_PREFIX, SASL_ADMIN) == (
        sum(len(grants) for grants in user_grants().values()),
        0,
    )
    return sasl_bootstrap


@pytest.fixture
def test_stage_rules(sasl_bootstrap: str) -> Iterator[Callable[[frozenset[Grant]], None]]:
    """Grants rules to ``refund-bench-acl-test`` for one test; removes them afterwards."""
    admin = AdminClient({"bootstrap.servers": sasl_bootstrap, **SASL_ADMIN})
    granted: list[AclBinding] = []

    def grant(grants: frozenset[Grant]) -> None:
        bindings = acl_bindings(f"{PRINCIPAL_PREFIX}acl-test", grants)
        for future in admin.create_acls(bindings).values():
            future.result()
        granted.extend(bindings)

    yield grant
    filters = [exact_filter(binding) for binding in granted]
    if filters:
        for future in admin.delete_acls(filters).values():
            future.result()


def test_the_provision_user_creates_the_topics_and_nothing_else(
    sasl_bootstrap: str, test_stage_rules: Callable[[frozenset[Grant]], None]
) -> None:
    """With the provision Job's rules for two new topics, its user creates them, and creating
    them again (the Job runs on every apply) is no error; a topic outside its rules it may not
    create, and it may not write the topics it made."""
    mine = [TopicSpec(f"provision-{uuid.uuid4().hex[:8]}"), TopicSpec(f"p-{uuid.uuid4().hex[:8]}")]
    test_stage_rules(provision_grants(mine))
    security = {**SASL_ADMIN, "sasl.username": "refund-bench-acl-test"}
    assert sorted(ensure_topics(sasl_bootstrap, mine, security=security)) == sorted(
        spec.name for spec in mine
    )
    assert ensure_topics(sasl_bootstrap, mine, security=security) == []
    with pytest.raises(KafkaException) as refused:
        ensure_topics(
            sasl_bootstrap, [TopicSpec(f"other-{uuid.uuid4().hex[:8]}")], security=security
        )
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    writer = Producer(
        {"bootstrap.servers": sasl_bootstrap, **security, "message.timeout.ms": 10000}
    )
    assert _delivery_errors(writer, [mine[0].name]) == {mine[0].name: "TOPIC_AUTHORIZATION_FAILED"}


def test_a_stateful_stage_runs_and_restores_on_no_more_than_its_rules(
    stack: Stack,
    framing: Framing,
    new_topic: TopicFactory,
    sasl_bootstrap: str,
    test_stage_rules: Callable[[frozenset[Grant]], None],
) -> None:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    source, sink = new_topic("acl-in", partitions=2), new_topic("acl-out", partitions=2)
    spec = counter_spec(name, source, sink)
    stage = StageTopics(name, spec.inputs, spec.outputs, spec.store)
    ensure_topics(
        stack.kafka,
        [TopicSpec(f"{source}.dlq"), TopicSpec(str(stage.changelog), compacted=True)],
        partitions=2,
    )
    test_stage_rules(stage_grants(stage))
    codec = bench_codec(framing, source, sink)
    settings = sasl_settings(sasl_bootstrap, user="refund-bench-acl-test")

    def run_until(total: int) -> list[Any]:
        """Every output once there are ``total``, the stage stopped: a duplicate would show."""
        runner = StageRunner(
            counter_spec(name, source, sink), runtime_config(settings, name), framing
        )
        thread = StageThread(runner).start()
        try:
            read_committed(stack.kafka, sink, until=lambda rs: len(rs) >= total, timeout_s=60)
        finally:
            assert thread.stop() is None
        return read_to_end(stack.kafka, sink, timeout_s=30, decode=partial(codec.decode, sink))

    first = [(f"k{i % 5}", {"id": f"a{i}", "seq": i, "payload": ""}) for i in range(10)]
    produce_values(stack.kafka, source, first, codec)
    assert len(run_until(10)) == 10
    # Restarted, the stage restores its counts from the changelog through its restore group.
    more = [(f"k{i}", {"id": f"b{i}", "seq": i, "payload": ""}) for i in range(5)]
    produce_values(stack.kafka, source, more, codec)
    out = run_until(15)
    # The second run's outputs, by their inputs' ids: a read returns the sink's two partitions
    # one after the other, not in the order the records were written.
    counts = {r.key: r.value["seq"] for r in out if r.value["id"].startswith("b")}
    assert counts == {f"k{i}": 3 for i in range(5)}


def _topics(client: str, operation: Operation) -> list[str]:
    """The topics ``client``'s rules allow ``operation`` on."""
    return sorted(
        g.name
        for g in client_grants()[client]
        if g.resource is Resource.TOPIC and g.operation is operation
    )


def _delivery_errors(producer: Producer, topics: list[str]) -> dict[str, str | None]:
    """Produce one record to partition 0 of each topic; each one's error code name, if any:
    reported on delivery, or by ``produce`` itself when the producer already knows from the
    topic's metadata that it may not write there."""
    errors: dict[str, str | None] = {}
    for topic in topics:
        try:
            producer.produce(
                topic,
                b"access check",
                key=b"acl-check",
                partition=0,
                on_delivery=lambda err, msg: errors.__setitem__(
                    str(msg.topic()), None if err is None else err.name()
                ),
            )
        except KafkaException as exc:
            errors[topic] = exc.args[0].name()
    producer.flush(30)
    return errors


CLIENTS = sorted(client_grants())


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_writes_its_own_topics_and_no_other(flow_rules: str, client: str) -> None:
    mine = _topics(client, Operation.WRITE)
    assert mine
    others = sorted({s.name for s in t.all_topic_specs()} - set(mine))
    conf: dict[str, Any] = {"bootstrap.servers": flow_rules, **signed_in_as(client)}
    # Refused writes, one topic at a time from an idempotent producer: nothing reaches a topic.
    checker = Producer({**conf, "enable.idempotence": True, "message.timeout.ms": 10000})
    for topic in others:
        assert _delivery_errors(checker, [topic]) == {topic: "TOPIC_AUTHORIZATION_FAILED"}
    if client == API:
        # Its producer commits what it writes, and the flow's stages would read it: what one
        # write needs is shown by test_an_idempotent_producer_needs_only_write_on_its_topics.
        return
    # Allowed writes in a transaction that is aborted: no stage reads them (read_committed).
    producer = Producer({**conf, "transactional.id": f"{client}-acl-check-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    assert _delivery_errors(producer, mine) == {topic: None for topic in mine}
    producer.abort_transaction(30)

    foreign = Producer({**conf, "transactional.id": f"not-{client}-{uuid.uuid4().hex}"})
    with pytest.raises(KafkaException) as refused_id:
        foreign.init_transactions(30)
    assert refused_id.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _fetch(address: str, client: str, group: str, topic: str) -> str:
    """Fetch partition 0 of ``topic`` from its end as ``client`` in ``group``: ``read`` when
    the broker serves it, else the error code name."""
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            **signed_in_as(client),
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.5):
                err = msg.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    return "read"
                return str(err.name())
        raise TimeoutError(f"{client}: no answer fetching {topic}")
    finally:
        consumer.close()


def _described(address: str, client: str, topic: str) -> str:
    """The broker's metadata of ``topic`` as ``client`` sees it: ``ok`` or the error name."""
    admin = AdminClient({"bootstrap.servers": address, **signed_in_as(client)})
    error = admin.list_topics(topic, timeout=30).topics[topic].error
    return "ok" if error is None else str(error.name())


def _offsets_of(address: str, client: str, group: str, topic: str) -> str:
    """Ask for ``group``'s committed offset as ``client``: ``ok`` or the error code name."""
    admin = AdminClient({"bootstrap.servers": address, **signed_in_as(client)})
    asked = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    try:
        for future in admin.list_consumer_group_offsets([asked], request_timeout=30).values():
            future.result()
    except KafkaException as exc:
        return str(exc.args[0].name())
    return "ok"


@pytest.mark.parametrize("stage", [s.name for s in STAGES])
def test_each_stage_reads_its_inputs_in_its_own_group_and_nothing_else(
    flow_rules: str, stage: str
) -> None:
    inputs = _topics(stage, Operation.READ)
    for topic in inputs:
        assert _fetch(flow_rules, stage, stage, topic) == "read", topic
    # Topics it writes: it may describe them, not read them.
    written = sorted(set(_topics(stage, Operation.WRITE)) - set(inputs))
    assert _fetch(flow_rules, stage, stage, written[0]) == "TOPIC_AUTHORIZATION_FAILED"
    unknown = sorted({s.name for s in t.all_topic_specs()} - set(inputs) - set(written))
    assert _described(flow_rules, stage, unknown[0]) == "TOPIC_AUTHORIZATION_FAILED"
    other = next(s.name for s in STAGES if s.name != stage)
    assert _offsets_of(flow_rules, stage, stage, inputs[0]) == "ok"
    assert _offsets_of(flow_rules, stage, other, inputs[0]) == "GROUP_AUTHORIZATION_FAILED"


def test_the_api_reads_nothing(flow_rules: str) -> None:
    assert _topics(API, Operation.READ) == []
    # It may describe the topics it writes, and has no consumer group to read them in.
    assert _fetch(flow_rules, API, "api", t.COMPLAINT_RECEIVED.name) == (
        "GROUP_AUTHORIZATION_FAILED"
    )
    assert _described(flow_rules, API, t.RULING_CAST.name) == "TOPIC_AUTHORIZATION_FAILED"


def test_an_idempotent_producer_needs_only_write_on_its_topics(
    new_topic: TopicFactory,
    sasl_bootstrap: str,
    test_stage_rules: Callable[[frozenset[Grant]], None],
) -> None:
    """The API's rules are Write and Describe on its topics, and no cluster-wide rule."""
    topic = new_topic("acl-api", partitions=1)
    test_stage_rules(
        frozenset(Grant(Resource.TOPIC, topic, op) for op in (Operation.WRITE, Operation.DESCRIBE))
    )
    producer = Producer(
        {
            "bootstrap.servers": sasl_bootstrap,
            **signed_in_as("acl-test"),
            "enable.idempotence": True,
            "message.timeout.ms": 10000,
        }
    )
    assert _delivery_errors(producer, [topic]) == {topic: None}


def _rules_of(admin: AdminClient, principal: str) -> set[tuple[object, ...]]:
    return {
        (b.restype, b.name, b.resource_pattern_type, b.operation, b.permission_type)
        for b in admin.describe_acls(principal_filter(principal)).result()
    }


def test_prune_removes_only_the_rules_a_client_no_longer_has(sasl_bootstrap: str) -> None:
    """A rule left from an older topic name goes; the current rules, and another principal's
    rule on the same topic, stay."""
    prefix = f"User:prune-{uuid.uuid4().hex[:8]}-"
    admin = AdminClient({"bootstrap.servers": sasl_bootstrap, **SASL_ADMIN})
    stale = Grant(Resource.TOPIC, "ruling.cast.v0", Operation.READ)
    stale_bindings = acl_bindings(f"{prefix}tally", [stale])
    deny = AclBinding(
        ResourceType.TOPIC,
        t.COMPLAINT_RECEIVED.name,
        ResourcePatternType.LITERAL,
        f"{prefix}tally",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    bystander = acl_bindings(f"User:bystander-{prefix[5:]}x", [stale])
    try:
        for future in admin.create_acls([*stale_bindings, deny, *bystander]).values():
            future.result()
        assert apply_acls(sasl_bootstrap, prefix, SASL_ADMIN).removed == 0
        assert len(_rules_of(admin, f"{prefix}tally")) == len(client_grants()["tally"]) + 2

        changes = apply_acls(sasl_bootstrap, prefix, SASL_ADMIN, prune=True)

        assert changes.removed == 1
        for client, grants in client_grants().items():
            kept = len(grants) + (client == "tally")  # the DENY rule stays
            assert len(_rules_of(admin, f"{prefix}{client}")) == kept, client
        tally_rules = _rules_of(admin, f"{prefix}tally")
        tally_topics = {name for _, name, *_ in tally_rules}
        assert "ruling.cast.v0" not in tally_topics
        assert t.RULING_CAST.name in tally_topics
        assert AclPermissionType.DENY in {permission for *_, permission in tally_rules}
        assert len(_rules_of(admin, bystander[0].principal)) == 1
        assert apply_acls(sasl_bootstrap, prefix, SASL_ADMIN, prune=True).removed == 0
    finally:
        principals = [*(f"{prefix}{client}" for client in user_grants()), bystander[0].principal]
        filters = [principal_filter(principal) for principal in principals]
        for future in admin.delete_acls(filters).values():
            future.result()
