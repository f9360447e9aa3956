"""The one consume -> handle -> produce -> commit loop every stage runs on.

Exactly-once mode (the default) follows Kafka's transactional consume-transform-produce
pattern: read with ``isolation.level=read_committed``; for each batch (bounded by count and
time) begin a transaction, produce the outputs, the DLQ records and the state-changelog writes,
add the consumed offsets with ``send_offsets_to_transaction`` and commit. A crash anywhere
before the commit aborts the transaction: explicitly, when an instance with the same
``transactional.id`` re-initialises (a local restart), or when the broker's transaction timeout
(``transaction_timeout_ms``, then up to the broker's next scan for timed-out transactions, 10 s
by default) passes (a pod's id holds its pod's name, so the pod replacing a crashed one has
another id); until then read_committed readers of the partitions it wrote
wait at its first record. So a read_committed reader sees each input's outputs exactly once.

At-least-once mode produces with an idempotent producer, waits for delivery, then commits
offsets synchronously: nothing is lost, a crash may duplicate.

Asynchronous stages (LLM and payment calls) are pipelined: the loop keeps polling and starting
handlers while earlier batches are still in flight or committing, up to ``max_pending_records``
records. Batches are committed strictly in poll order; every finished batch at the head goes
into one transaction. A record whose partition was revoked after it was polled is left out of
the transaction (no outputs, no offset), so its new owner processes it.

Error policy, by exception type (see :mod:`refund_bench.errors`): ``InvalidInput`` -> the
record goes to ``<input>.dlq`` and the batch goes on; ``TransientError`` -> retried with
backoff; anything else -> abort and re-raise, so the process exits and Kafka redelivers. One
exception: a commit that failed because the group moved on while its batches ran puts them
back and the stage goes on (:meth:`StageRunner._put_back`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import uvloop
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from refund_bench.codec import Codec, Framing
from refund_bench.errors import Fenced, InvalidInput, UndeclaredOutput, error_summary
from refund_bench.retry import AsyncSleep, RetryPolicy, SyncSleep
from refund_bench.runtime.dlq import DlqBudget, dead_letter
from refund_bench.runtime.health import Heartbeat
from refund_bench.runtime.messages import (
    AsyncHandler,
    Context,
    Emit,
    Guarantee,
    Message,
    SyncHandler,
)
from refund_bench.runtime.metrics import Metrics, NullMetrics, retry_counter
from refund_bench.runtime.state import BatchState, RecordState, StateStore
from refund_bench.stages import StageTopics
from refund_bench.topics import Topic, changelog_topic

log = logging.getLogger(__name__)

_TXN_RETRIES = 10
"""Attempts of one transactional call, at most (within the commit's deadline)."""
TXN_CALL_MIN_S = 1.0
"""The least time one transactional call is given, even past the commit's deadline: a call
given none would fail unsent. A commit may so take ``commit_timeout_s`` plus this, at most."""
_RECORD_OVERHEAD_BYTES = 512
"""Room left under the producer's ``message.max.bytes`` for a record's framing on the wire."""


@dataclass(frozen=True)
class StageSpec:
    """What a stage is: its inputs, outputs, handler and (optionally) its state store.

    ``assignment`` must be ``"range"`` for a stateful stage with several input topics: only the
    range assignor gives one instance the same partition number of every co-partitioned input.
    """

    name: str
    inputs: tuple[Topic, ...]
    outputs: tuple[Topic, ...]
    handler: SyncHandler | AsyncHandler
    store: str | None = None
    store_retention_s: float | None = None
    """How long a state key outlives its last write unless the instance's config says
    otherwise (``RuntimeConfig.state_retention_s``); ``None``: until the stage deletes it."""
    assignment: str = "cooperative-sticky"
    startup: Callable[[], Awaitable[None]] | None = None
    """Async stages: run on the stage's event loop before the first poll (open pools here)."""
    shutdown: Callable[[], Awaitable[None]] | None = None
    """Async stages: run on the stage's event loop when the stage stops."""
    before_commit: Callable[[], None] | None = None
    """Called once per transaction (one batch; in a pipelined stage, every finished batch at the
    head) after its handlers ran and before its outputs go to the producer and its offsets
    commit: a stage that buffers external writes (e.g. a
    database projection) makes them durable here. If it raises, the batch is aborted and
    redelivered."""

    @classmethod
    def of(
        cls, stage: StageTopics, handler: SyncHandler | AsyncHandler, **options: Any
    ) -> StageSpec:
        """The spec of ``stage`` as the stage table has it (:mod:`refund_bench.stages`):
        its name, inputs, outputs and store; ``options`` sets the other fields."""
        return cls(stage.name, stage.inputs, stage.outputs, handler, store=stage.store, **options)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    @property
    def changelog(self) -> str | None:
        return None if self.store is None else changelog_topic(self.name, self.store)


@dataclass(frozen=True)
class RuntimeConfig:
    """How one instance runs. Built by the service's entry point from its settings."""

    bootstrap_servers: str
    group_id: str
    transactional_id: str
    guarantee: Guarantee = "exactly-once"
    batch_max_records: int = 500
    batch_max_wait_s: float = 0.05
    max_inflight: int = 512
    max_pending_records: int = 2000
    """Async stages: records polled but not yet committed, at most (back-pressure)."""
    async_poll_interval_s: float = 0.005
    """Async stages: how often the loop polls for more records while batches are in flight."""
    held_poll_after_s: float = 30.0
    """Async stages: after this long at ``max_pending_records`` without a poll, the partitions
    are paused and the loop polls again (each second), so that the instance stays in its group
    (``max.poll.interval.ms``, 5 min by default, must be longer). Shorter waits at the limit,
    the usual back-pressure of a burst, poll nothing: pausing would drop the records already
    fetched, to fetch them again."""
    drain_timeout_s: float = 20.0
    """Async stages: after :meth:`StageRunner.stop`, how long the batches in flight may take to
    finish and commit, counted from the stop (a commit under way then runs in it). No commit
    begins after it: the batches not committed by then, running or finished, are left
    uncommitted and their records go to the partitions' next owner. Stopping thus takes at most
    this plus one commit (``commit_timeout_s``), and a commit that fails then is aborted, which
    may take as long again; keep the drain and one commit below the pod's termination grace
    period (60 s in the manifests)."""
    transaction_timeout_ms: int = 60_000
    session_timeout_ms: int = 10_000
    group_instance_id: str | None = None
    commit_timeout_s: float = 30.0
    """Exactly-once: how long one commit may take, ``send_offsets_to_transaction`` and
    ``commit_transaction`` together, their retries included (see :func:`retry_transactional`)."""
    state_retention_s: float | None = None
    """Overrides the stage's ``StageSpec.store_retention_s``."""
    state_expiry_per_batch: int = 1000
    """Keys past retention deleted per batch, at most (keeps each transaction bounded)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    dlq_budget: DlqBudget = field(default_factory=DlqBudget)
    consumer_overrides: dict[str, Any] = field(default_factory=dict)
    producer_overrides: dict[str, Any] = field(default_factory=dict)
    kafka_security: Mapping[str, str] = field(default_factory=dict, repr=False)
    """How every client of the instance signs in (``StackSettings.kafka_security_config()``);
    secrets, so left out of ``repr``."""


@dataclass(frozen=True, slots=True)
class _Outgoing:
    """One record a batch will produce: an output, a dead letter or a changelog write."""

    topic: str
    key: bytes
    value: bytes | None
    headers: Mapping[str, bytes]
    partition: int | None
    """``None``: the producer's partitioner picks it from the key."""


HeaderList = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class _Decoded:
    """A polled record, its decoded message or why it cannot be decoded, and its headers in
    order (repeated names and all), read from the record once: a header name that is not
    UTF-8 makes confluent-kafka fail, and a second read of that record's headers crashes the
    process."""

    msg: Any
    item: Message | InvalidInput
    headers: HeaderList


@dataclass
class _InFlight:
    """A polled batch of an async stage whose handlers run (or ran) as ``task``."""

    records: list[_Decoded]
    epoch: int
    """The revocation count when it was polled (see ``StageRunner._on_revoke``)."""
    started: float
    size: int
    task: asyncio.Future[list[Sequence[Emit] | InvalidInput]]


class StageRunner:
    """Runs one :class:`StageSpec` until :meth:`stop` is called or a fatal error is raised."""

    def __init__(
        self,
        spec: StageSpec,
        config: RuntimeConfig,
        framing: Framing,
        *,
        metrics: Metrics | None = None,
        heartbeat: Heartbeat | None = None,
        sleep: SyncSleep = time.sleep,
        async_sleep: AsyncSleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: wall-clock seconds, the state store's time of writes and of expiry."""
        if spec.store is not None and spec.is_async:
            raise ValueError("stateful stages take a synchronous handler (ordered per key)")
        if spec.store is not None and len(spec.inputs) > 1 and spec.assignment != "range":
            raise ValueError("a stateful stage with several inputs needs the range assignor")
        if spec.store is not None and config.guarantee != "exactly-once":
            # At least once, a changelog write could be delivered while the output it goes with
            # is not: after a restart the state says "done" and the output never comes.
            raise ValueError("a stateful stage runs exactly-once only (GUARANTEE=exactly-once)")
        self.spec = spec
        self.config = config
        self.metrics: Metrics = metrics or NullMetrics()
        self._count_retry = retry_counter(self.metrics)
        """Counts a handler's retried transient failures, by what failed."""
        self.heartbeat = heartbeat or Heartbeat()
        self._sleep = sleep
        self._async_sleep = async_sleep
        topics: dict[str, str] = {}
        for topic in (*spec.inputs, *spec.outputs, *(t.dlq for t in spec.inputs)):
            topics[topic.name] = topic.schema
        self.codec = Codec(framing, topics)
        self._outputs = {t.name for t in spec.outputs}
        self._store = (
            StateStore(
                spec.store,
                cast(str, spec.changelog),
                retention_s=config.state_retention_s or spec.store_retention_s,
                clock=clock,
            )
            if spec.store is not None
            else None
        )
        self._eos = config.guarantee == "exactly-once"
        self._max_output_bytes = (
            int(self._producer_conf().get("message.max.bytes", 1_000_000)) - _RECORD_OVERHEAD_BYTES
        )
        self._stopping = False
        self._closing = False
        """The consumer is being closed: its revoke callback asks librdkafka nothing."""
        self._stop_asked_at: float | None = None
        """When :meth:`stop` was first called (monotonic): the drain timeout counts from it."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._delivery_errors: list[KafkaError] = []
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._inflight = 0
        self._limit: asyncio.Semaphore | None = None
        self._revocations = 0
        self._revoked_at: dict[tuple[str, int], int] = {}
        self.batches_committed = 0
        self.records_released = 0
        """Polled records left uncommitted because their partition was revoked meanwhile."""
        self.records_abandoned = 0
        """Polled records left uncommitted for the partitions' next owner because the drain after
        a stop, or the wait after a fatal error, ran out (``drain_timeout_s``) before they were
        committed: still in flight, or finished after the last commit began."""
        self._failing_until: float | None = None
        """Async stages: set at the first fatal error, until when the handlers still running
        may finish (and no new one starts)."""
        self._fatal: BaseException | None = None
        """Async stages: the first fatal error, raised in place of the :class:`_NotStartedError` of
        handlers it kept from starting."""
        self._paused = False
        """Async stages: fetching is paused because the records pending are at their limit."""
        self._polled_at = time.monotonic()
        self._put_back_in_a_row = 0
        """Commits that failed and were put back in a row (:meth:`_put_back`), none made
        since (:meth:`_commit` sets it back to 0 on each commit of offsets: a commit of none,
        after a poll that only said the group was left, is no progress)."""

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish the batches it polled, then exit (safe from a signal handler).
        Not ready from now on: the stage takes no new batch while it drains."""
        if self._stop_asked_at is None:
            self._stop_asked_at = time.monotonic()
        self._stopping = True
        self.heartbeat.ready = False

    def run(self) -> None:
        """Consume until stopped. Raises on fatal errors after aborting the open transaction."""
        self._start()
        try:
            if self.spec.is_async:
                cast(asyncio.AbstractEventLoop, self._loop).run_until_complete(
                    self._run_pipelined()
                )
                return
            while not self._stopping:
                self.heartbeat.beat()
                consumer = cast(Consumer, self._consumer)
                msgs = consumer.consume(
                    num_messages=self.config.batch_max_records,
                    timeout=self.config.batch_max_wait_s,
                )
                if msgs:
                    try:
                        self._process_batch(msgs)
                    except KafkaException as exc:
                        if not self._put_back(exc, msgs):
                            raise
        finally:
            self._close()

    def _start(self) -> None:
        self._producer = Producer(self._producer_conf())
        if self._eos:
            # Fences any earlier instance with this transactional.id and aborts its open
            # transaction before we read a single record or restore any state.
            self._producer.init_transactions(self.config.commit_timeout_s)
        if self.spec.is_async:
            # uvloop: a drop-in asyncio loop on libuv, for the stages that keep hundreds of
            # HTTP calls in flight.
            self._loop = uvloop.new_event_loop()
            if self.spec.startup is not None:
                self._loop.run_until_complete(self.spec.startup())
        self._consumer = Consumer(self._consumer_conf())
        self._consumer.subscribe(
            [t.name for t in self.spec.inputs], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        self.heartbeat.ready = True

    def _close(self) -> None:
        self.heartbeat.ready = False
        if self._consumer is not None:
            self._closing = True
            try:
                self._consumer.close()
            except KafkaException:
                log.exception("closing the consumer failed")
            self._consumer = None
        # Nothing to flush: every batch ends with a commit (or an abort) that already waited
        # for its records, and a fenced producer must not be flushed at all.
        self._producer = None
        if self._loop is not None:
            if self.spec.shutdown is not None:
                self._loop.run_until_complete(self.spec.shutdown())
            self._loop.close()
            self._loop = None

    def _base_conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap_servers, **self.config.kafka_security}

    def _producer_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            **self._base_conf(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Same partitioner as the Java clients, so upstream producers agree on partitions.
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 1_000_000,
        }
        if self._eos:
            # No delivery callback: a record that cannot be delivered fails the transaction's
            # commit, which aborts the batch.
            conf["transactional.id"] = self.config.transactional_id
            conf["transaction.timeout.ms"] = self.config.transaction_timeout_ms
        else:
            conf["on_delivery"] = self._on_delivery
        conf.update(self.config.producer_overrides)
        return conf

    def _consumer_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            **self._base_conf(),
            "group.id": self.config.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "partition.assignment.strategy": self.spec.assignment,
            "session.timeout.ms": self.config.session_timeout_ms,
        }
        if self.config.group_instance_id:
            conf["group.instance.id"] = self.config.group_instance_id
        conf.update(self.config.consumer_overrides)
        return conf

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._delivery_errors.append(err)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._store is not None:
            numbers = {tp.partition for tp in partitions} - set(self._store.owned())
            started = time.monotonic()
            with self.heartbeat.restoring():
                # Settle the group's offsets first. A read_committed fetch of them waits for a
                # transaction still committing offsets for these partitions (a paused earlier
                # owner's; the broker ends it within the transaction timeout), so the restore
                # below reads its state writes too. Restoring first could miss them, then
                # resume after their input. The restore itself reads on past a transaction
                # still open on the changelog, whose offsets may be committed already.
                settle_s = self.config.transaction_timeout_ms / 1000 + 30
                consumer.committed(partitions, timeout=settle_s)
                read = self._store.restore(
                    self._base_conf(), numbers, on_progress=self.heartbeat.beat
                )
            log.info(
                "%s restored %d changelog records for partitions %s in %.2fs",
                self.spec.name,
                read,
                sorted(numbers),
                time.monotonic() - started,
            )
            self.metrics.set("state_keys", self._store.size())
        if self.spec.assignment == "cooperative-sticky":
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if self._paused:
            consumer.pause(partitions)  # they wait, like the rest, until there is room
        self._set_assigned(consumer)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Records already polled from these partitions must not be committed by us any more.
        self._revocations += 1
        log.info(
            "%s: partitions revoked: %s",
            self.spec.name,
            sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions),
        )
        for tp in partitions:
            self._revoked_at[(tp.topic, tp.partition)] = self._revocations
        if self._store is not None:
            self._store.drop({tp.partition for tp in partitions})
            self.metrics.set("state_keys", self._store.size())
        if self.spec.assignment == "cooperative-sticky":
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        self._set_assigned(consumer)

    def _set_assigned(self, consumer: Consumer) -> None:
        if self._closing:
            # Revoked by ``close()``: asking librdkafka for the assignment from the callback
            # it runs while closing waits for an answer only this thread would serve (a
            # deadlock, holding the GIL). Nothing stays assigned.
            self.metrics.set("assigned_partitions", 0)
            return
        with contextlib.suppress(KafkaException):
            self.metrics.set("assigned_partitions", len(consumer.assignment()))

    # -- one batch ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """Around one batch's (or batches') produce and :meth:`_commit`: begin the transaction
        (exactly-once), count how it ended, and on any error abort it and re-raise."""
        if self._eos:
            cast(Producer, self._producer).begin_transaction()
        try:
            yield
        except BaseException:
            if self._eos:
                self._abort_quietly()
            self.metrics.incr("transactions", kind="aborted")
            raise
        self.metrics.incr("transactions", kind="committed")

    def _decode_all(self, msgs: Sequence[Any]) -> list[_Decoded]:
        """Each polled record with its decoded message, or the reason it cannot be decoded."""
        records: list[_Decoded] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    # The consumer left its group while a batch ran longer than
                    # max.poll.interval.ms; this poll rejoins it. The batch's commit failed and
                    # was put back (:meth:`_put_back`), or it committed before the group moved on.
                    log.warning("%s: %s; rejoining the group", self.spec.name, err.str())
                    continue
                raise KafkaException(err)
            self.metrics.incr("records_in", topic=msg.topic())
            headers: HeaderList = []
            try:
                headers = _header_list(msg)
                key = _text_key(msg.key())
                value = self.codec.decode(msg.topic(), msg.value())
            except InvalidInput as exc:
                records.append(_Decoded(msg, exc, headers))
                continue
            message = Message(
                topic=msg.topic(),
                partition=msg.partition(),
                offset=msg.offset(),
                key=key,
                value=value,
                headers={name: value or b"" for name, value in headers},
                timestamp_ms=msg.timestamp()[1],
            )
            records.append(_Decoded(msg, message, headers))
        return records

    def _process_batch(self, msgs: Sequence[Any]) -> None:
        """Synchronous stages: one batch, handled in order, in one transaction."""
        started = time.perf_counter()
        records = self._decode_all(msgs)
        batch_state = BatchState(self._store) if self._store is not None else None
        offsets: dict[tuple[str, int], int] = {}
        outgoing: list[_Outgoing] = []
        with self._transaction():
            for record in records:
                # Liveness measures progress: a batch slow in all (a slow database) but moving
                # is not restarted only to be polled again, and as slowly.
                self.heartbeat.beat()
                msg, item = record.msg, record.item
                offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
                ctx = Context(
                    RecordState(batch_state, msg.partition()) if batch_state is not None else None
                )
                self._finish(
                    record,
                    ctx,
                    item if isinstance(item, InvalidInput) else self._handle_sync(item, ctx),
                    outgoing,
                )
            if self.spec.before_commit is not None:
                self.spec.before_commit()
            if batch_state is not None:
                expired = batch_state.expire(self.config.state_expiry_per_batch)
                if expired:
                    self.metrics.incr("state_expired", expired)
                changelog = cast(str, self.spec.changelog)
                for partition, key, value, headers in batch_state.changelog_records():
                    outgoing.append(_Outgoing(changelog, key.encode(), value, headers, partition))
            self._produce_all(outgoing)
            self._commit(offsets)
        if batch_state is not None:
            batch_state.apply()
            self.metrics.set("state_keys", cast(StateStore, self._store).size())
        self.batches_committed += 1
        self.metrics.observe("batch_seconds", time.perf_counter() - started)
        self.metrics.observe("batch_records", len(msgs))

    def _put_back(self, exc: KafkaException, msgs: Sequence[Any]) -> bool:
        """After a commit that failed because the group moved on while the batch ran (this
        instance lost its place in it: ``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``, ...;
        exactly once, an error that only aborts the transaction, which :meth:`_transaction` has
        aborted): put each of the batch's partitions back to the batch's first record of it,
        so that the batch is polled again, by this instance or, if the rebalance its next poll
        serves moves the partition, by the new owner from the committed offset. The stage goes
        on; its state store keeps no write of the aborted batch (:class:`BatchState` applies
        them after the commit only). At least once, the batch's outputs were delivered before
        the commit, and come out again.

        False, with nothing put back, for any other error, when a partition cannot be put
        back, or when the last :data:`MAX_PUT_BACK_IN_A_ROW` batches were all put back: the
        caller raises it, and the process exits and restarts, as for every error the loop does
        not handle."""
        err = self._group_moved_on(exc)
        if err is None or not self._seek_back([(msg, self._revocations) for msg in msgs]):
            return False
        self._count_put_back(err, len(msgs))
        return True

    def _group_moved_on(self, exc: KafkaException) -> KafkaError | None:
        """The error of a failed commit that :func:`may_put_back` allows putting back, if it is
        one."""
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and may_put_back(
            err, eos=self._eos, in_a_row=self._put_back_in_a_row
        ):
            return err
        return None

    def _seek_back(self, records: Sequence[tuple[Any, int]]) -> bool:
        """Put each partition of ``records`` (polled records, each with the revocation count
        when it was polled) back to its first record among them, unless the partition was
        revoked since (its new owner goes on from the committed offset). False when a
        partition cannot be put back."""
        firsts: dict[tuple[str, int], int] = {}
        for msg, epoch in records:
            key = (msg.topic(), msg.partition())
            if msg.error() is None and self._revoked_at.get(key, 0) <= epoch:
                firsts.setdefault(key, msg.offset())
        consumer = cast(Consumer, self._consumer)
        try:
            for (topic, partition), offset in firsts.items():
                consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as seek_error:
            log.warning("%s: a batch could not be put back (%s)", self.spec.name, seek_error)
            return False
        return True

    def _count_put_back(self, err: KafkaError, records: int, behind: int = 0) -> None:
        log.warning(
            "%s: the commit of %d records failed (%s)%s; they%s are put back to be polled again",
            self.spec.name,
            records,
            err.str(),
            ", and its transaction was aborted" if self._eos else "",
            f" and {behind} records polled behind them" if behind else "",
        )
        self.metrics.incr("retries", kind="rebalance")
        self._put_back_in_a_row += 1

    # -- asynchronous stages: pipelined batches ---------------------------------------------

    async def _run_pipelined(self) -> None:
        """Poll, start handlers and commit finished batches in order, until stopped."""
        self._limit = asyncio.Semaphore(self.config.max_inflight)
        consumer = cast(Consumer, self._consumer)
        pending: deque[_InFlight] = deque()
        drain_until: float | None = None
        try:
            while True:
                self.heartbeat.beat()
                if self._stop_asked_at is not None and drain_until is None:
                    # From the stop, not from here: a commit under way when it came counts in.
                    drain_until = self._stop_asked_at + self.config.drain_timeout_s
                room = self.config.max_pending_records - sum(b.size for b in pending)
                if (
                    not self._stopping
                    and self._failing_until is None
                    and self._may_poll(consumer, room)
                ):
                    # Idle: block in the poll (nothing else needs the loop). Busy: just look.
                    # Held back: the partitions are paused, and the poll keeps this instance in
                    # its group and serves rebalances while the head batch waits.
                    timeout = self.config.batch_max_wait_s if not pending else 0
                    wanted = min(max(room, 1), self.config.batch_max_records)
                    msgs = consumer.consume(wanted, timeout)
                    self._polled_at = time.monotonic()
                    if msgs:
                        pending.append(await self._launch(msgs))
                # No commit begins once the drain is over: each may take ``commit_timeout_s``,
                # and the pod's grace period allows for one beyond the drain, not a chain.
                if drain_until is None or time.monotonic() < drain_until:
                    ready: list[_InFlight] = []
                    while pending and pending[0].task.done():
                        ready.append(pending.popleft())
                    if ready:
                        try:
                            await self._commit_pipelined(ready)
                        except KafkaException as exc:
                            if not await self._put_back_pipelined(exc, ready, pending):
                                if self._fatal is not None:  # a handler's, during the wait
                                    raise self._fatal from exc
                                raise
                        continue
                if not pending:
                    if self._stopping:
                        return
                    continue
                now = time.monotonic()
                # After a stop, or a fatal error in a later batch, the batches in flight had
                # the drain timeout to finish.
                after = (
                    "the stop"
                    if drain_until is not None and now >= drain_until
                    else "a fatal error"
                    if self._failing_until is not None and now >= self._failing_until
                    else None
                )
                if after is not None:
                    log.warning(
                        "%s: %d records not committed %g s after %s (in flight, or finished"
                        " after the last commit began): left uncommitted for the partitions'"
                        " next owner",
                        self.spec.name,
                        sum(b.size for b in pending),
                        self.config.drain_timeout_s,
                        after,
                    )
                    self.records_abandoned += sum(b.size for b in pending)
                    break
                # Wake up for the head batch, for the next poll, or at least every second so
                # the heartbeat shows the loop alive while long calls are in flight.
                polling = not self._stopping and self._failing_until is None and room > 0
                wake = self.config.async_poll_interval_s if polling else 1.0
                if drain_until is not None:
                    wake = max(0.0, min(wake, drain_until - now))
                await asyncio.wait([pending[0].task], timeout=wake)
        except Exception as exc:
            await self._let_finish([b.task for b in pending], exc)
            if isinstance(exc, _NotStartedError) and self._fatal is not None:
                raise self._fatal from None
            raise
        finally:
            for batch in pending:
                batch.task.cancel()
            await asyncio.gather(*(b.task for b in pending), return_exceptions=True)
        if self._fatal is not None:
            # A handler failed fatally in a batch behind one still running, or after a stop
            # while the others of its batch still ran: the wait ran out before that batch came
            # to be committed. Its error is raised all the same: the process exits non-zero.
            raise self._fatal

    async def _put_back_pipelined(
        self, exc: KafkaException, ready: list[_InFlight], pending: deque[_InFlight]
    ) -> bool:
        """:meth:`_put_back` for the pipelined batches: the ``ready`` ones whose commit failed
        and every batch ``pending`` behind them, whose handlers may finish first (for at most
        ``drain_timeout_s``, so that calls already paid for are cached for the next poll);
        their results are dropped, and ``pending`` is emptied. False, with nothing put back,
        when :meth:`_put_back` would refuse, a handler still runs at the end of the wait, or
        one failed fatally meanwhile, or when the stage is stopping."""
        err = self._group_moved_on(exc)
        if err is None or self._stopping:
            return False  # stopping: the records go to the partitions' next owner anyway
        until = time.monotonic() + self.config.drain_timeout_s
        while (running := [b.task for b in pending if not b.task.done()]) and (
            left := until - time.monotonic()
        ) > 0:
            await asyncio.wait(running, timeout=min(left, 1.0))
            self.heartbeat.beat()  # the loop is alive: it waits for calls already paid for
        if self._failing_until is not None or any(not b.task.done() for b in pending):
            return False
        batches = [*ready, *pending]
        if not self._seek_back([(r.msg, b.epoch) for b in batches for r in b.records]):
            return False
        behind = sum(b.size for b in pending)
        pending.clear()
        self._count_put_back(err, sum(b.size for b in ready), behind)
        return True

    def _may_poll(self, consumer: Consumer, room: int) -> bool:
        """Whether the loop polls now, with ``room`` for this many more records pending: while
        there is room (resuming the partitions if they were paused), and at the limit once it
        has not polled for ``held_poll_after_s`` (pausing them first, so that the polls fetch
        nothing), then on every pass until there is room. Paused partitions keep their
        position: fetching resumes after the last record polled."""
        if room > 0:
            if self._paused:
                consumer.resume(consumer.assignment())
                self._paused = False
            return True
        if self._paused:
            return True
        if time.monotonic() - self._polled_at < self.config.held_poll_after_s:
            return False
        consumer.pause(consumer.assignment())
        self._paused = True
        return True

    async def _let_finish(self, tasks: Sequence[asyncio.Future[Any]], error: BaseException) -> None:
        """After a fatal ``error``: wait for the handlers still running, until ``drain_timeout_s``
        after the first such error (or after the stop, if the stage was stopping and that comes
        sooner), so that calls already paid for (an LLM's answer) finish and are cached for the
        replay. Their results are not committed; no new handler starts."""
        if self._failing_until is None:
            self._failing_until = time.monotonic() + self.config.drain_timeout_s
            if self._stop_asked_at is not None:
                # Stopping already: the wait ends with the drain, not a drain later.
                self._failing_until = min(
                    self._failing_until, self._stop_asked_at + self.config.drain_timeout_s
                )
            self.heartbeat.ready = False  # no new handler starts while the others finish
        if self._fatal is None and not isinstance(error, _NotStartedError):
            self._fatal = error
        running = [task for task in tasks if not task.done()]
        if running:
            log.warning(
                "%s: a fatal error; letting %d handlers still running finish (until the drain"
                " timeout) before stopping",
                self.spec.name,
                len(running),
            )
            await asyncio.wait(running, timeout=max(0.0, self._failing_until - time.monotonic()))

    async def _launch(self, msgs: list[Any]) -> _InFlight:
        """Decode a poll and start its handlers. A record naming a writer schema the codec has
        not seen yet is looked up in the registry (retried through an outage, with sleeps):
        that poll is decoded in a worker thread, so that the handlers in flight go on."""
        epoch = self._revocations
        if all(self.codec.decodes_offline(msg.topic(), msg.value()) for msg in msgs):
            records = self._decode_all(msgs)
        else:
            loop = asyncio.get_running_loop()
            records = await loop.run_in_executor(None, self._decode_all, msgs)
        messages = [r.item for r in records if isinstance(r.item, Message)]
        task = asyncio.ensure_future(self._handle_all_async(messages))
        return _InFlight(records, epoch, time.perf_counter(), len(msgs), task)

    async def _commit_pipelined(self, ready: list[_InFlight]) -> None:
        """One transaction for the finished batches at the head, in poll order.

        Re-raises a batch's fatal handler error (after aborting). The blocking commit runs in a
        worker thread so that the next batches' handlers keep running meanwhile.
        """
        offsets: dict[tuple[str, int], int] = {}
        outgoing: list[_Outgoing] = []
        released = 0
        with self._transaction():
            for batch in ready:
                results = iter(batch.task.result())
                for record in batch.records:
                    msg, item = record.msg, record.item
                    result = item if isinstance(item, InvalidInput) else next(results)
                    key = (msg.topic(), msg.partition())
                    if self._revoked_at.get(key, 0) > batch.epoch:
                        released += 1  # revoked since it was polled: its new owner redoes it
                        continue
                    offsets[key] = msg.offset() + 1
                    self._finish(record, Context(None), result, outgoing)
            if released:
                self.records_released += released
                log.info(
                    "%s: %d records of revoked partitions left to their new owner",
                    self.spec.name,
                    released,
                )
            if self.spec.before_commit is not None:
                self.spec.before_commit()
            self._produce_all(outgoing)
            await asyncio.get_running_loop().run_in_executor(None, self._commit, offsets)
        now = time.perf_counter()
        for batch in ready:
            self.batches_committed += 1
            self.metrics.observe("batch_seconds", now - batch.started)
            self.metrics.observe("batch_records", batch.size)

    def _handle_sync(self, message: Message, ctx: Context) -> Sequence[Emit] | InvalidInput:
        handler = cast(SyncHandler, self.spec.handler)
        started = time.perf_counter()

        def attempt() -> Sequence[Emit]:
            if ctx.state is not None:
                ctx.state.discard()  # an attempt that failed wrote nothing
            return handler(message, ctx)

        try:
            return self.config.retry.run(attempt, sleep=self._sleep, on_retry=self._count_retry)
        except InvalidInput as exc:
            return exc
        finally:
            self.metrics.observe("handler_seconds", time.perf_counter() - started)

    def _finish(
        self,
        record: _Decoded,
        ctx: Context,
        result: Sequence[Emit] | InvalidInput,
        outgoing: list[_Outgoing],
    ) -> None:
        """Add a record's encoded outputs to ``outgoing`` and keep its state writes, or add its
        dead letter instead.

        Every output is encoded before any is produced. A record whose output carries text that
        cannot be encoded (half of a surrogate pair, from input the stage passed on), or whose
        output or state write is too large for one Kafka record (the producer's
        ``message.max.bytes``), is dead-lettered whole, its state writes dropped, instead of
        failing the batch on every redelivery. Any other encoding error is a bug in the stage
        and stops it.
        """
        if isinstance(result, InvalidInput):
            outgoing.append(self._dead_letter(record, result))
            return
        try:
            encoded = [(emit, emit.key.encode(), self._encode(emit)) for emit in result]
        except UnicodeEncodeError as exc:
            why = error_summary(exc)
            reason = f"an output of this record holds text that cannot be encoded: {why}"
            outgoing.append(self._dead_letter(record, InvalidInput(reason)))
            return
        for emit, key, value in encoded:
            size = len(key) + len(value) + sum(len(k) + len(v) for k, v in emit.headers.items())
            if size > self._max_output_bytes:
                reason = (
                    f"an output of this record to {emit.topic} is {size} bytes, more than the"
                    f" {self._max_output_bytes} one record may hold"
                )
                outgoing.append(self._dead_letter(record, InvalidInput(reason)))
                return
        largest = ctx.state.largest_write() if ctx.state is not None else None
        if largest is not None and largest[1] > self._max_output_bytes:
            reason = (
                f"the state this record would keep for {largest[0]!r} is {largest[1]} bytes,"
                f" more than the {self._max_output_bytes} one changelog record may hold"
            )
            outgoing.append(self._dead_letter(record, InvalidInput(reason)))
            return
        msg = record.msg
        self.config.dlq_budget.record(False, (msg.topic(), msg.partition(), msg.offset()))
        for emit, key, value in encoded:
            outgoing.append(_Outgoing(emit.topic, key, value, emit.headers, None))
            self.metrics.incr("records_out", topic=emit.topic)
        if ctx.state is not None:
            ctx.state.merge_into_batch()

    async def _handle_all_async(
        self, messages: list[Message]
    ) -> list[Sequence[Emit] | InvalidInput]:
        """Every message's result, handled concurrently (at most ``max_inflight`` at once).

        A fatal error in one handler is raised once the others have finished, or the drain
        timeout has run out (those still running are then cancelled): see :meth:`_let_finish`.
        """
        if not messages:
            return []  # every record of the poll was dead-lettered at decoding
        handler = cast(AsyncHandler, self.spec.handler)
        limit = cast(asyncio.Semaphore, self._limit)
        ctx = Context(None)

        async def one(message: Message) -> Sequence[Emit] | InvalidInput:
            async with limit:
                if self._failing_until is not None:
                    raise _NotStartedError  # a fatal error elsewhere: nothing of this is committed
                started = time.perf_counter()
                self._inflight += 1
                self.metrics.set("inflight_handlers", self._inflight)
                try:
                    return await self.config.retry.run_async(
                        lambda: handler(message, ctx),
                        sleep=self._async_sleep,
                        on_retry=self._count_retry,
                    )
                except InvalidInput as exc:
                    return exc
                finally:
                    self._inflight -= 1
                    self.metrics.set("inflight_handlers", self._inflight)
                    self.metrics.observe("handler_seconds", time.perf_counter() - started)

        tasks = [asyncio.ensure_future(one(m)) for m in messages]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [
                error
                for t in tasks
                if t.done() and not t.cancelled() and (error := t.exception()) is not None
            ]
            if failed:
                await self._let_finish(tasks, failed[0])
                raise failed[0]
            return [t.result() for t in tasks]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _encode(self, emit: Emit) -> bytes:
        """The output's value in its topic's contract. An undeclared output topic is a bug in
        the stage: :class:`UndeclaredOutput`, which stops it."""
        if emit.topic not in self._outputs:
            raise UndeclaredOutput(f"stage {self.spec.name} does not declare output {emit.topic!r}")
        return self.codec.encode(emit.topic, emit.value)

    def _produce_all(self, outgoing: list[_Outgoing]) -> None:
        """Hand a transaction's records to the producer in one tight loop.

        They are encoded before (in :meth:`_finish`), not in between: records that reach the
        producer within a moment leave in one produce request per partition (the producer
        sends one partition per request), and their partitions are registered with the
        transaction coordinator together (one AddPartitionsToTxn in flight at a time). Produced
        as each was encoded, a batch's records trickled in and went out in more, smaller
        requests: 0.89 produce requests per complaint in a burst against 0.51 now, 5.2 against
        4.4 at a steady 100 complaints/s (docs/benchmarks.md).
        """
        producer = cast(Producer, self._producer)
        for record in outgoing:
            kwargs: dict[str, Any] = {"key": record.key, "value": record.value}
            if record.headers:
                kwargs["headers"] = list(record.headers.items())
            if record.partition is not None:
                kwargs["partition"] = record.partition
            while True:
                try:
                    producer.produce(record.topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)

    def _dead_letter(self, record: _Decoded, exc: InvalidInput) -> _Outgoing:
        """The dead letter for ``record`` (to be produced in its batch's transaction)."""
        msg = record.msg
        dlq = f"{msg.topic()}.dlq"
        letter = dead_letter(
            stage=self.spec.name,
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            key=msg.key(),
            value=msg.value(),
            reason=exc.reason,
            error_type=type(exc).__name__,
            timestamp_ms=_timestamp_ms(msg),
            original_headers=record.headers,
        )
        log.warning(
            "%s: %s[%d]@%d -> %s: %s",
            self.spec.name,
            msg.topic(),
            msg.partition(),
            msg.offset(),
            dlq,
            exc.reason,
        )
        envelope = self.codec.encode(dlq, letter.envelope)
        self.metrics.incr("records_dlq", topic=msg.topic(), kind=type(exc).__name__)
        self.config.dlq_budget.record(True, (msg.topic(), msg.partition(), msg.offset()))
        return _Outgoing(dlq, letter.key, envelope, letter.headers, None)

    def _commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """Commit the batch's outputs and ``offsets``: the transaction (exactly-once), or the
        deliveries and then the offsets (at-least-once). A commit that carries offsets is
        progress: the count of batches put back in a row starts again."""
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        if self._eos:
            self._commit_transaction(tps)
        else:
            self._commit_delivered(tps)
        if tps:
            self._put_back_in_a_row = 0

    def _commit_delivered(self, tps: list[TopicPartition]) -> None:
        producer = cast(Producer, self._producer)
        remaining = producer.flush(self.config.commit_timeout_s)
        if remaining or self._delivery_errors:
            errors, self._delivery_errors = self._delivery_errors, []
            raise KafkaException(errors[0] if errors else "delivery timed out")
        if tps:
            cast(Consumer, self._consumer).commit(offsets=tps, asynchronous=False)

    def _commit_transaction(self, tps: list[TopicPartition]) -> None:
        producer = cast(Producer, self._producer)
        consumer = cast(Consumer, self._consumer)
        # One deadline for the whole commit, so that a broker that keeps timing out cannot
        # hold the loop (and a stopping pod) past it: then the batch is aborted and the process
        # exits, and the batch is redelivered.
        deadline = time.monotonic() + self.config.commit_timeout_s

        def count_retry() -> None:
            self.metrics.incr("retries", kind="transaction")

        if tps:
            group = consumer.consumer_group_metadata()
            retry_transactional(
                lambda timeout: producer.send_offsets_to_transaction(tps, group, timeout),
                deadline,
                on_retry=count_retry,
            )
        retry_transactional(producer.commit_transaction, deadline, on_retry=count_retry)

    def _abort_quietly(self) -> None:
        producer = self._producer
        if producer is None:
            return
        try:
            producer.abort_transaction(self.config.commit_timeout_s)
        except KafkaException as exc:
            log.warning("abort_transaction failed: %s", exc)


def retry_transactional(
    call: Callable[[float], object],
    deadline: float,
    *,
    on_retry: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """``call(timeout)``, a transactional call of the producer, retried while its error is
    retriable, ``_TXN_RETRIES`` attempts at most, until ``deadline`` (on ``clock``). Each attempt
    is given the time left (:func:`txn_call_timeout`). Fencing and other fatal errors are raised
    as :class:`Fenced`; the last error otherwise as it is. ``on_retry`` is told of each retry."""
    attempt = 0
    while True:
        attempt += 1
        try:
            call(txn_call_timeout(deadline, clock()))
            return
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.retriable() and attempt < _TXN_RETRIES and clock() < deadline:
                on_retry()
                continue
            if err.fatal():
                raise Fenced(f"producer is fenced or fatal: {err.str()}") from exc
            raise


def txn_call_timeout(deadline: float, now: float) -> float:
    """Seconds a transactional call made at ``now`` may block: the time left until
    ``deadline``, but at least :data:`TXN_CALL_MIN_S`."""
    return max(deadline - now, TXN_CALL_MIN_S)


MAX_PUT_BACK_IN_A_ROW = 3
"""Failed commits put back in a row after which the next such failure stops the stage
instead."""

_GROUP_MOVED_ON = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError._ASSIGNMENT_LOST,
    }
)
"""The errors of an offset commit (in a transaction or not) made after the group moved on
without this instance, or while it rebalances."""


def may_put_back(err: KafkaError, *, eos: bool, in_a_row: int) -> bool:
    """Whether a stage puts back the batches whose commit failed with ``err``, after
    ``in_a_row`` commits put back with none made since: for an error of
    :data:`_GROUP_MOVED_ON` that is not fatal and, exactly once (``eos``), only aborts the
    transaction; and not after :data:`MAX_PUT_BACK_IN_A_ROW` (then every batch runs that
    long, and a restart, counted and alerted on, says so)."""
    if err.fatal() or err.code() not in _GROUP_MOVED_ON:
        return False
    if eos and not err.txn_requires_abort():
        return False
    return in_a_row < MAX_PUT_BACK_IN_A_ROW


class _NotStartedError(Exception):
    """A handler not started because a fatal error stops the stage."""


def _text_key(key: bytes | None) -> str | None:
    """A record's key as text; a key that is not UTF-8 makes the record :class:`InvalidInput`
    (keys are dispute ids, and every output is keyed by one)."""
    if key is None:
        return None
    try:
        return key.decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"record key is not UTF-8: {exc.reason} at byte {exc.start}") from exc


def _timestamp_ms(msg: Any) -> int | None:
    """The record's timestamp, or ``None`` when it has none."""
    kind, stamp = msg.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE else int(stamp)


def _header_list(msg: Any) -> HeaderList:
    """The record's headers, in order, repeated names and all. Call it once per record (see
    :class:`_Decoded`). A header name that is not UTF-8 makes the record :class:`InvalidInput`:
    its dead letter then carries no headers."""
    try:
        headers = msg.headers() or []
    except (SystemError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"record headers cannot be read (a header name is not UTF-8?): {error_summary(exc)}"
        ) from exc
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in headers]
