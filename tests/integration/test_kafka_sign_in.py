"""Signing in to Kafka: the services' ``KAFKA_SECURITY_PROTOCOL`` settings against the local
broker's SASL listener (``stack/kafka/server.properties``), with PLAIN and SCRAM-SHA-512.

That listener speaks only SASL: a client that dropped the settings on the way would speak
plaintext to it and get nothing. Records are produced and read back on the plain listener, so
each test shows what the signed-in client did.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pydantic import SecretStr

from refund_bench import topics as t
from refund_bench.codec import Codec, Framing
from refund_bench.config import StageSettings
from refund_bench.runtime.runner import StageRunner
from refund_bench.runtime.selftest import passthrough_spec
from refund_bench.service import runtime_config
from refund_bench.topics import TopicSpec, ensure_topics
from services.api.publisher import KafkaPublisher
from tests.conftest import Stack, TopicFactory
from tests.integration.conftest import SASL_PASSWORD, SASL_USERNAME
from tests.kafka_helpers import StageThread, bench_codec, produce_values, read_committed

pytestmark = pytest.mark.stack

USERNAME, PASSWORD = SASL_USERNAME, SASL_PASSWORD


def signed_in(address: str, password: str = PASSWORD, mechanism: str = "PLAIN") -> StageSettings:
    """A stage's settings as its environment would give them on a cluster with SASL."""
    return StageSettings(
        kafka_bootstrap_servers=address,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username=USERNAME,
        kafka_sasl_password=SecretStr(password),
    )


@pytest.fixture(scope="module")
def scram_user(stack: Stack) -> None:
    """SCRAM-SHA-512 credentials for the test user, as a cluster's operator adds them (Strimzi's
    User Operator does the same for each KafkaUser). Upserted: a second run changes nothing."""
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    upsert = UserScramCredentialUpsertion(
        USERNAME, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result()


@pytest.fixture(params=["PLAIN", "SCRAM-SHA-512"])
def mechanism(request: pytest.FixtureRequest) -> str:
    """PLAIN, and SCRAM-SHA-512: what the manifests use (Strimzi's KafkaUsers)."""
    if request.param.startswith("SCRAM"):
        request.getfixturevalue("scram_user")
    return str(request.param)


def test_a_stage_signed_in_with_sasl_consumes_and_produces_exactly_once(
    stack: Stack, framing: Framing, new_topic: TopicFactory, sasl_bootstrap: str, mechanism: str
) -> None:
    source, sink = new_topic("sasl-in", partitions=2), new_topic("sasl-out", partitions=2)
    codec = bench_codec(framing, source, sink)
    records = [(f"k{i}", {"id": f"r{i}", "seq": i, "payload": "x"}) for i in range(20)]
    produce_values(stack.kafka, source, records, codec)

    group = f"sasl-{uuid.uuid4().hex[:8]}"
    config = runtime_config(signed_in(sasl_bootstrap, mechanism=mechanism), group)
    assert PASSWORD not in repr(config)
    stage = StageThread(StageRunner(passthrough_spec(group, source, sink), config, framing)).start()
    try:
        out = read_committed(
            stack.kafka,
            sink,
            until=lambda rs: len(rs) >= len(records),
            timeout_s=60,
            settle_s=1.0,
            decode=lambda raw: codec.decode(sink, raw),
        )
    finally:
        assert stage.stop() is None
    assert sorted(r.value["seq"] for r in out) == list(range(len(records)))


def test_provisioning_signs_in_and_a_wrong_password_is_refused(
    stack: Stack, sasl_bootstrap: str, mechanism: str
) -> None:
    name = f"sasl-topic-{uuid.uuid4().hex[:12]}"
    wrong = signed_in(sasl_bootstrap, "not-the-password", mechanism).kafka_security_config()
    with pytest.raises((KafkaException, TimeoutError)):
        ensure_topics(sasl_bootstrap, [TopicSpec(name)], 1, timeout_s=5.0, security=wrong)
    assert name not in _topics(stack.kafka)

    right = signed_in(sasl_bootstrap, mechanism=mechanism).kafka_security_config()
    assert ensure_topics(sasl_bootstrap, [TopicSpec(name)], 1, security=right) == [name]
    assert name in _topics(stack.kafka)


def test_the_api_publishes_signed_in(
    stack: Stack, framing: Framing, new_topic: TopicFactory, sasl_bootstrap: str
) -> None:
    topic = t.Topic(new_topic("sasl-api", partitions=1), "bench.record")
    codec = Codec(framing, {topic.name: topic.schema})
    publisher = KafkaPublisher(
        sasl_bootstrap,
        codec,
        timeout_s=10.0,
        security=signed_in(sasl_bootstrap).kafka_security_config(),
    )
    publisher.start()
    try:

        async def publish() -> None:
            await publisher.check(5.0)
            await publisher.publish(topic, "k1", {"id": "r1", "seq": 1, "payload": "signed"})

        asyncio.run(publish())
    finally:
        publisher.close()
    [record] = read_committed(
        stack.kafka,
        topic.name,
        until=lambda rs: len(rs) >= 1,
        timeout_s=30,
        decode=lambda raw: codec.decode(topic.name, raw),
    )
    assert record.value["payload"] == "signed"


def _topics(kafka: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics)
