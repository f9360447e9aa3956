"""The recorder stage: projects the flow into PostgreSQL for the audit record and the review
queue. At-least-once: a batch's rows are written in one database transaction before its
offsets commit; redelivered events are no-ops thanks to natural-key inserts."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

import psycopg

from refund_bench import topics as t
from refund_bench.runtime import Context, Emit, Message, StageSpec
from services.recorder.projection import Statement, rows_for

INPUTS = (
    t.GRIEVANCE_EXTRACTED,
    t.RULING_CAST,
    t.VERDICT_DECIDED,
    t.REFUND_PRICED,
    t.PAYOUT_COMPLETED,
    t.PAYOUT_FAILED,
    t.REVIEW_DECIDED,
)


class Recorder:
    """Buffers each batch's statements and writes them in one transaction at commit time."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._pending: list[Statement] = []

    def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        self._pending.extend(rows_for(message.topic, message.value))
        return ()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        # Pipeline mode: the statements go out without a round trip each, in order; runs of
        # one statement become one ``executemany``.
        with self._conn.transaction(), self._conn.pipeline(), self._conn.cursor() as cur:
            for sql, run in groupby(pending, key=itemgetter(0)):
                cur.executemany(sql, [params for _, params in run])

    def spec(self) -> StageSpec:
        return StageSpec("recorder", INPUTS, (), self.handle, before_commit=self.flush)
