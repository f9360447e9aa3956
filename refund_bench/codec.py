"""Avro codecs for Kafka values, from the ``.avsc`` contracts in ``schemas/avro/``.

Two wire formats sit behind one :class:`Codec` interface:

- :class:`RegistryFraming` — the Confluent wire format (magic byte 0, 4-byte schema id, Avro
  binary) with ids from a Confluent-compatible schema registry, so any downstream consumer with a
  standard deserializer can read the topics.
- :class:`FingerprintFraming` — Avro single-object encoding (``C3 01`` + CRC-64-AVRO fingerprint
  + Avro binary), for deployments without a registry. Readers resolve fingerprints against the
  local schema catalog.

Decoding always resolves the writer's schema against the reader's (the current contract), so
old records stay readable after a compatible schema change. Anything undecodable raises
:class:`~refund_bench.errors.InvalidInput`, which the runtime routes to the DLQ; a registry that
cannot be reached raises :class:`~refund_bench.errors.TransientError` after retries instead.
"""

from __future__ import annotations

import io
import json
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from refund_bench.errors import InvalidInput, TransientError, error_summary
from refund_bench.retry import OnRetry, RetryPolicy, SyncSleep

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "avro"

Schema = dict[str, Any]


@cache
def load_schema(name: str, schema_dir: Path = SCHEMA_DIR) -> Schema:
    """The parsed contract ``schemas/avro/<name>.avsc``."""
    path = schema_dir / f"{name}.avsc"
    try:
        raw: Schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise KeyError(f"no schema named {name!r} in {schema_dir}") from exc
    return raw


HISTORY_DIR = SCHEMA_DIR / "history"
"""Earlier versions of the contracts, ``history/<name>/<fingerprint>.avsc``: what a reader
without a registry needs to read records written before a compatible change
(``python -m refund_bench.schema_compat --write-history`` adds them from git)."""


@cache
def earlier_schemas(name: str, history_dir: Path = HISTORY_DIR) -> tuple[Schema, ...]:
    """Every earlier version of contract ``name`` kept in ``history_dir`` (read once, like
    :func:`load_schema`)."""
    return tuple(
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted((history_dir / name).glob("*.avsc"))
    )


def schema_names(schema_dir: Path = SCHEMA_DIR) -> list[str]:
    """Every contract in the schema folder, by name."""
    return sorted(p.stem for p in schema_dir.glob("*.avsc"))


class Framing(Protocol):
    """How the writer schema is identified on the wire."""

    def header_for(self, topic: str, schema: Schema) -> bytes:
        """Bytes to put before the Avro body of ``topic``'s records written with ``schema``."""
        ...

    def writer_schema(self, data: bytes) -> tuple[Schema, int]:
        """The writer's schema of ``data`` and where its Avro body starts."""
        ...

    def answers_offline(self, data: bytes) -> bool:
        """Whether :meth:`writer_schema` answers for ``data`` without asking a registry (it
        knows the writer schema, or the framing is malformed)."""
        ...


_SINGLE_OBJECT_MAGIC = b"\xc3\x01"


@dataclass
class FingerprintFraming:
    """Avro single-object encoding; writer schemas are looked up in ``known`` by fingerprint."""

    known: dict[bytes, Schema] = field(default_factory=dict)

    @staticmethod
    def fingerprint_of(schema: Schema) -> bytes:
        """The CRC-64-AVRO fingerprint of ``schema``'s canonical form, as it is on the wire."""
        canonical = to_parsing_canonical_form(fastavro.parse_schema(schema))
        return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))[::-1]

    def remember(self, schema: Schema) -> bytes:
        fp = self.fingerprint_of(schema)
        self.known.setdefault(fp, schema)
        return fp

    def header_for(self, topic: str, schema: Schema) -> bytes:
        return _SINGLE_OBJECT_MAGIC + self.remember(schema)

    def writer_schema(self, data: bytes) -> tuple[Schema, int]:
        if len(data) < 10 or data[:2] != _SINGLE_OBJECT_MAGIC:
            raise InvalidInput("not Avro single-object encoded (bad magic bytes)")
        schema = self.known.get(data[2:10])
        if schema is None:
            raise InvalidInput(
                f"unknown writer schema fingerprint {data[2:10].hex()}: not a version of this"
                " topic's contract in schemas/avro/ or its history"
            )
        return schema, 10

    def answers_offline(self, data: bytes) -> bool:
        return True


class RegistryClient(Protocol):
    """The part of ``confluent_kafka.schema_registry.SchemaRegistryClient`` the codec uses."""

    def register_schema(self, subject_name: str, schema: Any) -> int: ...

    def get_schema(self, schema_id: int) -> Any: ...


NOT_FOUND_RETRY = RetryPolicy(attempts=3, base_seconds=0.5, max_seconds=1.0, jitter_seconds=0.25)
"""How a writer schema id the registry does not have is looked up again: 3 lookups, 0.5 and 1 s
apart (plus up to 0.25 s each), about 2 s in all."""


@dataclass
class RegistryFraming:
    """Confluent wire format with subject ``<topic>-value`` (TopicNameStrategy)."""

    client: RegistryClient
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """For registering and looking up schemas: a registry outage is retried, then raised."""
    not_found_retry: RetryPolicy = NOT_FOUND_RETRY
    """A writer schema id the registry answers 404 for is looked up again this way before the
    record naming it is dead-lettered: a replica of a registry can lack, for a moment, a schema
    that was just registered on another (a publisher's new contract version)."""
    missing_for_s: float = 60.0
    """An id still not found after those lookups is taken as missing for this long: records
    naming it meanwhile are dead-lettered at once, so that a run of them (a publisher using
    another registry's ids, say) costs the wait once, not once per record."""
    sleep: SyncSleep = time.sleep
    """Between the lookups of an id not found (and of an outage's retries)."""
    on_retry: OnRetry | None = None
    """Told of each registry request that failed and is retried (``retry``), to count it
    (``refund_bench_retries_total{kind="schema_registry"}``). The lookups again of an id the
    registry answered 404 for are no failure of the registry and are not told."""
    clock: Callable[[], float] = time.monotonic
    _ids: dict[tuple[str, str], int] = field(default_factory=dict)
    _schemas: dict[int, Schema] = field(default_factory=dict)
    """Only schemas found: an id not found is looked up again at its next record (see
    ``missing_for_s``)."""
    _missing: dict[int, float] = field(default_factory=dict)
    """Ids not found, until when they are taken as missing (on ``clock``)."""

    def header_for(self, topic: str, schema: Schema) -> bytes:
        from confluent_kafka.schema_registry import Schema as RegistrySchema

        text = json.dumps(schema, sort_keys=True)
        key = (topic, text)
        schema_id = self._ids.get(key)
        if schema_id is None:
            registered = RegistrySchema(schema_str=text, schema_type="AVRO")
            schema_id = self.retry.run(
                lambda: _asked(lambda: self.client.register_schema(f"{topic}-value", registered)),
                sleep=self.sleep,
                on_retry=self.on_retry,
            )
            self._ids[key] = schema_id
            self._schemas[schema_id] = schema
        return b"\x00" + struct.pack(">I", schema_id)

    def writer_schema(self, data: bytes) -> tuple[Schema, int]:
        if len(data) < 5 or data[0] != 0:
            raise InvalidInput("not in the Confluent wire format (bad magic byte)")
        (schema_id,) = struct.unpack(">I", data[1:5])
        schema = self._schemas.get(schema_id)
        if schema is None:
            registered = self._lookup(schema_id)
            kind = registered.schema_type or "AVRO"
            if kind != "AVRO":
                raise InvalidInput(f"writer schema id {schema_id} is a {kind} schema, not Avro")
            try:
                schema = json.loads(registered.schema_str)
            except ValueError as exc:
                raise InvalidInput(f"writer schema id {schema_id} is not JSON: {exc}") from exc
            self._schemas[schema_id] = schema
        return schema, 5

    def answers_offline(self, data: bytes) -> bool:
        return len(data) < 5 or data[0] != 0 or struct.unpack(">I", data[1:5])[0] in self._schemas

    def _lookup(self, schema_id: int) -> Any:
        """The registered schema. An outage is retried (``retry``), then raised; an id the
        registry does not have (a 404) is looked up again (``not_found_retry``), then raises
        :class:`InvalidInput`, so that the record naming it is dead-lettered."""
        now = self.clock()
        if self._missing.get(schema_id, now) > now:
            raise InvalidInput(
                f"writer schema id {schema_id} not found (looked up less than"
                f" {self.missing_for_s:g} s ago)"
            )
        try:
            registered = self.not_found_retry.run(
                lambda: self.retry.run(
                    lambda: _asked(lambda: self._fetch(schema_id)),
                    sleep=self.sleep,
                    on_retry=self.on_retry,
                ),
                sleep=self.sleep,
                retry_on=(_SchemaNotFound,),
            )
        except _SchemaNotFound as exc:
            now = self.clock()
            if len(self._missing) >= 1024:  # bounded: forget those whose time is up, or else all
                self._missing = {i: until for i, until in self._missing.items() if until > now}
                if len(self._missing) >= 1024:
                    self._missing.clear()
            self._missing[schema_id] = now + self.missing_for_s
            lookups = max(1, self.not_found_retry.attempts)
            raise InvalidInput(f"{exc.reason} ({lookups} lookups)") from exc
        self._missing.pop(schema_id, None)
        return registered

    def _fetch(self, schema_id: int) -> Any:
        """The registered schema; :class:`_SchemaNotFound` when the registry has no such id."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return self.client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise _SchemaNotFound(f"writer schema id {schema_id} not found: {exc}") from exc
            raise


class _SchemaNotFound(InvalidInput):
    """The registry answered 404 for a writer schema id (it may still be on its way to the
    replica that answered)."""


_T = TypeVar("_T")


def _asked(call: Callable[[], _T]) -> _T:
    """``call()``, one request to the registry: when the registry cannot answer (connection
    refused, timeout, 5xx), :class:`TransientError`, so that the retry policy tries again and a
    longer outage stops the stage instead of dead-lettering valid records or failing a start.
    A 4xx answer (an incompatible schema, say) is raised as it is."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return call()
    except (InvalidInput, TransientError):
        raise
    except SchemaRegistryError as exc:
        if 400 <= exc.http_status_code < 500:
            raise
        raise TransientError(f"schema registry: {exc}", dependency="schema_registry") from exc
    except Exception as exc:
        raise TransientError(
            f"schema registry unreachable: {exc!r}", dependency="schema_registry"
        ) from exc


@dataclass
class _TopicCodec:
    schema: Schema
    parsed: Any
    header: bytes


class Codec:
    """Encodes and decodes the values of a fixed set of topics, each bound to one contract."""

    def __init__(self, framing: Framing, topics: Mapping[str, str]) -> None:
        """``topics`` maps a topic name to its contract name (an ``.avsc`` file stem)."""
        self._framing = framing
        self._topics: dict[str, _TopicCodec] = {}
        self._readers: dict[tuple[bytes, str], tuple[Any, Any]] = {}
        """(framing header, topic) -> (parsed writer schema, parsed reader schema or ``None``
        when they are the same)."""
        for topic, schema_name in topics.items():
            self.bind(topic, schema_name)

    def bind(self, topic: str, schema_name: str) -> None:
        """Add ``topic``, written and read with contract ``schema_name``."""
        schema = load_schema(schema_name)
        self._topics[topic] = _TopicCodec(
            schema=schema,
            parsed=fastavro.parse_schema(schema),
            header=self._framing.header_for(topic, schema),
        )
        if isinstance(self._framing, FingerprintFraming):
            # Without a registry the wire names the writer's schema by fingerprint only: know
            # the contract's earlier versions too, or records written before a compatible
            # change (still in the topic, or from writers not yet upgraded) would be refused.
            for known in (schema, *earlier_schemas(schema_name)):
                self._framing.remember(known)

    def topics(self) -> list[str]:
        return list(self._topics)

    def encode(self, topic: str, value: Mapping[str, Any]) -> bytes:
        """Avro-encode ``value`` for ``topic``; a value breaking the contract is a bug: raises."""
        codec = self._topics[topic]
        buf = io.BytesIO()
        buf.write(codec.header)
        fastavro.schemaless_writer(buf, codec.parsed, dict(value))
        return buf.getvalue()

    def decodes_offline(self, topic: str, data: bytes | None) -> bool:
        """Whether :meth:`decode` of ``data`` makes no request to a schema registry: false only
        for a record naming a writer schema this codec has not seen yet."""
        return data is None or topic not in self._topics or self._framing.answers_offline(data)

    def decode(self, topic: str, data: bytes | None) -> dict[str, Any]:
        """Decode a value of ``topic``; raises :class:`InvalidInput` when it cannot be read."""
        if data is None:
            raise InvalidInput("record has no value")
        codec = self._topics.get(topic)
        if codec is None:
            raise InvalidInput(f"no contract bound to topic {topic!r}")
        writer, start = self._framing.writer_schema(data)
        # The framing header (schema id or fingerprint) names the writer schema: parse each
        # writer schema once per topic, keyed by the header's bytes. A value written with the
        # topic's own contract (the usual case) is read without schema resolution.
        reader_key = (data[:start], topic)
        pair = self._readers.get(reader_key)
        if pair is None:
            same = writer == codec.schema
            try:
                pair = (
                    codec.parsed if same else fastavro.parse_schema(writer),
                    None if same else codec.parsed,
                )
            except Exception as exc:  # fastavro raises several types for a schema it cannot use
                raise InvalidInput(
                    f"the writer schema named by header {data[:start].hex()} cannot be read"
                    f" as Avro: {error_summary(exc)}"
                ) from exc
            self._readers[reader_key] = pair
        try:
            buf = io.BytesIO(data)
            buf.seek(start)
            value = fastavro.schemaless_reader(buf, pair[0], pair[1])
        except Exception as exc:
            why = error_summary(exc)
            raise InvalidInput(f"cannot decode {topic} value as Avro: {why}") from exc
        if not isinstance(value, dict):
            raise InvalidInput(f"{topic} value is not a record")
        if buf.tell() != len(data):
            raise InvalidInput(f"{topic} value has {len(data) - buf.tell()} trailing bytes")
        return value


def framing_from_registry_url(url: str, *, on_retry: OnRetry | None = None) -> Framing:
    """Registry framing when ``url`` is set, fingerprint framing otherwise. ``on_retry`` is told
    of each registry request retried (see :attr:`RegistryFraming.on_retry`)."""
    if not url:
        return FingerprintFraming()
    from confluent_kafka.schema_registry import SchemaRegistryClient

    # One retry loop, RegistryFraming's (counted there): the client's own retries are off.
    return RegistryFraming(SchemaRegistryClient({"url": url, "max.retries": 0}), on_retry=on_retry)
