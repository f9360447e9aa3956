"""Publishing events to Kafka from the event loop, waiting for the broker's acknowledgement.

One idempotent producer (``enable.idempotence``: no duplicates or reordering from the
producer's own retries) with the ``murmur2_random`` partitioner, the same as the Java clients
and the rest of the pipeline, so a dispute's events meet in one partition number. A background
thread serves delivery reports and resolves the awaiting coroutines' futures. A producer that
fails for good (librdkafka's fatal errors: the broker refused it an idempotent producer id,
say) fails what it holds, and the next publish or readiness check starts a new one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer

from refund_bench.codec import Codec
from refund_bench.topics import Topic

log = logging.getLogger(__name__)

REFUSALS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.POLICY_VIOLATION,
    }
)
"""Delivery errors that say the broker did not write the record (or the client never sent
it): a denied write, a topic or partition that does not exist, a record too large or refused
by a policy. Any other error, a timeout above all, leaves it unknown whether it was written."""


class PublishError(Exception):
    """The broker did not acknowledge the record. ``refused``: it was not written (Kafka
    refused it, or the client never queued it); otherwise it was not acknowledged in time, and
    may still arrive later."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class Publisher(Protocol):
    """What the API needs from a broker client."""

    def start(self) -> None:
        """Begin serving delivery reports (call before the first publish)."""

    async def publish(self, topic: Topic, key: str, value: Mapping[str, Any]) -> None:
        """Encode and send one record; returns once the broker acknowledged it.

        Raises :class:`PublishError` if it was refused or not acknowledged within the timeout.
        """

    async def check(self, timeout_s: float) -> None:
        """Raise if the brokers' metadata cannot be fetched within ``timeout_s``, or the
        producer failed for good."""

    def close(self) -> None:
        """Flush what is queued and stop."""


class _Client:
    """One producer and the thread that serves its delivery reports and errors."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.fatal: KafkaError | None = None
        """The error that ended the producer for good, once librdkafka reported one."""
        self._stop = threading.Event()
        self._retired = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self.producer = Producer(dict(config))
        self._thread = threading.Thread(target=self._serve, name="api-producer", daemon=True)
        self._thread.start()

    def refused(self, error: KafkaError) -> bool:
        """Whether a delivery report's ``error`` says the record was not written."""
        if error.code() in REFUSALS:
            return True
        # Records still queued when the producer failed for good are failed so; none was
        # written when the broker refused the producer itself (no producer id).
        fatal = self.fatal
        if error.code() != KafkaError._FATAL or fatal is None:
            return False
        return fatal.code() in REFUSALS

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.poll(0.1)
            except Exception as exc:  # the reports still due are served all the same
                # librdkafka raises a fatal error here, once; a callback's error comes out too.
                error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
                if isinstance(error, KafkaError) and error.fatal():
                    self.fatal = error
                    log.error("the Kafka producer failed for good, a new one takes over: %s", error)
                else:
                    log.exception("serving the Kafka producer's reports")
            if self._retired.is_set() and len(self.producer) == 0:
                self._close()  # every record it held is reported: let go of the broker
                return

    def producer_closed(self) -> bool:
        return self._closed

    def retire(self) -> None:
        """No record is produced to it any more: it closes once it has reported the ones it
        holds."""
        self._retired.set()

    def close(self, timeout_s: float) -> None:
        """Flush for up to ``timeout_s``, stop serving and close the producer."""
        with self._lock:
            if not self._closed:
                self.producer.flush(timeout_s)
        self._stop.set()
        self._thread.join(5.0)
        self._close()

    def _close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.producer.close()


class KafkaPublisher:
    """:class:`Publisher` over a ``confluent_kafka.Producer``."""

    def __init__(
        self,
        bootstrap_servers: str,
        codec: Codec,
        *,
        timeout_s: float = 10.0,
        client_id: str = "refund-bench-api",
        security: Mapping[str, str] | None = None,
    ) -> None:
        self._codec = codec
        self._timeout_s = timeout_s
        timeout_ms = int(timeout_s * 1000)
        self._config = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 2,
            "request.timeout.ms": min(timeout_ms, 5000),
            "message.timeout.ms": timeout_ms,
            **(security or {}),
        }
        self._client: _Client | None = None
        self._retired: list[_Client] = []
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Create the producer (nothing connects before this) and serve delivery reports.

        A closed publisher does not start again.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("KafkaPublisher was closed")
            if self._client is None:
                self._client = _Client(self._config)

    def _current(self) -> _Client:
        """The client to produce with: a new one in place of one that failed for good."""
        with self._lock:
            if self._client is None:
                raise RuntimeError("KafkaPublisher is not started, or was closed")
            if self._client.fatal is not None:
                self._client.retire()
                self._retired = [c for c in self._retired if not c.producer_closed()]
                self._retired.append(self._client)
                self._client = _Client(self._config)
            return self._client

    async def publish(self, topic: Topic, key: str, value: Mapping[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        client = self._current()

        def resolve(error: Exception | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            failure = None
            if err is not None:
                failure = PublishError(f"{topic.name}: {err}", refused=client.refused(err))
            loop.call_soon_threadsafe(resolve, failure)

        data = self._codec.encode(topic.name, value)
        try:
            client.producer.produce(
                topic.name, key=key.encode(), value=data, on_delivery=on_delivery
            )
        except (BufferError, KafkaException) as exc:  # not queued: nothing was sent
            raise PublishError(f"{topic.name}: {exc}", refused=True) from exc
        try:
            await asyncio.wait_for(done, self._timeout_s + 2.0)
        except TimeoutError as exc:
            raise PublishError(f"{topic.name}: no acknowledgement in {self._timeout_s}s") from exc

    async def check(self, timeout_s: float) -> None:
        """Also raises the error that ended the producer for good, until a publish starts a
        new one."""
        with self._lock:
            client = self._client
        if client is None:
            raise RuntimeError("KafkaPublisher is not started, or was closed")
        if client.fatal is not None:
            raise KafkaException(client.fatal)
        await asyncio.to_thread(client.producer.list_topics, timeout=timeout_s)

    def close(self) -> None:
        """Flush, stop serving delivery reports and close the client, releasing its threads
        and broker connections now rather than when the object is collected. Idempotent."""
        with self._lock:
            self._closed = True
            clients = [c for c in (self._client, *self._retired) if c is not None]
            self._client, self._retired = None, []
        for client in clients:
            # The flush waits out message.timeout.ms at most, so nothing is left queued.
            client.close(self._timeout_s)
