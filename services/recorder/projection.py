"""What each flow event adds to the audit projection and the review queue (pure).

Every statement is an insert keyed by natural ids with ``ON CONFLICT DO NOTHING`` (or an
update that is idempotent), so redelivered events change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from refund_bench import events as ev
from refund_bench.domain import Decision, Ruling

Statement = tuple[str, tuple[Any, ...]]

_REVIEW_ITEM = (
    "INSERT INTO review_items (dispute_id, item_key, kind, grievance_id, reason, created_at)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (dispute_id, item_key) DO NOTHING"
)


def grievance_rows(e: ev.GrievanceExtracted) -> list[Statement]:
    return [
        (
            "INSERT INTO grievances (dispute_id, grievance_id, category, text, span_start,"
            " span_end,"
            " item_name, item_quantity, grievance_total, snapshot_sha256, prompt_version, model,"
            " extracted_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id, grievance_id) DO NOTHING",
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


def ruling_rows(e: ev.RulingCast) -> list[Statement]:
    return [
        (
            "INSERT INTO rulings (dispute_id, grievance_id, judge_seat, ruling, model_ruling,"
            " confidence, evidence_cited, reasoning, model, prompt_version, snapshot_sha256,"
            " raw_response, cast_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id, grievance_id, judge_seat) DO NOTHING",
            (
                e.dispute_id,
                e.grievance_id,
                e.judge_seat,
                e.ruling,
                e.model_ruling,
                e.confidence,
                json.dumps(e.evidence_cited),
                e.reasoning,
                e.model,
                e.prompt_version,
                e.snapshot_sha256,
                e.raw_response,
                e.cast_at,
            ),
        )
    ]


def verdict_rows(e: ev.VerdictDecided) -> list[Statement]:
    rows: list[Statement] = [
        (
            "INSERT INTO verdicts (dispute_id, grievance_id, category, outcome, votes_upheld,"
            " votes_rejected, votes_escalate, split, unanimous, decided_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id, grievance_id) DO NOTHING",
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
        rows.append(
            (
                _REVIEW_ITEM,
                (
                    e.dispute_id,
                    f"grievance:{e.grievance_id}",
                    "GRIEVANCE",
                    e.grievance_id,
                    reason,
                    e.decided_at,
                ),
            )
        )
    return rows


def priced_rows(e: ev.RefundPriced) -> list[Statement]:
    rows: list[Statement] = [
        (
            "INSERT INTO priced_refunds (dispute_id, round, pricing_version, currency,"
            " order_total_minor, lines, total_minor, already_paid_minor, payable_minor, cap_minor,"
            " decision, held_grievances, reason, priced_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id, round) DO NOTHING",
            (
                e.dispute_id,
                e.round,
                e.pricing_version,
                e.currency,
                e.order_total_minor,
                json.dumps([line.model_dump() for line in e.lines]),
                e.total_minor,
                e.already_paid_minor,
                e.payable_minor,
                e.cap_minor,
                e.decision,
                json.dumps(e.held_grievances),
                e.reason,
                e.priced_at,
            ),
        )
    ]
    if e.decision == Decision.HELD_FOR_REVIEW and not e.lines:
        rows.append(
            (_REVIEW_ITEM, (e.dispute_id, "extraction", "EXTRACTION", None, e.reason, e.priced_at))
        )
    elif e.decision == Decision.HELD_FOR_REVIEW and e.total_minor > e.cap_minor:
        rows.append(
            (
                _REVIEW_ITEM,
                (e.dispute_id, f"dispute:round{e.round}", "DISPUTE", None, e.reason, e.priced_at),
            )
        )
    return rows


def payout_completed_rows(e: ev.PayoutCompleted) -> list[Statement]:
    return [
        (
            "INSERT INTO payout_events (dispute_id, round, outcome, amount_minor,"
            " stripe_refund_id, at)"
            " VALUES (%s, %s, 'COMPLETED', %s, %s, %s) ON CONFLICT (dispute_id, round) DO NOTHING",
            (e.dispute_id, e.round, e.amount_minor, e.stripe_refund_id, e.completed_at),
        )
    ]


def payout_failed_rows(e: ev.PayoutFailed) -> list[Statement]:
    return [
        (
            "INSERT INTO payout_events (dispute_id, round, outcome, amount_minor, error_code,"
            " reason, at) VALUES (%s, %s, 'FAILED', %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id, round) DO NOTHING",
            (e.dispute_id, e.round, e.amount_minor, e.error_code, e.reason, e.failed_at),
        ),
        (
            _REVIEW_ITEM,
            (
                e.dispute_id,
                f"payout:round{e.round}",
                "PAYOUT",
                None,
                f"payout failed ({e.error_code}): {e.reason}",
                e.failed_at,
            ),
        ),
    ]


def review_rows(e: ev.ReviewDecided) -> list[Statement]:
    key = f"grievance:{e.grievance_id}" if e.kind == "GRIEVANCE" else None
    if key is None:
        return [
            (
                "UPDATE review_items SET status = 'DECIDED', decided_at = %s"
                " WHERE dispute_id = %s AND kind IN ('DISPUTE', 'EXTRACTION', 'PAYOUT')"
                " AND status = 'OPEN'",
                (e.decided_at, e.dispute_id),
            )
        ]
    return [
        (
            "UPDATE review_items SET status = 'DECIDED', decided_at = %s"
            " WHERE dispute_id = %s AND item_key = %s AND status = 'OPEN'",
            (e.decided_at, e.dispute_id, key),
        )
    ]


def rows_for(topic: str, value: Mapping[str, Any]) -> list[Statement]:
    """The statements that project one event of ``topic``."""
    match topic:
        case "grievance.extracted":
            return grievance_rows(ev.parse(ev.GrievanceExtracted, value))
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
