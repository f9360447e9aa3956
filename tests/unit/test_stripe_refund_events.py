"""Which Stripe events report a failure of one of the payout stage's refunds (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from services.api.refund_failures import RefundFailureReport, StripeEvent, refund_failure_of
from tests.stripe_events import refund_event


def _of(event: dict[str, Any]) -> RefundFailureReport | str:
    return refund_failure_of(StripeEvent.model_validate(event))


@pytest.mark.parametrize("event_type", ["refund.failed", "refund.updated", "charge.refund.updated"])
@pytest.mark.parametrize("status", ["failed", "canceled", "requires_action"])
def test_a_refund_that_did_not_pay_is_reported_with_its_round(event_type: str, status: str) -> None:
    event = refund_event("re_1", dispute_id="d-1", round_=2, status=status, event_type=event_type)
    assert _of(event) == RefundFailureReport(
        stripe_event_id=event["id"],
        stripe_refund_id="re_1",
        refund_status=status,
        failure_reason="expired_or_canceled_card",
        dispute_id="d-1",
        round=2,
    )


@pytest.mark.parametrize(
    ("changes", "because"),
    [
        ({"status": "succeeded"}, "status succeeded is not a failure"),
        ({"status": "pending"}, "status pending is not a failure"),
        ({"dispute_id": None}, "not made by the payout stage"),
        ({"dispute_id": "d 1"}, "not made by the payout stage"),
        ({"round_": "0"}, "not made by the payout stage"),
        ({"round_": "\u00b2"}, "not made by the payout stage"),
        ({"round_": "1234567890"}, "not made by the payout stage"),
        ({"event_type": "charge.refunded"}, "is not about a refund's status"),
    ],
)
def test_other_events_report_nothing_and_say_why(changes: dict[str, Any], because: str) -> None:
    fields: dict[str, Any] = {"dispute_id": "d-1", "round_": 1, **changes}
    report = _of(refund_event("re_1", **fields))
    assert isinstance(report, str)
    assert because in report


def test_a_refund_event_about_something_else_is_an_error() -> None:
    event = refund_event("re_1", dispute_id="d-1")
    event["data"]["object"]["object"] = "charge"
    with pytest.raises(ValueError, match="not a refund"):
        _of(event)
