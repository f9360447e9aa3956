"""A refund paid through the whole pipeline that Stripe later reports failed: the round turns
FAILED in the ledger and in the audit record, a payment operator finds it in the review queue
and pays it again from the desk, in a new round under a new idempotency key. The pipeline runs
as processes (the ``pipeline`` fixture) and pays through stripe-mock; Stripe's event reaches the
API's webhook as Stripe sends it, signed. The webhook reads the refund back from Stripe: there,
the fake of tests/fakes on loopback, which holds the refund failed (stripe-mock holds every
refund succeeded)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from refund_bench.db.payout_rounds import idempotency_key
from refund_bench.disputes import Story
from refund_bench.samples import ARTICLE_COMPLAINT
from tests.conftest import Stack
from tests.e2e.conftest_api import ApiServer, running_api, sign_in
from tests.e2e.pipeline import Pipeline
from tests.fakes.stripe_idempotent import FakeStripe, FakeStripeServer
from tests.stripe_events import refund_event, signed, webhook_settings

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def stripe_now() -> Iterator[FakeStripeServer]:
    """Stripe as the webhook reads it back."""
    with FakeStripeServer(FakeStripe()) as server:
        yield server


@pytest.fixture(scope="module")
def api_server(stack: Stack, stripe_now: FakeStripeServer) -> Iterator[ApiServer]:
    with running_api(stack, **webhook_settings(stripe_now.url)) as server:
        yield server


def wait_story(
    pipeline: Pipeline, dispute_id: str, what: str, done: Callable[[Story], bool]
) -> Story:
    deadline = time.monotonic() + 60.0
    while True:
        story = pipeline.story(dispute_id)
        if done(story):
            return story
        if time.monotonic() > deadline:
            raise TimeoutError(f"{dispute_id}: {what} not seen in 60s")
        time.sleep(0.2)


def item_status(story: Story, item_key: str) -> str | None:
    return next((i["status"] for i in story.review_items if i["item_key"] == item_key), None)


def test_a_paid_refund_stripe_reports_failed_goes_to_a_payment_operator_who_pays_it_again(
    pipeline: Pipeline, api_server: ApiServer, stripe_now: FakeStripeServer
) -> None:
    dispute = pipeline.submit("order-1840", "cust-77", ARTICLE_COMPLAINT)
    paid = pipeline.wait_final(dispute, timeout_s=120)
    [ledger] = paid.ledger
    assert (ledger["round"], ledger["amount_minor"], ledger["status"]) == (1, 68900, "SUCCEEDED")
    refund_id = ledger["stripe_refund_id"]
    assert refund_id

    # The refund Stripe made from the payout's request carries its dispute and round.
    stripe_now.fake.hold(refund_id, "failed", failure_reason="expired_or_canceled_card")
    event = refund_event(refund_id, dispute_id=dispute, round_=1, event_type="refund.failed")
    body, headers = signed(event)
    answer = httpx.post(
        f"{api_server.url}/webhooks/stripe", content=body, headers=headers, timeout=30
    )
    assert (answer.status_code, answer.json()["outcome"]) == (200, "recorded"), answer.text

    failed = wait_story(
        pipeline,
        dispute,
        "the round FAILED in the audit record",
        lambda s: [p["outcome"] for p in s.payouts] == ["FAILED"],
    )
    [payout] = failed.payouts
    assert (payout["round"], payout["error_code"]) == (1, "refund_failed")
    assert refund_id in payout["reason"]
    [ledger] = failed.ledger
    assert (ledger["status"], ledger["error_code"], ledger["stripe_refund_id"]) == (
        "FAILED",
        "refund_failed",
        refund_id,
    )
    assert ledger["idempotency_key"] == idempotency_key(dispute, 1)
    assert failed.paid_minor == 0
    items = {i["item_key"]: (i["kind"], i["status"]) for i in failed.review_items}
    assert items["payout:round1"] == ("PAYOUT", "OPEN")

    # The dispute's page in the API says the same.
    with api_server.client() as client:
        told = client.get(f"/disputes/{dispute}", headers=api_server.auth())
    assert told.status_code == 200, told.text
    assert told.json()["summary"]["paid_minor"] == 0

    # The payment operator pays it again from the desk: round 2 pays the 68900 under its own key.
    with api_server.client() as client:
        token = sign_in(client, "carol")
        form = {
            "item_key": "payout:round1",
            "decision": "REPAY",
            "note": "the customer's card was re-issued",
            "csrf_token": token,
        }
        repaid = client.post(f"/review/disputes/{dispute}/decisions", data=form)
    assert repaid.status_code == 303, repaid.text
    again = wait_story(
        pipeline,
        dispute,
        "round 2 final and the payout item decided",
        lambda s: s.is_final(2) and item_status(s, "payout:round1") == "DECIDED",
    )
    round2 = again.priced[-1]
    assert (round2["round"], round2["decision"], round2["payable_minor"]) == (
        2,
        "AUTO_APPROVED",
        68900,
    )
    assert round2["already_paid_minor"] == 0
    assert "round 1's refund of 68900 failed: no longer counted as paid" in round2["reason"]
    assert [(row["round"], row["status"]) for row in again.ledger] == [
        (1, "FAILED"),
        (2, "SUCCEEDED"),
    ]
    assert again.ledger[1]["idempotency_key"] == idempotency_key(dispute, 2)
    assert again.ledger[1]["stripe_refund_id"] not in (None, refund_id)
    assert [(p["round"], p["outcome"]) for p in again.payouts] == [(1, "FAILED"), (2, "COMPLETED")]
    assert again.paid_minor == 68900
    assert [r["amount_minor"] for r in again.replies] == [68900, 68900]
    assert item_status(again, "grievance:g3") == "OPEN", "the raita still waits for its reviewer"
