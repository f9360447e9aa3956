"""The recorder stage: projects the flow into PostgreSQL for the audit record and the review
queue. At-least-once: a batch's rows are written in one database transaction before its
offsets commit; redelivered events are no-ops thanks to natural-key inserts.

A batch's rows go to each table in one statement (arrays of column values, unnested), not one
statement per row: a few statements per batch instead of about twenty per complaint. Inserts
come first, each table's rows in key order (two replicas that write some of the same keys take
them in the same order), then the updates in event order (an update may close a review item
inserted by the same batch); no insert undoes an update, since existing rows are left alone.

A row whose key is stored already is left out (a redelivery). When it states other facts than
the stored row (:attr:`~services.recorder.projection.Table.facts`: an event priced or ruled
again differently, say after a replay under new rules), the stored row still stands, and the
recorder logs the key and the columns that differ and counts it in ``facts_conflicting`` (by
table): the audit record and the topic then disagree, and someone should look. The check costs a
query, after the batch's commit, only for a table some of whose rows were left out.

Replicas still update one dispute's rows from different topics, so PostgreSQL may end one
batch's transaction as a deadlock's victim: that write is retried (it rolled back whole), with
the shared backoff, instead of stopping the stage. A batch that may open or close a dispute's
grievance items from one topic while another replica does from the other (an ESCALATE
verdict; a round that declines the dispute or settles a grievance) first locks that dispute
for its transaction (:class:`~services.recorder.projection.ReviewLock`): at read committed,
each would otherwise miss the other's rows not committed yet, and leave an item open."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, NamedTuple

import psycopg
from psycopg import errors

from refund_bench.retry import RetryPolicy, SyncSleep
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.runtime.metrics import Metrics, NullMetrics
from refund_bench.stages import RECORDER
from services.recorder.projection import (
    REVIEW_ITEMS,
    REVIEW_LOCK_SQL,
    ReviewLock,
    Statement,
    Table,
    decided_on_the_desk,
    rows_for,
)

log = logging.getLogger(__name__)


RETRIED_SQLSTATES = (errors.DeadlockDetected, errors.SerializationFailure)
"""Errors after which the whole transaction rolled back and the same write may succeed."""


class Conflict(NamedTuple):
    """A row left out because its key holds a row that states other facts."""

    table: str
    key: tuple[Any, ...]
    """The key's values, in the table's key order."""
    columns: tuple[str, ...]
    """The fact columns whose stored value differs from the row's."""


class Recorder:
    """Buffers each batch's statements and writes them in one transaction at commit time."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        retry: RetryPolicy | None = None,
        sleep: SyncSleep = time.sleep,
        metrics: Metrics | None = None,
    ) -> None:
        self._conn = conn
        self._pending: list[Statement] = []
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._metrics: Metrics = metrics or NullMetrics()

    def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        self._pending.extend(rows_for(message.topic, message.value))
        return ()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        rows: dict[Table, list[tuple[Any, ...]]] = {}
        updates: list[tuple[str, tuple[Any, ...]]] = []
        locks: set[str] = set()
        for statement in pending:
            if isinstance(statement, ReviewLock):
                locks.add(statement.dispute_id)
                continue
            target, params = statement
            if isinstance(target, Table):
                rows.setdefault(target, []).append(params)
            else:
                updates.append((target, params))
        for table, table_rows in rows.items():
            table_rows.sort(key=table.key_of)  # stable: the first row per key stays first
        if REVIEW_ITEMS in rows:
            updates.append(decided_on_the_desk(rows[REVIEW_ITEMS]))
        left_out = self._retry.run(
            lambda: self._write(sorted(locks), rows, updates),
            sleep=self._sleep,
            retry_on=RETRIED_SQLSTATES,
            on_retry=lambda exc: log.warning("recording a batch failed (%s); retrying", exc),
        )
        # After the commit, with no lock held: no statement changes a fact once it is stored.
        conflicts = [c for table in left_out for c in self._conflicts(table, rows[table])]
        for conflict in conflicts:
            log.warning(
                "%s keeps the row it holds for %s; a later event's row differs in %s and was"
                " not recorded",
                conflict.table,
                conflict.key,
                ", ".join(conflict.columns),
            )
            self._metrics.incr("facts_conflicting", kind=conflict.table)

    def _write(
        self,
        locks: list[str],
        rows: dict[Table, list[tuple[Any, ...]]],
        updates: list[tuple[str, tuple[Any, ...]]],
    ) -> list[Table]:
        """Write the batch in one transaction; the tables with facts some of whose rows were
        left out (their keys held rows already)."""
        # Pipeline mode: the statements go out without a round trip each. A cursor per table,
        # to read how many of its rows went in once the pipeline is synced.
        with self._conn.transaction(), ExitStack() as cursors:
            inserted: list[tuple[Table, int, psycopg.Cursor[Any]]] = []
            with self._conn.pipeline():
                cur = cursors.enter_context(self._conn.cursor())
                if locks:
                    cur.execute(REVIEW_LOCK_SQL, (locks,))
                for table, table_rows in rows.items():
                    columns = [list(column) for column in zip(*table_rows, strict=True)]
                    table_cur = cursors.enter_context(self._conn.cursor())
                    table_cur.execute(table.insert_sql, columns)
                    inserted.append((table, len(table_rows), table_cur))
                for sql, params in updates:
                    cur.execute(sql, params)
            return [t for t, given, c in inserted if t.facts and c.rowcount < given]

    def _conflicts(self, table: Table, table_rows: list[tuple[Any, ...]]) -> list[Conflict]:
        """The rows of ``table_rows`` whose keys hold stored rows that state other facts."""
        compared = [table.compared_of(row) for row in table_rows]
        columns = [list(column) for column in zip(*compared, strict=True)]
        with self._conn.transaction(), self._conn.cursor() as cur:
            found = cur.execute(table.conflicts_sql, columns).fetchall()
        width = len(table.key)
        return [Conflict(table.name, tuple(row[:width]), tuple(row[width])) for row in found]

    def spec(self) -> StageSpec:
        return StageSpec.of(RECORDER, self.handle, before_commit=self.flush)
