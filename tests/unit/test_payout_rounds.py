"""Which failed payout rounds the desk may pay again (pure rules, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from refund_bench.db.payout_rounds import (
    MAY_HAVE_REFUNDED,
    PRICING_KEEPS_PAID_S,
    REPAY_WINDOW_S,
    UNMENDABLE_FAILURES,
    settled_on_other_item,
    why_not_repayable,
)
from services.pricing.handler import PAID_RETENTION_S


def test_a_failed_round_within_the_window_can_be_paid_again() -> None:
    assert why_not_repayable("FAILED", "card_declined") is None
    assert why_not_repayable("FAILED", "refund_failed", REPAY_WINDOW_S) is None


def test_a_round_settled_elsewhere_or_paid_again_on_its_other_item_is_not_paid_again() -> None:
    """A round whose refund failed again after Stripe refunded it has two review items: neither
    pays it again once it was settled another way, or paid again on the other."""
    settled = why_not_repayable("FAILED", "refund_failed", 0.0, paid_elsewhere=True)
    assert settled is not None
    assert "settled it another way before (PAID_ELSEWHERE)" in settled
    repaid = why_not_repayable("FAILED", "refund_failed", 0.0, repaid_on="payout:round1")
    assert repaid == "it was paid again already, in a new round (REPAY on payout:round1)"


OPENED = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def test_a_settlement_by_hand_on_the_other_item_since_this_one_opened_settles_it_too() -> None:
    later = OPENED + timedelta(minutes=5)
    settled = ("payout:round1", later)
    assert (
        settled_on_other_item("payout:round1:again", OPENED, settled, paid_elsewhere=True)
        == "payout:round1"
    )


@pytest.mark.parametrize(
    ("settled", "paid_elsewhere"),
    [
        (None, True),  # nobody settled the round by hand
        (("payout:round1", OPENED + timedelta(minutes=5)), False),  # the mark is gone
        (("payout:round1", OPENED - timedelta(minutes=5)), True),  # settled before this failure
        (("payout:round1", OPENED), True),  # in the same instant: not after it
        (("payout:round1:again", OPENED + timedelta(minutes=5)), True),  # on this item itself
    ],
)
def test_a_settlement_by_hand_counts_only_on_the_other_item_after_this_one_opened(
    settled: tuple[str, datetime] | None, paid_elsewhere: bool
) -> None:
    assert (
        settled_on_other_item("payout:round1:again", OPENED, settled, paid_elsewhere=paid_elsewhere)
        is None
    )


def test_a_failed_round_past_the_window_cannot() -> None:
    why = why_not_repayable("FAILED", "refund_failed", REPAY_WINDOW_S + 1)
    assert why is not None
    assert "last priced 34 days ago, and pricing keeps a paid dispute 35 days" in why


def test_the_window_closes_before_pricing_lets_the_dispute_go() -> None:
    assert PAID_RETENTION_S == PRICING_KEEPS_PAID_S
    assert REPAY_WINDOW_S < PRICING_KEEPS_PAID_S


@pytest.mark.parametrize("status", [None, "PENDING", "SUCCEEDED"])
def test_only_a_failed_round_can_be_paid_again(status: str | None) -> None:
    why = why_not_repayable(status, None, 0.0)
    assert why is not None
    assert "only a FAILED refund can be paid again" in why


def test_a_round_that_may_have_refunded_is_never_paid_again() -> None:
    for code in MAY_HAVE_REFUNDED:
        assert why_not_repayable("FAILED", code, 0.0) == UNMENDABLE_FAILURES[code]
