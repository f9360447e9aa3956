"""Reading one dispute's story back from PostgreSQL: for the demo, tests and benchmarks.

A dispute is *final* for its latest settlement round when that round is priced, its reply is
stored and, if it approved money, the payout of that round has completed or failed, and the
story of each grievance it priced is recorded whole: the grievance, its verdict and every
ruling the verdict counted. The recorder reads each topic on its own, so a priced round may be
in PostgreSQL before the rulings that led to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from refund_bench.money import format_minor

_PAYING = ("AUTO_APPROVED", "REVIEW_APPROVED")


@dataclass(frozen=True)
class Story:
    dispute: dict[str, Any] | None
    extraction: dict[str, Any] | None
    """What the extractor made of the complaint, with the answers it read (``extractions``)."""
    grievances: list[dict[str, Any]]
    rulings: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    priced: list[dict[str, Any]]
    replies: list[dict[str, Any]]
    payouts: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    review_items: list[dict[str, Any]]

    @property
    def latest_round(self) -> dict[str, Any] | None:
        return self.priced[-1] if self.priced else None

    def is_final(self, round_: int | None = None, *, whole: bool = True) -> bool:
        """True when the given (default: latest) priced round has reached its end state;
        ``whole``: and the grievances it priced are recorded whole (:func:`_grievances_recorded`;
        ``False`` for a dispute whose verdicts were written without rulings, as a test may)."""
        rounds = {p["round"]: p for p in self.priced}
        target = rounds.get(round_) if round_ is not None else self.latest_round
        if target is None:
            return False
        if not any(r["round"] == target["round"] for r in self.replies):
            return False
        paying = target["decision"] in _PAYING and target["payable_minor"] > 0
        if paying and not any(p["round"] == target["round"] for p in self.payouts):
            return False
        return not whole or self._grievances_recorded(
            line["grievance_id"] for line in target["lines"]
        )

    def _grievances_recorded(self, grievance_ids: Iterable[str]) -> bool:
        """Whether each of ``grievance_ids`` has its grievance, its verdict and as many rulings
        as the verdict counted votes."""
        grievances = {g["grievance_id"] for g in self.grievances}
        verdicts = {v["grievance_id"]: v for v in self.verdicts}
        rulings = Counter(r["grievance_id"] for r in self.rulings)
        for grievance_id in grievance_ids:
            verdict = verdicts.get(grievance_id)
            if grievance_id not in grievances or verdict is None:
                return False
            votes = verdict["votes_upheld"] + verdict["votes_rejected"] + verdict["votes_escalate"]
            if rulings[grievance_id] < votes:
                return False
        return True

    @property
    def paid_minor(self) -> int:
        return sum(p["amount_minor"] for p in self.payouts if p["outcome"] == "COMPLETED")


def _rows(conn: psycopg.Connection[Any], sql: str, dispute_id: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, (dispute_id,))
        return list(cur.fetchall())


def load_story(conn: psycopg.Connection[Any], dispute_id: str) -> Story:
    disputes = _rows(conn, "SELECT * FROM disputes WHERE dispute_id = %s", dispute_id)
    extractions = _rows(conn, "SELECT * FROM extractions WHERE dispute_id = %s", dispute_id)
    return Story(
        dispute=disputes[0] if disputes else None,
        extraction=extractions[0] if extractions else None,
        grievances=_rows(
            conn, "SELECT * FROM grievances WHERE dispute_id = %s ORDER BY span_start", dispute_id
        ),
        rulings=_rows(
            conn,
            "SELECT * FROM rulings WHERE dispute_id = %s ORDER BY grievance_id, judge_seat",
            dispute_id,
        ),
        verdicts=_rows(
            conn, "SELECT * FROM verdicts WHERE dispute_id = %s ORDER BY grievance_id", dispute_id
        ),
        priced=_rows(
            conn, "SELECT * FROM priced_refunds WHERE dispute_id = %s ORDER BY round", dispute_id
        ),
        replies=_rows(
            conn, "SELECT * FROM replies WHERE dispute_id = %s ORDER BY round", dispute_id
        ),
        payouts=_rows(
            conn, "SELECT * FROM payout_events WHERE dispute_id = %s ORDER BY round", dispute_id
        ),
        ledger=_rows(
            conn, "SELECT * FROM payout_ledger WHERE dispute_id = %s ORDER BY round", dispute_id
        ),
        review_items=_rows(
            conn,
            "SELECT * FROM review_items WHERE dispute_id = %s ORDER BY created_at, item_key",
            dispute_id,
        ),
    )


def render(story: Story, label: str = "") -> str:
    """A plain-text account of one dispute, as the demo prints it."""
    if story.dispute is None:
        return f"{label}: no such dispute"
    d = story.dispute
    out = [
        f"=== {label} {d['dispute_id']} (order {d['order_id']})",
        f"complaint: {d['complaint_text']}",
    ]
    out.append(f"evidence snapshot: sha256 {d['snapshot_sha256'][:16]}...")
    if story.extraction is not None:
        e = story.extraction
        attempts = len(e["answers"])
        out.append(
            f"extraction: {e['outcome']}, from {attempts} model answer{'s' * (attempts != 1)}"
        )
    verdicts = {v["grievance_id"]: v for v in story.verdicts}
    for g in story.grievances:
        item = f" [{g['item_quantity']} x {g['item_name']}]" if g["item_name"] else ""
        out.append(f"  {g['grievance_id']} {g['category']}{item}: {g['text']}")
        for r in (r for r in story.rulings if r["grievance_id"] == g["grievance_id"]):
            silent = (
                "  (no record: counts towards no majority)"
                if r["ruling"] == "UPHELD" and r.get("cites_missing_evidence")
                else ""
            )
            out.append(
                f"      judge {r['judge_seat']}: {r['ruling']:<8} conf {r['confidence']:.2f}"
                f"  cites {', '.join(r['evidence_cited']) or '-'}{silent}"
            )
        v = verdicts.get(g["grievance_id"])
        if v:
            out.append(f"      verdict: {v['outcome']} ({v['split']})")
    if not story.grievances:
        out.append("  no checkable grievance")
    for p in story.priced:
        out.append(f"  round {p['round']}: {p['decision']} - {p['reason']}")
        for line in p["lines"]:
            out.append(
                f"      {line['grievance_id']} {line['category']:<15} {line['status']:<8}"
                f" {format_minor(line['amount_minor'], p['currency']):>10}  {line['rule']}"
            )
        out.append(
            f"      total {format_minor(p['total_minor'], p['currency'])},"
            f" payable now {format_minor(p['payable_minor'], p['currency'])}"
        )
    for reply in story.replies:
        out.append(f"  reply (round {reply['round']}, {reply['source']}): {reply['text']}")
    for pay in story.payouts:
        detail = pay["stripe_refund_id"] or pay["error_code"]
        out.append(
            f"  payout round {pay['round']}: {pay['outcome']} {pay['amount_minor']} ({detail})"
        )
    open_items = [i for i in story.review_items if i["status"] == "OPEN"]
    for review in open_items:
        out.append(
            f"  review queue: {review['kind']} {review['grievance_id'] or ''} - {review['reason']}"
        )
    return "\n".join(out)
