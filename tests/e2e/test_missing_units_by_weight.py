"""The whole pipeline: two dishes reported missing, each alone explained by the pickup-weight
shortfall, both together not. The bench upholds both; pricing pays one and holds the other for
a reviewer, whose UPHOLD pays it in a second round."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from refund_bench.db.orders import upsert_orders
from refund_bench.domain import LineItem
from refund_bench.samples import ON_TIME_ORDER, own_copy
from tests.e2e.conftest_api import ApiServer, sign_in
from tests.e2e.pipeline import Pipeline

pytestmark = pytest.mark.stack

# 400 g short at pickup: a Paneer Tikka (350 g) or a Dal Makhani (400 g), not both (750 g).
TWO_DISHES = ON_TIME_ORDER.model_copy(
    update={
        "line_items": (
            LineItem(name="Paneer Tikka", quantity=1, unit_price_minor=28000, unit_weight_g=350),
            LineItem(name="Dal Makhani", quantity=1, unit_price_minor=22000, unit_weight_g=400),
        ),
        "charged_total_minor": 50000,
        "pickup_weight_expected_g": 750,
        "pickup_weight_actual_g": 350,
    }
)
COMPLAINT = "The Paneer Tikka never arrived. The Dal Makhani was missing too."


def test_missing_dishes_the_weights_cannot_both_explain_wait_for_a_reviewer(
    pipeline: Pipeline, api_server: ApiServer
) -> None:
    order = own_copy(TWO_DISHES, uuid.uuid4().hex[:12])
    with psycopg.connect(pipeline.database_url) as conn:
        upsert_orders(conn, [order])
    dispute = pipeline.submit(order.order_id, order.customer_id, COMPLAINT, own_order=False)

    first = pipeline.wait_final(dispute, timeout_s=120)
    assert [(g["item_name"], g["item_quantity"]) for g in first.grievances] == [
        ("Paneer Tikka", 1),
        ("Dal Makhani", 1),
    ]
    assert [v["outcome"] for v in first.verdicts] == ["UPHELD", "UPHELD"], "each alone: yes"
    [priced] = first.priced
    tikka, dal = priced["lines"]
    assert (tikka["status"], tikka["amount_minor"]) == ("PAY", 28000)
    assert (dal["status"], dal["amount_minor"], dal["proposed_minor"]) == ("HELD", 0, 22000)
    assert (priced["payable_minor"], priced["decision"]) == (28000, "AUTO_APPROVED")
    assert [(p["round"], p["amount_minor"]) for p in first.payouts] == [(1, 28000)]
    item_key = f"grievance:{dal['grievance_id']}"
    [item] = [i for i in first.review_items if i["item_key"] == item_key]
    assert item["status"] == "OPEN"
    assert "explains 0 of these 1 units" in item["reason"]

    with api_server.client() as client:
        form = {
            "item_key": item_key,
            "decision": "UPHOLD",
            "note": "The driver's photo shows one bag only; both dishes were missing.",
            "csrf_token": sign_in(client, "alice"),
        }
        answer = client.post(f"/review/disputes/{dispute}/decisions", data=form)
    assert answer.status_code == 303, answer.text

    second = pipeline.wait_for_payout(dispute, 2, timeout_s=120)
    assert [(p["round"], p["amount_minor"], p["outcome"]) for p in second.payouts] == [
        (1, 28000, "COMPLETED"),
        (2, 22000, "COMPLETED"),
    ]
    assert [i["status"] for i in second.review_items] == ["DECIDED"]
