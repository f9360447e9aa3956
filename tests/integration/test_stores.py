"""The one-statement stores against real PostgreSQL, on the stages' autocommit pool.

Each keeps its first-writer-wins contract without a transaction around it: the snapshot a
dispute keeps, the order as one consistent read, the ledger round and its first outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from refund_bench.db.orders import OrderReader, UnreadableOrder, load_orders, upsert_orders
from refund_bench.db.snapshots import (
    AsyncSnapshotReader,
    DisputeToFreeze,
    FrozenDispute,
    freeze_dispute,
    freeze_disputes,
)
from refund_bench.domain import OrderRecord
from refund_bench.errors import InvalidInput
from refund_bench.resources import pg_pool
from refund_bench.samples import SAMPLE_ORDERS, own_copy
from services.extractor.evidence import freeze
from services.payout.ledger import PayoutLedger
from tests.ledger_rows import seed_round
from tests.pg_helpers import WAITING_ON_SQL

pytestmark = pytest.mark.stack

T = TypeVar("T")


def _with_pool(database: str, work: Callable[[AsyncConnectionPool[Any]], Awaitable[T]]) -> T:
    async def go() -> T:
        pool = pg_pool(database)
        await pool.open()
        try:
            return await work(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


def _to_freeze(dispute_id: str, snapshot_json: str, sha256: str) -> DisputeToFreeze:
    return DisputeToFreeze(
        dispute_id=dispute_id,
        order_id="order-1840",
        customer_id="cust-77",
        complaint_text="the raita leaked",
        received_at=datetime(2026, 12, 2, 19, 0, tzinfo=UTC),
        snapshot_json=snapshot_json,
        snapshot_sha256=sha256,
        channel="app",
    )


def test_a_dispute_keeps_the_snapshot_frozen_first(database: str) -> None:
    first, changed = freeze(SAMPLE_ORDERS[0]), freeze(SAMPLE_ORDERS[1])
    assert first.sha256 != changed.sha256
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"
    other = f"d-store-{uuid.uuid4().hex[:8]}"

    async def work(pool: AsyncConnectionPool[Any]) -> list[FrozenDispute]:
        return [
            await freeze_dispute(pool, _to_freeze(dispute, first.json, first.sha256)),
            # A redelivery after the order's evidence changed: the first snapshot still wins.
            await freeze_dispute(pool, _to_freeze(dispute, changed.json, changed.sha256)),
            # Another dispute on the same evidence shares the stored snapshot.
            await freeze_dispute(pool, _to_freeze(other, first.json, first.sha256)),
        ]

    results = [(r.snapshot_json, r.snapshot_sha256) for r in _with_pool(database, work)]
    assert results == [(first.json, first.sha256)] * 3
    with psycopg.connect(database) as conn:
        kept = conn.execute(
            "SELECT snapshot_sha256 FROM disputes WHERE dispute_id = %s", (dispute,)
        ).fetchone()
        copies = conn.execute(
            "SELECT count(*) FROM evidence_snapshots WHERE sha256 = %s", (first.sha256,)
        ).fetchone()
    assert kept == (first.sha256,)
    assert copies == (1,)


def test_one_statement_freezes_a_batch_as_one_at_a_time_would(database: str) -> None:
    """New and stored disputes, one given twice with other evidence, and two disputes on the
    same evidence, in one call: each answer is what freezing them in turn would give."""
    first, changed = freeze(SAMPLE_ORDERS[0]), freeze(SAMPLE_ORDERS[1])
    stored, twice, shared = (f"d-store-{uuid.uuid4().hex[:8]}" for _ in range(3))

    async def work(pool: AsyncConnectionPool[Any]) -> list[FrozenDispute]:
        await freeze_dispute(pool, _to_freeze(stored, first.json, first.sha256))
        return await freeze_disputes(
            pool,
            [
                _to_freeze(stored, changed.json, changed.sha256),
                _to_freeze(twice, changed.json, changed.sha256),
                _to_freeze(shared, first.json, first.sha256),
                _to_freeze(twice, first.json, first.sha256),
            ],
        )

    results = [(r.snapshot_json, r.snapshot_sha256) for r in _with_pool(database, work)]
    ours, theirs = (first.json, first.sha256), (changed.json, changed.sha256)
    assert results == [ours, theirs, ours, theirs]
    with psycopg.connect(database) as conn:
        kept = conn.execute(
            "SELECT dispute_id, snapshot_sha256 FROM disputes WHERE dispute_id = ANY(%s)",
            ([stored, twice, shared],),
        ).fetchall()
    assert sorted(kept) == sorted(
        [(stored, first.sha256), (twice, changed.sha256), (shared, first.sha256)]
    )


def test_what_is_stored_tells_a_redelivery_from_another_complaint_under_the_same_id(
    database: str,
) -> None:
    snapshot = freeze(SAMPLE_ORDERS[0])
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"
    given = _to_freeze(dispute, snapshot.json, snapshot.sha256)
    other_words = dataclasses.replace(given, complaint_text="the naan was burnt")
    other_order = dataclasses.replace(given, order_id="order-2210")

    async def work(pool: AsyncConnectionPool[Any]) -> list[FrozenDispute]:
        return await freeze_disputes(pool, [given, other_words, given, other_order])

    asked = [given, other_words, given, other_order]
    stored = _with_pool(database, work)
    assert [s.holds(g) for s, g in zip(stored, asked, strict=True)] == [True, False, True, False]
    assert {(s.order_id, s.complaint_text) for s in stored} == {("order-1840", "the raita leaked")}


def test_a_complaint_is_stored_and_read_back_exactly_whatever_characters_it_holds(
    database: str,
) -> None:
    """Text an array literal would have to quote or escape (quotes, backslashes, braces, commas,
    the word NULL, an empty string, characters beyond ASCII) is stored and answered as given,
    however the statement sends its columns (as binary arrays now, as text literals before);
    so is the channel the complaint came from."""
    snapshot = freeze(SAMPLE_ORDERS[0])
    texts = [
        'He said "it\'s fine", then {left}, \\ and, NULL',
        "NULL",
        "",
        "राइता बैग में लीक हो गया 😡 — ¼ of it",
    ]
    given = [
        dataclasses.replace(
            _to_freeze(f"d-store-{uuid.uuid4().hex[:8]}", snapshot.json, snapshot.sha256),
            complaint_text=text,
            customer_id=f'cust {{{n}}}, "x"',
            channel=text or "app",
        )
        for n, text in enumerate(texts)
    ]

    async def work(pool: AsyncConnectionPool[Any]) -> list[FrozenDispute]:
        return await freeze_disputes(pool, given)

    stored = _with_pool(database, work)
    assert [(s.complaint_text, s.customer_id) for s in stored] == [
        (g.complaint_text, g.customer_id) for g in given
    ]
    assert all(s.holds(g) for s, g in zip(stored, given, strict=True))
    assert {(s.snapshot_json, s.snapshot_sha256) for s in stored} == {
        (snapshot.json, snapshot.sha256)
    }
    with psycopg.connect(database) as conn:
        kept = conn.execute(
            "SELECT complaint_text, channel FROM disputes WHERE dispute_id = ANY(%s)"
            " ORDER BY array_position(%s::text[], dispute_id)",
            ([g.dispute_id for g in given], [g.dispute_id for g in given]),
        ).fetchall()
    assert kept == [(text, text or "app") for text in texts]


def test_a_dispute_stored_concurrently_by_another_writer_is_read_back(database: str) -> None:
    """The race of a rebalance: another instance's uncommitted insert of the same dispute.

    Our statement waits on it; once it commits, the statement's own view of the tables (taken
    before) cannot show the row, so the store reads it again and answers with that snapshot.
    """
    theirs, ours = freeze(SAMPLE_ORDERS[0]), freeze(SAMPLE_ORDERS[1])
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"

    async def work(pool: AsyncConnectionPool[Any]) -> FrozenDispute:
        async with await psycopg.AsyncConnection.connect(database) as other:
            await other.execute(
                "INSERT INTO evidence_snapshots (sha256, snapshot) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING",
                (theirs.sha256, theirs.json),
            )
            args = _to_freeze(dispute, theirs.json, theirs.sha256)
            await other.execute(
                "INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text,"
                " received_at, snapshot_sha256) VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    dispute,
                    args.order_id,
                    args.customer_id,
                    args.complaint_text,
                    args.received_at,
                    theirs.sha256,
                ),
            )
            ours_task = asyncio.create_task(
                freeze_dispute(pool, _to_freeze(dispute, ours.json, ours.sha256))
            )
            await _until_a_backend_waits_on_a_lock(database, other.info.backend_pid)
            await other.commit()
        return await ours_task

    stored = _with_pool(database, work)
    assert (stored.snapshot_json, stored.snapshot_sha256) == (theirs.json, theirs.sha256)


async def _until_a_backend_waits_on_a_lock(
    database: str, holder_pid: int, timeout_s: float = 10.0
) -> None:
    """Until a session waits for a lock the session ``holder_pid`` holds (whatever else shares
    the database)."""
    async with await psycopg.AsyncConnection.connect(database, autocommit=True) as watcher:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            cur = await watcher.execute(WAITING_ON_SQL, (holder_pid,))
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.01)  # polling a condition, with a deadline
    raise AssertionError("the store never waited on the other writer's insert")


def test_the_snapshot_reader_verifies_and_caches_by_hash(database: str) -> None:
    snapshot = freeze(SAMPLE_ORDERS[0])
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"

    async def work(pool: AsyncConnectionPool[Any]) -> tuple[Any, Any]:
        await freeze_dispute(pool, _to_freeze(dispute, snapshot.json, snapshot.sha256))
        reader = AsyncSnapshotReader(pool, cache_size=1)
        first = await reader.get(snapshot.sha256)
        # A cache hit needs no connection: with the pool closed, only the cache can answer.
        await pool.close()
        return first, await reader.get(snapshot.sha256)

    first, second = _with_pool(database, work)
    assert first == snapshot.data
    assert second is first


def test_an_order_loads_with_its_items_in_line_order(database: str) -> None:
    order = SAMPLE_ORDERS[0]

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        reader = OrderReader(pool)
        # Lookups made together go out as one statement; each caller gets its own order.
        return list(
            await asyncio.gather(
                reader.get(order.order_id), reader.get("no-such"), reader.get(order.order_id)
            )
        )

    loaded, missing, again = _with_pool(database, work)
    assert missing is None
    assert again == loaded
    assert loaded.line_items == order.line_items
    # Timestamps come back in UTC: the same instants, written with another offset.
    instants = ("placed_at", "delivered_at")
    for name in instants:
        assert datetime.fromisoformat(getattr(loaded, name)) == datetime.fromisoformat(
            getattr(order, name)
        )
    assert loaded.model_dump(exclude=set(instants)) == order.model_dump(exclude=set(instants))


def test_an_item_ordered_in_two_lines_loads_as_one_line(database: str) -> None:
    """Two lines of one item (its name in another case, the same price and weight) load as its
    first line with both quantities: a grievance about it prices against three, and the order is
    not refused for naming an item twice. A name at two prices stays two lines."""
    base = own_copy(SAMPLE_ORDERS[0], uuid.uuid4().hex[:8])
    first, *others = base.line_items
    again = first.model_copy(update={"name": first.name.upper(), "quantity": 2})
    repeated = base.model_copy(update={"line_items": (first, *others, again)})
    dearer = own_copy(SAMPLE_ORDERS[0], uuid.uuid4().hex[:8])
    priced_apart = dearer.model_copy(
        update={
            "line_items": (
                *dearer.line_items,
                first.model_copy(update={"unit_price_minor": first.unit_price_minor + 1}),
            )
        }
    )
    with psycopg.connect(database, autocommit=True) as conn:
        upsert_orders(conn, [repeated, priced_apart])

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        async with pool.connection() as conn:
            return await load_orders(conn, [repeated.order_id, priced_apart.order_id])

    loaded, apart = _with_pool(database, work)
    assert isinstance(loaded, OrderRecord), loaded
    assert loaded.line_items == (
        first.model_copy(update={"quantity": first.quantity + 2}),
        *others,
    )
    freeze(loaded)  # one line per name: the evidence takes it
    assert isinstance(apart, OrderRecord), apart
    assert len(apart.line_items) == len(dearer.line_items) + 1
    with pytest.raises(InvalidInput, match="two line items"):
        freeze(apart)


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("unit_price_minor", 2**62, "line_items.0.unit_price_minor"),
        ("quantity", 2_000_000_000, "line_items.1.quantity"),
    ],
)
def test_an_order_the_evidence_model_refuses_is_unreadable_alone(
    database: str, column: str, value: int, named: str
) -> None:
    """Values the store accepts but no real order has (an amount pricing could not write to
    Avro) make that order unreadable, with the field named; the batch's other orders load."""
    bad = own_copy(SAMPLE_ORDERS[0], uuid.uuid4().hex[:8])
    line = 1 if column == "quantity" else 0
    with psycopg.connect(database, autocommit=True) as conn:
        upsert_orders(conn, [bad])
        conn.execute(
            f"UPDATE order_line_items SET {column} = %s WHERE order_id = %s AND line_no = %s",
            (value, bad.order_id, line + 1),
        )

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        reader = OrderReader(pool)
        return list(
            await asyncio.gather(reader.get(bad.order_id), reader.get(SAMPLE_ORDERS[0].order_id))
        )

    unreadable, good = _with_pool(database, work)
    assert isinstance(unreadable, UnreadableOrder)
    assert unreadable.order_id == bad.order_id
    assert unreadable.reason.startswith(f"{named}: Input should be less than or equal to")
    assert str(value) not in unreadable.reason
    assert isinstance(good, OrderRecord)
    assert good.order_id == SAMPLE_ORDERS[0].order_id


@pytest.mark.parametrize("reports", ["null", "5", '"rude driver"', '{"note": "rude"}', "[1]"])
def test_conduct_reports_that_are_not_a_list_of_texts_make_the_order_unreadable_alone(
    database: str, reports: str
) -> None:
    """The column is jsonb: any JSON value fits it. One that is not an array of texts is that
    order's unreadable field (never characters or keys frozen as reports, never a crash of the
    batch it was looked up in)."""
    bad = own_copy(SAMPLE_ORDERS[0], uuid.uuid4().hex[:8])
    with psycopg.connect(database, autocommit=True) as conn:
        upsert_orders(conn, [bad])
        conn.execute(
            "UPDATE orders SET partner_conduct_reports = %s::jsonb WHERE order_id = %s",
            (reports, bad.order_id),
        )

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        reader = OrderReader(pool)
        return list(
            await asyncio.gather(reader.get(bad.order_id), reader.get(SAMPLE_ORDERS[0].order_id))
        )

    unreadable, good = _with_pool(database, work)
    assert isinstance(unreadable, UnreadableOrder), unreadable
    assert unreadable.reason.startswith("partner_conduct_reports"), unreadable.reason
    assert "rude" not in unreadable.reason
    assert isinstance(good, OrderRecord)


@pytest.mark.parametrize(
    ("assignment", "named"),
    [
        ("placed_at = 'infinity'", "placed_at: not a time"),
        ("delivered_at = '-infinity'", "delivered_at: not a time"),
        ("delivered_at = '12026-01-01 00:00Z'", "delivered_at: not a time"),
        (
            "partner_conduct_reports = (repeat('[', 3000) || repeat(']', 3000))::jsonb",
            "partner_conduct_reports: JSON too deeply nested",
        ),
    ],
)
@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati"])
def test_a_time_or_json_python_cannot_hold_makes_the_order_unreadable_alone(
    database: str, assignment: str, named: str, zone: str
) -> None:
    """PostgreSQL stores ``infinity``, years past 9999 and JSON nested thousands deep, which
    the driver could not load: such an order is unreadable, and the orders looked up in the
    same statement load (no error fails the whole batch, which would stop the stage on every
    redelivery)."""
    bad = own_copy(SAMPLE_ORDERS[0], uuid.uuid4().hex[:8])
    with psycopg.connect(database, autocommit=True) as conn:
        upsert_orders(conn, [bad])
        conn.execute(
            f"UPDATE orders SET {assignment} WHERE order_id = %s",
            (bad.order_id,),
        )

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        async with pool.connection() as conn:
            await conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
            return await load_orders(conn, [bad.order_id, SAMPLE_ORDERS[0].order_id])

    unreadable, good = _with_pool(database, work)
    assert isinstance(unreadable, UnreadableOrder), unreadable
    assert unreadable.order_id == bad.order_id
    assert unreadable.reason.startswith(named), unreadable.reason
    assert isinstance(good, OrderRecord)
    assert good.order_id == SAMPLE_ORDERS[0].order_id


def test_an_orders_snapshot_hash_does_not_depend_on_the_sessions_time_zone(
    database: str,
) -> None:
    """Two extractors whose connections use different TimeZone settings freeze the same
    evidence to the same snapshot (its timestamps are written in UTC)."""

    async def load(zone: str) -> Any:
        async with await psycopg.AsyncConnection.connect(database) as conn:
            await conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
            (order,) = await load_orders(conn, ["order-1840"])
            return order

    kolkata, utc = asyncio.run(load("Asia/Kolkata")), asyncio.run(load("UTC"))
    assert kolkata.placed_at.endswith("+00:00")
    assert freeze(kolkata).sha256 == freeze(utc).sha256


def test_a_ledger_round_is_opened_once_and_keeps_its_first_outcome(database: str) -> None:
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"

    async def work(pool: AsyncConnectionPool[Any]) -> list[Any]:
        ledger = PayoutLedger(pool)

        def open_round(amount: int, key: str) -> Awaitable[Any]:
            return ledger.open_round(
                dispute_id=dispute,
                round_=1,
                amount_minor=amount,
                currency="INR",
                payment_reference=f"pi_{dispute}",  # the dispute's own payment
                idempotency_key=key,
            )

        opened = await open_round(68900, f"{dispute}-key-1")
        again = await open_round(99999, f"{dispute}-key-2")
        paid = await ledger.settle(dispute, 1, refund_id="re_1")
        late_failure = await ledger.settle(dispute, 1, error_code="card_declined")
        return [opened, again, paid, late_failure]

    opened, again, paid, late_failure = _with_pool(database, work)
    assert (opened.status, opened.amount_minor, opened.idempotency_key) == (
        "PENDING",
        68900,
        f"{dispute}-key-1",
    )
    assert again == opened
    assert (opened.opened, again.opened) == (True, False), "only the first open inserts"
    assert (paid.status, paid.stripe_refund_id, paid.error_code) == ("SUCCEEDED", "re_1", None)
    assert late_failure == paid


def test_a_call_counted_after_another_handler_forgot_its_refused_one_starts_the_keys_hours(
    database: str,
) -> None:
    """Two handlers pay one round (a redelivery during a rebalance): A opens it and Stripe
    refuses A's key (401), so A counts its call as never begun; B, which found the round open
    before that, counts its own call after. The round's 23 hours count from B's call, not from
    the settler's reservation (which could fail a round Stripe never took as stale)."""
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"

    async def work(pool: AsyncConnectionPool[Any]) -> tuple[Any, ...]:
        ledger = PayoutLedger(pool)
        for _handler in ("A", "B"):
            await ledger.open_round(
                dispute_id=dispute,
                round_=1,
                amount_minor=68900,
                currency="INR",
                payment_reference=f"pi_{dispute}",
                idempotency_key=f"{dispute}-key",
            )
        await ledger.forget_refused_call(dispute, 1)  # A's call, refused
        await ledger.record_attempt(dispute, 1)  # B's call
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT attempts, first_call_at IS NOT NULL FROM payout_ledger"
                " WHERE dispute_id = %s",
                (dispute,),
            )
            return tuple(await cur.fetchone() or ())

    assert _with_pool(database, work) == (1, True)


def test_a_call_counted_on_a_round_whose_earlier_calls_have_no_time_keeps_none(
    database: str,
) -> None:
    """A round an earlier release called Stripe for without recording when: a later call must
    not become its first, or the round's 23 hours would start again, and a call after Stripe
    forgot the key could refund twice. Its age counts from its opening."""
    dispute = f"d-store-{uuid.uuid4().hex[:8]}"
    seed_round(database, dispute, status="PENDING", attempts=2, age="20 hours")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "UPDATE payout_ledger SET first_call_at = NULL WHERE dispute_id = %s", (dispute,)
        )

    async def work(pool: AsyncConnectionPool[Any]) -> tuple[Any, ...]:
        await PayoutLedger(pool).record_attempt(dispute, 1)
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT attempts, first_call_at FROM payout_ledger WHERE dispute_id = %s",
                (dispute,),
            )
            return tuple(await cur.fetchone() or ())

    assert _with_pool(database, work) == (3, None)
