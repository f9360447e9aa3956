"""Pure pieces of the runtime: retry schedule, DLQ budget, staged state, codecs."""

from __future__ import annotations

import dataclasses
import gc
import io
import random
from collections.abc import Sequence
from datetime import UTC, datetime

import fastavro
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from refund_bench.codec import Codec, FingerprintFraming
from refund_bench.errors import (
    REASON_LIMIT,
    DlqLimitExceeded,
    InvalidInput,
    TransientError,
    error_summary,
)
from refund_bench.gc_tuning import tune_gc
from refund_bench.llm.client import LlmUnavailable
from refund_bench.retry import RetryPolicy, retry_after_seconds, retry_kind
from refund_bench.runtime.dlq import (
    HEADER_FRAMING_BYTES,
    MAX_KEY_BYTES,
    MAX_ORIGINAL_BYTES,
    MAX_ORIGINAL_HEADER_BYTES,
    MAX_REASON_BYTES,
    MAX_REASON_CHARS,
    DlqBudget,
    dead_letter,
)
from refund_bench.runtime.messages import Context, Emit, Message
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.runtime.runner import RuntimeConfig, StageRunner, StageSpec
from refund_bench.runtime.selftest import counter_spec
from refund_bench.runtime.state import BatchState, RecordState, StateStore, encode_state
from refund_bench.topics import Topic


def test_retry_waits_1_2_4_8_seconds_plus_jitter_then_gives_up() -> None:
    slept: list[float] = []
    calls = 0

    def always_busy() -> None:
        nonlocal calls
        calls += 1
        raise TransientError("429")

    policy = RetryPolicy(jitter_seconds=0.5, rng=random.Random(7))
    with pytest.raises(TransientError):
        policy.run(always_busy, sleep=slept.append)
    assert calls == 5
    assert [int(s) for s in slept] == [1, 2, 4, 8]
    assert all(0 <= s - b <= 0.5 for s, b in zip(slept, [1, 2, 4, 8], strict=True))


def test_retry_returns_after_transient_failures_and_never_retries_invalid_input() -> None:
    slept: list[float] = []
    attempts: list[Exception | str] = [TransientError("503"), TransientError("timeout"), "ok"]

    def flaky() -> str:
        outcome = attempts.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert RetryPolicy().run(flaky, sleep=slept.append) == "ok"
    assert len(slept) == 2

    calls = 0

    def invalid() -> None:
        nonlocal calls
        calls += 1
        raise InvalidInput("bad")

    with pytest.raises(InvalidInput):
        RetryPolicy().run(invalid, sleep=slept.append)
    assert calls == 1


def test_each_retried_failure_is_told_by_what_failed_and_the_last_one_is_not() -> None:
    """``on_retry`` sees the failures that are retried (4 of 5 attempts), sync and async; the
    kind names the dependency, never the message."""
    import asyncio

    failures = [
        TransientError("HTTP 503", dependency="stripe"),
        LlmUnavailable("rate_limited", "slow down", 429),
        TransientError("schema registry: down", dependency="schema_registry"),
        TransientError("who knows"),
        TransientError("the last one", dependency="stripe"),
    ]
    told: list[str] = []

    def fails() -> None:
        raise failures[len(told)] if len(told) < 4 else failures[4]

    with pytest.raises(TransientError, match="the last one"):
        RetryPolicy().run(
            fails, sleep=lambda _: None, on_retry=lambda e: told.append(retry_kind(e))
        )
    assert told == ["stripe", "llm_rate_limited", "schema_registry", "other"]

    told.clear()

    async def fails_async() -> None:
        fails()

    async def no_wait(_: float) -> None:
        return None

    with pytest.raises(TransientError, match="the last one"):
        asyncio.run(
            RetryPolicy().run_async(
                fails_async, sleep=no_wait, on_retry=lambda e: told.append(retry_kind(e))
            )
        )
    assert told == ["stripe", "llm_rate_limited", "schema_registry", "other"]


async def _never() -> None:
    raise TransientError("busy")


def test_async_retry_awaits_what_a_plain_callable_returns() -> None:
    import asyncio

    async def value() -> str:
        return "done"

    assert asyncio.run(RetryPolicy().run_async(lambda: value())) == "done"


def test_async_retry_uses_the_injected_sleep() -> None:
    import asyncio

    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    with pytest.raises(TransientError):
        asyncio.run(RetryPolicy(attempts=3, jitter_seconds=0).run_async(_never, sleep=fake_sleep))
    assert slept == [1.0, 2.0]


def test_a_single_attempt_policy_raises_at_once_without_sleeping() -> None:
    slept: list[float] = []

    def busy() -> None:
        raise TransientError("429")

    with pytest.raises(TransientError):
        RetryPolicy(attempts=1).run(busy, sleep=slept.append)
    assert slept == []


def test_async_retry_succeeds_on_the_third_attempt_after_the_first_two_delays() -> None:
    import asyncio

    slept: list[float] = []
    outcomes: list[Exception | str] = [TransientError("503"), TransientError("429"), "ok"]

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    async def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    policy = RetryPolicy(jitter_seconds=0)
    assert asyncio.run(policy.run_async(flaky, sleep=fake_sleep)) == "ok"
    assert slept == [1.0, 2.0]


def test_a_retry_waits_at_least_what_the_failure_asks_up_to_the_cap_with_jitter_on_top() -> None:
    """A failure's ``retry_after_seconds`` is a least wait: the backoff stands where it is
    longer, the cap bounds it, and the jitter comes on top, in the first retry (a plain call)
    and in tenacity's later ones alike."""
    slept: list[float] = []
    outcomes: list[Exception | str] = [
        TransientError("429", retry_after_seconds=5),
        TransientError("429", retry_after_seconds=0.5),
        TransientError("503", retry_after_seconds=3600),
        TransientError("timeout"),
        "ok",
    ]

    def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    policy = RetryPolicy(jitter_seconds=0.5, max_retry_after_seconds=60, rng=random.Random(3))
    assert policy.run(flaky, sleep=slept.append) == "ok"
    assert [int(s) for s in slept] == [5, 2, 60, 8]
    assert all(0 <= s - b <= 0.5 for s, b in zip(slept, [5, 2, 60, 8], strict=True))
    assert slept[2] > 60, "jitter on top of the cap: replicas told the same wait spread out"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # passed: no wait
        ("Wednesday, 21-Oct-15 07:28:10 GMT", 10.0),  # the obsolete RFC 850 form
        ("-5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(
    value: str | None, seconds: float | None
) -> None:
    now = datetime(2015, 10, 21, 7, 28, tzinfo=UTC).timestamp()
    assert retry_after_seconds(value, now) == seconds


def test_dlq_budget_trips_only_when_most_of_a_window_fails() -> None:
    budget = DlqBudget(window=10, max_fraction=0.5, min_failures=3)
    for failed in [True, False, True, False, False, True, False, True, True]:
        budget.record(failed)  # 5 of 10: half is not "most"
    with pytest.raises(DlqLimitExceeded, match="6 of the last 10"):
        budget.record(True)


def test_a_restarted_stage_dead_letters_a_run_of_bad_records_a_long_running_one_would() -> None:
    """A new process's window starts empty: it still takes more than half the window's records
    failing to trip, so a run of bad records at the committed offset is dead-lettered instead of
    stopping the stage on every restart. A stage fed only garbage stops all the same."""
    restarted = DlqBudget()  # 200 records, half, at least 20
    for offset in range(100):
        restarted.record(True, ("ruling.cast", 0, offset))
    with pytest.raises(DlqLimitExceeded, match="101 of the last 101"):
        restarted.record(True, ("ruling.cast", 0, 100))


def test_a_record_read_again_counts_once() -> None:
    """A batch put back after a failed commit is polled again: its dead letters are the same
    records, not more failing input."""
    budget = DlqBudget(window=10, max_fraction=0.5, min_failures=3)
    for _ in range(3):  # the batch read three times: 5 failures, not 15
        for offset in range(5):
            budget.record(True, ("t", 0, offset))
    with pytest.raises(DlqLimitExceeded, match="6 of the last 6"):
        budget.record(True, ("t", 1, 0))


def test_a_batch_larger_than_the_window_read_again_counts_once() -> None:
    """A batch of 500 (the default) whose head and tail failed, 60 records each: no 200 records
    in a row hold more than 60 failures. Put back and read again, its tail must not be counted
    beside its head as if they had come one after the other."""
    budget = DlqBudget()  # 200 records, half, at least 20
    for _ in range(2):
        for offset in range(500):
            budget.record(offset < 60 or offset >= 440, ("verdict.decided", 3, offset))


def read_in_runs(runs: Sequence[tuple[bool, int, int]]) -> list[tuple[bool, int]]:
    """The (failed, offset) of each record a stage reads in ``runs``: each run is ``count``
    records that all failed or all passed, from ``back`` offsets before the next one not yet
    read (a batch put back and read again, then what follows it)."""
    records: list[tuple[bool, int]] = []
    following = 0
    for failed, count, back in runs:
        start = max(0, following - back)
        records += [(failed, offset) for offset in range(start, start + count)]
        following = max(following, start + count)
    return records


@example([(True, 20, 0), (False, 10, 0), (True, 20, 5)])  # 5 read again count once: trips at 35
@example([(True, 25, 0), (False, 25, 0), (True, 25, 0), (True, 1, 0)])  # 25 of 50 then 26
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30), st.integers(0, 20)), max_size=10))
def test_dlq_budget_trips_exactly_above_the_fraction_of_its_window(
    runs: list[tuple[bool, int, int]],
) -> None:
    """Against a plain model: each record counted once, by its position, over the last 50
    records counted; it trips when more than 25 of them failed (and at least 5)."""
    budget = DlqBudget(window=50, max_fraction=0.5, min_failures=5)
    seen: set[int] = set()
    recent: list[bool] = []
    for failed, offset in read_in_runs(runs):
        if offset not in seen:
            seen.add(offset)
            recent = [*recent, failed][-50:]
        if sum(recent) > 25:
            with pytest.raises(DlqLimitExceeded):
                budget.record(failed, offset)
            return
        budget.record(failed, offset)


def _store_with(
    partition: int,
    data: dict[str, object],
    *,
    retention_s: float | None = None,
    clock: _Clock | None = None,
) -> StateStore:
    """A store owning ``partition``, its keys restored as written at time 0, in ``data`` order."""
    store = StateStore("s", "s.changelog", retention_s=retention_s, clock=clock or _Clock())
    store.open(partition)
    for key, value in data.items():
        store.install(partition, key, encode_state(value), 0.0)
    return store


class _Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_record_state_sees_its_own_writes_then_the_batch_then_committed() -> None:
    store = _store_with(3, {"a": 1, "b": 2})
    batch = BatchState(store)
    first = RecordState(batch, 3)
    first.put("a", 10)
    first.delete("b")
    assert (first.get("a"), first.get("b")) == (10, None)
    first.merge_into_batch()
    second = RecordState(batch, 3)
    assert (second.get("a"), second.get("b")) == (10, None)
    discarded = RecordState(batch, 3)
    discarded.put("a", 99)  # this record goes to the DLQ: never merged
    assert store.values(3) == {"a": 1, "b": 2}, "nothing is committed before the transaction"
    assert sorted(batch.changelog_records()) == [(3, "a", b"10", {}), (3, "b", None, {})]
    batch.apply()
    assert store.values(3) == {"a": 10}


def test_keys_untouched_longer_than_retention_are_tombstoned_oldest_first() -> None:
    clock = _Clock()
    store = _store_with(0, {"a": 1, "b": 2}, retention_s=100.0, clock=clock)
    store.open(1)
    store.install(1, "c", encode_state(3), 50.0)
    clock.now = 99.0
    assert list(store.expired(10)) == [], "nothing is older than the retention yet"

    clock.now = 120.0  # a and b (written at 0) are past retention, c (at 50) is not
    batch = BatchState(store)
    record = RecordState(batch, 0)
    record.put("a", 10)  # rewritten by this batch: stays
    record.merge_into_batch()
    assert batch.expire(limit=10) == 1
    assert sorted(batch.changelog_records()) == [(0, "a", b"10", {}), (0, "b", None, {})]
    batch.apply()
    assert (store.values(0), store.values(1), store.size()) == ({"a": 10}, {"c": 3}, 2)

    clock.now = 219.0  # a was rewritten at 120: fresh until 220; c expires at 150
    assert list(store.expired(10)) == [(1, "c")]
    clock.now = 221.0
    assert sorted(store.expired(10)) == [(0, "a"), (1, "c")]


def test_expiry_takes_at_most_its_limit_per_batch() -> None:
    clock = _Clock(1000.0)
    store = _store_with(0, {f"k{i}": i for i in range(5)}, retention_s=1.0, clock=clock)
    batch = BatchState(store)
    assert batch.expire(limit=2) == 2
    batch.apply()
    assert sorted(store.committed(0)) == ["k2", "k3", "k4"], "the oldest two went first"


def test_a_write_may_set_its_own_retention_and_it_travels_in_a_header() -> None:
    clock = _Clock()
    store = _store_with(0, {}, retention_s=100.0, clock=clock)
    batch = BatchState(store)
    record = RecordState(batch, 0)
    record.put("settled", 1, retention_s=10.0)
    record.put("open", 2)
    record.merge_into_batch()
    assert sorted(batch.changelog_records()) == [
        (0, "open", b"2", {}),
        (0, "settled", b"1", {"state.retention.s": b"10.0"}),
    ]
    batch.apply()
    clock.now = 11.0
    assert list(store.expired(10)) == [(0, "settled")]

    again = BatchState(store)  # written again with the store's retention: 100 s from now
    record = RecordState(again, 0)
    record.put("settled", 3)
    record.merge_into_batch()
    again.apply()
    clock.now = 105.0
    assert list(store.expired(10)) == [(0, "open")]
    with pytest.raises(ValueError, match="retention must be positive"):
        RecordState(again, 0).put("x", 1, retention_s=0.0)


def test_a_store_without_retention_keeps_every_key() -> None:
    clock = _Clock(10.0**12)
    store = _store_with(0, {"a": 1}, clock=clock)
    batch = BatchState(store)
    assert batch.expire(limit=10) == 0
    assert list(store.expired(10)) == []


_writes = st.lists(
    st.tuples(st.sampled_from("abcdef"), st.floats(min_value=0.0, max_value=50.0)),
    max_size=30,
)


@given(_writes, st.floats(min_value=1.0, max_value=40.0))
def test_expiry_removes_exactly_the_keys_last_written_before_the_horizon(
    writes: list[tuple[str, float]], retention: float
) -> None:
    clock = _Clock()
    store = StateStore("s", "s.changelog", retention_s=retention, clock=clock)
    store.open(0)
    last: dict[str, float] = {}
    for key, step in writes:  # writes in time order, as batches commit them
        clock.now += step
        batch = BatchState(store)
        record = RecordState(batch, 0)
        record.put(key, clock.now)
        record.merge_into_batch()
        batch.apply()
        last[key] = clock.now
    clock.now += 10.0
    batch = BatchState(store)
    batch.expire(limit=len(last) + 1)
    batch.apply()
    horizon = clock.now - retention
    assert set(store.committed(0)) == {k for k, at in last.items() if at > horizon}


def test_state_of_an_unrestored_partition_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        StateStore("s", "s.changelog").committed(0)


def test_records_of_two_writer_schemas_each_resolve_against_the_contract() -> None:
    framing = FingerprintFraming()
    codec = Codec(framing, {"t": "bench.record"})
    older = {
        "type": "record",
        "name": "BenchRecord",
        "namespace": "refundbench.events",
        "fields": [{"name": "id", "type": "string"}, {"name": "seq", "type": "long"}],
    }
    body = io.BytesIO()
    body.write(b"\xc3\x01" + framing.remember(older))
    fastavro.schemaless_writer(body, fastavro.parse_schema(older), {"id": "r0", "seq": 1})
    old_record = body.getvalue()
    new_record = codec.encode("t", {"id": "r1", "seq": 2, "payload": "p"})
    for _ in range(2):  # the second round reads through the cached writer schemas
        assert codec.decode("t", old_record) == {"id": "r0", "seq": 1, "payload": ""}
        assert codec.decode("t", new_record) == {"id": "r1", "seq": 2, "payload": "p"}


def test_fingerprint_codec_round_trips_and_rejects_garbage() -> None:
    codec = Codec(FingerprintFraming(), {"t": "bench.record"})
    value = {"id": "r1", "seq": 5, "payload": "p"}
    assert codec.decode("t", codec.encode("t", value)) == value
    for bad in (b"", b"\x00\x01", b"\xc3\x01" + b"\x00" * 8 + b"x"):
        with pytest.raises(InvalidInput):
            codec.decode("t", bad)
    with pytest.raises(InvalidInput, match="trailing"):
        codec.decode("t", codec.encode("t", value) + b"\x00")


def test_a_value_that_cannot_be_decoded_is_described_without_its_text() -> None:
    """A dead letter's reason (logged, and in a header) says what and where, never the words:
    the repr of a text-decoding error would quote the whole complaint."""
    codec = Codec(FingerprintFraming(), {"t": "bench.record"})
    words = "Priya Sharma, priya@example.com, card ending 4242"
    good = codec.encode("t", {"id": "r1", "seq": 5, "payload": words})
    bad = good.replace(b"card", b"c\xffrd")
    with pytest.raises(InvalidInput) as caught:
        codec.decode("t", bad)
    assert caught.value.reason == (
        "cannot decode t value as Avro: UnicodeDecodeError: utf-8 invalid start byte at position 34"
    )
    assert "priya" not in caught.value.reason.casefold()


def test_a_long_library_message_is_cut_in_a_reason() -> None:
    summary = error_summary(ValueError("x" * 5000))
    assert summary == f"ValueError: {'x' * REASON_LIMIT}..."


def test_tune_gc_freezes_start_up_and_raises_only_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(0)
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0
        tune_gc(12_345)
        assert gc.get_threshold() == (12_345, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("spec", "config", "problem"),
    [
        (
            counter_spec("c", "in", "out"),
            RuntimeConfig("localhost:9", "g", "t", guarantee="at-least-once"),
            "exactly-once only",
        ),
        (
            dataclasses.replace(
                counter_spec("c", "in", "out"),
                inputs=(Topic("a", "bench.record"), Topic("b", "bench.record")),
            ),
            RuntimeConfig("localhost:9", "g", "t"),
            "range assignor",
        ),
    ],
)
def test_a_stateful_stage_refuses_what_would_lose_its_state(
    spec: StageSpec, config: RuntimeConfig, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        StageRunner(spec, config, FingerprintFraming())


def test_a_dead_letter_fits_one_record_even_for_an_input_that_filled_one() -> None:
    value = b"\x00" * 999_000
    letter = dead_letter(
        stage="judge",
        topic="grievance.extracted",
        partition=3,
        offset=41,
        key=b"d-1",
        value=value,
        reason="x" * 50_000,
        error_type="InvalidInput",
    )
    envelope, headers = letter.envelope, letter.headers
    assert envelope["original_value"] == value[:MAX_ORIGINAL_BYTES]
    assert (letter.key, envelope["original_key"]) == (b"d-1", b"d-1")
    assert envelope["reason"].startswith("x" * (MAX_REASON_CHARS - 1) + "…")
    assert envelope["reason"].endswith(
        f"[original value cut to {MAX_ORIGINAL_BYTES} of 999000 bytes]"
    )
    assert headers["dlq.original.bytes"] == b"999000"
    assert headers["dlq.reason"] == envelope["reason"].encode()
    codec = Codec(FingerprintFraming(), {"grievance.extracted.dlq": "dead_letter"})
    record = codec.encode("grievance.extracted.dlq", envelope)
    assert len(record) + sum(len(k) + len(v) for k, v in headers.items()) < 1_000_000


def test_a_dead_letter_fits_one_record_even_for_a_key_that_filled_most_of_one() -> None:
    """The key is in a dead letter twice (its own key and ``original_key``)."""
    key, value = b"k" * 600_000, b"v" * 390_000
    letter = dead_letter(
        stage="extractor", topic="complaint.received", partition=0, offset=7, key=key,
        value=value, reason="record key is not the dispute id", error_type="InvalidInput",
    )  # fmt: skip
    assert letter.key == letter.envelope["original_key"] == key[:MAX_KEY_BYTES]
    assert letter.envelope["original_value"] == value
    assert letter.envelope["reason"] == (
        f"record key is not the dispute id [original key cut to {MAX_KEY_BYTES} of 600000 bytes]"
    )
    assert (letter.headers["dlq.original.key.bytes"], letter.headers["dlq.original.bytes"]) == (
        b"600000",
        b"390000",
    )
    codec = Codec(FingerprintFraming(), {"complaint.received.dlq": "dead_letter"})
    record = codec.encode("complaint.received.dlq", letter.envelope)
    sizes = len(letter.key) + len(record) + sum(len(k) + len(v) for k, v in letter.headers.items())
    assert sizes < 1_000_000


def test_a_dead_letter_keeps_the_headers_that_fit_and_still_fits_one_record() -> None:
    """Upstream's headers are kept in order up to 64 KiB; with the largest key and value kept
    too, the dead letter is still one record."""
    big = [(f"h{i}", b"v" * 10_000) for i in range(10)]
    letter = dead_letter(
        stage="judge", topic="grievance.extracted", partition=3, offset=41, key=b"k" * 5000,
        value=b"\x00" * 999_000, reason="x" * 50_000, error_type="InvalidInput",
        timestamp_ms=1_764_000_000_123, original_headers=big,
    )  # fmt: skip
    kept = letter.envelope["original_headers"]
    assert [h["name"] for h in kept] == [f"h{i}" for i in range(6)], "6 x 10,013 bytes fit"
    assert letter.envelope["reason"].endswith("[4 of 10 original headers left out: over 64 KiB]")
    assert letter.envelope["original_timestamp"] == 1_764_000_000_123
    codec = Codec(FingerprintFraming(), {"grievance.extracted.dlq": "dead_letter"})
    record = codec.encode("grievance.extracted.dlq", letter.envelope)
    sizes = len(letter.key) + len(record) + sum(len(k) + len(v) for k, v in letter.headers.items())
    assert sizes < 1_000_000


def test_a_small_dead_letter_is_kept_whole() -> None:
    letter = dead_letter(
        stage="s", topic="t", partition=0, offset=0, key=None, value=b"abc", reason="bad",
        error_type="InvalidInput",
    )  # fmt: skip
    assert (letter.envelope["original_value"], letter.envelope["reason"]) == (b"abc", "bad")
    assert (letter.key, letter.envelope["original_key"]) == (b"", None)
    assert letter.headers["dlq.original.bytes"] == b"3"
    assert letter.headers["dlq.original.key.bytes"] == b"0"
    assert (letter.envelope["original_headers"], letter.envelope["original_timestamp"]) == (
        [],
        None,
    )


def test_a_retried_handler_sees_none_of_its_failed_attempts_writes() -> None:
    """A handler that counts, then fails on a dependency, is retried: the retry counts from the
    committed value, not from what the failed attempt staged."""
    failures = [TransientError("the order store is briefly away", dependency="orders")]

    def count_then_look_up(message: Message, ctx: Context) -> Sequence[Emit]:
        state = ctx.store()
        state.put("n", int(state.get("n") or 0) + 1)
        if failures:
            raise failures.pop()
        return [Emit("out", "k", {"seq": state.get("n")})]

    records = Topic("in", "bench.record"), Topic("out", "bench.record")
    spec = StageSpec("c", records[:1], records[1:], count_then_look_up, store="counts")
    registry = CollectorRegistry()
    runner = StageRunner(
        spec,
        RuntimeConfig("localhost:9", "g", "t"),
        FingerprintFraming(),
        metrics=PrometheusMetrics("c", registry),
        sleep=lambda _: None,
    )
    batch = BatchState(_store_with(0, {"n": 5}))
    ctx = Context(RecordState(batch, 0))
    emitted = runner._handle_sync(Message("in", 0, 0, "k", {}, {}, 0), ctx)
    assert emitted == [Emit("out", "k", {"seq": 6})]
    assert failures == [], "the first attempt failed and was retried"
    retried = {"stage": "c", "topic": "", "kind": "orders"}
    assert registry.get_sample_value("refund_bench_retries_total", retried) == 1


def test_a_dead_letter_of_a_full_record_with_a_long_wide_reason_fits_one_record() -> None:
    """Everything at its limit at once: a value of 900 KB, 64 KiB of headers, a key cut to
    1 KiB, and a reason of 4,000 four-byte characters (an error quoting an emoji-laden answer),
    which the record carries twice (envelope and header). It stays below the producer's
    1,000,000-byte ``message.max.bytes``."""
    letter = dead_letter(
        stage="judge", topic="grievance.extracted", partition=3, offset=41, key=b"k" * 5000,
        value=b"\xff" * 1_000_000, reason="\U0001f600" * 5000, error_type="InvalidInput",
        original_headers=[("h", b"v" * 1000)] * 70,
    )  # fmt: skip
    assert len(letter.envelope["reason"].encode()) <= MAX_REASON_BYTES + 200
    assert letter.headers["dlq.reason"] == letter.envelope["reason"].encode()
    codec = Codec(FingerprintFraming(), {"grievance.extracted.dlq": "dead_letter"})
    record = codec.encode("grievance.extracted.dlq", letter.envelope)
    headers = sum(len(name) + len(value) for name, value in letter.headers.items())
    assert len(record) + headers + len(letter.key) < 990_000


def test_a_great_many_empty_headers_still_leave_a_dead_letter_that_fits_one_record() -> None:
    """An empty header costs the envelope a few bytes even though its name and value are empty:
    200,000 of them beside a large value would otherwise make a dead letter too big to produce,
    and the stage would stop on the record instead of dead-lettering it."""
    letter = dead_letter(
        stage="judge", topic="grievance.extracted", partition=3, offset=41, key=b"k",
        value=b"\xff" * 400_000, reason="undecodable", error_type="InvalidInput",
        original_headers=[("", b"")] * 200_000,
    )  # fmt: skip
    kept = len(letter.envelope["original_headers"])
    assert kept == MAX_ORIGINAL_HEADER_BYTES // HEADER_FRAMING_BYTES
    assert letter.envelope["reason"].endswith(
        f"[{200_000 - kept} of 200000 original headers left out: over 64 KiB]"
    )
    codec = Codec(FingerprintFraming(), {"grievance.extracted.dlq": "dead_letter"})
    record = codec.encode("grievance.extracted.dlq", letter.envelope)
    assert len(record) < 400_000 + MAX_ORIGINAL_HEADER_BYTES + 10_000
