"""The whole pipeline: two reviewers upholding the raita claim at the same moment produce one
decision, one re-pricing and one second payout (6000), never a third round."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx
import pytest

from refund_bench.samples import ARTICLE_COMPLAINT
from tests.e2e.conftest_api import ApiServer, sign_in
from tests.e2e.drain import WITH_RECORDER, wait_drained
from tests.e2e.pipeline import Pipeline

pytestmark = pytest.mark.stack


def test_two_reviewers_at_once_pay_the_difference_once(
    pipeline: Pipeline, api_server: ApiServer
) -> None:
    accepted = httpx.post(
        f"{api_server.url}/complaints",
        json={
            "order_id": pipeline.own_order("order-1840"),
            "customer_id": "cust-77",
            "text": ARTICLE_COMPLAINT,
        },
        headers=api_server.auth(**{"Idempotency-Key": str(uuid.uuid4())}),
        timeout=30,
    )
    assert accepted.status_code == 202, accepted.text
    dispute_id = accepted.json()["dispute_id"]
    first = pipeline.wait_final(dispute_id, timeout_s=120)
    raita = next(g for g in first.grievances if g["category"] == "PACKAGING")
    item_key = f"grievance:{raita['grievance_id']}"

    clients = {name: api_server.client() for name in ("alice", "bob")}
    try:
        tokens = {name: sign_in(client, name) for name, client in clients.items()}
        barrier = threading.Barrier(len(clients))
        answers: dict[str, Any] = {}

        def uphold(name: str) -> None:
            form = {
                "item_key": item_key,
                "decision": "UPHOLD",
                "note": f"{name}: upheld",
                "csrf_token": tokens[name],
            }
            barrier.wait()
            answers[name] = clients[name].post(
                f"/review/disputes/{dispute_id}/decisions", data=form
            )

        threads = [threading.Thread(target=uphold, args=(n,)) for n in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        for client in clients.values():
            client.close()
    assert sorted(a.status_code for a in answers.values()) == [303, 409]

    pipeline.wait_for_payout(dispute_id, 2, timeout_s=120)
    # A (wrong) second decision would have re-priced and paid again by the time every stage and
    # the recorder have consumed everything.
    wait_drained(pipeline.stack.kafka, timeout_s=120, groups=WITH_RECORDER)
    story = pipeline.story(dispute_id)
    assert [p["round"] for p in story.priced] == [1, 2]
    assert [(p["round"], p["amount_minor"], p["outcome"]) for p in story.payouts] == [
        (1, 68900, "COMPLETED"),
        (2, 6000, "COMPLETED"),
    ]
    assert story.paid_minor == 74900
