"""Publishing events to Kafka from the event loop, waiting for the broker's acknowledgement.

One idempotent producer (``enable.idempotence``: no duplicates or reordering from the
producer's own retries) with the ``murmur2_random`` partitioner, the same as the Java clients
and the rest of the pipeline, so a dispute's events meet in one partition number. A background
thread serves delivery reports and resolves the awaiting coroutines' futures.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaException, Producer

from refund_bench.codec import Codec
from refund_bench.topics import Topic


class PublishError(Exception):
    """The broker did not acknowledge the record (in time). It may still arrive later."""


class Publisher(Protocol):
    """What the API needs from a broker client."""

    def start(self) -> None:
        """Begin serving delivery reports (call before the first publish)."""

    async def publish(self, topic: Topic, key: str, value: Mapping[str, Any]) -> None:
        """Encode and send one record; returns once the broker acknowledged it.

        Raises :class:`PublishError` if it was not acknowledged within the timeout.
        """

    async def check(self, timeout_s: float) -> None:
        """Raise if the brokers' metadata cannot be fetched within ``timeout_s``."""

    def close(self) -> None:
        """Flush what is queued and stop."""


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
        self._producer: Producer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Create the producer (nothing connects before this) and serve delivery reports.

        A closed publisher does not start again.
        """
        if self._stop.is_set():
            raise RuntimeError("KafkaPublisher was closed")
        if self._producer is None:
            self._producer = Producer(self._config)
            self._thread = threading.Thread(
                target=self._serve, args=(self._producer,), name="api-producer", daemon=True
            )
            self._thread.start()

    @property
    def _started(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("KafkaPublisher is not started, or was closed")
        return self._producer

    def _serve(self, producer: Producer) -> None:
        while not self._stop.is_set():
            producer.poll(0.1)

    async def publish(self, topic: Topic, key: str, value: Mapping[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def resolve(error: Exception | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def on_delivery(err: Any, _msg: Any) -> None:
            failure = None if err is None else PublishError(f"{topic.name}: {err}")
            loop.call_soon_threadsafe(resolve, failure)

        data = self._codec.encode(topic.name, value)
        try:
            self._started.produce(topic.name, key=key.encode(), value=data, on_delivery=on_delivery)
        except (BufferError, KafkaException) as exc:
            raise PublishError(f"{topic.name}: {exc}") from exc
        try:
            await asyncio.wait_for(done, self._timeout_s + 2.0)
        except TimeoutError as exc:
            raise PublishError(f"{topic.name}: no acknowledgement in {self._timeout_s}s") from exc

    async def check(self, timeout_s: float) -> None:
        await asyncio.to_thread(self._started.list_topics, timeout=timeout_s)

    def close(self) -> None:
        """Flush, stop serving delivery reports and close the client, releasing its threads
        and broker connections now rather than when the object is collected. Idempotent."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        producer.flush(self._timeout_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        # The flush waited out message.timeout.ms, so nothing is queued and this returns at once.
        producer.close()
