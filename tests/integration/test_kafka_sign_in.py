"""Signing in to Kafka: the services' ``KAFKA_SECURITY_PROTOCOL`` settings against the local
broker's SASL listener (``stack/kafka/server.properties``), with PLAIN and SCRAM-SHA-512, and
its TLS listener, which requires a client certificate (``KAFKA_SSL_*``).

Those listeners speak only SASL or TLS: a client that dropped the settings on the way would
speak plaintext to them and get nothing. Records are produced and read back on the plain
listener, so each test shows what the signed-in client did.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

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
from tests.conftest import Stack, TopicFactory, unavailable
from tests.integration.conftest import SASL_PASSWORD, SASL_USERNAME, sasl_settings
from tests.kafka_helpers import (
    StageThread,
    bench_codec,
    produce_values,
    read_committed,
    read_to_end,
    start_selftest,
    wait_consumed,
)

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def scram_user(stack: Stack) -> None:
    """SCRAM-SHA-512 credentials for the test user, as a cluster's operator adds them (Strimzi's
    User Operator does the same for each KafkaUser). Upserted: a second run changes nothing."""
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    upsert = UserScramCredentialUpsertion(
        SASL_USERNAME,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        SASL_PASSWORD.encode(),
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result()


@pytest.fixture(params=["PLAIN", "SCRAM-SHA-512"])
def mechanism(request: pytest.FixtureRequest) -> str:
    """PLAIN, and SCRAM-SHA-512: what the manifests use (Strimzi's KafkaUsers)."""
    if request.param.startswith("SCRAM"):
        request.getfixturevalue("scram_user")
    return str(request.param)


@dataclass(frozen=True)
class Tls:
    """The broker's TLS listener (client certificates required) and the local test files."""

    address: str
    files: Path
    key_password: str

    def settings(self, *, ca: bool = True, certificate: bool = True) -> StageSettings:
        """A stage's settings for it, as its environment would give them (mTLS)."""
        return StageSettings(
            kafka_bootstrap_servers=self.address,
            kafka_security_protocol="SSL",
            kafka_ssl_ca_location=str(self.files / "ca.crt") if ca else "",
            kafka_ssl_certificate_location=str(self.files / "client.crt") if certificate else "",
            kafka_ssl_key_location=str(self.files / "client.key") if certificate else "",
            kafka_ssl_key_password=SecretStr(self.key_password if certificate else ""),
        )


@pytest.fixture(scope="module")
def tls() -> Tls:
    address = os.environ.get("KAFKA_TLS_TEST_BOOTSTRAP_SERVERS", "")
    if not address:
        unavailable("the broker's TLS listener (KAFKA_TLS_TEST_BOOTSTRAP_SERVERS)")
    return Tls(
        address,
        Path(os.environ["KAFKA_TLS_TEST_DIR"]),
        os.environ["KAFKA_TLS_TEST_KEY_PASSWORD"],
    )


def test_a_stage_signed_in_with_sasl_consumes_and_produces_exactly_once(
    stack: Stack, framing: Framing, new_topic: TopicFactory, sasl_bootstrap: str, mechanism: str
) -> None:
    settings = sasl_settings(sasl_bootstrap, mechanism=mechanism)
    _runs_exactly_once(stack, framing, new_topic, settings, SASL_PASSWORD)


def test_a_stage_with_a_client_certificate_consumes_and_produces_exactly_once(
    stack: Stack, framing: Framing, new_topic: TopicFactory, tls: Tls
) -> None:
    _runs_exactly_once(stack, framing, new_topic, tls.settings(), tls.key_password)


@pytest.mark.parametrize(
    "missing", ["the brokers' CA", "a client certificate", "the key's password"]
)
def test_tls_without_the_ca_a_certificate_or_its_password_is_refused(
    stack: Stack, tls: Tls, missing: str
) -> None:
    name = f"tls-topic-{uuid.uuid4().hex[:12]}"
    if missing == "the brokers' CA":
        wrong = tls.settings(ca=False)
    elif missing == "a client certificate":
        wrong = tls.settings(certificate=False)
    else:
        wrong = tls.settings().model_copy(update={"kafka_ssl_key_password": SecretStr("nope")})
    with pytest.raises((KafkaException, TimeoutError)):
        ensure_topics(
            tls.address, [TopicSpec(name)], 1, timeout_s=5.0, security=wrong.kafka_security_config()
        )
    assert name not in _topics(stack.kafka)
    right = tls.settings().kafka_security_config()
    assert ensure_topics(tls.address, [TopicSpec(name)], 1, security=right) == [name]


RECORDS = 20
"""Records each pass-through check sends."""


def _topics_with_records(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> tuple[str, str, Codec]:
    """A new input topic holding :data:`RECORDS` records (``seq`` 0, 1, ...), a new output
    topic, and their codec."""
    source, sink = new_topic("sign-in", partitions=2), new_topic("sign-out", partitions=2)
    codec = bench_codec(framing, source, sink)
    records = [(f"k{i}", {"id": f"r{i}", "seq": i, "payload": "x"}) for i in range(RECORDS)]
    produce_values(stack.kafka, source, records, codec)
    return source, sink, codec


def _seqs_out(stack: Stack, codec: Codec, sink: str, group: str, source: str) -> list[int]:
    """The ``seq`` of every committed output record, sorted, once there are :data:`RECORDS`
    and ``group`` has committed all of ``source``: a duplicate would show."""
    read_committed(stack.kafka, sink, until=lambda rs: len(rs) >= RECORDS, timeout_s=60)
    wait_consumed(stack.kafka, group, source, timeout_s=60)
    out = read_to_end(stack.kafka, sink, timeout_s=30, decode=partial(codec.decode, sink))
    return sorted(r.value["seq"] for r in out)


def _runs_exactly_once(
    stack: Stack,
    framing: Framing,
    new_topic: TopicFactory,
    settings: StageSettings,
    secret: str,
) -> None:
    """A stage built by the production ``runtime_config()`` from ``settings`` passes the
    records through exactly once; ``secret`` is not in its config's repr."""
    source, sink, codec = _topics_with_records(stack, framing, new_topic)
    group = f"sign-in-{uuid.uuid4().hex[:8]}"
    config = runtime_config(settings, group)
    assert secret not in repr(config)
    stage = StageThread(StageRunner(passthrough_spec(group, source, sink), config, framing)).start()
    try:
        seqs = _seqs_out(stack, codec, sink, group, source)
    finally:
        assert stage.stop() is None
    assert seqs == list(range(RECORDS))


def test_provisioning_signs_in_and_a_wrong_password_is_refused(
    stack: Stack, sasl_bootstrap: str, mechanism: str
) -> None:
    name = f"sasl-topic-{uuid.uuid4().hex[:12]}"
    wrong = sasl_settings(
        sasl_bootstrap, password="not-the-password", mechanism=mechanism
    ).kafka_security_config()
    with pytest.raises((KafkaException, TimeoutError)):
        ensure_topics(sasl_bootstrap, [TopicSpec(name)], 1, timeout_s=5.0, security=wrong)
    assert name not in _topics(stack.kafka)

    right = sasl_settings(sasl_bootstrap, mechanism=mechanism).kafka_security_config()
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
        security=sasl_settings(sasl_bootstrap).kafka_security_config(),
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


def test_the_selftest_stage_signs_in_from_the_services_settings(
    stack: Stack, framing: Framing, new_topic: TopicFactory, sasl_bootstrap: str
) -> None:
    """``python -m refund_bench.runtime.selftest``, pointed at the SASL listener with the
    services' sign-in variables, passes records through exactly once."""
    source, sink, codec = _topics_with_records(stack, framing, new_topic)
    group = f"selftest-{uuid.uuid4().hex[:8]}"
    sign_in = {
        "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": SASL_USERNAME,
        "KAFKA_SASL_PASSWORD": SASL_PASSWORD,
    }
    args = ("--input", source, "--output", sink, "--group", group, "--txn-id", f"{group}-0")
    proc = start_selftest(
        "passthrough",
        *args,
        kafka=sasl_bootstrap,
        registry_url=stack.registry_url,
        env=sign_in,
    )
    try:
        seqs = _seqs_out(stack, codec, sink, group, source)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert seqs == list(range(RECORDS))
