"""Publishing complaints the way an upstream service does (demo, benchmarks, tests)."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError, Message, Producer

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url


class ComplaintPublisher:
    """Produces ``complaint.received`` events, Avro-encoded, keyed by dispute id.

    Not thread-safe: one caller publishes and flushes."""

    def __init__(
        self,
        bootstrap_servers: str,
        registry_url: str,
        kafka_security: Mapping[str, str] | None = None,
    ) -> None:
        self._codec = Codec(
            framing_from_registry_url(registry_url),
            {t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema},
        )
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                **(kafka_security or {}),
            }
        )
        self._failed: list[KafkaError] = []

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failed.append(error)

    def publish(
        self, dispute_id: str, order_id: str, customer_id: str, text: str, channel: str = "api"
    ) -> None:
        """Queue one complaint; :meth:`flush` waits until the broker has them all."""
        event = ev.ComplaintReceived(
            dispute_id=dispute_id,
            order_id=order_id,
            customer_id=customer_id,
            text=text,
            received_at=ev.now(),
            channel=channel,
        )
        value = self._codec.encode(t.COMPLAINT_RECEIVED.name, event.to_avro())
        while True:
            try:
                self._producer.produce(
                    t.COMPLAINT_RECEIVED.name,
                    key=dispute_id.encode(),
                    value=value,
                    on_delivery=self._on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Raise unless every complaint queued since the last flush was acknowledged within
        ``timeout_s``: :class:`TimeoutError` when some are still queued,
        :class:`ComplaintsNotPublishedError` when the producer gave some up (an unknown topic,
        a refused write, its own timeout)."""
        if self._producer.flush(timeout_s) != 0:
            raise TimeoutError("complaints not acknowledged by the broker in time")
        failed, self._failed = self._failed, []
        if failed:
            raise ComplaintsNotPublishedError(
                f"{len(failed)} complaint(s) not published to {t.COMPLAINT_RECEIVED.name}: "
                f"{failed[0].str()}"
            )


class ComplaintsNotPublishedError(RuntimeError):
    """The producer gave up on complaints it had queued: they were not published."""
