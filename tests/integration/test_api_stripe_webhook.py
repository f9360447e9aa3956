"""Stripe's webhook on the real stack: a refund Stripe took on and later reported failed turns
its round FAILED in the payout ledger and is published once as payout.failed; nothing else
changes anything, and an unsigned or stale event is refused.

payout.failed is shared with other tests, so each test reads only the window of offsets after
its own requests and filters by its dispute id.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import stripe
from pydantic import SecretStr

from refund_bench import topics as t
from refund_bench.codec import Codec
from refund_bench.db.payout_rounds import idempotency_key, why_not_repayable
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    dispute_events,
    end_offsets,
    event_codec,
    running_api,
)
from tests.ledger_rows import paid_round, read_round, seed_round
from tests.stripe_events import WEBHOOK_SECRET, refund_event, signed

pytestmark = pytest.mark.stack
TOPIC = t.PAYOUT_FAILED.name


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with running_api(stack, stripe_webhook_secret=SecretStr(WEBHOOK_SECRET)) as server:
        yield server


@pytest.fixture(scope="module")
def codec(stack: Stack) -> Codec:
    return event_codec(stack)


def deliver(api: ApiServer, event: dict[str, Any], **signing: Any) -> httpx.Response:
    body, headers = signed(event, **signing)
    return httpx.post(f"{api.url}/webhooks/stripe", content=body, headers=headers, timeout=30)


def new_dispute() -> str:
    return f"d-test-{uuid.uuid4().hex}"


def published_rows(database: str, dispute_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT stripe_refund_id, error_code, published FROM refund_failures"
            " WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()


def test_a_refund_reported_failed_fails_its_round_and_is_published_once(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    dispute, refund_id = paid_round(api.database_url)
    start = end_offsets(stack.kafka, TOPIC)

    first = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert first.status_code == 200, first.text
    assert first.json()["outcome"] == "recorded"
    # Stripe delivers again, and reports the same failure in its other event types.
    again = [
        deliver(api, refund_event(refund_id, dispute_id=dispute)),
        deliver(api, refund_event(refund_id, dispute_id=dispute, event_type="refund.updated")),
        deliver(
            api,
            refund_event(refund_id, dispute_id=dispute, event_type="charge.refund.updated"),
        ),
    ]
    assert [(a.status_code, a.json()["outcome"]) for a in again] == [(200, "already_failed")] * 3

    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")
    events = dispute_events(stack.kafka, codec, TOPIC, start, dispute)
    assert len(events) == 1, events
    (event,) = events
    assert (event["round"], event["amount_minor"], event["currency"]) == (1, 68900, "INR")
    assert event["error_code"] == "refund_failed"
    assert refund_id in event["reason"]
    assert "expired_or_canceled_card" in event["reason"]
    assert event["idempotency_key"] == idempotency_key(dispute, 1)
    assert published_rows(api.database_url, dispute) == [(refund_id, "refund_failed", True)]


@pytest.mark.parametrize("status", ["canceled", "requires_action"])
def test_a_canceled_or_stuck_refund_is_a_failure_too(api: ApiServer, status: str) -> None:
    dispute, refund_id = paid_round(api.database_url)
    answer = deliver(
        api,
        refund_event(refund_id, dispute_id=dispute, status=status, event_type="refund.updated"),
    )
    assert (answer.status_code, answer.json()["outcome"]) == (200, "recorded")
    assert read_round(api.database_url, dispute) == ("FAILED", 1, f"refund_{status}")


@pytest.mark.parametrize("reported", ["by an earlier event", "by Stripe's answer to the payout"])
def test_a_refund_that_waited_for_the_customer_and_then_failed_may_be_paid_again(
    api: ApiServer, reported: str
) -> None:
    """A refund waiting for the customer may still go through, so its FAILED round is not paid
    again and holds the order's other disputes. Once Stripe reports that refund failed, no
    money went back: the ledger records it (once), so the desk offers REPAY and the round holds
    nothing more. The round is in the review queue already: no second payout.failed."""
    if reported == "by an earlier event":
        dispute, refund_id = paid_round(api.database_url)
        waiting = refund_event(
            refund_id, dispute_id=dispute, status="requires_action", event_type="refund.updated"
        )
        assert deliver(api, waiting).json()["outcome"] == "recorded"
        queued = [(refund_id, "refund_requires_action")]
    else:  # the payout stage failed the round itself, keeping no refund id
        dispute, refund_id = new_dispute(), f"re_{uuid.uuid4().hex[:16]}"
        seed_round(api.database_url, dispute, status="FAILED", error_code="refund_requires_action")
        queued = []
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_requires_action")
    assert why_not_repayable("FAILED", "refund_requires_action") is not None

    final = deliver(api, refund_event(refund_id, dispute_id=dispute, status="canceled"))
    assert (final.status_code, final.json()["outcome"]) == (200, "now_final"), final.text
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_canceled")
    assert why_not_repayable("FAILED", "refund_canceled") is None
    again = deliver(api, refund_event(refund_id, dispute_id=dispute, status="failed"))
    assert again.json()["outcome"] == "already_failed"
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_canceled")
    assert [row[:2] for row in published_rows(api.database_url, dispute)] == queued


def test_a_refund_the_payout_has_not_recorded_yet_is_delivered_again(api: ApiServer) -> None:
    """Stripe may report the failure before the payout stage has written the refund's id (it
    called Stripe and has not settled the round yet): 503, so that Stripe delivers again."""
    dispute = new_dispute()
    refund_id = f"re_{uuid.uuid4().hex[:16]}"
    seed_round(api.database_url, dispute, status="PENDING")
    event = refund_event(refund_id, dispute_id=dispute)

    early = deliver(api, event)
    assert early.status_code == 503, early.text
    assert "has not recorded refund" in early.json()["detail"]
    assert read_round(api.database_url, dispute) == ("PENDING", 1, None)

    with psycopg.connect(api.database_url, autocommit=True) as conn:  # the payout settles it
        conn.execute(
            "UPDATE payout_ledger SET status = 'SUCCEEDED', stripe_refund_id = %s"
            " WHERE dispute_id = %s AND round = 1",
            (refund_id, dispute),
        )
    later = deliver(api, event)
    assert (later.status_code, later.json()["outcome"]) == (200, "recorded")
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")


@pytest.mark.parametrize(
    ("case", "outcome"),
    [
        ("succeeded", "ignored"),
        ("pending", "ignored"),
        ("no metadata", "ignored"),
        ("a round too large for the ledger", "ignored"),
        ("not a refund event", "ignored"),
        ("another round", "unknown_round"),
        ("another refund of the round", "other_refund"),
    ],
)
def test_events_that_are_no_failure_of_a_paid_round_change_nothing(
    api: ApiServer, case: str, outcome: str
) -> None:
    dispute, refund_id = paid_round(api.database_url)
    event = {
        "succeeded": refund_event(refund_id, dispute_id=dispute, status="succeeded"),
        "pending": refund_event(refund_id, dispute_id=dispute, status="pending"),
        "no metadata": refund_event(refund_id),
        "a round too large for the ledger": refund_event(
            refund_id, dispute_id=dispute, round_=2**40
        ),
        "not a refund event": {
            **refund_event(refund_id, dispute_id=dispute),
            "type": "charge.succeeded",
        },
        "another round": refund_event(refund_id, dispute_id=dispute, round_=2),
        "another refund of the round": refund_event("re_someone_else", dispute_id=dispute),
    }[case]
    answer = deliver(api, event)
    assert (answer.status_code, answer.json()["outcome"]) == (200, outcome), answer.text
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)
    assert published_rows(api.database_url, dispute) == []


@pytest.mark.parametrize(
    "fault",
    [
        "no signature",
        "another secret",
        "an hour old",
        "the body changed after signing",
        "a signature that is not ASCII",
    ],
)
def test_an_event_stripe_did_not_sign_just_now_is_refused(api: ApiServer, fault: str) -> None:
    dispute, refund_id = paid_round(api.database_url)
    event = refund_event(refund_id, dispute_id=dispute)
    body, headers = signed(
        event,
        secret="whsec_other" if fault == "another secret" else WEBHOOK_SECRET,
        timestamp=int(time.time()) - 3600 if fault == "an hour old" else None,
    )
    if fault == "no signature":
        del headers["Stripe-Signature"]
    if fault == "a signature that is not ASCII":
        headers["Stripe-Signature"] = f"t={int(time.time())},v1=\u00e9".encode()  # type: ignore[assignment]
    if fault == "the body changed after signing":
        body = body.replace(b'"round": "1"', b'"round": "2"')
        assert b'"round": "2"' in body
    answer = httpx.post(f"{api.url}/webhooks/stripe", content=body, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "Stripe-Signature" in answer.json()["detail"]
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        json.dumps({"id": "evt_1", "type": "refund.failed"}).encode(),
        json.dumps(
            {
                **refund_event("re_x", dispute_id="d-x"),
                "data": {"object": {"id": "ch_1", "object": "charge", "status": "failed"}},
            }
        ).encode(),
        '{"id": "evt_\u00e9"}'.encode("latin-1"),
    ],
    ids=["not JSON", "no data", "a refund event about a charge", "not UTF-8"],
)
def test_a_signed_body_that_is_no_stripe_event_is_a_400(api: ApiServer, body: bytes) -> None:
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode("utf-8", "replace"), WEBHOOK_SECRET
    )
    answer = httpx.post(
        f"{api.url}/webhooks/stripe",
        content=body,
        headers={"Stripe-Signature": header, "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"]


def test_without_a_signing_secret_the_endpoint_answers_503(stack: Stack) -> None:
    with running_api(stack) as unconfigured:
        dispute, refund_id = paid_round(unconfigured.database_url)
        answer = deliver(unconfigured, refund_event(refund_id, dispute_id=dispute))
        assert answer.status_code == 503, answer.text
        assert "not configured" in answer.json()["detail"]
        assert read_round(unconfigured.database_url, dispute) == ("SUCCEEDED", 1, None)
