"""PostgreSQL access of the API and the desk. Parameterized SQL only.

Three outbox-style flows share one shape: a row is committed first (its id is then durable), and
publishing happens later under ``SELECT ... FOR UPDATE`` of that row, which is marked
``published`` in the same transaction. A crash between the broker's acknowledgement and the
commit leaves the row unpublished, so it is published again: consumers are idempotent on
``dispute_id`` (complaints), ``review_id`` (decisions) and dispute and round (refunds Stripe
reported failed, :mod:`services.api.refund_failures`). The row lock keeps two concurrent
publishers of one row from both publishing it.

A publisher holds its connection until the broker answers (up to ``PUBLISH_TIMEOUT_S``), so
those connections come from a pool of their own: with Kafka down, waiting publishers take at
most that pool, and the desk and the status API keep theirs. A publisher that gets no connection
within ``PUBLISH_WAIT_S`` raises :class:`PublishersBusy` (its row stays unpublished). Queries
wait at most ``DB_POOL_WAIT_S`` for a connection of the main pool (the pool's own timeout,
which the API sets so; the intake's raise :class:`DatabaseBusy`, the others psycopg's
``PoolTimeout``), so that a request is answered 503 at once
(:data:`DATABASE_UNAVAILABLE`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from refund_bench.db.payout_rounds import (
    CONFLICT_HOW_TO_CLOSE,
    CONFLICT_NOT_REPAYABLE,
    how_to_close,
    is_payout_failure_item,
    payout_again_item,
    payout_item,
    payout_item_round,
    settled_on_other_item,
    why_not_repayable,
)
from refund_bench.domain import ReviewDecision
from services.api import models as m

Row = dict[str, Any]
T = TypeVar("T")
REVIEW_KINDS = ("GRIEVANCE", "DISPUTE", "PAYOUT", "EXTRACTION")


@dataclass(frozen=True)
class IntakeRecord:
    idempotency_key: str
    body_sha256: str
    dispute_id: str
    order_id: str
    customer_id: str
    complaint_text: str
    channel: str
    received_at: datetime
    published: bool = False


@dataclass(frozen=True)
class IntakeSeen:
    """An idempotency key's record as last committed: its body's digest, its dispute and
    whether it is published."""

    body_sha256: str
    dispute_id: str
    published: bool


@dataclass(frozen=True)
class DecisionRecord:
    review_id: str
    dispute_id: str
    item_key: str
    kind: str
    grievance_id: str | None
    decision: str
    reviewer: str
    note: str
    decided_at: datetime
    published: bool = False


@dataclass(frozen=True)
class QueueItem:
    dispute_id: str
    item_key: str
    kind: str
    grievance_id: str | None
    reason: str
    created_at: datetime
    category: str | None
    grievance_text: str | None
    order_id: str | None


class ItemNotFound(Exception):  # noqa: N818 - reads as the condition
    """No review item with that key for that dispute."""


class AlreadyDecided(Exception):  # noqa: N818
    """The item already has a decision (``existing``; ``None`` if decided outside the desk)."""

    def __init__(self, existing: DecisionRecord | None) -> None:
        super().__init__("already decided")
        self.existing = existing


class NotDecidable(Exception):  # noqa: N818
    """The decision does not apply to this kind of item."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PublishersBusy(Exception):  # noqa: N818 - reads as the condition
    """Every publishing connection is held (publishers waiting for the broker): not published
    now; the row stays unpublished for a retry or the outbox."""


class DatabaseBusy(Exception):  # noqa: N818 - reads as the condition
    """Every connection of the main pool stayed taken for ``pool_wait_s``: nothing was read or
    written; the request may be retried."""


DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    DatabaseBusy,
    PoolTimeout,
    psycopg.OperationalError,
)
"""What a query raises when PostgreSQL is out of reach, too busy, or too slow (a connection
lost or refused, no connection free in time, a statement or lock timeout): the request may be
retried, and is answered 503 with ``Retry-After``."""


@dataclass(frozen=True)
class OutboxTable(Generic[T]):
    """A table whose rows are published once: ``key`` names a row, ``published`` and
    ``published_at`` record its publishing, ``oldest`` orders the unpublished ones, and ``make``
    builds a row's record from its ``columns``. Names are constants of the code, never input."""

    name: str
    columns: str
    key: str
    oldest: str
    make: Callable[[Row], T]

    @property
    def mark_sql(self) -> str:
        return (
            f"UPDATE {self.name} SET published = true, published_at = now()"  # noqa: S608
            f" WHERE {self.key} = %s"
        )


class Locked(Generic[T]):
    """A row held with ``FOR UPDATE`` until the surrounding context exits."""

    def __init__(self, row: T, conn: AsyncConnection[Any], mark_sql: str, key: str) -> None:
        self.row = row
        self._conn = conn
        self._mark_sql = mark_sql
        self._key = key

    async def mark_published(self) -> None:
        await self._conn.execute(self._mark_sql, (self._key,))


INTAKE = OutboxTable(
    "intake_requests",
    "idempotency_key, body_sha256, dispute_id, order_id, customer_id, complaint_text, channel,"
    " received_at, published",
    key="idempotency_key",
    oldest="received_at",
    make=lambda row: IntakeRecord(**row),
)
DECISIONS = OutboxTable(
    "review_decisions",
    "review_id, dispute_id, item_key, kind, grievance_id, decision, reviewer, note, decided_at,"
    " published",
    key="review_id",
    oldest="decided_at",
    make=lambda row: DecisionRecord(**row),
)


@dataclass(frozen=True)
class LoginWindow:
    """Sign-in attempts counted in a user name's current window, and when it closes."""

    attempts: int
    seconds_left: int


@asynccontextmanager
async def _taken(
    pool: AsyncConnectionPool[Any], wait_s: float, busy: type[Exception], what: str
) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of ``pool``, given back after; ``busy`` if none is free within ``wait_s``
    (a request answered at once, not after the pool's own 30 s)."""
    try:
        conn = await pool.getconn(timeout=wait_s)
    except PoolTimeout as exc:
        raise busy(f"no {what} connection free within {wait_s:g}s") from exc
    try:
        yield conn
    finally:
        await pool.putconn(conn)


def _login_key(username: str) -> str:
    return hashlib.sha256(username.strip().casefold().encode()).hexdigest()


class Store:
    """Queries over two async connection pools (owned by the caller): ``pool`` for everything
    but publishing, ``publish_pool`` for the rows locked while their event is published.

    The intake's queries wait ``pool_wait_s`` at most for a connection of ``pool``
    (:class:`DatabaseBusy`), the others the pool's own timeout (the API sets it to the same)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        publish_pool: AsyncConnectionPool[Any],
        publish_wait_s: float,
        pool_wait_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._publish_pool = publish_pool
        self._publish_wait_s = publish_wait_s
        self._pool_wait_s = pool_wait_s

    def _connection(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A connection of the main pool (autocommit); :class:`DatabaseBusy` if none is free
        within ``pool_wait_s``."""
        return _taken(self._pool, self._pool_wait_s, DatabaseBusy, "database")

    @asynccontextmanager
    async def _publishing(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A publishing connection in a transaction; :class:`PublishersBusy` if none is free
        within ``publish_wait_s``."""
        async with (
            _taken(self._publish_pool, self._publish_wait_s, PublishersBusy, "publishing") as conn,
            conn.transaction(),
        ):
            yield conn

    async def ping(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute("SELECT 1")

    async def order_customer(self, order_id: str) -> str | None:
        """The customer of ``order_id``, or ``None`` if the order store has no such order;
        :class:`DatabaseBusy` when no connection comes free in time."""
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT customer_id FROM orders WHERE order_id = %s", (order_id,)
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    # -- intake ---------------------------------------------------------------------------

    async def intake_seen(self, key: str) -> IntakeSeen | None:
        """What is recorded for the idempotency key ``key`` (read without a lock, on the main
        pool), or ``None``; :class:`DatabaseBusy` when no connection comes free in time."""
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT body_sha256, dispute_id, published FROM intake_requests"
                " WHERE idempotency_key = %s",
                (key,),
            )
            row = await cur.fetchone()
        return None if row is None else IntakeSeen(str(row[0]), str(row[1]), bool(row[2]))

    async def claim_intake(self, record: IntakeRecord) -> None:
        """Insert ``record`` unless its idempotency key is taken (then the first one stays);
        :class:`DatabaseBusy` (nothing inserted) when no connection comes free in time."""
        async with self._connection() as conn:
            await conn.execute(
                f"INSERT INTO intake_requests ({INTAKE.columns})"  # noqa: S608 - constant columns
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false)"
                " ON CONFLICT (idempotency_key) DO NOTHING",
                (
                    record.idempotency_key,
                    record.body_sha256,
                    record.dispute_id,
                    record.order_id,
                    record.customer_id,
                    record.complaint_text,
                    record.channel,
                    record.received_at,
                ),
            )

    @asynccontextmanager
    async def _locked(
        self, table: OutboxTable[T], where: str, params: tuple[Any, ...]
    ) -> AsyncIterator[Locked[T] | None]:
        """The first row of ``table`` that ``where`` selects, locked (``FOR UPDATE`` plus what
        ``where`` ends with) in a publishing transaction until the context exits; ``None`` if
        there is none."""
        async with self._publishing() as conn:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(
                    f"SELECT {table.columns} FROM {table.name} WHERE {where}",  # noqa: S608
                    params,
                )
                row = await cur.fetchone()
            yield (
                None
                if row is None
                else Locked(table.make(row), conn, table.mark_sql, row[table.key])
            )

    @asynccontextmanager
    async def lock_row(self, table: OutboxTable[T], key: str) -> AsyncIterator[Locked[T]]:
        """Row ``key`` of ``table``, locked; raises ``KeyError`` if there is none."""
        async with self._locked(table, f"{table.key} = %s FOR UPDATE", (key,)) as locked:
            if locked is None:
                raise KeyError(key)
            yield locked

    def next_unpublished(
        self, table: OutboxTable[T]
    ) -> AbstractAsyncContextManager[Locked[T] | None]:
        """The oldest unpublished row of ``table`` no one else holds (``SKIP LOCKED``), or
        ``None``."""
        return self._locked(
            table, f"NOT published ORDER BY {table.oldest} LIMIT 1 FOR UPDATE SKIP LOCKED", ()
        )

    # -- review queue and decisions -------------------------------------------------------

    async def queue(
        self, limit: int = 500, *, dispute_id: str | None = None, kind: str | None = None
    ) -> tuple[dict[str, int], list[QueueItem]]:
        """Open review items per kind (every kind present, 0 included) and the oldest first,
        optionally only those of one dispute and/or one kind (the counts are always global)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT kind, count(*) FROM review_items WHERE status = 'OPEN' GROUP BY kind"
            )
            counts = dict.fromkeys(REVIEW_KINDS, 0)
            for item_kind, count in await cur.fetchall():
                counts[str(item_kind)] = int(count)
            async with conn.cursor(row_factory=dict_row) as dcur:
                await dcur.execute(
                    "SELECT ri.dispute_id, ri.item_key, ri.kind, ri.grievance_id, ri.reason,"
                    " ri.created_at, g.category, g.text AS grievance_text, d.order_id"
                    " FROM review_items ri"
                    " LEFT JOIN grievances g"
                    "   ON g.dispute_id = ri.dispute_id AND g.grievance_id = ri.grievance_id"
                    " LEFT JOIN disputes d ON d.dispute_id = ri.dispute_id"
                    " WHERE ri.status = 'OPEN'"
                    " AND (%(dispute)s::text IS NULL OR ri.dispute_id = %(dispute)s)"
                    " AND (%(kind)s::text IS NULL OR ri.kind = %(kind)s)"
                    " ORDER BY ri.created_at, ri.dispute_id, ri.item_key LIMIT %(limit)s",
                    {"dispute": dispute_id, "kind": kind, "limit": limit},
                )
                items = [QueueItem(**row) for row in await dcur.fetchall()]
        return counts, items

    async def record_decision(
        self,
        new: DecisionRecord,
        check: Callable[[str], None],
        seen_repaid_on: str | None = None,
    ) -> DecisionRecord:
        """Record ``new`` as the one decision of its (dispute, item); return it as stored.

        ``check(kind)`` raises :class:`NotDecidable` when the decision does not fit the item.
        ``seen_repaid_on``: the other item of the round whose REPAY the operator was shown
        (the desk's "Close (paid again)"); a PAID_ELSEWHERE on a failure item whose round was
        paid again from its other item is :class:`NotDecidable` unless it names that item: the
        REPAY came while the operator decided, and a settlement by hand would pay twice.
        Raises :class:`ItemNotFound`, or :class:`AlreadyDecided` when another decision won,
        including one committed a moment earlier by a concurrent request: the UNIQUE
        (dispute_id, item_key) constraint lets exactly one insert succeed. Also
        :class:`AlreadyDecided` (with ``None``) when the item is closed otherwise, e.g. by the
        recorder (a dispute item superseded by a new round), even at the same moment.

        The item's row is held ``FOR SHARE`` until the decision commits: a close the recorder
        has not committed yet is waited for and then seen, and the recorder's close waits for
        the decision, so a decision is never recorded for an item closed meanwhile. No
        deadlock: this transaction locks no other row of ``review_items``, and the recorder
        (the only other writer of it) never writes ``review_decisions`` (it reads them, taking
        no lock) and never touches ``payout_ledger``.

        A decision on a PAYOUT item also locks its round's ledger row (``FOR UPDATE``) before it
        is checked and recorded: a round failing again after a refund has two items, and two
        decisions on them (a REPAY on one, and a REPAY or a PAID_ELSEWHERE on the other) are
        then made one after the other, the second checked against the first: a REPAY is refused
        after the other item's, and a PAID_ELSEWHERE after the other item's REPAY closes its
        item without marking the round settled another way, if the operator saw that REPAY.
        Stripe's webhook locks only the ledger row, so the order items, ledger, decisions cannot
        deadlock.
        """
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(
                "SELECT kind, grievance_id, status, created_at FROM review_items"
                " WHERE dispute_id = %s AND item_key = %s FOR SHARE",
                (new.dispute_id, new.item_key),
            )
            item = await cur.fetchone()
            if item is None:
                raise ItemNotFound(new.item_key)
            check(item["kind"])
            if item["status"] != "OPEN":
                raise AlreadyDecided(await self._decision_for(cur, new))
            if item["kind"] == "PAYOUT":
                await cur.execute(
                    "SELECT 1 FROM payout_ledger WHERE dispute_id = %s AND round = %s FOR UPDATE",
                    (new.dispute_id, payout_item_round(new.item_key)),
                )
            if new.decision == ReviewDecision.REPAY.value:
                await self._check_repayable(cur, new, item["created_at"])
            round_ = payout_item_round(new.item_key)
            settles = (
                new.decision == ReviewDecision.PAID_ELSEWHERE.value
                and round_ is not None
                and is_payout_failure_item(new.item_key)
            )
            if settles and round_ is not None:
                repaid = await self._other_decision(cur, new, round_, ReviewDecision.REPAY)
                if repaid is not None and repaid.item_key != seen_repaid_on:
                    raise NotDecidable(
                        f"Round {round_} was paid again from {repaid.item_key} by"
                        f" {repaid.reviewer} at {repaid.decided_at:%Y-%m-%d %H:%M} UTC while you"
                        " decided: nothing is left to pay, and your decision was not recorded."
                        " If you paid the customer by hand meanwhile, recover that payment."
                        " Then close this item with Close (paid again)."
                    )
                settles = repaid is None
            await cur.execute(
                f"INSERT INTO review_decisions ({DECISIONS.columns})"  # noqa: S608
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, false)"
                " ON CONFLICT (dispute_id, item_key) DO NOTHING RETURNING review_id",
                (
                    new.review_id,
                    new.dispute_id,
                    new.item_key,
                    item["kind"],
                    item["grievance_id"],
                    new.decision,
                    new.reviewer,
                    new.note,
                    new.decided_at,
                ),
            )
            if await cur.fetchone() is None:
                raise AlreadyDecided(await self._decision_for(cur, new))
            if settles:
                # Money went back by hand: the round now holds the order's other disputes for
                # a payment operator, as a paid round does (payout_claim_round). Closing a
                # conflicting request's item says nothing of the round, and neither does
                # closing one of a round paid again from its other item (checked above).
                await cur.execute(
                    "UPDATE payout_ledger SET paid_elsewhere = true, updated_at = now()"
                    " WHERE dispute_id = %s AND round = %s AND status = 'FAILED'",
                    (new.dispute_id, round_),
                )
        return replace(new, kind=item["kind"], grievance_id=item["grievance_id"])

    @staticmethod
    async def _check_repayable(cur: Any, new: DecisionRecord, opened_at: datetime) -> None:
        """:class:`NotDecidable` unless paying the payout item's round again can mend it
        (:func:`~refund_bench.db.payout_rounds.why_not_repayable`); ``opened_at``: when the
        item opened (a settlement by hand on the round's other item since then settled this
        failure too)."""
        dispute_id, item_key = new.dispute_id, new.item_key
        round_ = payout_item_round(item_key)
        if round_ is None:
            raise NotDecidable("REPAY applies to a payout:round<n> item only.")
        if not is_payout_failure_item(item_key):
            raise NotDecidable(
                f"Round {round_} cannot be paid again from {item_key}: {CONFLICT_NOT_REPAYABLE}."
                f" {CONFLICT_HOW_TO_CLOSE} (PAID_ELSEWHERE)."
            )
        await cur.execute(
            "SELECT status, error_code, paid_elsewhere FROM payout_ledger"
            " WHERE dispute_id = %s AND round = %s",
            (dispute_id, round_),
        )
        row = await cur.fetchone()
        status, error_code = (row["status"], row["error_code"]) if row else (None, None)
        await cur.execute(
            "SELECT EXTRACT(EPOCH FROM now() - max(priced_at))::float8 AS age_s"
            " FROM priced_refunds WHERE dispute_id = %s",
            (dispute_id,),
        )
        priced = await cur.fetchone()
        repaid = await Store._other_decision(cur, new, round_, ReviewDecision.REPAY)
        settled = await Store._other_decision(cur, new, round_, ReviewDecision.PAID_ELSEWHERE)
        repaid_on = repaid.item_key if repaid else None
        settled_on = settled_on_other_item(
            item_key,
            opened_at,
            None if settled is None else (settled.item_key, settled.decided_at),
            paid_elsewhere=bool(row and row["paid_elsewhere"]),
        )
        why = why_not_repayable(
            status,
            error_code,
            priced["age_s"] if priced else None,
            paid_elsewhere=bool(row and row["paid_elsewhere"]),
            repaid_on=repaid_on,
            settled_on=settled_on,
        )
        if why is not None:
            close = how_to_close(
                error_code,
                status,
                repaid_on,
                settled_on,
                paid_elsewhere=bool(row and row["paid_elsewhere"]),
            )
            raise NotDecidable(
                f"Round {round_} cannot be paid again: {why}. {close} (PAID_ELSEWHERE)."
            )

    @staticmethod
    async def _other_decision(
        cur: Any, new: DecisionRecord, round_: int, decision: ReviewDecision
    ) -> DecisionRecord | None:
        """The ``decision`` recorded on another failure item of the round (``payout:round<n>``,
        ``payout:round<n>:again``) than ``new``'s, if any."""
        others = [payout_item(round_), payout_again_item(round_)]
        await cur.execute(
            f"SELECT {DECISIONS.columns} FROM review_decisions"  # noqa: S608
            " WHERE dispute_id = %s AND decision = %s AND item_key = ANY(%s) AND item_key <> %s",
            (new.dispute_id, decision.value, others, new.item_key),
        )
        row = await cur.fetchone()
        return None if row is None else DecisionRecord(**row)

    @staticmethod
    async def _decision_for(cur: Any, new: DecisionRecord) -> DecisionRecord | None:
        await cur.execute(
            f"SELECT {DECISIONS.columns} FROM review_decisions"  # noqa: S608
            " WHERE dispute_id = %s AND item_key = %s",
            (new.dispute_id, new.item_key),
        )
        row = await cur.fetchone()
        return None if row is None else DecisionRecord(**row)

    # -- review-desk sign-in --------------------------------------------------------------

    async def count_login_attempt(self, username: str, window_s: int) -> LoginWindow:
        """Count one sign-in attempt for ``username`` and return its window so far.

        A window opens at the first attempt after the previous one closed and lasts
        ``window_s``. Atomic: concurrent attempts on any replica each get their own count.
        """
        window = timedelta(seconds=window_s)
        async with self._pool.connection() as conn:
            # Windows that have closed count for nothing: drop them, so that guessing at many
            # user names cannot grow the table without end.
            await conn.execute(
                "DELETE FROM desk_login_attempts WHERE window_started_at <= now() - %s", (window,)
            )
            cur = await conn.execute(
                "INSERT INTO desk_login_attempts AS a (username_sha256, attempts,"
                " window_started_at) VALUES (%(user)s, 1, now())"
                " ON CONFLICT (username_sha256) DO UPDATE SET"
                " attempts = CASE WHEN a.window_started_at > now() - %(window)s"
                "  THEN a.attempts + 1 ELSE 1 END,"
                " window_started_at = CASE WHEN a.window_started_at > now() - %(window)s"
                "  THEN a.window_started_at ELSE now() END"
                " RETURNING attempts,"
                " EXTRACT(EPOCH FROM a.window_started_at + %(window)s - now())",
                {"user": _login_key(username), "window": window},
            )
            row = await cur.fetchone()
        assert row is not None
        return LoginWindow(attempts=int(row[0]), seconds_left=max(1, math.ceil(row[1])))

    async def clear_login_attempts(self, username: str) -> None:
        """Forget ``username``'s attempts (it signed in)."""
        async with self._pool.connection() as conn:
            await conn.execute(
                "DELETE FROM desk_login_attempts WHERE username_sha256 = %s",
                (_login_key(username),),
            )

    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse the session ``session_id`` from now on (until it would have expired anyway).

        Also drops revocations whose sessions have expired since.
        """
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM desk_revoked_sessions WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO desk_revoked_sessions (session_id, expires_at) VALUES (%s, %s)"
                " ON CONFLICT (session_id) DO NOTHING",
                (session_id, expires_at),
            )

    async def session_revoked(self, session_id: str) -> bool:
        """True when the session ``session_id`` was signed out."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM desk_revoked_sessions WHERE session_id = %s", (session_id,)
            )
            return await cur.fetchone() is not None

    # -- the audit record -----------------------------------------------------------------

    async def dispute_story(self, dispute_id: str) -> m.DisputeStory | None:
        """Everything recorded about ``dispute_id``, read in one consistent snapshot."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            async with conn.cursor(row_factory=dict_row) as cur:
                q = _Reader(cur, dispute_id)
                return await _story(q, dispute_id)


class _Reader:
    def __init__(self, cur: Any, dispute_id: str) -> None:
        self._cur = cur
        self._id = dispute_id

    async def all(self, sql: str) -> list[Row]:
        await self._cur.execute(sql, (self._id,))
        rows: list[Row] = await self._cur.fetchall()
        return rows

    async def one(self, sql: str) -> Row | None:
        rows = await self.all(sql)
        return rows[0] if rows else None


def _json(value: Any) -> Any:
    """jsonb arrives decoded; tolerate text holding JSON too."""
    return json.loads(value) if isinstance(value, str) else value


def _channel(intake: Mapping[str, Any] | None, dispute: Mapping[str, Any] | None) -> str:
    """Where the complaint came from: the API's record of it, else what its event said (kept
    with the dispute), else ``upstream``: for a dispute stored before disputes kept it, and for
    an event that named none (its contract's default, ``api``, which no complaint the API
    never took can truly say)."""
    if intake is not None:
        return str(intake["channel"])
    if dispute is not None and dispute["channel"] not in (None, "api"):
        return str(dispute["channel"])
    return "upstream"


async def _story(q: _Reader, dispute_id: str) -> m.DisputeStory | None:
    dispute = await q.one(
        "SELECT d.order_id, d.customer_id, d.complaint_text, d.received_at, d.created_at,"
        " d.channel, d.snapshot_sha256, s.snapshot, s.created_at AS snapshot_created_at"
        " FROM disputes d LEFT JOIN evidence_snapshots s ON s.sha256 = d.snapshot_sha256"
        " WHERE d.dispute_id = %s"
    )
    intake = await q.one(
        "SELECT order_id, customer_id, complaint_text, received_at, channel, published"
        " FROM intake_requests WHERE dispute_id = %s"
    )
    base = dispute or intake
    if base is None:
        return None
    complaint = m.Complaint(
        order_id=base["order_id"],
        customer_id=base["customer_id"],
        text=base["complaint_text"],
        received_at=base["received_at"],
        channel=_channel(intake, dispute),
        accepted_via_api=intake is not None,
        # A disputes row is the extractor's, from complaint.received: the complaint was
        # published, though the API's own publish was not confirmed (a late acknowledgement).
        published=(intake["published"] or dispute is not None) if intake else None,
        extracted_at=dispute["created_at"] if dispute else None,
    )
    evidence = None
    if dispute is not None and dispute["snapshot"] is not None:
        parsed = json.loads(dispute["snapshot"])
        evidence = m.EvidenceSnapshot(
            sha256=dispute["snapshot_sha256"],
            snapshot_json=dispute["snapshot"],
            snapshot=parsed if isinstance(parsed, dict) else {"value": parsed},
            created_at=dispute["snapshot_created_at"],
        )
    extraction = next(
        (
            m.ExtractionRecord(**{**r, "answers": _json(r["answers"])})
            for r in await q.all(
                "SELECT outcome, grievance_total, reason, complaint_sha256, snapshot_sha256,"
                " answers, extracted_at FROM extractions WHERE dispute_id = %s"
            )
        ),
        None,
    )
    grievances = [
        m.Grievance(**r)
        for r in await q.all(
            "SELECT grievance_id, category, text, span_start, span_end, item_name,"
            " item_quantity, grievance_total, model, prompt_version, extracted_at"
            " FROM grievances WHERE dispute_id = %s"
            " ORDER BY span_start, length(grievance_id), grievance_id"
        )
    ]
    rulings = [
        m.RulingRecord(**{**r, "evidence_cited": _json(r["evidence_cited"])})
        for r in await q.all(
            "SELECT grievance_id, judge_seat, ruling, model_ruling, confidence, evidence_cited,"
            " reasoning, model, prompt_version, snapshot_sha256, raw_response, cast_at, seed,"
            " cites_missing_evidence, temperature, served_model, system_fingerprint"
            " FROM rulings WHERE dispute_id = %s"
            " ORDER BY length(grievance_id), grievance_id, judge_seat"
        )
    ]
    verdicts = [
        m.VerdictRecord(**r)
        for r in await q.all(
            "SELECT grievance_id, category, outcome, votes_upheld, votes_rejected,"
            " votes_escalate, split, unanimous, decided_at FROM verdicts WHERE dispute_id = %s"
            " ORDER BY length(grievance_id), grievance_id"
        )
    ]
    rounds = [
        m.PricedRound(
            **{
                **r,
                "lines": [m.PricedLine(**line) for line in _json(r["lines"])],
                "held_grievances": _json(r["held_grievances"]),
            }
        )
        for r in await q.all(
            "SELECT round, pricing_version, currency, order_total_minor, lines, total_minor,"
            " already_paid_minor, payable_minor, cap_minor, decision, held_grievances, reason,"
            " priced_at FROM priced_refunds WHERE dispute_id = %s ORDER BY round"
        )
    ]
    replies = [
        m.ReplyRecord(**{**r, "guard_failures": _json(r["guard_failures"])})
        for r in await q.all(
            "SELECT round, text, amount_minor, currency, source, guard_failures, model,"
            " prompt_version, created_at, model_answer, served_model, system_fingerprint"
            " FROM replies WHERE dispute_id = %s ORDER BY round"
        )
    ]
    ledger = [
        m.LedgerRecord(**r)
        for r in await q.all(
            "SELECT round, amount_minor, currency, payment_reference, idempotency_key, status,"
            " stripe_refund_id, error_code, error_message, attempts, created_at, updated_at,"
            " paid_elsewhere FROM payout_ledger WHERE dispute_id = %s ORDER BY round"
        )
    ]
    payout_events = [
        m.PayoutEventRecord(**r)
        for r in await q.all(
            "SELECT round, revision, outcome, amount_minor, stripe_refund_id, error_code,"
            " reason, at FROM payout_events WHERE dispute_id = %s ORDER BY round"
        )
    ]
    payout_history = [
        m.PayoutEventRecord(**r)
        for r in await q.all(
            "SELECT round, revision, outcome, amount_minor, stripe_refund_id, error_code,"
            " reason, at FROM payout_event_history WHERE dispute_id = %s"
            " ORDER BY round, at, revision, outcome"
        )
    ]
    items = [
        m.ReviewItemRecord(**r)
        for r in await q.all(
            "SELECT item_key, kind, grievance_id, reason, status, created_at, decided_at"
            " FROM review_items WHERE dispute_id = %s ORDER BY created_at, item_key"
        )
    ]
    decisions = [
        m.ReviewDecisionRecord(**r)
        for r in await q.all(
            "SELECT review_id, item_key, kind, grievance_id, decision, reviewer, note,"
            " decided_at, published FROM review_decisions WHERE dispute_id = %s"
            " ORDER BY decided_at, review_id"
        )
    ]
    currency = rounds[-1].currency if rounds else (ledger[-1].currency if ledger else None)
    return m.DisputeStory(
        dispute_id=dispute_id,
        summary=m.Summary(
            grievances=len(grievances),
            rounds=len(rounds),
            open_review_items=sum(1 for i in items if i.status == "OPEN"),
            paid_minor=sum(row.amount_minor for row in ledger if row.status == "SUCCEEDED"),
            currency=currency,
        ),
        complaint=complaint,
        evidence=evidence,
        extraction=extraction,
        grievances=grievances,
        rulings=rulings,
        verdicts=verdicts,
        priced_rounds=rounds,
        replies=replies,
        payouts=m.Payouts(ledger=ledger, events=payout_events, history=payout_history),
        review_items=items,
        review_decisions=decisions,
    )


def decision_event_fields(record: DecisionRecord) -> Mapping[str, Any]:
    """The ``review.decided`` fields of a recorded decision."""
    return {
        "dispute_id": record.dispute_id,
        "review_id": record.review_id,
        "kind": record.kind,
        "grievance_id": record.grievance_id,
        "decision": record.decision,
        "reviewer": record.reviewer,
        "note": record.note,
        "decided_at": record.decided_at,
        "item_key": record.item_key,
    }
