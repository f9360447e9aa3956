"""Orders shared by the unit tests: the article's order-1840 and a builder for variations."""

from __future__ import annotations

from typing import Any

from refund_bench.domain import LineItem, OrderRecord

BIRYANI = "Hyderabadi Biryani"
RAITA = "Raita"

ARTICLE_COMPLAINT = (
    "Ordered at 8:15pm and the food showed up at 9:40pm. We had guests over, it was "
    "embarrassing. Two of the four were missing completely. The raita had leaked all over the "
    "inside of the bag. And the delivery guy was rude when I asked him about it. Honestly the "
    "worst experience I've had on this app - refund everything."
)

ARTICLE_ORDER = OrderRecord(
    order_id="order-1840",
    customer_id="cust-77",
    currency="INR",
    placed_at="2026-09-14T20:15:00+05:30",
    delivered_at="2026-09-14T21:40:00+05:30",
    delivery_sla_minutes=45,
    line_items=(
        LineItem(name=BIRYANI, quantity=4, unit_price_minor=32000, unit_weight_g=550),
        LineItem(name=RAITA, quantity=1, unit_price_minor=6000, unit_weight_g=200),
    ),
    delivery_fee_minor=0,
    charged_total_minor=134000,
    pickup_weight_expected_g=2400,
    pickup_weight_actual_g=1200,
    partner_rating_at_handover=5,
    packaging_condition_recorded=False,
    partner_conduct_reports=(
        "in-app chat flagged by trust & safety: abusive language to customer",
    ),
    payment_reference="pi_order1840",
)


def article_order(**changes: Any) -> OrderRecord:
    """The article's order with some fields replaced (validated like a fresh record)."""
    return OrderRecord.model_validate({**ARTICLE_ORDER.model_dump(), **changes})


def span_of(text: str, phrase: str) -> tuple[int, int]:
    """The (start, end) offsets of ``phrase`` in ``text``; fails loudly when absent."""
    start = text.index(phrase)
    return start, start + len(phrase)
