"""When a dispute's story, as the recorder projected it, is final: the demo and the tests wait
for it before reading any part of it."""

from __future__ import annotations

from typing import Any

from refund_bench.disputes import Story


def _story(rulings: int = 3, verdict: bool = True, grievance: bool = True) -> Story:
    votes = {"votes_upheld": 2, "votes_rejected": 0, "votes_escalate": 1}
    line = {"grievance_id": "g1", "status": "PAY", "amount_minor": 4900}
    priced = {"round": 1, "decision": "AUTO_APPROVED", "payable_minor": 4900, "lines": [line]}
    return Story(
        dispute={"dispute_id": "d-1"},
        extraction=None,
        grievances=[{"grievance_id": "g1"}] if grievance else [],
        rulings=[{"grievance_id": "g1", "judge_seat": seat} for seat in range(rulings)],
        verdicts=[{"grievance_id": "g1", **votes}] if verdict else [],
        priced=[priced],
        replies=[{"round": 1}],
        payouts=[{"round": 1, "outcome": "COMPLETED", "amount_minor": 4900}],
        ledger=[],
        review_items=[],
    )


def test_a_paid_round_with_its_grievances_recorded_whole_is_final() -> None:
    assert _story().is_final()


def test_a_round_is_not_final_before_the_rulings_and_verdicts_that_led_to_it_are_recorded() -> None:
    # The recorder reads each topic on its own: the payout may be in before a ruling is.
    assert not _story(rulings=2).is_final()
    assert not _story(verdict=False).is_final()
    assert not _story(grievance=False).is_final()
    # Verdicts written with no rulings (a test's): final without them when asked so.
    assert _story(rulings=0).is_final(whole=False)


def test_a_round_with_nothing_to_judge_needs_only_its_reply() -> None:
    priced: dict[str, Any] = {
        "round": 1,
        "decision": "NOTHING_TO_PAY",
        "payable_minor": 0,
        "lines": [],
    }
    empty = Story(
        dispute={"dispute_id": "d-2"},
        extraction=None,
        grievances=[],
        rulings=[],
        verdicts=[],
        priced=[priced],
        replies=[{"round": 1}],
        payouts=[],
        ledger=[],
        review_items=[],
    )
    assert empty.is_final()
    assert not Story(**{**empty.__dict__, "replies": []}).is_final()
