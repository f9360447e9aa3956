"""Which Stripe events are about one of the payout stage's refunds, and which round (pure).

The status an event carries is kept for the logs only: the webhook acts on the refund as Stripe
holds it when read back (tests/integration/test_api_stripe_webhook.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from services.api.refund_failures import (
    PayoutRefundEvent,
    RefundFailureReport,
    StripeEvent,
    failure_report,
    payout_refund_of,
)
from services.payout.payments import RetrievedRefund
from tests.stripe_events import refund_event


def _of(event: dict[str, Any]) -> PayoutRefundEvent | str:
    return payout_refund_of(StripeEvent.model_validate(event))


@pytest.mark.parametrize("event_type", ["refund.failed", "refund.updated", "charge.refund.updated"])
@pytest.mark.parametrize(
    "status", ["failed", "canceled", "requires_action", "succeeded", "pending", None]
)
def test_an_event_about_a_payout_refund_names_its_round_whatever_its_status(
    event_type: str, status: str | None
) -> None:
    event = refund_event("re_1", dispute_id="d-1", round_=2, status="failed", event_type=event_type)
    event["data"]["object"]["status"] = status
    assert _of(event) == PayoutRefundEvent(
        stripe_event_id=event["id"],
        stripe_refund_id="re_1",
        event_status=status,
        dispute_id="d-1",
        round=2,
    )


def test_a_failure_is_reported_with_the_status_stripe_holds_not_the_events() -> None:
    event = _of(refund_event("re_1", dispute_id="d-1", round_=2, status="requires_action"))
    assert isinstance(event, PayoutRefundEvent)
    held = RetrievedRefund(id="re_1", status="canceled", failure_reason="unknown")
    assert failure_report(event, held) == RefundFailureReport(
        stripe_event_id=event.stripe_event_id,
        stripe_refund_id="re_1",
        refund_status="canceled",
        failure_reason="unknown",
        dispute_id="d-1",
        round=2,
    )


@pytest.mark.parametrize(
    ("changes", "because"),
    [
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
