"""A refund paid through the whole pipeline that Stripe later reports failed: the round turns
FAILED in the ledger and in the audit record, and a payment operator finds it in the review
queue. The pipeline runs as processes (the ``pipeline`` fixture); Stripe's event reaches the
API's webhook as Stripe sends it, signed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from pydantic import SecretStr

from refund_bench.db.payout_rounds import idempotency_key
from refund_bench.disputes import Story
from refund_bench.samples import ARTICLE_COMPLAINT
from tests.conftest import Stack
from tests.e2e.conftest_api import ApiServer, running_api
from tests.e2e.pipeline import Pipeline
from tests.stripe_events import WEBHOOK_SECRET, refund_event, signed

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def api_server(stack: Stack) -> Iterator[ApiServer]:
    with running_api(stack, stripe_webhook_secret=SecretStr(WEBHOOK_SECRET)) as server:
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


def test_a_paid_refund_stripe_reports_failed_goes_to_a_payment_operator(
    pipeline: Pipeline, api_server: ApiServer
) -> None:
    dispute = pipeline.submit("order-1840", "cust-77", ARTICLE_COMPLAINT)
    paid = pipeline.wait_final(dispute, timeout_s=120)
    [ledger] = paid.ledger
    assert (ledger["round"], ledger["amount_minor"], ledger["status"]) == (1, 68900, "SUCCEEDED")
    refund_id = ledger["stripe_refund_id"]
    assert refund_id

    # The refund Stripe made from the payout's request carries its dispute and round.
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
