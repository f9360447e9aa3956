"""Which review decisions pricing and the recorder both act on: a decision its kind of review
can make, on an item of that kind."""

from __future__ import annotations

import pytest

from refund_bench.domain import review_problem


@pytest.mark.parametrize(
    ("kind", "decision", "grievance_id", "item_key"),
    [
        ("GRIEVANCE", "UPHOLD", "g2", "grievance:g2"),
        ("GRIEVANCE", "REJECT", "g2", None),  # published before decisions named their item
        ("DISPUTE", "APPROVE", None, "dispute:round3"),
        ("DISPUTE", "DECLINE", None, None),
        ("PAYOUT", "REPAY", None, "payout:round2"),
        ("PAYOUT", "PAID_ELSEWHERE", None, "payout:round12"),
        ("PAYOUT", "REPAY", None, "payout:round2:again"),  # failed again after a refund
        ("PAYOUT", "PAID_ELSEWHERE", None, "payout:round2:again"),
        ("PAYOUT", "PAID_ELSEWHERE", None, "payout:round2:conflict"),  # closes a LEDGER_CONFLICT
        ("EXTRACTION", "RESOLVED_ELSEWHERE", None, "extraction"),  # handled outside the pipeline
    ],
)
def test_a_decision_on_an_item_of_its_kind_is_taken(
    kind: str, decision: str, grievance_id: str | None, item_key: str | None
) -> None:
    assert review_problem(kind, decision, grievance_id, item_key) is None


@pytest.mark.parametrize(
    ("kind", "decision", "grievance_id", "item_key", "problem"),
    [
        ("REFUND", "UPHOLD", None, "refund", "unknown kind of review 'REFUND'"),
        ("EXTRACTION", "UPHOLD", None, "extraction", "an EXTRACTION review cannot decide UPHOLD"),
        ("PAYOUT", "RESOLVED_ELSEWHERE", None, "payout:round1", "cannot decide RESOLVED_ELSE"),
        ("EXTRACTION", "RESOLVED_ELSEWHERE", None, None, "must name its extraction item, not None"),
        ("EXTRACTION", "RESOLVED_ELSEWHERE", None, "grievance:g1", "must name its extraction"),
        ("GRIEVANCE", "APPROVE", "g2", "grievance:g2", "a GRIEVANCE review cannot decide APPROVE"),
        ("GRIEVANCE", "UPHOLD", None, None, "a GRIEVANCE review names no grievance_id"),
        (
            "GRIEVANCE",
            "UPHOLD",
            "g2",
            "grievance:g3",
            "a review of grievance g2 cannot decide item 'grievance:g3'",
        ),
        ("DISPUTE", "APPROVE", None, "payout:round2", "a DISPUTE review cannot decide item"),
        ("DISPUTE", "APPROVE", None, "dispute:roundx", "a DISPUTE review cannot decide item"),
        ("PAYOUT", "REPAY", None, None, "must name its payout:round<n> item, not None"),
        ("PAYOUT", "REPAY", None, "dispute:round2", "must name its payout:round<n> item"),
        ("PAYOUT", "REPAY", None, "payout:round2:later", "must name its payout:round<n> item"),
        ("DISPUTE", "APPROVE", None, "payout:round2:again", "a DISPUTE review cannot decide"),
        (
            "PAYOUT",
            "REPAY",
            None,
            "payout:round2:conflict",
            "a review of payout:round2:conflict, a payout request refused for the round's recorded"
            " amount, cannot decide REPAY",
        ),
    ],
)
def test_any_other_decision_is_refused_with_why(
    kind: str, decision: str, grievance_id: str | None, item_key: str | None, problem: str
) -> None:
    found = review_problem(kind, decision, grievance_id, item_key)
    assert found is not None
    assert problem in found
