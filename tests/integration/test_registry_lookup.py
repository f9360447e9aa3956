"""Looking up a writer schema: an id the registry does not have is bad input (the DLQ), once
it has been looked up again for a moment (a replica may not have a new schema yet); a registry
that cannot answer is an outage (retried, then raised), never a reason to dead-letter valid
records. Registering a schema at start is retried the same way."""

from __future__ import annotations

import json
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from prometheus_client import CollectorRegistry

from refund_bench.codec import RegistryFraming, load_schema
from refund_bench.errors import InvalidInput, TransientError
from refund_bench.retry import OnRetry, RetryPolicy
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from tests.fakes.registry_proxy import Answer, RegistryProxy, schema_id_of

pytestmark = pytest.mark.stack

QUICK = RetryPolicy(attempts=3, base_seconds=0.01, max_seconds=0.01, jitter_seconds=0.0)


def _framing(url: str, on_retry: OnRetry | None = None) -> RegistryFraming:
    return RegistryFraming(
        SchemaRegistryClient({"url": url, "max.retries": 0}),
        retry=QUICK,
        not_found_retry=QUICK,
        on_retry=on_retry,
    )


def _record(schema_id: int) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + b"\x02"


class _Failing(BaseHTTPRequestHandler):
    calls = 0

    def do_GET(self) -> None:
        type(self).calls += 1
        body = b'{"error_code": 50001, "message": "registry backend unavailable"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815 - the http.server name

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def failing_registry() -> Iterator[str]:
    _Failing.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _LaggingReplica(RegistryProxy):
    """The stack's registry behind a proxy that, like a replica a moment behind the one a
    schema was registered on, answers 404 to the first ``misses`` lookups of each schema id;
    it counts every lookup of an id."""

    def __init__(self, origin: str, misses: int) -> None:
        self.lookups: dict[int, int] = {}

        def before(path: str) -> Answer | None:
            schema_id = schema_id_of(path)
            if schema_id is None:
                return None
            seen = self.lookups[schema_id] = self.lookups.get(schema_id, 0) + 1
            if seen <= misses:
                return 404, b'{"error_code": 40403, "message": "Schema not found"}'
            return None

        super().__init__(origin, before)


@pytest.fixture
def lagging(registry_url: str) -> Iterator[_LaggingReplica]:
    with _LaggingReplica(registry_url, misses=QUICK.attempts - 1) as replica:
        yield replica


class _FailingOnce(RegistryProxy):
    """The stack's registry behind a proxy that answers 503 to the first request of each path
    (a registration, a lookup by id), as a registry in a brief outage."""

    def __init__(self, origin: str) -> None:
        self.failed: set[str] = set()

        def before(path: str) -> Answer | None:
            if path in self.failed:
                return None
            self.failed.add(path)
            return 503, b'{"error_code": 50001, "message": "registry backend unavailable"}'

        super().__init__(origin, before)


def test_each_registry_request_retried_is_counted_once_as_a_schema_registry_retry(
    registry_url: str,
) -> None:
    """A registration and a lookup, each failing once: each retry is counted where it happens,
    in ``refund_bench_retries_total{kind="schema_registry"}``, since neither runs inside the
    runtime's counted retry of a handler."""
    registry = CollectorRegistry()
    on_retry = retry_counter(PrometheusMetrics("extractor", registry))
    retries = {"stage": "extractor", "topic": "", "kind": "schema_registry"}
    contract = load_schema("bench.record")
    with _FailingOnce(registry_url) as proxy:
        header = _framing(proxy.url, on_retry).header_for(
            f"counted-{uuid.uuid4().hex[:8]}", contract
        )
        assert registry.get_sample_value("refund_bench_retries_total", retries) == 1
        reader = _framing(proxy.url, on_retry)  # knows no schema yet: looks the id up
        assert reader.writer_schema(header + b"\x02") == (contract, 5)
        assert len(proxy.failed) == 2, "one registration and one lookup failed"
    assert registry.get_sample_value("refund_bench_retries_total", retries) == 2


def test_an_unknown_schema_id_is_invalid_input(registry_url: str) -> None:
    with pytest.raises(InvalidInput, match="writer schema id 987654 not found"):
        _framing(registry_url).writer_schema(_record(987654))


def test_a_schema_a_replica_does_not_have_yet_is_found_when_looked_up_again(
    registry_url: str, lagging: _LaggingReplica
) -> None:
    """A publisher registered a new contract version on one replica; the replica this stage
    asks answers 404 for a moment. The record is read, not dead-lettered."""
    contract = load_schema("bench.record")
    schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
        f"lagging-{uuid.uuid4().hex[:8]}-value", Schema(json.dumps(contract), "AVRO")
    )
    framing = _framing(lagging.url)
    assert framing.writer_schema(_record(schema_id)) == (contract, 5)
    assert lagging.lookups[schema_id] == QUICK.attempts
    assert framing.writer_schema(_record(schema_id)) == (contract, 5)
    assert lagging.lookups[schema_id] == QUICK.attempts, "found, it is kept"


def test_an_unknown_schema_id_is_dead_lettered_after_its_lookups_and_then_at_once(
    lagging: _LaggingReplica,
) -> None:
    """The stack's registry has no id 987655 (the replica's 404s give way to the registry's
    own): its lookups run out and the record is bad input. A record naming it again within
    ``missing_for_s`` is dead-lettered without looking it up again; after that it is looked
    up anew."""
    now = [0.0]
    framing = _framing(lagging.url)
    framing.clock = lambda: now[0]
    with pytest.raises(InvalidInput, match=r"writer schema id 987655 not found: .*3 lookups"):
        framing.writer_schema(_record(987655))
    assert lagging.lookups[987655] == QUICK.attempts
    now[0] += framing.missing_for_s - 1
    with pytest.raises(InvalidInput, match=r"writer schema id 987655 not found .*ago"):
        framing.writer_schema(_record(987655))
    assert lagging.lookups[987655] == QUICK.attempts
    now[0] += 1
    with pytest.raises(InvalidInput, match="writer schema id 987655 not found: "):
        framing.writer_schema(_record(987655))
    assert lagging.lookups[987655] == 2 * QUICK.attempts


def test_a_writer_schema_that_is_no_avro_schema_is_invalid_input(registry_url: str) -> None:
    """A record framed with the id of a JSON Schema, or of an Avro schema that names a type
    from another subject (a schema reference, which the codec does not resolve), is bad input
    like an unknown id: dead-lettered, not a stop of the stage."""
    from refund_bench.codec import Codec
    from refund_bench.topics import COMPLAINT_RECEIVED

    client = SchemaRegistryClient({"url": registry_url})
    subject = f"not-avro-{uuid.uuid4().hex[:8]}-value"
    json_schema = Schema('{"type": "object", "properties": {"a": {"type": "string"}}}', "JSON")
    json_id = client.register_schema(subject, json_schema)
    codec = Codec(_framing(registry_url), {"complaint.received": COMPLAINT_RECEIVED.schema})
    with pytest.raises(InvalidInput, match=f"writer schema id {json_id} is a JSON schema"):
        codec.decode("complaint.received", _record(json_id))

    base = Schema('{"type": "record", "name": "B", "fields": [{"name": "a", "type": "string"}]}')
    client.register_schema(f"{subject}-base", base)
    version = client.get_latest_version(f"{subject}-base").version
    referring = Schema(
        '{"type": "record", "name": "R", "fields": [{"name": "b", "type": "B"}]}',
        "AVRO",
        [SchemaReference("B", f"{subject}-base", version)],
    )
    referring_id = client.register_schema(f"{subject}-referring", referring)
    header = _record(referring_id)[:5].hex()
    with pytest.raises(InvalidInput, match=f"named by header {header} cannot be read as Avro"):
        codec.decode("complaint.received", _record(referring_id))


def test_a_registry_answering_5xx_is_retried_then_transient(failing_registry: str) -> None:
    with pytest.raises(TransientError, match="schema registry"):
        _framing(failing_registry).writer_schema(_record(1))
    assert _Failing.calls == QUICK.attempts


def test_a_registry_nobody_listens_on_is_transient() -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TransientError, match="unreachable"):
        _framing(f"http://127.0.0.1:{port}").writer_schema(_record(1))


def test_registering_a_schema_through_an_outage_is_retried_then_transient(
    failing_registry: str,
) -> None:
    with pytest.raises(TransientError, match="schema registry"):
        _framing(failing_registry).header_for("t", load_schema("bench.record"))
    assert _Failing.calls == QUICK.attempts


def test_the_registry_refuses_a_complaint_schema_the_extractor_could_not_read(
    registry_url: str,
) -> None:
    """Upstream services write complaint.received and the extractor reads it: a publisher's new
    schema that drops a field the contract needs (which BACKWARD alone would allow: a new reader
    can skip an old field) is refused at registration, before any record is written with it."""
    client = SchemaRegistryClient({"url": registry_url})
    subject = f"test-{uuid.uuid4().hex}-value"
    contract = load_schema("complaint.received")
    client.register_schema(subject, Schema(json.dumps(contract), "AVRO"))
    without_text = {**contract, "fields": [f for f in contract["fields"] if f["name"] != "text"]}
    with_a_new_optional_field = {
        **contract,
        "fields": [
            *contract["fields"],
            {"name": "submitted_via", "type": "string", "default": "app"},
        ],
    }
    try:
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, Schema(json.dumps(without_text), "AVRO"))
        assert refused.value.http_status_code == 409
        assert client.register_schema(
            subject, Schema(json.dumps(with_a_new_optional_field), "AVRO")
        )
    finally:
        client.delete_subject(subject, permanent=False)
        client.delete_subject(subject, permanent=True)
