"""What each flow event adds to the audit projection and the review queue (pure).

Every insert is keyed by natural ids with ``ON CONFLICT DO NOTHING`` and every update is
idempotent, so redelivered events change nothing. An event yields rows for a :class:`Table`
(written set-wise, one statement per table and batch) and, for review decisions, updates.
A row whose key is stored already keeps the stored row; when the two state different facts
(:attr:`Table.facts`), :attr:`Table.conflicts_sql` finds it, so that the recorder can say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson
from psycopg import sql
from psycopg.adapt import PyFormat

from refund_bench import events as ev
from refund_bench.db.payout_rounds import (
    LEDGER_CONFLICT,
    payout_again_item,
    payout_conflict_item,
    payout_item,
)
from refund_bench.domain import EXTRACTION_ITEM, Decision, LineStatus, Ruling, review_problem
from refund_bench.errors import InvalidInput


@dataclass(frozen=True, eq=False)
class Table:
    """Rows of one shape for table ``name``: the first row per ``key`` is kept.

    ``columns`` are (name, SQL type) pairs; a row is a tuple of values in that order.
    ``facts`` are the columns that state what was decided or done: a later row under a stored
    key that differs from the stored one in any of them is a conflicting fact, not a
    redelivery. Times and provenance (what served a model's answer) are no facts: an event cast
    again after a crash may carry other ones; nor is prose the code writes (a round's reason, a
    ruling's reasoning, which add the code's notes to the model's words: the model's answer is
    compared as it came), nor a JSON document whose shape a release may change (a round's
    priced lines: their totals are compared).
    Empty: rows are not compared (a row that later events update, such as a round's standing
    payout outcome, or one whose key says all it states).
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    facts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = {name for name, _ in self.columns}
        if not {*self.key, *self.facts} <= names or set(self.key) & set(self.facts):
            raise ValueError(f"table {self.name}: key and facts must be distinct columns of it")

    @cached_property
    def _key_positions(self) -> tuple[int, ...]:
        names = [name for name, _ in self.columns]
        return tuple(names.index(name) for name in self.key)

    def key_of(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """The values of ``row``'s key columns."""
        return tuple(row[i] for i in self._key_positions)

    @cached_property
    def insert_sql(self) -> bytes:
        """One INSERT for many rows: one array parameter per column, in column order. Rendered
        once: the names are ASCII, so it reads the same on every connection."""
        statement = sql.SQL(
            "INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays})"
            " ON CONFLICT ({key}) DO NOTHING"
        ).format(
            table=sql.Identifier(self.name),
            columns=sql.SQL(", ").join(sql.Identifier(name) for name, _ in self.columns),
            arrays=sql.SQL(", ").join(
                sql.SQL("{}::{}[]").format(sql.Placeholder(format=PyFormat.BINARY), sql.SQL(kind))
                for _, kind in self.columns
            ),
            key=sql.SQL(", ").join(sql.Identifier(name) for name in self.key),
        )
        return statement.as_bytes(None)

    @cached_property
    def _compared(self) -> tuple[tuple[str, str], ...]:
        kinds = dict(self.columns)
        return tuple((name, kinds[name]) for name in (*self.key, *self.facts))

    @cached_property
    def _compared_positions(self) -> tuple[int, ...]:
        names = [name for name, _ in self.columns]
        return tuple(names.index(name) for name, _ in self._compared)

    def compared_of(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """The values of ``row``'s key and fact columns, in the order of :attr:`conflicts_sql`'s
        parameters."""
        return tuple(row[i] for i in self._compared_positions)

    @cached_property
    def conflicts_sql(self) -> bytes:
        """Given one array per key and fact column (:meth:`compared_of`), the stored rows whose
        facts differ from a given row with their key: each as its key's values and then the
        names of the fact columns that differ. Run after the rows were inserted (and committed):
        a row the batch inserted compares equal to itself."""
        if not self.facts:
            raise ValueError(f"table {self.name} states no facts to compare")
        given = sql.Identifier("given")
        stored = sql.Identifier("stored")
        differs = [
            sql.SQL("{s}.{c} IS DISTINCT FROM {g}.{c}").format(
                s=stored, g=given, c=sql.Identifier(c)
            )
            for c in self.facts
        ]
        statement = sql.SQL(
            "SELECT {keys}, array_remove(ARRAY[{names}], NULL)"
            " FROM unnest({arrays}) AS {given} ({aliases})"
            " JOIN {table} AS {stored} ON {joined}"
            " WHERE {any_differs}"
        ).format(
            keys=sql.SQL(", ").join(
                sql.SQL("{}.{}").format(given, sql.Identifier(k)) for k in self.key
            ),
            names=sql.SQL(", ").join(
                sql.SQL("CASE WHEN {} THEN {} END").format(test, sql.Literal(c))
                for test, c in zip(differs, self.facts, strict=True)
            ),
            arrays=sql.SQL(", ").join(
                sql.SQL("{}::{}[]").format(sql.Placeholder(format=PyFormat.BINARY), sql.SQL(kind))
                for _, kind in self._compared
            ),
            given=given,
            aliases=sql.SQL(", ").join(sql.Identifier(name) for name, _ in self._compared),
            table=sql.Identifier(self.name),
            stored=stored,
            joined=sql.SQL(" AND ").join(
                sql.SQL("{s}.{k} = {g}.{k}").format(s=stored, g=given, k=sql.Identifier(k))
                for k in self.key
            ),
            any_differs=sql.SQL(" OR ").join(differs),
        )
        return statement.as_bytes(None)


def _json(value: Any) -> str:
    """A jsonb column's value as JSON text."""
    return orjson.dumps(value).decode()


@dataclass(frozen=True)
class ReviewLock:
    """A dispute whose grievance items the batch may open or close across topics: the batch's
    transaction locks it first (:data:`REVIEW_LOCK_SQL`), so that two replicas writing its
    verdict and its round at once see each other's rows instead of each missing the other's."""

    dispute_id: str


REVIEW_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(hashtextextended('refund-bench:review:' || d, 0))"
    " FROM unnest(%s::text[]) AS d"
)
"""Takes the transaction's :class:`ReviewLock` locks, one per dispute id, in the order given
(sorted, so that two transactions take them in the same order)."""


Row = tuple[Table, tuple[Any, ...]]
Update = tuple[str, tuple[Any, ...]]
Statement = Row | Update | ReviewLock
"""A row for a table, an update (SQL and its parameters), or a dispute to lock first."""

GRIEVANCES = Table(
    "grievances",
    (
        ("dispute_id", "text"),
        ("grievance_id", "text"),
        ("category", "text"),
        ("text", "text"),
        ("span_start", "integer"),
        ("span_end", "integer"),
        ("item_name", "text"),
        ("item_quantity", "integer"),
        ("grievance_total", "integer"),
        ("snapshot_sha256", "text"),
        ("prompt_version", "text"),
        ("model", "text"),
        ("extracted_at", "timestamptz"),
    ),
    ("dispute_id", "grievance_id"),
    (
        "category",
        "text",
        "span_start",
        "span_end",
        "item_name",
        "item_quantity",
        "grievance_total",
        "snapshot_sha256",
    ),
)
EXTRACTIONS = Table(
    "extractions",
    (
        ("dispute_id", "text"),
        ("order_id", "text"),
        ("snapshot_sha256", "text"),
        ("complaint_sha256", "text"),
        ("outcome", "text"),
        ("grievance_total", "integer"),
        ("reason", "text"),
        ("answers", "jsonb"),
        ("extracted_at", "timestamptz"),
    ),
    ("dispute_id",),
    ("order_id", "snapshot_sha256", "complaint_sha256", "outcome", "grievance_total"),
)
RULINGS = Table(
    "rulings",
    (
        ("dispute_id", "text"),
        ("grievance_id", "text"),
        ("judge_seat", "integer"),
        ("ruling", "text"),
        ("model_ruling", "text"),
        ("confidence", "double precision"),
        ("evidence_cited", "jsonb"),
        ("reasoning", "text"),
        ("model", "text"),
        ("prompt_version", "text"),
        ("snapshot_sha256", "text"),
        ("raw_response", "text"),
        ("cast_at", "timestamptz"),
        ("seed", "bigint"),
        ("cites_missing_evidence", "boolean"),
        ("temperature", "double precision"),
        ("served_model", "text"),
        ("system_fingerprint", "text"),
    ),
    ("dispute_id", "grievance_id", "judge_seat"),
    (
        "ruling",
        "model_ruling",
        "confidence",
        "evidence_cited",
        "snapshot_sha256",
        "raw_response",
        "cites_missing_evidence",
    ),
)
VERDICTS = Table(
    "verdicts",
    (
        ("dispute_id", "text"),
        ("grievance_id", "text"),
        ("category", "text"),
        ("outcome", "text"),
        ("votes_upheld", "integer"),
        ("votes_rejected", "integer"),
        ("votes_escalate", "integer"),
        ("split", "text"),
        ("unanimous", "boolean"),
        ("decided_at", "timestamptz"),
    ),
    ("dispute_id", "grievance_id"),
    (
        "category",
        "outcome",
        "votes_upheld",
        "votes_rejected",
        "votes_escalate",
        "split",
        "unanimous",
    ),
)
PRICED_REFUNDS = Table(
    "priced_refunds",
    (
        ("dispute_id", "text"),
        ("round", "integer"),
        ("pricing_version", "text"),
        ("currency", "text"),
        ("order_total_minor", "bigint"),
        ("lines", "jsonb"),
        ("total_minor", "bigint"),
        ("already_paid_minor", "bigint"),
        ("payable_minor", "bigint"),
        ("cap_minor", "bigint"),
        ("decision", "text"),
        ("held_grievances", "jsonb"),
        ("reason", "text"),
        ("priced_at", "timestamptz"),
    ),
    ("dispute_id", "round"),
    (
        "pricing_version",
        "currency",
        "order_total_minor",
        "total_minor",
        "already_paid_minor",
        "payable_minor",
        "cap_minor",
        "decision",
        "held_grievances",
    ),
)
PAYOUTS_COMPLETED = Table(
    "payout_events",
    (
        ("dispute_id", "text"),
        ("round", "integer"),
        ("outcome", "text"),
        ("amount_minor", "bigint"),
        ("stripe_refund_id", "text"),
        ("at", "timestamptz"),
        ("revision", "integer"),
    ),
    ("dispute_id", "round"),
)
PAYOUTS_FAILED = Table(
    "payout_events",
    (
        ("dispute_id", "text"),
        ("round", "integer"),
        ("outcome", "text"),
        ("amount_minor", "bigint"),
        ("error_code", "text"),
        ("reason", "text"),
        ("at", "timestamptz"),
        ("revision", "integer"),
    ),
    ("dispute_id", "round"),
)
PAYOUT_HISTORY = Table(
    "payout_event_history",
    (
        ("dispute_id", "text"),
        ("round", "integer"),
        ("revision", "integer"),
        ("outcome", "text"),
        ("amount_minor", "bigint"),
        ("stripe_refund_id", "text"),
        ("error_code", "text"),
        ("reason", "text"),
        ("at", "timestamptz"),
    ),
    ("dispute_id", "round", "revision", "outcome"),
    # Not error_code: a failure's final code is set on the ledger (a refund that waited for the
    # customer, then failed) without a new revision, and a payout replayed later reports it.
    ("amount_minor", "stripe_refund_id"),
)
"""Every outcome of a round, as it was reported (``payout_events`` holds the one that stands)."""
REVIEW_ITEMS = Table(
    "review_items",
    (
        ("dispute_id", "text"),
        ("item_key", "text"),
        ("kind", "text"),
        ("grievance_id", "text"),
        ("reason", "text"),
        ("created_at", "timestamptz"),
    ),
    ("dispute_id", "item_key"),
    # No facts: an item's key names its kind and grievance, and its reason is free text.
)


def grievance_rows(e: ev.GrievanceExtracted) -> list[Statement]:
    return [
        (
            GRIEVANCES,
            (
                e.dispute_id,
                e.grievance_id,
                e.category,
                e.text,
                e.span_start,
                e.span_end,
                e.item_name,
                e.item_quantity,
                e.grievance_total,
                e.snapshot_sha256,
                e.extractor_prompt_version,
                e.extractor_model,
                e.extracted_at,
            ),
        )
    ]


def extraction_rows(e: ev.ComplaintExtracted) -> list[Statement]:
    return [
        (
            EXTRACTIONS,
            (
                e.dispute_id,
                e.order_id,
                e.snapshot_sha256,
                e.complaint_sha256,
                e.outcome,
                e.grievance_total,
                e.reason,
                _json([answer.model_dump() for answer in e.answers]),
                e.extracted_at,
            ),
        )
    ]


def ruling_rows(e: ev.RulingCast) -> list[Statement]:
    return [
        (
            RULINGS,
            (
                e.dispute_id,
                e.grievance_id,
                e.judge_seat,
                e.ruling,
                e.model_ruling,
                e.confidence,
                _json(e.evidence_cited),
                e.reasoning,
                e.model,
                e.prompt_version,
                e.snapshot_sha256,
                e.raw_response,
                e.cast_at,
                e.seed,
                e.cites_missing_evidence,
                e.temperature,
                e.served_model,
                e.system_fingerprint,
            ),
        )
    ]


def verdict_rows(e: ev.VerdictDecided) -> list[Statement]:
    rows: list[Statement] = [
        (
            VERDICTS,
            (
                e.dispute_id,
                e.grievance_id,
                e.category,
                e.outcome,
                e.votes_upheld,
                e.votes_rejected,
                e.votes_escalate,
                e.split,
                e.unanimous,
                e.decided_at,
            ),
        )
    ]
    if e.outcome == Ruling.ESCALATE:
        reason = (
            f"the bench could not decide ({e.split}: {e.votes_upheld} upheld, "
            f"{e.votes_rejected} rejected, {e.votes_escalate} escalate)"
        )
        on_silence = sum(
            1 for r in e.rulings if r.ruling == Ruling.UPHELD and r.cites_missing_evidence
        )
        if on_silence:
            reason += (
                f"; upheld rulings citing evidence the order store has no record of ({on_silence})"
                " make no majority"
            )
        item_key = f"grievance:{e.grievance_id}"
        rows.append(
            (
                REVIEW_ITEMS,
                (e.dispute_id, item_key, "GRIEVANCE", e.grievance_id, reason, e.decided_at),
            )
        )
        rows.append(_closed_if_decided_already(e.dispute_id, item_key, e.grievance_id))
        rows.append(ReviewLock(e.dispute_id))
    return rows


_DECIDED_ALREADY_SQL = (
    "UPDATE review_items ri SET status = 'DECIDED', decided_at = p.priced_at,"
    " reason = ri.reason || CASE WHEN p.settles THEN ' (settled by round ' || p.round || ')'"
    " ELSE ' (the dispute was declined)' END"
    " FROM (SELECT round, priced_at, settles FROM (SELECT round, decision, priced_at,"
    " round > 1 AND EXISTS (SELECT 1 FROM jsonb_array_elements(lines) line"
    " WHERE line->>'grievance_id' = %s AND line->>'status' <> 'HELD') AS settles"
    " FROM priced_refunds WHERE dispute_id = %s) r"
    " WHERE settles OR decision = 'DECLINED' ORDER BY round LIMIT 1) p"
    " WHERE ri.dispute_id = %s AND ri.item_key = %s AND ri.status = 'OPEN'"
)


_DECIDED_ON_THE_DESK_SQL = (
    "UPDATE review_items ri SET status = 'DECIDED', decided_at = d.decided_at"
    " FROM unnest(%s::text[], %s::text[]) AS n (dispute_id, item_key), review_decisions d"
    " WHERE ri.dispute_id = n.dispute_id AND ri.item_key = n.item_key AND ri.status = 'OPEN'"
    " AND d.dispute_id = ri.dispute_id AND d.item_key = ri.item_key"
)


def decided_on_the_desk(items: Sequence[tuple[Any, ...]]) -> Update:
    """Closes those of the review ``items`` (:data:`REVIEW_ITEMS` rows just written) that the
    desk already holds a decision for (its ``review_decisions``, one per item).

    ``review.decided`` is read apart from the topics that open items, so a projection written
    again from the topics may read an item's decision in a batch before the one that opens the
    item, when the decision's update finds nothing to close. The item would then stay OPEN for
    good: the desk takes one decision per item, and has it."""
    return (
        _DECIDED_ON_THE_DESK_SQL,
        ([item[0] for item in items], [item[1] for item in items]),
    )


def _closed_if_decided_already(dispute_id: str, item_key: str, grievance_id: str) -> Update:
    """Closes a grievance's item that a round recorded before its verdict already decided.

    The verdict and the rounds are read from different topics, so a lagging partition, or a
    projection written again from the topics, may bring the verdict after a round that
    declined the dispute or settled the grievance (:func:`priced_rows` closes only the items
    there are when it is read): the item is then closed as the first such round would have
    closed it (a later one, a repayment's, may hold nothing of it), and the queue shows what
    it would have shown had the topics been read in the flow's order.
    """
    return (_DECIDED_ALREADY_SQL, (grievance_id, dispute_id, dispute_id, item_key))


def priced_rows(e: ev.RefundPriced) -> list[Statement]:
    rows: list[Statement] = [
        (
            PRICED_REFUNDS,
            (
                e.dispute_id,
                e.round,
                e.pricing_version,
                e.currency,
                e.order_total_minor,
                _json([line.model_dump() for line in e.lines]),
                e.total_minor,
                e.already_paid_minor,
                e.payable_minor,
                e.cap_minor,
                e.decision,
                _json(e.held_grievances),
                e.reason,
                e.priced_at,
            ),
        )
    ]
    rows += _line_review_rows(e)
    if e.decision == Decision.HELD_FOR_REVIEW and not e.lines:
        rows.append(
            (
                REVIEW_ITEMS,
                (e.dispute_id, EXTRACTION_ITEM, "EXTRACTION", None, e.reason, e.priced_at),
            )
        )
    elif e.decision == Decision.HELD_FOR_REVIEW and e.total_minor > e.cap_minor:
        rows.append(
            (
                REVIEW_ITEMS,
                (e.dispute_id, f"dispute:round{e.round}", "DISPUTE", None, e.reason, e.priced_at),
            )
        )
    # A new round supersedes the dispute items of earlier rounds: a decision on one of them
    # would apply to totals that no longer hold.
    rows.append(
        (
            "UPDATE review_items SET status = 'DECIDED', decided_at = %s,"
            " reason = reason || %s WHERE dispute_id = %s AND kind = 'DISPUTE'"
            " AND status = 'OPEN' AND substring(item_key from '^dispute:round([0-9]+)$')::int < %s",
            (e.priced_at, f" (superseded by round {e.round})", e.dispute_id, e.round),
        )
    )
    if e.decision == Decision.DECLINED or (e.round > 1 and e.lines):
        rows.append(ReviewLock(e.dispute_id))  # it may close items a verdict opens meanwhile
    if e.decision == Decision.DECLINED:
        # Declined as a whole: what any one grievance comes to no longer matters.
        rows.append(
            (
                "UPDATE review_items SET status = 'DECIDED', decided_at = %s,"
                " reason = reason || ' (the dispute was declined)' WHERE dispute_id = %s"
                " AND kind = 'GRIEVANCE' AND status = 'OPEN'",
                (e.priced_at, e.dispute_id),
            )
        )
    return rows


def _line_review_rows(e: ev.RefundPriced) -> list[Statement]:
    """The review items of a round's lines. A line the bench upheld but pricing held (its units
    beyond what the pickup weight explains) opens a grievance item, as an ESCALATE verdict
    does; an open grievance item whose line no longer waits (another decision freed what held
    it) is settled by the round. Round 1 follows no decision, so it settles nothing (and costs
    no statement)."""
    rows: list[Statement] = [
        (
            REVIEW_ITEMS,
            (
                e.dispute_id,
                f"grievance:{line.grievance_id}",
                "GRIEVANCE",
                line.grievance_id,
                f"upheld, held by pricing: {line.rule}",
                e.priced_at,
            ),
        )
        for line in e.lines
        if line.status == LineStatus.HELD and line.outcome == Ruling.UPHELD
    ]
    settled = [line.grievance_id for line in e.lines if line.status != LineStatus.HELD]
    if settled and e.round > 1:
        rows.append(
            (
                "UPDATE review_items SET status = 'DECIDED', decided_at = %s,"
                " reason = reason || %s WHERE dispute_id = %s AND kind = 'GRIEVANCE'"
                " AND status = 'OPEN' AND grievance_id = ANY(%s)",
                (e.priced_at, f" (settled by round {e.round})", e.dispute_id, settled),
            )
        )
    return rows


def payout_completed_rows(e: ev.PayoutCompleted) -> list[Statement]:
    """A paid round. A round's ``payout_events`` row holds the outcome of its event with the
    highest ``revision`` (at equal revisions a failure's), whatever order the two topics are
    read in: a ``payout.completed`` the API published after Stripe refunded a round that had
    failed waiting for the customer turns the FAILED round COMPLETED again, and a redelivered
    older one changes nothing. A ``payout.failed`` of a higher revision (Stripe reported the
    refund failed later) may be read first: the FAILED round then gains the refund's id. Every
    outcome is kept in ``payout_event_history`` too."""
    return [
        (
            PAYOUT_HISTORY,
            (
                e.dispute_id,
                e.round,
                e.revision,
                "COMPLETED",
                e.amount_minor,
                e.stripe_refund_id,
                None,
                None,
                e.completed_at,
            ),
        ),
        (
            PAYOUTS_COMPLETED,
            (
                e.dispute_id,
                e.round,
                "COMPLETED",
                e.amount_minor,
                e.stripe_refund_id,
                e.completed_at,
                e.revision,
            ),
        ),
        (
            "UPDATE payout_events SET outcome = 'COMPLETED', amount_minor = %s,"
            " stripe_refund_id = %s, error_code = NULL, reason = NULL, at = %s, revision = %s"
            " WHERE dispute_id = %s AND round = %s AND revision < %s",
            (
                e.amount_minor,
                e.stripe_refund_id,
                e.completed_at,
                e.revision,
                e.dispute_id,
                e.round,
                e.revision,
            ),
        ),
        (
            "UPDATE payout_events SET stripe_refund_id = %s"
            " WHERE dispute_id = %s AND round = %s AND stripe_refund_id IS NULL",
            (e.stripe_refund_id, e.dispute_id, e.round),
        ),
    ]


def payout_failed_rows(e: ev.PayoutFailed) -> list[Statement]:
    """A failed round, and its review item. The round's record turns FAILED unless it holds an
    event of a higher revision (see :func:`payout_completed_rows`): a round recorded COMPLETED
    turns FAILED when Stripe reported its refund failed after taking it on
    (:mod:`services.api.refund_failures`), and a redelivered failure does not undo a later
    refund.

    The review item is the round's own (``payout:round<n>``), or the one the event names: a
    refund Stripe reported failed after it had refunded it following a wait for the customer
    opens ``payout:round<n>:again``, since the round's own item may have been decided then.
    Either is inserted once, so a redelivered failure opens nothing more.

    A ``LEDGER_CONFLICT`` is a request the payout refused, not the round's outcome (the round
    may well be paid): it leaves the round's record as it is and opens an item of its own,
    ``payout:round<n>:conflict``, so that a real failure of the round and the conflict are
    decided apart, and deciding one never closes the other."""
    conflict = e.error_code == LEDGER_CONFLICT
    own = payout_conflict_item(e.round) if conflict else payout_item(e.round)
    named = {None, own} if conflict else {None, own, payout_again_item(e.round)}
    if e.item_key not in named:
        raise InvalidInput(
            f"payout.failed ({e.error_code}) of round {e.round} names review item"
            f" {e.item_key!r}, which is not one of that round's"
        )
    item = (
        REVIEW_ITEMS,
        (
            e.dispute_id,
            e.item_key or own,
            "PAYOUT",
            None,
            f"payout {'request refused' if conflict else 'failed'} ({e.error_code}): {e.reason}",
            e.failed_at,
        ),
    )
    if conflict:
        return [item]
    return [
        (
            PAYOUT_HISTORY,
            (
                e.dispute_id,
                e.round,
                e.revision,
                "FAILED",
                e.amount_minor,
                None,
                e.error_code,
                e.reason,
                e.failed_at,
            ),
        ),
        (
            PAYOUTS_FAILED,
            (
                e.dispute_id,
                e.round,
                "FAILED",
                e.amount_minor,
                e.error_code,
                e.reason,
                e.failed_at,
                e.revision,
            ),
        ),
        (
            "UPDATE payout_events SET outcome = 'FAILED', amount_minor = %s, error_code = %s,"
            " reason = %s, at = %s, revision = %s WHERE dispute_id = %s AND round = %s"
            " AND (revision < %s OR (revision = %s AND outcome = 'COMPLETED'))",
            (
                e.amount_minor,
                e.error_code,
                e.reason,
                e.failed_at,
                e.revision,
                e.dispute_id,
                e.round,
                e.revision,
                e.revision,
            ),
        ),
        item,
    ]


def review_rows(e: ev.ReviewDecided) -> list[Statement]:
    """Close the item decided, and only that one: a decision on the dispute leaves its failed
    payout open, and the other way round. A decision published before events named their item
    closes the open items of its kind. A decision pricing refuses (see
    :func:`~refund_bench.domain.review_problem`) closes nothing: :class:`InvalidInput`, so
    its item stays in the queue for a decision that counts."""
    problem = review_problem(e.kind, e.decision, e.grievance_id, e.item_key)
    if problem is not None:
        raise InvalidInput(f"review {e.review_id}: {problem}")
    key = e.item_key or (f"grievance:{e.grievance_id}" if e.kind == "GRIEVANCE" else None)
    if key is None:
        return [
            (
                "UPDATE review_items SET status = 'DECIDED', decided_at = %s"
                " WHERE dispute_id = %s AND kind = %s AND status = 'OPEN'",
                (e.decided_at, e.dispute_id, e.kind),
            )
        ]
    return [
        (
            "UPDATE review_items SET status = 'DECIDED', decided_at = %s"
            " WHERE dispute_id = %s AND item_key = %s AND kind = %s AND status = 'OPEN'",
            (e.decided_at, e.dispute_id, key, e.kind),
        )
    ]


def rows_for(topic: str, value: Mapping[str, Any]) -> list[Statement]:
    """The statements that project one event of ``topic``."""
    match topic:
        case "grievance.extracted":
            return grievance_rows(ev.parse(ev.GrievanceExtracted, value))
        case "complaint.extracted":
            return extraction_rows(ev.parse(ev.ComplaintExtracted, value))
        case "ruling.cast":
            return ruling_rows(ev.parse(ev.RulingCast, value))
        case "verdict.decided":
            return verdict_rows(ev.parse(ev.VerdictDecided, value))
        case "refund.priced":
            return priced_rows(ev.parse(ev.RefundPriced, value))
        case "payout.completed":
            return payout_completed_rows(ev.parse(ev.PayoutCompleted, value))
        case "payout.failed":
            return payout_failed_rows(ev.parse(ev.PayoutFailed, value))
        case "review.decided":
            return review_rows(ev.parse(ev.ReviewDecided, value))
    return []
