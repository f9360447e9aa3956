"""The pricing table, the order-total clamp, the auto-approve cap and review rounds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st

from refund_bench.domain import (
    MAX_ORDER_MINOR,
    Category,
    Decision,
    LineItem,
    LineStatus,
    OrderRecord,
    ReviewDecision,
    Ruling,
)
from refund_bench.errors import InvalidInput
from refund_bench.money import PAYABLE_STEPS, payable_step
from services.extractor.evidence import build_snapshot, freeze
from services.pricing.table import (
    DEFAULT_CAP_MINOR,
    PRICING_VERSION,
    GrievanceVerdict,
    PricedRefund,
    ReviewOverrides,
    pay_again,
    price_refund,
)
from tests.unit.orders import ARTICLE_ORDER, BIRYANI, RAITA, article_order

U, R, E = Ruling.UPHELD, Ruling.REJECTED, Ruling.ESCALATE
SNAPSHOT = build_snapshot(ARTICLE_ORDER)
EMPTY_BAG = build_snapshot(article_order(pickup_weight_actual_g=0))
"""The article's order handed over weighing nothing: the shortfall explains every unit."""


def verdict(
    gid: str,
    category: Category,
    outcome: Ruling = U,
    item: str | None = None,
    quantity: int | None = None,
) -> GrievanceVerdict:
    return GrievanceVerdict(
        grievance_id=gid,
        category=category,
        outcome=outcome,
        item_name=item,
        item_quantity=quantity,
    )


ARTICLE_VERDICTS = (
    verdict("g1", Category.LATE_DELIVERY),
    verdict("g2", Category.MISSING_ITEM, item=BIRYANI, quantity=2),
    verdict("g3", Category.PACKAGING, E, item=RAITA),
    verdict("g4", Category.PARTNER_CONDUCT),
)


def one(category: Category, outcome: Ruling = U, **kw: Any) -> PricedRefund:
    return price_refund([verdict("g1", category, outcome, **kw)], SNAPSHOT)


def test_article_round_one() -> None:
    priced = price_refund(ARTICLE_VERDICTS, SNAPSHOT)
    assert [(ln.status, ln.amount_minor, ln.proposed_minor) for ln in priced.lines] == [
        (LineStatus.PAY, 4900, 4900),
        (LineStatus.PAY, 64000, 64000),
        (LineStatus.HELD, 0, 6000),
        (LineStatus.ZERO, 0, 0),
    ]
    assert priced.lines[1].rule == "MISSING_ITEM: 2 x 32000 (Hyderabadi Biryani)"
    assert priced.lines[0].rule == (
        "LATE_DELIVERY: flat 4900 (delivered 85 min after placing, SLA 45 min)"
    )
    assert priced.total_minor == 68900
    assert priced.payable_minor == 68900
    assert priced.decision is Decision.AUTO_APPROVED
    assert priced.held_grievances == ("g3",)
    assert "held for review: g3" in priced.reason
    assert (priced.cap_minor, priced.order_total_minor, priced.currency) == (
        DEFAULT_CAP_MINOR,
        134000,
        "INR",
    )
    assert priced.pricing_version == PRICING_VERSION == "2026-12-07.v7"


@pytest.mark.parametrize("currency", ["inr", "Inr"])
def test_an_order_stored_with_its_currency_in_lowercase_prices_as_in_capitals(
    currency: str,
) -> None:
    """Stripe writes currency codes in lowercase, and an order store filled from it may too:
    the late delivery's flat amount and the cap are found all the same."""
    priced = price_refund(ARTICLE_VERDICTS, build_snapshot(article_order(currency=currency)))
    assert priced == price_refund(ARTICLE_VERDICTS, SNAPSHOT)
    assert (priced.decision, priced.payable_minor, priced.currency) == (
        Decision.AUTO_APPROVED,
        68900,
        "INR",
    )


@pytest.mark.parametrize("currency", ["", "IN", "INRX", "1NR", "I R", "\u0130NR", "\u0131nr"])
def test_an_order_whose_currency_is_not_three_letters_is_refused(currency: str) -> None:
    with pytest.raises(ValueError, match="currency"):
        article_order(currency=currency)


def test_article_round_two_after_the_reviewer_upholds_the_raita() -> None:
    overrides = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g3")
    priced = price_refund(
        ARTICLE_VERDICTS, SNAPSHOT, already_approved_minor=68900, overrides=overrides
    )
    raita = priced.lines[2]
    assert (raita.outcome, raita.status, raita.amount_minor) == (U, LineStatus.PAY, 6000)
    assert priced.total_minor == 74900
    assert priced.already_paid_minor == 68900
    assert priced.payable_minor == 6000
    assert priced.decision is Decision.AUTO_APPROVED
    assert priced.held_grievances == ()


def test_reviewer_rejecting_the_held_line_leaves_nothing_more_to_pay() -> None:
    overrides = ReviewOverrides().with_review(ReviewDecision.REJECT, "g3")
    priced = price_refund(
        ARTICLE_VERDICTS, SNAPSHOT, already_approved_minor=68900, overrides=overrides
    )
    assert priced.lines[2].status is LineStatus.REJECTED
    assert (priced.total_minor, priced.payable_minor) == (68900, 0)
    assert priced.decision is Decision.NOTHING_TO_PAY


def test_the_snapshot_read_back_from_json_prices_the_same() -> None:
    assert price_refund(ARTICLE_VERDICTS, freeze(ARTICLE_ORDER).data) == price_refund(
        ARTICLE_VERDICTS, SNAPSHOT
    )


@pytest.mark.parametrize(
    ("category", "kw", "amount", "rule"),
    [
        (Category.WRONG_ITEM, {"item": BIRYANI, "quantity": 9}, 128000, "claimed 9, ordered 4"),
        (Category.MISSING_ITEM, {"item": BIRYANI, "quantity": 1}, 32000, "1 x 32000"),
        (Category.WRONG_ITEM, {"item": RAITA}, 6000, "WRONG_ITEM: 1 x 6000 (Raita)"),
        (Category.WRONG_ITEM, {"item": BIRYANI, "quantity": 3}, 96000, "3 x 32000"),
        (Category.PACKAGING, {"item": BIRYANI, "quantity": 2}, 64000, "2 x 32000"),
        (Category.QUALITY, {"item": BIRYANI, "quantity": 1}, 16000, "half of 1 x 32000"),
        (Category.QUALITY, {"item": RAITA}, 3000, "= 3000"),
        (Category.PARTNER_CONDUCT, {}, 0, "no monetary compensation"),
        (Category.BILLING, {}, 0, "not above the expected total"),
    ],
)
def test_pricing_rules(category: Category, kw: dict[str, Any], amount: int, rule: str) -> None:
    line = one(category, **kw).lines[0]
    assert line.amount_minor == amount
    assert line.status is (LineStatus.PAY if amount else LineStatus.ZERO)
    assert rule in line.rule


def test_an_item_named_without_a_quantity_claims_every_unit_ordered() -> None:
    # The extractor's contract: "the biryanis were cold" is all four of them, not one.
    line = one(Category.QUALITY, item=BIRYANI).lines[0]
    assert (line.status, line.amount_minor, line.quantity) == (LineStatus.PAY, 64000, 4)
    assert line.rule == "QUALITY: half of 4 x 32000 (Hyderabadi Biryani) = 64000"


@pytest.mark.parametrize("category", [Category.PACKAGING, Category.QUALITY])
def test_an_upheld_line_priced_by_an_item_that_names_none_is_held_for_a_reviewer(
    category: Category,
) -> None:
    # "The bag was soaked and everything leaked": which item's price applies is a person's call.
    priced = one(category)
    line = priced.lines[0]
    assert (line.outcome, line.status, line.amount_minor) == (U, LineStatus.HELD, 0)
    assert line.rule == f"{category}: no item named: held for a reviewer"
    assert priced.held_grievances == ("g1",)
    assert priced.decision is Decision.HELD_FOR_REVIEW

    upheld = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g1")
    reviewed = price_refund([verdict("g1", category)], SNAPSHOT, overrides=upheld)
    assert (reviewed.lines[0].status, reviewed.lines[0].amount_minor) == (LineStatus.ZERO, 0)
    assert reviewed.lines[0].rule == f"{category}: no item named"
    assert reviewed.held_grievances == ()


def test_quality_halves_with_floor_division() -> None:
    order = article_order(
        line_items=(LineItem(name="Lassi", quantity=1, unit_price_minor=4999),),
        charged_total_minor=4999,
    )
    line = price_refund([verdict("g1", Category.QUALITY, item="Lassi")], build_snapshot(order))
    assert line.lines[0].amount_minor == 2499


@pytest.mark.parametrize(
    ("currency", "price", "half"),
    [("KWD", 1250, 620), ("ISK", 68900, 34400), ("UGX", 500, 200), ("INR", 68900, 34450)],
)
def test_quality_halves_to_an_amount_stripe_takes_in_the_currency(
    currency: str, price: int, half: int
) -> None:
    """KWD 0.625 and ISK 344.50 are amounts Stripe refuses to refund: the half is rounded down
    to its step (KWD in tens of fils, ISK and UGX in whole units)."""
    order = article_order(
        currency=currency,
        line_items=(LineItem(name="Lassi", quantity=1, unit_price_minor=price),),
        charged_total_minor=price,
    )
    priced = price_refund(
        [verdict("g1", Category.QUALITY, item="Lassi")],
        build_snapshot(order),
        cap_currency=currency,
    )
    assert priced.lines[0].amount_minor == half
    assert priced.lines[0].rule == f"QUALITY: half of 1 x {price} (Lassi) = {half}"


def test_billing_pays_the_overcharge_once() -> None:
    snapshot = build_snapshot(article_order(charged_total_minor=139000))
    priced = price_refund(
        [verdict("g1", Category.BILLING), verdict("g2", Category.BILLING, item=RAITA)], snapshot
    )
    assert [ln.amount_minor for ln in priced.lines] == [5000, 0]
    assert priced.lines[0].rule == "BILLING: overcharge 5000 (charged 139000, expected 134000)"
    assert priced.lines[1].rule == "BILLING: 0, already paid by g1"


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"delivered_at": "2026-09-14T20:50:00+05:30"}, "within the SLA of 45 min"),
        ({"currency": "USD"}, "no flat amount for USD"),
    ],
)
def test_late_delivery_pays_nothing_when_the_sla_is_known_not_to_be_exceeded(
    changes: dict[str, Any], rule: str
) -> None:
    snapshot = build_snapshot(article_order(**changes))
    line = price_refund([verdict("g1", Category.LATE_DELIVERY)], snapshot).lines[0]
    assert (line.status, line.amount_minor) == (LineStatus.ZERO, 0)
    assert rule in line.rule


@pytest.mark.parametrize("unrecorded", [{"delivered_at": None}, {"delivery_sla_minutes": None}])
def test_a_late_delivery_the_order_cannot_time_waits_for_a_reviewer_whose_uphold_pays_it(
    unrecorded: dict[str, Any],
) -> None:
    """Missing evidence is never a price of 0: the line is held, and a reviewer's UPHOLD (their
    judgement standing in for the times the order lacks) pays the flat amount; a REJECT pays
    nothing."""
    snapshot = build_snapshot(article_order(**unrecorded))
    late = [verdict("g1", Category.LATE_DELIVERY)]
    first = price_refund(late, snapshot)
    [line] = first.lines
    assert (line.status, line.amount_minor) == (LineStatus.HELD, 0)
    assert "not recorded" in line.rule
    assert first.decision is Decision.HELD_FOR_REVIEW
    # The desk shows the reviewer what their UPHOLD pays: the flat amount, not 0.
    assert line.proposed_minor == 4900

    upheld = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g1")
    [paid] = price_refund(late, snapshot, overrides=upheld).lines
    assert (paid.status, paid.amount_minor) == (LineStatus.PAY, 4900)
    assert "upheld by a reviewer" in paid.rule
    rejected = ReviewOverrides().with_review(ReviewDecision.REJECT, "g1")
    [refused] = price_refund(late, snapshot, overrides=rejected).lines
    assert (refused.status, refused.amount_minor) == (LineStatus.REJECTED, 0)


def test_rejected_and_escalated_lines_pay_nothing_but_show_the_proposal() -> None:
    priced = price_refund(
        [
            verdict("g1", Category.MISSING_ITEM, R, item=BIRYANI, quantity=2),
            verdict("g2", Category.WRONG_ITEM, E, item=RAITA),
        ],
        SNAPSHOT,
    )
    assert [(ln.status, ln.amount_minor, ln.proposed_minor) for ln in priced.lines] == [
        (LineStatus.REJECTED, 0, 64000),
        (LineStatus.HELD, 0, 6000),
    ]
    assert priced.decision is Decision.HELD_FOR_REVIEW
    assert priced.payable_minor == 0


def test_a_unit_paid_half_for_quality_then_upheld_missing_is_paid_its_price_once() -> None:
    """Four naan, a 500 g shortfall that explains one missing: the bench upholds two missing
    (held: the weights explain one) and all four soggy (half of four paid in round 1). A
    reviewer then upholds the two missing. Each naan is paid once: two in full, two half."""
    order = article_order(
        line_items=[
            {"name": "Naan", "quantity": 4, "unit_price_minor": 10000, "unit_weight_g": 500}
        ],
        charged_total_minor=40000,
        pickup_weight_expected_g=2000,
        pickup_weight_actual_g=1500,
    )
    verdicts = [
        verdict("g1", Category.MISSING_ITEM, item="Naan", quantity=2),
        verdict("g2", Category.QUALITY, item="Naan", quantity=4),
    ]
    snapshot = build_snapshot(order)
    first = price_refund(verdicts, snapshot)
    assert [(ln.status, ln.amount_minor) for ln in first.lines] == [
        (LineStatus.HELD, 0),
        (LineStatus.PAY, 20000),
    ]
    upheld = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g1")
    second = price_refund(
        verdicts, snapshot, already_approved_minor=first.payable_minor, overrides=upheld
    )
    assert [ln.amount_minor for ln in second.lines] == [10000, 20000]
    assert second.lines[0].rule == (
        "MISSING_ITEM: 2 x 10000 (Naan); less 10000 paid for quality on 2 of these units"
    )
    assert (second.total_minor, second.payable_minor) == (30000, 10000)
    assert first.payable_minor + second.payable_minor == 20000 + 10000


@settings(max_examples=300)
@given(
    ordered=st.integers(min_value=1, max_value=6),
    unit_price=st.integers(min_value=1, max_value=100_000),
    missing=st.data(),
    bench_holds_by=st.sampled_from(["weights", "escalate"]),
)
def test_a_unit_is_paid_once_when_a_reviewer_upholds_it_missing_after_quality(
    ordered: int, unit_price: int, missing: st.DataObject, bench_holds_by: str
) -> None:
    """Whatever the quantities and the price: the bench pays half of ``soggy`` units for
    quality and holds ``gone`` units claimed missing (the weights do not explain them, or the
    bench escalates); a reviewer upholds the missing ones. The item's lines then pay the missing
    units in full and half of the delivered soggy ones, once: ``price x gone + price x
    min(soggy, ordered - gone) // 2``."""
    gone = missing.draw(st.integers(min_value=1, max_value=ordered), label="gone")
    soggy = missing.draw(st.integers(min_value=1, max_value=ordered), label="soggy")
    order = article_order(
        line_items=[
            {"name": "Naan", "quantity": ordered, "unit_price_minor": unit_price,
             "unit_weight_g": 100}
        ],
        charged_total_minor=unit_price * ordered,
        pickup_weight_expected_g=100 * ordered,
        pickup_weight_actual_g=100 * ordered,  # no shortfall: no missing unit explained
    )  # fmt: skip
    outcome = U if bench_holds_by == "weights" else E
    verdicts = [
        verdict("g1", Category.MISSING_ITEM, outcome, item="Naan", quantity=gone),
        verdict("g2", Category.QUALITY, item="Naan", quantity=soggy),
    ]
    snapshot = build_snapshot(order)
    first = price_refund(verdicts, snapshot, cap_minor=MAX_ORDER_MINOR)
    assert [ln.amount_minor for ln in first.lines] == [0, unit_price * soggy // 2]
    upheld = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g1")
    second = price_refund(
        verdicts,
        snapshot,
        cap_minor=MAX_ORDER_MINOR,
        already_approved_minor=first.payable_minor,
        overrides=upheld,
    )
    once = unit_price * gone + unit_price * min(soggy, ordered - gone) // 2
    assert second.total_minor == once
    assert first.payable_minor + second.payable_minor == once


def test_nothing_upheld_pays_nothing() -> None:
    priced = price_refund([verdict("g1", Category.PARTNER_CONDUCT)], SNAPSHOT)
    assert (priced.decision, priced.payable_minor, priced.total_minor) == (
        Decision.NOTHING_TO_PAY,
        0,
        0,
    )
    assert price_refund([], SNAPSHOT).decision is Decision.NOTHING_TO_PAY


def test_lines_naming_one_item_never_pay_more_than_its_line_total() -> None:
    priced = price_refund(
        [
            verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=3),
            verdict("g2", Category.QUALITY, item=BIRYANI, quantity=4),
            verdict("g3", Category.PACKAGING, E, item=BIRYANI, quantity=1),
        ],
        EMPTY_BAG,
        cap_minor=200_000,
    )
    # Three of the four are missing: the soggy claim pays half of the one delivered only.
    assert [ln.amount_minor for ln in priced.lines] == [96000, 16000, 0]
    assert priced.lines[1].rule == (
        "QUALITY: half of 1 x 32000 (Hyderabadi Biryani) (claimed 4; 3 of the 4 ordered already"
        " refunded in full or for quality) = 16000"
    )
    assert priced.lines[1].quantity == 1
    # The delivered one was paid half for quality: refunded in full, it is paid the other half.
    assert priced.lines[2].proposed_minor == 16000  # what is left of the biryani line
    assert priced.lines[2].rule.endswith("; less 16000 paid for quality on 1 of these units")
    assert priced.total_minor == 112000

    priced = price_refund(
        [
            verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=3),
            verdict("g3", Category.PACKAGING, E, item=BIRYANI, quantity=4),
        ],
        EMPTY_BAG,
        cap_minor=200_000,
    )
    assert priced.lines[1].proposed_minor == 32000
    assert priced.lines[1].rule.endswith(
        "; capped at 32000 left of the Hyderabadi Biryani line total"
    )


NAAN = "Butter Naan"
TWO_NAAN = build_snapshot(
    article_order(
        line_items=(LineItem(name=NAAN, quantity=2, unit_price_minor=20000, unit_weight_g=None),),
        charged_total_minor=40000,
        pickup_weight_expected_g=None,
        pickup_weight_actual_g=None,
    )
)


@pytest.mark.parametrize("full", [Category.MISSING_ITEM, Category.PACKAGING, Category.WRONG_ITEM])
@pytest.mark.parametrize("quality_first", [False, True])
def test_quality_pays_half_of_the_units_no_other_line_refunded_in_full(
    full: Category, quality_first: bool
) -> None:
    """One of two naans is refunded in full (missing, leaked, wrong), and the customer says
    both were soggy: the quality line pays half of the other naan, 10000, whichever grievance
    came first. Half of both on top of the full refund would pay 40000 for 30000 of loss."""
    lines = [
        verdict("g1", full, item=NAAN, quantity=1),
        verdict("g2", Category.QUALITY, item=NAAN, quantity=2),
    ]
    if quality_first:
        lines = [
            verdict("g1", Category.QUALITY, item=NAAN, quantity=2),
            verdict("g2", full, item=NAAN, quantity=1),
        ]
    priced = price_refund(lines, TWO_NAAN)
    amounts = {ln.category: ln.amount_minor for ln in priced.lines}
    assert amounts == {full: 20000, Category.QUALITY: 10000}
    assert priced.total_minor == 30000


def test_two_quality_lines_on_one_item_pay_half_of_each_unit_once() -> None:
    priced = price_refund(
        [
            verdict("g1", Category.QUALITY, item=NAAN, quantity=2),
            verdict("g2", Category.QUALITY, item=NAAN, quantity=1),
        ],
        TWO_NAAN,
    )
    assert [(ln.status, ln.amount_minor, ln.quantity) for ln in priced.lines] == [
        (LineStatus.PAY, 20000, 2),
        (LineStatus.ZERO, 0, 0),
    ]


TWO_DISHES = article_order(
    line_items=(
        LineItem(name="Paneer Tikka", quantity=1, unit_price_minor=28000, unit_weight_g=350),
        LineItem(name="Dal Makhani", quantity=2, unit_price_minor=22000, unit_weight_g=400),
        LineItem(name="Butter Naan", quantity=2, unit_price_minor=5000, unit_weight_g=90),
    ),
    charged_total_minor=82000,
    pickup_weight_expected_g=1330,
    pickup_weight_actual_g=930,
)
"""400 g short: one Dal Makhani's worth, or a Paneer Tikka's (350 g, the rest within half a
naan), but not both; each alone is what the snapshot's per-item estimate shows."""


def missing(gid: str, item: str, quantity: int, outcome: Ruling = U) -> GrievanceVerdict:
    return verdict(gid, Category.MISSING_ITEM, outcome, item=item, quantity=quantity)


def test_upheld_missing_units_are_paid_only_as_far_as_the_weight_shortfall_explains_them() -> None:
    snapshot = build_snapshot(TWO_DISHES)
    estimates = snapshot["derived"]["missing_units_estimate"]
    assert (estimates["Paneer Tikka"], estimates["Dal Makhani"]) == (1, 1)  # each alone: yes
    priced = price_refund(
        [missing("g1", "Paneer Tikka", 1), missing("g2", "Dal Makhani", 1)], snapshot
    )
    tikka, dal = priced.lines
    assert (tikka.status, tikka.amount_minor) == (LineStatus.PAY, 28000)
    assert (dal.outcome, dal.status, dal.amount_minor, dal.proposed_minor) == (
        U,
        LineStatus.HELD,
        0,
        22000,
    )
    assert dal.rule == (
        "MISSING_ITEM: 1 x 22000 (Dal Makhani); held: the pickup weight was 400 g short, "
        "350 g of it is paid on other lines, and the rest explains 0 of these 1 units"
    )
    assert (priced.total_minor, priced.payable_minor) == (28000, 28000)
    assert priced.held_grievances == ("g2",)
    assert priced.decision is Decision.AUTO_APPROVED


def test_the_shortfall_explains_units_up_to_half_a_unit_over() -> None:
    snapshot = build_snapshot(TWO_DISHES)
    # 350 g + 90 g = 440 g: within 400 g and half a naan (45 g).
    priced = price_refund(
        [missing("g1", "Paneer Tikka", 1), missing("g2", "Butter Naan", 1)], snapshot
    )
    assert [ln.status for ln in priced.lines] == [LineStatus.PAY, LineStatus.PAY]
    # Two naan on top (530 g) are not.
    priced = price_refund(
        [missing("g1", "Paneer Tikka", 1), missing("g2", "Butter Naan", 2)], snapshot
    )
    assert [ln.status for ln in priced.lines] == [LineStatus.PAY, LineStatus.HELD]
    assert priced.lines[1].rule.endswith("explains 1 of these 2 units")
    # More units of one dish than the shortfall explains: held, as the judges' estimate shows.
    [dal] = price_refund([missing("g1", "Dal Makhani", 2)], snapshot).lines
    assert (dal.status, dal.quantity) == (LineStatus.HELD, 2)
    assert dal.rule.endswith("explains 1 of these 2 units")


def test_a_reviewers_uphold_pays_a_line_the_weights_held() -> None:
    snapshot = build_snapshot(TWO_DISHES)
    verdicts = [missing("g1", "Paneer Tikka", 1), missing("g2", "Dal Makhani", 1)]
    overrides = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g2")
    priced = price_refund(verdicts, snapshot, already_approved_minor=28000, overrides=overrides)
    assert [(ln.status, ln.amount_minor) for ln in priced.lines] == [
        (LineStatus.PAY, 28000),
        (LineStatus.PAY, 22000),
    ]
    assert (priced.total_minor, priced.payable_minor) == (50000, 22000)
    assert priced.held_grievances == ()
    # A reviewer rejecting the paid dish frees its weight: the bench's UPHELD dal then pays.
    rejected = ReviewOverrides().with_review(ReviewDecision.REJECT, "g1")
    priced = price_refund(verdicts, snapshot, already_approved_minor=28000, overrides=rejected)
    assert [(ln.status, ln.amount_minor) for ln in priced.lines] == [
        (LineStatus.REJECTED, 0),
        (LineStatus.PAY, 22000),
    ]


def test_a_reviewers_uphold_never_holds_a_line_the_bench_upheld_and_a_round_paid() -> None:
    """The dal was escalated, the tikka upheld and paid in round 1; upholding the dal takes no
    weight from the tikka: round 2 pays the dal, and the tikka stays paid."""
    snapshot = build_snapshot(TWO_DISHES)
    verdicts = [missing("g1", "Dal Makhani", 1, outcome=E), missing("g2", "Paneer Tikka", 1)]
    first = price_refund(verdicts, snapshot)
    assert [(ln.status, ln.amount_minor) for ln in first.lines] == [
        (LineStatus.HELD, 0),
        (LineStatus.PAY, 28000),
    ]
    overrides = ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g1")
    second = price_refund(verdicts, snapshot, already_approved_minor=28000, overrides=overrides)
    assert [(ln.status, ln.amount_minor) for ln in second.lines] == [
        (LineStatus.PAY, 22000),
        (LineStatus.PAY, 28000),
    ]
    assert (second.total_minor, second.payable_minor, second.held_grievances) == (50000, 22000, ())


def test_no_weight_bound_without_recorded_weights() -> None:
    unweighed = build_snapshot(TWO_DISHES.model_copy(update={"pickup_weight_expected_g": None}))
    priced = price_refund(
        [missing("g1", "Paneer Tikka", 1), missing("g2", "Dal Makhani", 2)], unweighed
    )
    assert [(ln.status, ln.amount_minor) for ln in priced.lines] == [
        (LineStatus.PAY, 28000),
        (LineStatus.PAY, 44000),
    ]


def test_total_never_exceeds_what_the_order_cost() -> None:
    # A discounted order: the customer paid less than the menu prices add up to.
    snapshot = build_snapshot(article_order(charged_total_minor=50000))
    priced = price_refund(
        [verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=2)], snapshot
    )
    assert priced.lines[0].amount_minor == 64000
    assert priced.total_minor == 50000
    assert priced.payable_minor == 50000
    assert "clamped to the order total 50000" in priced.reason


def test_over_the_cap_is_held_and_nothing_is_paid_automatically() -> None:
    priced = price_refund(
        [verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=4)], EMPTY_BAG
    )
    assert priced.total_minor == 128000
    assert priced.decision is Decision.HELD_FOR_REVIEW
    assert priced.payable_minor == 0
    assert "exceeds the auto-approve cap 100000" in priced.reason


def test_an_order_in_another_currency_than_the_caps_is_never_paid_automatically() -> None:
    """The cap counts minor units of one currency: 100000 are INR 1,000, but EUR 1,000. An
    order in another currency goes to a person whatever its total; a reviewer's approval pays
    it, and with the cap set in its currency it is priced as usual."""
    missing = [verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=2)]
    euros = build_snapshot(article_order(currency="EUR"))
    held = price_refund(missing, euros)
    assert (held.total_minor, held.cap_minor) == (64000, 0)
    assert (held.decision, held.payable_minor) == (Decision.HELD_FOR_REVIEW, 0)
    assert held.reason.startswith(
        "total 64000 in EUR, for which no auto-approve cap is set (the cap counts INR);"
        " nothing paid automatically"
    )
    approved = price_refund(
        missing, euros, overrides=ReviewOverrides(dispute=ReviewDecision.APPROVE)
    )
    assert (approved.decision, approved.payable_minor) == (Decision.REVIEW_APPROVED, 64000)
    in_euros = price_refund(missing, euros, cap_minor=70000, cap_currency="EUR")
    assert (in_euros.decision, in_euros.payable_minor, in_euros.cap_minor) == (
        Decision.AUTO_APPROVED,
        64000,
        70000,
    )
    rupees = price_refund(missing, SNAPSHOT, cap_minor=70000, cap_currency="EUR")
    assert (rupees.decision, rupees.cap_minor) == (Decision.HELD_FOR_REVIEW, 0)


def test_reviewer_approval_lifts_the_cap_but_not_the_order_total() -> None:
    overrides = ReviewOverrides(dispute=ReviewDecision.APPROVE)
    priced = price_refund(
        [
            verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=4),
            verdict("g2", Category.WRONG_ITEM, item=RAITA),
            verdict("g3", Category.LATE_DELIVERY),
        ],
        EMPTY_BAG,
        overrides=overrides,
    )
    assert priced.decision is Decision.REVIEW_APPROVED
    assert priced.total_minor == 134000  # 138900 in lines, clamped to the order
    assert priced.payable_minor == 134000


def test_an_approval_covers_the_total_approved_not_a_larger_one() -> None:
    """Approved at 128000 (over the cap); a later uphold raises the total to 134000: above the
    cap and above what the reviewer approved, so the dispute is held again, nothing paid."""
    lines = [
        verdict("g1", Category.MISSING_ITEM, item=BIRYANI, quantity=4),
        verdict("g2", Category.WRONG_ITEM, item=RAITA, outcome=E),
    ]
    approved = ReviewOverrides(dispute=ReviewDecision.APPROVE, approved_total_minor=128000)
    first = price_refund(lines, EMPTY_BAG, overrides=approved)
    assert (first.decision, first.total_minor, first.payable_minor) == (
        Decision.REVIEW_APPROVED,
        128000,
        128000,
    )
    upheld = approved.with_review(ReviewDecision.UPHOLD, "g2")
    assert upheld.approved_total_minor == 128000
    later = price_refund(lines, EMPTY_BAG, already_approved_minor=128000, overrides=upheld)
    assert (later.decision, later.total_minor, later.payable_minor) == (
        Decision.HELD_FOR_REVIEW,
        134000,
        0,
    )
    assert "the total 128000 a reviewer approved" in later.reason
    again = upheld.with_review(ReviewDecision.APPROVE, None, approved_total_minor=134000)
    last = price_refund(lines, EMPTY_BAG, already_approved_minor=128000, overrides=again)
    assert (last.decision, last.payable_minor) == (Decision.REVIEW_APPROVED, 6000)


def test_two_approvals_cover_the_larger_total() -> None:
    """A reviewer approving a superseded round's smaller total does not shrink the approval."""
    approve = ReviewDecision.APPROVE
    later = ReviewOverrides().with_review(approve, None, approved_total_minor=134000)
    assert later.with_review(approve, None, 128000).approved_total_minor == 134000
    assert later.with_review(approve, None, 150000).approved_total_minor == 150000
    assert later.with_review(approve, None, None).approved_total_minor is None


def test_reviewer_decline_pays_nothing() -> None:
    overrides = ReviewOverrides(dispute=ReviewDecision.DECLINE)
    priced = price_refund(ARTICLE_VERDICTS, SNAPSHOT, overrides=overrides)
    assert (priced.decision, priced.payable_minor) == (Decision.DECLINED, 0)
    assert priced.total_minor == 68900


def test_zero_payable_with_held_lines_waits_for_review() -> None:
    priced = price_refund(ARTICLE_VERDICTS, SNAPSHOT, already_approved_minor=68900)
    assert (priced.decision, priced.payable_minor) == (Decision.HELD_FOR_REVIEW, 0)


def test_lines_are_in_grievance_order_g2_before_g10() -> None:
    verdicts = [verdict(f"g{n}", Category.PARTNER_CONDUCT) for n in (10, 2, 1)]
    ids = [ln.grievance_id for ln in price_refund(verdicts, SNAPSHOT).lines]
    assert ids == ["g1", "g2", "g10"]


@pytest.mark.parametrize(
    ("verdicts", "kw", "message"),
    [
        ([verdict("g1", Category.WRONG_ITEM, item="Pizza")], {}, "not a line item"),
        ([verdict("g1", Category.QUALITY), verdict("g1", Category.BILLING)], {}, "duplicate"),
        ([], {"overrides": ReviewOverrides(grievances={"g9": U})}, "not in the dispute"),
        ([], {"cap_minor": -1}, "cap_minor"),
        ([], {"already_approved_minor": -1}, "already approved"),
        ([], {"already_approved_minor": 134001}, "already approved"),
    ],
)
def test_inconsistent_inputs_are_invalid(
    verdicts: list[GrievanceVerdict], kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        price_refund(verdicts, SNAPSHOT, **kw)


@pytest.mark.parametrize(
    "snapshot",
    [
        {},
        {"order": SNAPSHOT["order"]},
        {**SNAPSHOT, "derived": {**SNAPSHOT["derived"], "sla_exceeded": "yes"}},
        {**SNAPSHOT, "derived": {**SNAPSHOT["derived"], "overcharge_minor": 4.5}},
    ],
)
def test_malformed_snapshots_are_invalid(snapshot: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="malformed"):
        price_refund(ARTICLE_VERDICTS, snapshot)


def test_review_overrides_refuse_escalate_and_grievance_level_dispute_decisions() -> None:
    with pytest.raises(ValueError, match="UPHELD or REJECTED"):
        ReviewOverrides(grievances={"g1": E})
    with pytest.raises(ValueError, match="APPROVE or DECLINE"):
        ReviewOverrides(dispute=ReviewDecision.UPHOLD)
    with pytest.raises(InvalidInput, match="needs a grievance_id"):
        ReviewOverrides().with_review(ReviewDecision.UPHOLD, None)
    later = (
        ReviewOverrides()
        .with_review(ReviewDecision.UPHOLD, "g3")
        .with_review(ReviewDecision.REJECT, "g3")
        .with_review(ReviewDecision.APPROVE, None)
    )
    assert later == ReviewOverrides(grievances={"g3": R}, dispute=ReviewDecision.APPROVE)


# --- properties ---------------------------------------------------------------------------

NAMES = ("Dosa", "Idli", "Vada", "Chai")
PLACED = datetime.fromisoformat("2026-09-14T20:00:00+05:30")
ITEM_PRICED = {Category.MISSING_ITEM, Category.WRONG_ITEM, Category.PACKAGING, Category.QUALITY}


@st.composite
def orders(draw: st.DrawFn, currencies: Sequence[str] = ("INR", "USD")) -> OrderRecord:
    """An order in one of ``currencies``, its prices in multiples of what Stripe takes it in
    (:func:`~refund_bench.money.payable_step`), as a payment through Stripe would be."""
    currency = draw(st.sampled_from(currencies))
    step = payable_step(currency)
    count = draw(st.integers(min_value=1, max_value=len(NAMES)))
    items = tuple(
        LineItem(
            name=NAMES[i],
            quantity=draw(st.integers(min_value=1, max_value=6)),
            unit_price_minor=draw(st.integers(min_value=0, max_value=60_000)) * step,
            unit_weight_g=draw(st.none() | st.integers(min_value=0, max_value=800)),
        )
        for i in range(count)
    )
    items_total = sum(i.unit_price_minor * i.quantity for i in items)
    fee = draw(st.integers(min_value=0, max_value=5_000)) * step
    charged = draw(st.integers(min_value=0, max_value=items_total + fee + 20_000)) // step * step
    delay = draw(st.none() | st.integers(min_value=0, max_value=240))
    delivered = None if delay is None else (PLACED + timedelta(minutes=delay)).isoformat()
    weighed = draw(st.booleans())
    expected_g = draw(st.integers(min_value=0, max_value=5_000)) if weighed else None
    actual_g = draw(st.integers(min_value=0, max_value=5_000)) if weighed else None
    return OrderRecord(
        order_id="o",
        pickup_weight_expected_g=expected_g,
        pickup_weight_actual_g=actual_g,
        customer_id="c",
        currency=currency,
        placed_at=PLACED.isoformat(),
        delivered_at=delivered,
        delivery_sla_minutes=draw(st.none() | st.integers(min_value=10, max_value=90)),
        line_items=items,
        delivery_fee_minor=fee,
        charged_total_minor=charged,
    )


@st.composite
def cases(draw: st.DrawFn, currencies: Sequence[str] = ("INR", "USD")) -> dict[str, Any]:
    order = draw(orders(currencies))
    step = payable_step(order.currency)
    names = [item.name for item in order.line_items]
    n = draw(st.integers(min_value=1, max_value=8))
    verdicts = [
        verdict(
            f"g{i + 1}",
            draw(st.sampled_from(list(Category))),
            draw(st.sampled_from([U, U, R, E])),  # the bench upholds most grievances
            item=draw(st.sampled_from([*names, None])),
            quantity=draw(st.none() | st.integers(min_value=0, max_value=10)),
        )
        for i in range(n)
    ]
    ids = [v.grievance_id for v in verdicts]
    grievance_overrides = draw(
        st.dictionaries(st.sampled_from(ids), st.sampled_from([U, R])) if ids else st.just({})
    )
    # Most rounds are priced on the bench's verdicts alone, where the cap decides; one in three
    # carries a reviewer's decision on the whole dispute.
    dispute = draw(
        st.sampled_from([None, None, None, None, ReviewDecision.APPROVE, ReviewDecision.DECLINE])
    )
    approved_total = (
        draw(st.none() | st.integers(min_value=0, max_value=order.charged_total_minor))
        if dispute is ReviewDecision.APPROVE
        else None
    )
    overrides = ReviewOverrides(
        grievances=grievance_overrides, dispute=dispute, approved_total_minor=approved_total
    )
    # The cap and what earlier rounds approved are drawn around the total the verdicts price to
    # (the cap and the earlier rounds change the decision, never the total): a total within the
    # cap, on it and above it, paid before in part, in full or not at all, are all common.
    total = price_refund(verdicts, build_snapshot(order), overrides=overrides).total_minor
    cap = draw(
        st.integers(min_value=0, max_value=200_000)
        | st.integers(min_value=max(0, total - 2 * step), max_value=total + 2 * step)
        | st.integers(min_value=total, max_value=total + 200_000)
    )
    # One draw in four counts the cap in another currency than the order's: it caps at nothing.
    other = "EUR" if order.currency != "EUR" else "INR"
    cap_currency = draw(st.sampled_from([order.currency] * 3 + [other]))
    already_steps = draw(
        st.just(0)
        | st.integers(min_value=0, max_value=total // step)
        | st.integers(min_value=0, max_value=order.charged_total_minor // step)
    )
    return {
        "order": order,
        "verdicts": verdicts,
        "cap_minor": cap,
        "cap_currency": cap_currency,
        "already_approved_minor": already_steps * step,
        "overrides": overrides,
    }


def article_case(**changes: Any) -> dict[str, Any]:
    """The article's dispute as a :func:`cases` draw: its verdicts price to 68900 in INR."""
    case = {
        "order": ARTICLE_ORDER,
        "verdicts": list(ARTICLE_VERDICTS),
        "cap_minor": DEFAULT_CAP_MINOR,
        "cap_currency": "INR",
        "already_approved_minor": 0,
        "overrides": ReviewOverrides(),
    }
    return {**case, **changes}


# Paid automatically after earlier rounds: 68900 of which 20000 approved before, and the
# raita upheld by a reviewer after 68900 was paid, its total 74900 on the cap.
@example(article_case(already_approved_minor=20000))
@example(
    article_case(
        cap_minor=74900,
        already_approved_minor=68900,
        overrides=ReviewOverrides().with_review(ReviewDecision.UPHOLD, "g3"),
    )
)
@given(cases())
def test_money_safety_invariants(case: dict[str, Any]) -> None:
    order: OrderRecord = case["order"]
    overrides: ReviewOverrides = case["overrides"]
    priced = price_refund(
        case["verdicts"],
        build_snapshot(order),
        cap_minor=case["cap_minor"],
        cap_currency=case["cap_currency"],
        already_approved_minor=case["already_approved_minor"],
        overrides=overrides,
    )
    event(f"decision: {priced.decision.value}")
    if priced.decision is Decision.AUTO_APPROVED and priced.already_paid_minor > 0:
        event("paid automatically after earlier rounds")
    if case["cap_currency"] != order.currency:  # a cap in another currency caps at nothing
        assert priced.cap_minor == 0
        assert priced.decision is not Decision.AUTO_APPROVED
    amounts = [priced.total_minor, priced.payable_minor, priced.already_paid_minor]
    amounts += [x for ln in priced.lines for x in (ln.amount_minor, ln.proposed_minor)]
    assert all(type(a) is int and a >= 0 for a in amounts)

    pay_lines = sum(ln.amount_minor for ln in priced.lines if ln.status is LineStatus.PAY)
    assert priced.total_minor == min(pay_lines, order.charged_total_minor)
    assert priced.total_minor <= order.charged_total_minor
    assert priced.payable_minor + priced.already_paid_minor <= order.charged_total_minor
    assert priced.payable_minor <= priced.total_minor
    approved = overrides.dispute is ReviewDecision.APPROVE and (
        overrides.approved_total_minor is None
        or priced.total_minor <= overrides.approved_total_minor
    )
    if priced.payable_minor > 0:
        assert priced.total_minor <= priced.cap_minor or approved
        assert priced.decision in (Decision.AUTO_APPROVED, Decision.REVIEW_APPROVED)
    if priced.decision in (Decision.AUTO_APPROVED, Decision.REVIEW_APPROVED):
        # What earlier rounds approved is never paid again.
        assert priced.payable_minor == max(0, priced.total_minor - priced.already_paid_minor)
    if priced.decision is Decision.AUTO_APPROVED:
        assert priced.payable_minor > 0
    if overrides.dispute is ReviewDecision.DECLINE:
        assert priced.payable_minor == 0
        assert priced.decision is Decision.DECLINED
    elif priced.total_minor > priced.cap_minor and not approved:
        assert (priced.decision, priced.payable_minor) == (Decision.HELD_FOR_REVIEW, 0)

    for line in priced.lines:
        if line.outcome is not U:
            assert line.status is not LineStatus.PAY
            assert line.amount_minor == 0
        if line.outcome is E:
            assert line.status is LineStatus.HELD
        expected = overrides.grievances.get(line.grievance_id)
        if expected is not None:
            assert line.outcome is expected
    assert priced.held_grievances == tuple(
        ln.grievance_id for ln in priced.lines if ln.status is LineStatus.HELD
    )
    # The missing units the bench upheld and pricing paid weigh, together, no more than the
    # pickup-weight shortfall plus half of the heaviest of their units.
    shortfall = order.pickup_shortfall_g
    if shortfall is not None:
        weights = {i.name: i.unit_weight_g for i in order.line_items if i.unit_weight_g}
        paid = [
            ln
            for ln in priced.lines
            if ln.category is Category.MISSING_ITEM
            and ln.status is LineStatus.PAY
            and ln.grievance_id not in overrides.grievances
            and ln.item_name in weights
        ]
        paid_g = sum((ln.quantity or 0) * weights[ln.item_name or ""] for ln in paid)
        heaviest = max((weights[ln.item_name or ""] for ln in paid), default=0)
        assert 2 * paid_g <= 2 * max(shortfall, 0) + heaviest
    per_item: dict[str, int] = {}
    for line in priced.lines:
        if line.item_name is not None and line.category in ITEM_PRICED:
            per_item[line.item_name] = per_item.get(line.item_name, 0) + line.amount_minor
    for item in order.line_items:
        assert per_item.get(item.name, 0) <= item.unit_price_minor * item.quantity
    for item in order.line_items:
        on_item = [
            ln for ln in priced.lines if ln.item_name == item.name and ln.category in ITEM_PRICED
        ]
        full_units = sum(
            ln.quantity or 0
            for ln in on_item
            if ln.category is not Category.QUALITY and ln.status is LineStatus.PAY
        )
        open_units = item.quantity - min(item.quantity, full_units)
        price = item.unit_price_minor
        quality = sum(ln.amount_minor for ln in on_item if ln.category is Category.QUALITY)
        # All lines on an item, the reviewers' among them, pay each unit at most once: in full
        # for the units refunded in full, half for the others (compensated for quality).
        if quality:
            each_once = price * (item.quantity - open_units) + price * open_units // 2
            assert sum(ln.amount_minor for ln in on_item) <= each_once
        if not overrides.grievances:
            # The bench's QUALITY lines on an item pay at most half of the units its other
            # paid lines did not refund in full.
            assert quality <= price * open_units // 2


@given(cases(currencies=sorted(PAYABLE_STEPS)))
def test_every_amount_is_one_stripe_takes_in_the_orders_currency(case: dict[str, Any]) -> None:
    """In a currency Stripe takes in steps of more than one minor unit (KWD in tens, ISK in
    hundreds), an order paid through Stripe costs a multiple of its step, and so must every
    amount priced for it: a QUALITY half of KWD 1.250 is KWD 0.620, never the 0.625 Stripe
    refuses."""
    order: OrderRecord = case["order"]
    priced = price_refund(
        case["verdicts"],
        build_snapshot(order),
        cap_minor=case["cap_minor"],
        cap_currency=order.currency,
        already_approved_minor=case["already_approved_minor"],
        overrides=case["overrides"],
    )
    step = payable_step(order.currency)
    amounts = [priced.total_minor, priced.payable_minor, priced.already_paid_minor]
    amounts += [x for ln in priced.lines for x in (ln.amount_minor, ln.proposed_minor)]
    assert [a % step for a in amounts] == [0] * len(amounts), (order.currency, amounts)


@given(cases(currencies=sorted(PAYABLE_STEPS)), st.data())
def test_what_is_payable_is_on_step_whatever_earlier_rounds_approved(
    case: dict[str, Any], data: st.DataObject
) -> None:
    """An earlier round approved off the currency's step (priced before pricing rounded to it):
    what a later round pays, and what a REPAY of it pays, are still amounts Stripe takes."""
    order: OrderRecord = case["order"]
    already = data.draw(st.integers(min_value=0, max_value=order.charged_total_minor))
    priced = price_refund(
        case["verdicts"],
        build_snapshot(order),
        cap_minor=case["cap_minor"],
        cap_currency=order.currency,
        already_approved_minor=already,
        overrides=case["overrides"],
    )
    step = payable_step(order.currency)
    assert priced.payable_minor % step == 0
    assert priced.payable_minor <= max(0, priced.total_minor - already)
    failed = data.draw(st.integers(min_value=1, max_value=max(1, already)))
    assert pay_again(priced, 1, failed).payable_minor % step == 0


def test_a_round_after_one_approved_off_step_pays_on_step() -> None:
    """Round 1, priced by table v5, approved KWD 0.625 for a lassi's quality; round 2 adds the
    missing naan (KWD 2.000): 1.995 would be refused by Stripe, so 1.990 is paid, and the reason
    says what was kept back. A REPAY of the failed 0.625 pays 0.620."""
    order = article_order(
        currency="KWD",
        line_items=(
            LineItem(name="Lassi", quantity=1, unit_price_minor=1250),
            LineItem(name="Naan", quantity=1, unit_price_minor=2000),
        ),
        charged_total_minor=3250,
    )
    verdicts = [
        verdict("g1", Category.QUALITY, item="Lassi"),
        verdict("g2", Category.MISSING_ITEM, item="Naan"),
    ]
    priced = price_refund(
        verdicts, build_snapshot(order), cap_currency="KWD", already_approved_minor=625
    )
    assert (priced.total_minor, priced.payable_minor) == (2620, 1990)
    assert "5 below KWD's step of 10 minor units kept back" in priced.reason
    held = price_refund(
        verdicts,
        build_snapshot(order),
        cap_minor=1000,
        cap_currency="KWD",
        already_approved_minor=625,
    )
    assert (held.decision, held.payable_minor) == (Decision.HELD_FOR_REVIEW, 0)
    assert "kept back" not in held.reason, "a round that pays nothing keeps nothing back"
    repaid = pay_again(price_refund([], build_snapshot(order), cap_currency="KWD"), 1, 625)
    assert repaid.payable_minor == 620


@given(cases(), st.data())
def test_a_later_round_pays_only_what_earlier_rounds_did_not(
    case: dict[str, Any], data: st.DataObject
) -> None:
    """Round 1 is priced with nothing approved before; round 2 (a reviewer's decisions on the
    same verdicts) with what round 1 approved: together they never pay more than round 2's
    total, nor more than the order cost."""
    order: OrderRecord = case["order"]
    snapshot = build_snapshot(order)
    first = price_refund(case["verdicts"], snapshot, cap_minor=case["cap_minor"])
    approved_before = (
        first.payable_minor
        if first.decision in (Decision.AUTO_APPROVED, Decision.REVIEW_APPROVED)
        else 0
    )
    cap = data.draw(st.integers(min_value=0, max_value=200_000))
    second = price_refund(
        case["verdicts"],
        snapshot,
        cap_minor=cap,
        already_approved_minor=approved_before,
        overrides=case["overrides"],
    )
    paid = approved_before + second.payable_minor
    assert paid <= order.charged_total_minor
    assert second.payable_minor == 0 or paid == second.total_minor


@settings(max_examples=1000)
@given(cases(), st.data())
def test_a_reviewers_uphold_changes_no_line_the_bench_upheld(
    case: dict[str, Any], data: st.DataObject
) -> None:
    """Upholding a line the bench escalated or rejected leaves every line the bench upheld as it
    was: its status and its amount (reviewers' lines come after the bench's for the weights and
    the item budgets)."""
    overrides: ReviewOverrides = case["overrides"]
    open_lines = [
        v.grievance_id
        for v in case["verdicts"]
        if v.outcome is not U and v.grievance_id not in overrides.grievances
    ]
    assume(open_lines)
    chosen = data.draw(st.sampled_from(open_lines))
    snapshot = build_snapshot(case["order"])
    before = price_refund(case["verdicts"], snapshot, overrides=overrides)
    after = price_refund(
        case["verdicts"],
        snapshot,
        overrides=overrides.with_review(ReviewDecision.UPHOLD, chosen),
    )
    bench = {v.grievance_id for v in case["verdicts"] if v.outcome is U}
    bench -= set(overrides.grievances)
    for old, new in zip(before.lines, after.lines, strict=True):
        if old.grievance_id in bench:
            assert (new.status, new.amount_minor) == (old.status, old.amount_minor)


@given(cases())
def test_pricing_is_deterministic_and_order_of_verdicts_does_not_matter(
    case: dict[str, Any],
) -> None:
    snapshot = build_snapshot(case["order"])
    kw = {k: case[k] for k in ("cap_minor", "already_approved_minor", "overrides")}
    forward = price_refund(case["verdicts"], snapshot, **kw)
    backward = price_refund(list(reversed(case["verdicts"])), snapshot, **kw)
    assert forward == backward


def test_a_malformed_snapshot_is_dead_lettered_naming_the_field_never_quoting_its_text() -> None:
    """The reason is logged and kept with the dead letter: it names the field and the rule, and
    leaves out the order's text (a partner conduct report, packaging notes)."""
    words = "the rider shouted at me outside flat 221B"
    snapshot = {**SNAPSHOT, "order": {**SNAPSHOT["order"], "partner_conduct_reports": words}}
    with pytest.raises(InvalidInput) as refused:
        price_refund([verdict("g1", Category.PARTNER_CONDUCT)], snapshot)
    assert refused.value.reason == (
        "evidence snapshot is malformed: order.partner_conduct_reports: Input should be a valid"
        " tuple"
    )
    over = [
        {**item, "unit_price_minor": MAX_ORDER_MINOR} for item in SNAPSHOT["order"]["line_items"]
    ]
    snapshot = {
        **SNAPSHOT,
        "order": {**SNAPSHOT["order"], "line_items": over, "packaging_notes": words},
    }
    with pytest.raises(InvalidInput, match="malformed: order: Value error, the line items") as too:
        price_refund([verdict("g1", Category.PARTNER_CONDUCT)], snapshot)
    assert "221B" not in too.value.reason


def test_a_late_delivery_in_a_currency_without_a_flat_amount_is_not_held_for_nothing() -> None:
    """No flat amount, no payment whatever the times say: the line is not sent to a person
    whose UPHOLD could pay nothing."""
    snapshot = build_snapshot(article_order(currency="USD", delivered_at=None))
    [line] = price_refund([verdict("g1", Category.LATE_DELIVERY)], snapshot).lines
    assert (line.status, line.amount_minor) == (LineStatus.ZERO, 0)
    assert "no flat amount for USD" in line.rule
