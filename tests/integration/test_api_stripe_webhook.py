"""Stripe's webhook on the real stack: a refund Stripe took on and later reported failed turns
its round FAILED in the payout ledger and is published once as payout.failed; a refund that
waited for the customer and then succeeded turns its round SUCCEEDED; nothing else changes
anything, and an unsigned or stale event is refused.

The webhook reads each refund back from Stripe and acts on the status Stripe holds, not on the
event's: here Stripe is the fake in tests/fakes, on loopback, holding whatever status a test
sets (stripe-mock, which always holds its one fixture, checks the real client once).

payout.failed is shared with other tests, so each test reads only the window of offsets after
its own requests and filters by its dispute id.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
import stripe
from pydantic import SecretStr

from refund_bench import topics as t
from refund_bench.codec import Codec
from refund_bench.db.payout_rounds import (
    IDEMPOTENCY_REFUSED,
    SAVED_SERVER_ERROR,
    STALE_PENDING,
    WAITING_FOR_CUSTOMER,
    how_to_close,
    idempotency_key,
    why_not_repayable,
)
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    delete_dispute,
    dispute_events,
    end_offsets,
    event_codec,
    running_api,
    seed_article_dispute,
    sign_in,
)
from tests.fakes.stripe_idempotent import FakeStripe, FakeStripeServer
from tests.kafka_helpers import wait_for
from tests.ledger_rows import paid_round, read_round, seed_round
from tests.stripe_events import READ_KEY, WEBHOOK_SECRET, refund_event, signed, webhook_settings

pytestmark = pytest.mark.stack
TOPIC = t.PAYOUT_FAILED.name
API_KEY = READ_KEY


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeStripeServer]:
    with FakeStripeServer(FakeStripe()) as server:
        yield server


@pytest.fixture(scope="module")
def api(stack: Stack, fake: FakeStripeServer) -> Iterator[ApiServer]:
    with running_api(stack, **webhook_settings(fake.url)) as server:
        yield server


def held_paid_round(api: ApiServer, fake: FakeStripeServer, status: str) -> tuple[str, str]:
    """A new dispute whose round 1 the ledger paid with a new refund, which Stripe holds with
    ``status``: their ids."""
    dispute, refund_id = paid_round(api.database_url)
    fake.fake.hold(refund_id, status, failure_reason=_reason(status))
    return dispute, refund_id


def _reason(status: str) -> str | None:
    return "expired_or_canceled_card" if status in ("failed", "canceled") else None


@pytest.fixture(scope="module")
def codec(stack: Stack) -> Codec:
    return event_codec(stack)


def deliver(api: ApiServer, event: dict[str, Any], **signing: Any) -> httpx.Response:
    body, headers = signed(event, **signing)
    return httpx.post(f"{api.url}/webhooks/stripe", content=body, headers=headers, timeout=30)


def new_dispute() -> str:
    return f"d-test-{uuid.uuid4().hex}"


def failed_round(
    api: ApiServer, error_code: str, *, paid_elsewhere: bool = False
) -> tuple[str, str]:
    """A new dispute whose round 1 the payout failed with ``error_code`` (keeping no refund id),
    and the id of a refund of it that Stripe may report: (dispute, refund id)."""
    dispute, refund_id = new_dispute(), f"re_{uuid.uuid4().hex[:16]}"
    seed_round(
        api.database_url,
        dispute,
        status="FAILED",
        error_code=error_code,
        paid_elsewhere=paid_elsewhere,
    )
    return dispute, refund_id


def published_rows(database: str, dispute_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT stripe_refund_id, error_code, published FROM refund_failures"
            " WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()


def ledger_row(database: str, dispute: str) -> dict[str, Any]:
    with psycopg.connect(database, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute(
            "SELECT status, attempts, error_code, error_message, stripe_refund_id,"
            " paid_elsewhere FROM payout_ledger WHERE dispute_id = %s AND round = 1",
            (dispute,),
        ).fetchone()
    assert row is not None
    return row


def test_a_refund_reported_failed_fails_its_round_and_is_published_once(
    api: ApiServer, fake: FakeStripeServer, stack: Stack, codec: Codec
) -> None:
    dispute, refund_id = held_paid_round(api, fake, "failed")
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
def test_a_canceled_or_stuck_refund_is_a_failure_too(
    api: ApiServer, fake: FakeStripeServer, status: str
) -> None:
    dispute, refund_id = held_paid_round(api, fake, status)
    answer = deliver(
        api,
        refund_event(refund_id, dispute_id=dispute, status=status, event_type="refund.updated"),
    )
    assert (answer.status_code, answer.json()["outcome"]) == (200, "recorded")
    assert read_round(api.database_url, dispute) == ("FAILED", 1, f"refund_{status}")
    # The reason reaches the payment operator's review item: a refund that waits for the
    # customer may still go through, so paying another way meanwhile could pay twice.
    reason = ledger_row(api.database_url, dispute)["error_message"]
    if status == "requires_action":
        assert "another way meanwhile could refund twice" in reason, reason
        assert "Pay it another way" not in reason, reason
    else:
        assert "Pay it another way" in reason, reason


@pytest.mark.parametrize("reported", ["by an earlier event", "by Stripe's answer to the payout"])
def test_a_refund_that_waited_for_the_customer_and_then_failed_may_be_paid_again(
    api: ApiServer, fake: FakeStripeServer, reported: str
) -> None:
    """A refund waiting for the customer may still go through, so its FAILED round is not paid
    again and holds the order's other disputes. Once Stripe reports that refund canceled, no
    money went back: the ledger records it (once), so the desk offers REPAY and the round holds
    nothing more. The round is in the review queue already: no second payout.failed."""
    if reported == "by an earlier event":
        dispute, refund_id = held_paid_round(api, fake, "requires_action")
        waiting = refund_event(
            refund_id, dispute_id=dispute, status="requires_action", event_type="refund.updated"
        )
        assert deliver(api, waiting).json()["outcome"] == "recorded"
        queued = [(refund_id, "refund_requires_action")]
    else:  # the payout stage failed the round itself, keeping no refund id
        dispute, refund_id = failed_round(api, "refund_requires_action")
        queued = []
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_requires_action")
    assert why_not_repayable("FAILED", "refund_requires_action") is not None

    fake.fake.hold(refund_id, "canceled")
    final = deliver(api, refund_event(refund_id, dispute_id=dispute, status="canceled"))
    assert (final.status_code, final.json()["outcome"]) == (200, "now_final"), final.text
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_canceled")
    assert why_not_repayable("FAILED", "refund_canceled") is None
    # Another event, late or stale: Stripe still holds the refund canceled.
    again = deliver(api, refund_event(refund_id, dispute_id=dispute, status="failed"))
    assert again.json()["outcome"] == "already_failed"
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_canceled")
    assert [row[:2] for row in published_rows(api.database_url, dispute)] == queued


@pytest.mark.parametrize(
    ("holds", "settled", "outcome"),
    [
        ("failed", ("SUCCEEDED", None), ("recorded", "FAILED", "refund_failed")),
        ("succeeded", ("FAILED", "refund_requires_action"), ("now_refunded", "SUCCEEDED", None)),
        ("pending", ("FAILED", "refund_requires_action"), ("now_refunded", "SUCCEEDED", None)),
    ],
)
def test_a_refund_the_payout_has_not_recorded_yet_is_delivered_again(
    api: ApiServer,
    fake: FakeStripeServer,
    holds: str,
    settled: tuple[str, str | None],
    outcome: tuple[str, str, str | None],
) -> None:
    """Stripe may report the refund before the payout stage has settled its round (it called
    Stripe and has not recorded the answer yet): 503 whatever Stripe holds, so that Stripe
    delivers again, and the event then acts on the round as the payout settled it. A refund
    Stripe holds succeeded (or pending) may be one whose round the payout then settles FAILED
    from Stripe's first answer (``requires_action``, replayed after a crash, say), and Stripe
    sends no further event: delivered again, it turns that round SUCCEEDED."""
    dispute = new_dispute()
    refund_id = f"re_{uuid.uuid4().hex[:16]}"
    fake.fake.hold(refund_id, holds, failure_reason=_reason(holds))
    seed_round(api.database_url, dispute, status="PENDING")
    event = refund_event(refund_id, dispute_id=dispute, status=holds, event_type="refund.updated")

    early = deliver(api, event)
    assert early.status_code == 503, early.text
    assert "has not recorded refund" in early.json()["detail"]
    assert read_round(api.database_url, dispute) == ("PENDING", 1, None)

    with psycopg.connect(api.database_url, autocommit=True) as conn:  # the payout settles it
        conn.execute(
            "UPDATE payout_ledger SET status = %s, error_code = %s, stripe_refund_id = %s"
            " WHERE dispute_id = %s AND round = 1",
            (*settled, refund_id, dispute),
        )
    later = deliver(api, event)
    assert (later.status_code, later.json()["outcome"]) == (200, outcome[0]), later.text
    assert read_round(api.database_url, dispute) == (outcome[1], 1, outcome[2])


@pytest.mark.parametrize(
    ("case", "outcome"),
    [
        ("succeeded", "already_paid"),
        ("pending", "already_paid"),
        ("no metadata", "ignored"),
        ("a round too large for the ledger", "ignored"),
        ("not a refund event", "ignored"),
        ("another round", "unknown_round"),
        ("another refund of the round", "other_refund"),
    ],
)
def test_events_that_are_no_failure_of_a_paid_round_change_nothing(
    api: ApiServer, fake: FakeStripeServer, case: str, outcome: str
) -> None:
    dispute, refund_id = held_paid_round(api, fake, case if case == "pending" else "succeeded")
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


@pytest.mark.parametrize("missing", ["the signing secret", "the API key", "both"])
def test_without_a_signing_secret_or_an_api_key_the_endpoint_answers_503(
    stack: Stack, fake: FakeStripeServer, missing: str
) -> None:
    settings: dict[str, Any] = {
        "stripe_api_base": fake.url,
        "stripe_webhook_secret": SecretStr("" if missing != "the API key" else WEBHOOK_SECRET),
        "stripe_api_key": SecretStr("" if missing != "the signing secret" else API_KEY),
    }
    with running_api(stack, **settings) as unconfigured:
        dispute, refund_id = paid_round(unconfigured.database_url)
        fake.fake.hold(refund_id, "failed")
        answer = deliver(unconfigured, refund_event(refund_id, dispute_id=dispute))
        assert answer.status_code == 503, answer.text
        assert "not configured" in answer.json()["detail"]
        assert read_round(unconfigured.database_url, dispute) == ("SUCCEEDED", 1, None)


# -- Stripe's own word: the refund is read back, and its status decides ----------------------


def test_a_late_requires_action_for_a_refund_that_has_succeeded_changes_nothing(
    api: ApiServer, fake: FakeStripeServer
) -> None:
    """Stripe delivered the refund's ``requires_action`` change after it had succeeded (or
    delivers it again): the refund succeeded, so the round stays paid, and nothing goes to
    review."""
    dispute, refund_id = held_paid_round(api, fake, "succeeded")
    for event_type in ("refund.updated", "charge.refund.updated"):
        late = refund_event(
            refund_id, dispute_id=dispute, status="requires_action", event_type=event_type
        )
        answer = deliver(api, late)
        assert (answer.status_code, answer.json()["outcome"]) == (200, "already_paid"), answer.text
        assert "succeeded" in answer.json()["detail"]
    assert fake.fake.reads.count(refund_id) == 2
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)
    assert published_rows(api.database_url, dispute) == []  # no payout.failed queued


@pytest.mark.parametrize("reported", ["by an earlier event", "by Stripe's answer to the payout"])
def test_a_refund_that_waited_for_the_customer_and_then_succeeded_pays_its_round(
    api: ApiServer, fake: FakeStripeServer, reported: str
) -> None:
    """The money went back after the customer acted: the round FAILED waiting for the customer
    turns SUCCEEDED with the refund's id and a note saying so, once; any later or repeated event
    about that refund changes nothing more."""
    if reported == "by an earlier event":
        dispute, refund_id = held_paid_round(api, fake, "requires_action")
        waiting = refund_event(
            refund_id, dispute_id=dispute, status="requires_action", event_type="refund.updated"
        )
        assert deliver(api, waiting).json()["outcome"] == "recorded"
    else:  # the payout stage failed the round itself, keeping no refund id
        dispute, refund_id = failed_round(api, "refund_requires_action")
        waiting = refund_event(
            refund_id, dispute_id=dispute, status="requires_action", event_type="refund.updated"
        )
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_requires_action")

    fake.fake.hold(refund_id, "succeeded")
    paid = refund_event(
        refund_id, dispute_id=dispute, status="succeeded", event_type="refund.updated"
    )
    answer = deliver(api, paid)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "now_refunded"), answer.text
    row = ledger_row(api.database_url, dispute)
    assert (row["status"], row["attempts"], row["error_code"]) == ("SUCCEEDED", 1, None)
    assert row["stripe_refund_id"] == refund_id
    assert f"Stripe reported refund {refund_id} succeeded" in row["error_message"]
    assert why_not_repayable(row["status"], row["error_code"]) is not None

    for event in (paid, waiting):  # delivered again, or late: Stripe holds it succeeded
        again = deliver(api, event)
        assert (again.status_code, again.json()["outcome"]) == (200, "already_paid"), again.text
    assert ledger_row(api.database_url, dispute) == row


def completion_rows(database: str, dispute_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT stripe_refund_id, revision, published FROM refund_completions"
            " WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()


@pytest.mark.parametrize(
    "reported",
    [
        "by an earlier event",
        "by Stripe's answer to the payout",
        "by Stripe's answer, and settled another way meanwhile",
    ],
)
def test_a_refund_that_succeeded_after_waiting_is_published_as_completed_once(
    api: ApiServer, fake: FakeStripeServer, stack: Stack, codec: Codec, reported: str
) -> None:
    """The round turned SUCCEEDED in the ledger; analysts and the audit record read the topics,
    where the round's last word was a payout.failed: one payout.completed for the round says it
    is paid, carrying the round's revision after the change (one more than the failure's), and
    Stripe's redeliveries publish no second one."""
    completed_start = end_offsets(stack.kafka, t.PAYOUT_COMPLETED.name)
    failed_start = end_offsets(stack.kafka, TOPIC)
    if reported == "by an earlier event":
        dispute, refund_id = held_paid_round(api, fake, "requires_action")
        waiting = refund_event(refund_id, dispute_id=dispute, status="requires_action")
        assert deliver(api, waiting).json()["outcome"] == "recorded"
        [failure] = dispute_events(stack.kafka, codec, TOPIC, failed_start, dispute, settle_s=0)
        assert (failure["error_code"], failure["revision"]) == ("refund_requires_action", 1)
        revision, outcome = 2, "now_refunded"
    else:  # the payout stage failed the round itself (revision 0), keeping no refund id
        settled = reported.endswith("meanwhile")
        dispute, refund_id = failed_round(api, "refund_requires_action", paid_elsewhere=settled)
        revision = 1
        outcome = "refunded_after_settled" if settled else "now_refunded"
    fake.fake.hold(refund_id, "succeeded")
    paid = refund_event(refund_id, dispute_id=dispute, status="succeeded")
    answer = deliver(api, paid)
    assert (answer.status_code, answer.json()["outcome"]) == (200, outcome), answer.text
    assert "payout.completed" in answer.json()["detail"]
    wait_for(
        lambda: completion_rows(api.database_url, dispute) == [(refund_id, revision, True)],
        30,
        "the round's payout.completed to be published",
    )
    for event_type in ("refund.updated", "charge.refund.updated"):  # Stripe delivers again
        again = deliver(api, {**paid, "type": event_type})
        assert again.json()["outcome"] == "already_paid", again.text
    events = dispute_events(
        stack.kafka, codec, t.PAYOUT_COMPLETED.name, completed_start, dispute, settle_s=2.0
    )
    assert events == [
        {
            "dispute_id": dispute,
            "round": 1,
            "amount_minor": 68900,
            "currency": "INR",
            "stripe_refund_id": refund_id,
            "idempotency_key": idempotency_key(dispute, 1),
            "completed_at": events[0]["completed_at"],
            "revision": revision,
        }
    ]
    assert completion_rows(api.database_url, dispute) == [(refund_id, revision, True)]


@pytest.mark.parametrize("reported", ["by an earlier event", "by Stripe's answer to the payout"])
def test_a_refund_that_succeeded_after_waiting_and_then_failed_fails_its_round_again(
    api: ApiServer, fake: FakeStripeServer, stack: Stack, codec: Codec, reported: str
) -> None:
    """Stripe may report a refund failed after it succeeded: the round turns FAILED again, the
    round's one refund_failures row is written or brought up to date (not duplicated) and
    queued, so that a payout.failed for the failure is published. The round's review item was
    decided when Stripe refunded it, so that payout.failed names an item of its own,
    ``payout:round1:again``, for the recorder to open (outcome ``failed_again``), whether the
    wait for the customer was reported by an earlier event or by Stripe's answer to the payout
    itself."""
    start = end_offsets(stack.kafka, TOPIC)
    if reported == "by an earlier event":
        dispute, refund_id = held_paid_round(api, fake, "requires_action")
        waited = deliver(api, refund_event(refund_id, dispute_id=dispute))
        assert waited.json()["outcome"] == "recorded"
        wait_for(
            lambda: (
                published_rows(api.database_url, dispute)
                == [(refund_id, "refund_requires_action", True)]
            ),
            30,
            "the first payout.failed to be published",
        )
    else:  # the payout stage failed the round itself, keeping no refund id
        dispute, refund_id = failed_round(api, "refund_requires_action")
    fake.fake.hold(refund_id, "succeeded")
    assert deliver(api, refund_event(refund_id, dispute_id=dispute)).json()["outcome"] == (
        "now_refunded"
    )
    fake.fake.hold(refund_id, "failed", failure_reason="lost_or_stolen_card")
    answer = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert (answer.status_code, answer.json()["outcome"]) == (200, "failed_again"), answer.text
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")
    wait_for(
        lambda: published_rows(api.database_url, dispute) == [(refund_id, "refund_failed", True)],
        30,
        "the failure's payout.failed to be published",
    )
    events = dispute_events(stack.kafka, codec, TOPIC, start, dispute, settle_s=0.5)
    earlier = [("refund_requires_action", 1, None)] if reported == "by an earlier event" else []
    # Each change counts up the round's revision: the refund in between was one as well.
    again_at = 3 if earlier else 2
    assert [(e["error_code"], e["revision"], e["item_key"]) for e in events] == [
        *earlier,
        ("refund_failed", again_at, "payout:round1:again"),
    ]
    again = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert again.json()["outcome"] == "already_failed", "a redelivery publishes nothing more"


UNKNOWN_REFUND = [STALE_PENDING, IDEMPOTENCY_REFUSED, SAVED_SERVER_ERROR]
"""Codes of a round the payout failed not knowing whether Stripe made its refund."""


@pytest.mark.parametrize("code", UNKNOWN_REFUND)
@pytest.mark.parametrize("holds", ["succeeded", "pending"])
def test_a_round_failed_not_knowing_of_its_refund_is_paid_once_stripe_reports_it_refunded(
    api: ApiServer, fake: FakeStripeServer, code: str, holds: str
) -> None:
    """The payout failed the round not knowing whether Stripe had made its refund, and the desk
    tells the operator to look for one before paying by hand. Stripe then reports the round's
    own refund (its metadata names the round) refunded: the money went back, so the ledger
    records the round paid, with the refund, and payout.completed says so; the desk no longer
    lets anyone pay it."""
    dispute, refund_id = failed_round(api, code)
    fake.fake.hold(refund_id, holds)
    answer = deliver(api, refund_event(refund_id, dispute_id=dispute, status=holds))
    assert (answer.status_code, answer.json()["outcome"]) == (200, "now_refunded"), answer.text
    row = ledger_row(api.database_url, dispute)
    assert (row["status"], row["error_code"], row["stripe_refund_id"]) == (
        "SUCCEEDED",
        None,
        refund_id,
    )
    assert code in row["error_message"]
    assert "do not pay it another way" in row["error_message"]
    wait_for(
        lambda: completion_rows(api.database_url, dispute) == [(refund_id, 1, True)],
        30,
        "the round's payout.completed to be published",
    )
    assert deliver(api, refund_event(refund_id, dispute_id=dispute)).json()["outcome"] == (
        "already_paid"
    )


@pytest.mark.parametrize("code", UNKNOWN_REFUND)
def test_a_round_failed_not_knowing_of_its_refund_may_be_paid_again_once_stripe_reports_it_failed(
    api: ApiServer, fake: FakeStripeServer, code: str
) -> None:
    """Stripe reports the round's own refund failed: no money went back through it, so the
    ledger says so, and the desk offers REPAY on the round's item, still open. Nothing more is
    published: the item is in the queue already."""
    dispute, refund_id = failed_round(api, code)
    assert why_not_repayable("FAILED", code) is not None
    fake.fake.hold(refund_id, "failed", failure_reason="lost_or_stolen_card")
    answer = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert (answer.status_code, answer.json()["outcome"]) == (200, "now_final"), answer.text
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")
    assert ledger_row(api.database_url, dispute)["stripe_refund_id"] == refund_id
    assert why_not_repayable("FAILED", "refund_failed") is None
    assert published_rows(api.database_url, dispute) == []
    again = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert again.json()["outcome"] == "already_failed"


@pytest.mark.parametrize("code", [WAITING_FOR_CUSTOMER, *UNKNOWN_REFUND])
def test_a_refund_that_fails_after_its_round_was_settled_another_way_goes_back_to_review(
    api: ApiServer, fake: FakeStripeServer, stack: Stack, codec: Codec, code: str
) -> None:
    """A payment operator settled the round another way (PAID_ELSEWHERE) while its refund might
    still go through, perhaps counting on that refund. Stripe then reports it canceled: the
    customer may have been paid nothing, and the round's item is decided, so its payout.failed
    is published again, naming an item of its own, once however often Stripe delivers."""
    start = end_offsets(stack.kafka, TOPIC)
    dispute, refund_id = failed_round(api, code, paid_elsewhere=True)
    fake.fake.hold(refund_id, "canceled")
    canceled = refund_event(refund_id, dispute_id=dispute, status="canceled")
    answer = deliver(api, canceled)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "failed_after_settled")
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_canceled")
    reason = why_not_repayable("FAILED", "refund_canceled", paid_elsewhere=True)
    assert reason is not None
    assert "what the customer has been paid" in reason
    close = how_to_close("refund_canceled", "FAILED", paid_elsewhere=True)
    assert "pay by hand only what is still owed" in close
    wait_for(
        lambda: published_rows(api.database_url, dispute) == [(refund_id, "refund_canceled", True)],
        30,
        "the round's payout.failed to be published",
    )
    assert deliver(api, canceled).json()["outcome"] == "already_failed"
    events = dispute_events(stack.kafka, codec, TOPIC, start, dispute, settle_s=0.5)
    assert [(e["error_code"], e["revision"], e["item_key"]) for e in events] == [
        ("refund_canceled", 1, "payout:round1:again")
    ]
    # The item says what to do about a round settled by hand: not to pay it again blindly.
    assert "pay by hand only what is still owed" in events[0]["reason"]
    assert "Pay it another way" not in events[0]["reason"]


@pytest.mark.parametrize("code", UNKNOWN_REFUND)
def test_a_round_failed_not_knowing_of_its_refund_waits_once_stripe_reports_it_waiting(
    api: ApiServer, fake: FakeStripeServer, code: str
) -> None:
    """The desk told the operator to look for the round's refund at Stripe, and to pay by hand
    only if there is none. Stripe reports it waiting for the customer: it exists and may still
    go through, so the ledger records the round waiting (with the refund's id), and the desk
    says to wait, not to pay it another way."""
    dispute, refund_id = failed_round(api, code)
    fake.fake.hold(refund_id, "requires_action")
    waiting = refund_event(refund_id, dispute_id=dispute, status="requires_action")
    answer = deliver(api, waiting)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "now_waiting"), answer.text
    row = ledger_row(api.database_url, dispute)
    assert (row["status"], row["error_code"], row["stripe_refund_id"]) == (
        "FAILED",
        WAITING_FOR_CUSTOMER,
        refund_id,
    )
    assert "another way meanwhile could refund twice" in row["error_message"]
    assert "Do not pay the customer another way" in how_to_close(WAITING_FOR_CUSTOMER, "FAILED")
    assert deliver(api, waiting).json()["outcome"] == "already_failed"
    assert published_rows(api.database_url, dispute) == []


@pytest.mark.parametrize("code", UNKNOWN_REFUND)
def test_a_refund_that_succeeds_after_its_unknown_round_was_paid_another_way_raises_the_alarm(
    api: ApiServer, fake: FakeStripeServer, code: str
) -> None:
    dispute, refund_id = failed_round(api, code, paid_elsewhere=True)
    fake.fake.hold(refund_id, "succeeded")
    answer = deliver(api, refund_event(refund_id, dispute_id=dispute, status="succeeded"))
    assert (answer.status_code, answer.json()["outcome"]) == (200, "refunded_after_settled")
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)


def test_a_refund_that_succeeded_after_its_round_was_paid_another_way_raises_the_alarm(
    api: ApiServer, fake: FakeStripeServer
) -> None:
    """A payment operator settled the waiting round another way (PAID_ELSEWHERE); then Stripe
    refunded it after all. The ledger records the refund, and the outcome says the customer
    may have been paid twice, which the alert RefundBenchRefundNeedsOperator counts."""
    dispute, refund_id = failed_round(api, "refund_requires_action", paid_elsewhere=True)
    fake.fake.hold(refund_id, "succeeded")
    paid = refund_event(refund_id, dispute_id=dispute, status="succeeded")
    answer = deliver(api, paid)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "refunded_after_settled")
    assert "paid twice" in answer.json()["detail"] or "double payment" in answer.json()["detail"]
    row = ledger_row(api.database_url, dispute)
    assert (row["status"], row["stripe_refund_id"]) == ("SUCCEEDED", refund_id)
    assert deliver(api, paid).json()["outcome"] == "already_paid"


def test_no_more_events_than_the_concurrency_hold_a_connection_while_stripe_is_read(
    api: ApiServer, fake: FakeStripeServer
) -> None:
    """Stripe answers slowly, and four events come at once: two (STRIPE_WEBHOOK_CONCURRENCY)
    read their refunds, each holding a database connection and its round's lock; the other two
    wait without one, counted in ``api_stripe_events_waiting``. All four are settled."""
    assert api.settings.stripe_webhook_concurrency == 2
    rounds = [held_paid_round(api, fake, "failed") for _ in range(4)]
    gate = threading.Event()
    fake.fake.read_gate, fake.fake.most_reading = gate, 0
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = [
                pool.submit(deliver, api, refund_event(refund, dispute_id=dispute))
                for dispute, refund in rounds
            ]
            wait_for(
                lambda: fake.fake.reading == 2 and _waiting(api) == 2,
                30,
                "two events reading Stripe and two waiting",
            )
            gate.set()
            outcomes = [answer.result(60).json()["outcome"] for answer in answers]
    finally:
        fake.fake.read_gate = None
        gate.set()
    assert outcomes == ["recorded"] * 4
    assert fake.fake.most_reading == 2
    assert _waiting(api) == 0


def test_an_event_that_waits_longer_than_stripe_may_take_is_delivered_again(
    stack: Stack, fake: FakeStripeServer
) -> None:
    """Both slots stay taken past STRIPE_WEBHOOK_WAIT_S: a third event is answered 503 ``busy``
    (Stripe delivers it again) instead of waiting without end, and changes nothing. The reads
    may take far longer than the wait, so that the slots are still taken when it ends."""
    settings = {**webhook_settings(fake.url), "stripe_timeout_s": 30.0}
    with running_api(stack, **settings, stripe_webhook_wait_s=1.0) as api:
        _turned_away_while_both_slots_read(api, fake)


def _turned_away_while_both_slots_read(api: ApiServer, fake: FakeStripeServer) -> None:
    rounds = [held_paid_round(api, fake, "failed") for _ in range(3)]
    gate = threading.Event()
    fake.fake.read_gate = gate
    try:
        with ThreadPoolExecutor(2) as pool:
            held = [
                pool.submit(deliver, api, refund_event(refund, dispute_id=dispute))
                for dispute, refund in rounds[:2]
            ]
            wait_for(lambda: fake.fake.reading == 2, 30, "both slots reading Stripe")
            dispute, refund = rounds[2]
            turned_away = deliver(api, refund_event(refund, dispute_id=dispute))
            gate.set()
            outcomes = [answer.result(60).json()["outcome"] for answer in held]
    finally:
        fake.fake.read_gate = None
        gate.set()
    assert turned_away.status_code == 503, turned_away.text
    assert "deliver again" in turned_away.json()["detail"]
    assert read_round(api.database_url, rounds[2][0]) == ("SUCCEEDED", 1, None)
    assert outcomes == ["recorded"] * 2
    assert _waiting(api) == 0


def _waiting(api: ApiServer) -> float:
    text = httpx.get(api.metrics_url, timeout=10).text
    [line] = [x for x in text.splitlines() if x.startswith("api_stripe_events_waiting ")]
    return float(line.split()[1])


@pytest.mark.parametrize("reported", ["by an earlier event", "by Stripe's answer to the payout"])
def test_the_desk_shows_a_round_refunded_after_waiting_and_lets_it_be_closed(
    api: ApiServer, fake: FakeStripeServer, reported: str
) -> None:
    """The round's review item stays open (the recorder opened it from payout.failed) until a
    payment operator closes it: the case page shows the round SUCCEEDED, says Stripe refunded
    it, offers no REPAY and refuses one; closing it is recorded, and leaves the paid round as it
    is."""
    dispute = new_dispute()
    seed_article_dispute(api.database_url, dispute)
    try:
        refund_id = ledger_row(api.database_url, dispute)["stripe_refund_id"]
        fake.fake.hold(refund_id, "requires_action")
        if reported == "by an earlier event":
            waiting = refund_event(refund_id, dispute_id=dispute, status="requires_action")
            assert deliver(api, waiting).json()["outcome"] == "recorded"
        else:
            with psycopg.connect(api.database_url) as conn:
                conn.execute(
                    "UPDATE payout_ledger SET status = 'FAILED', stripe_refund_id = NULL,"
                    " error_code = 'refund_requires_action' WHERE dispute_id = %s AND round = 1",
                    (dispute,),
                )
        with psycopg.connect(api.database_url) as conn:  # as the recorder does on payout.failed
            conn.execute(
                "INSERT INTO review_items (dispute_id, item_key, kind, reason)"
                " VALUES (%s, 'payout:round1', 'PAYOUT', 'payout failed (refund_requires_action)')",
                (dispute,),
            )
        fake.fake.hold(refund_id, "succeeded")
        paid = refund_event(refund_id, dispute_id=dispute, status="succeeded")
        assert deliver(api, paid).json()["outcome"] == "now_refunded"

        url = f"/review/disputes/{dispute}/decisions"
        with api.client() as client:
            token = sign_in(client, "carol")
            case = client.get(f"/review/disputes/{dispute}").text
            item = case[case.index('id="item-payout:round1"') :]
            item = item[: item.index("</form>")]
            assert 'class="badge b-SUCCEEDED">SUCCEEDED</span>' in item
            assert "Stripe refunded this round" in item
            assert 'value="REPAY"' not in item
            assert 'value="PAID_ELSEWHERE"' in item
            assert "Do not pay the customer another way" not in item
            assert f"Stripe reported refund {refund_id} succeeded" in case  # the ledger's note
            form = {"item_key": "payout:round1", "note": "Stripe refunded it", "csrf_token": token}
            refused = client.post(url, data={**form, "decision": "REPAY"})
            assert refused.status_code == 422
            assert "it is SUCCEEDED in the payout ledger" in refused.text
            closed = client.post(url, data={**form, "decision": "PAID_ELSEWHERE"})
            assert closed.status_code == 303, closed.text
            shown = client.get(closed.headers["location"]).text
        assert "Recorded PAID_ELSEWHERE (payout:round1)" in shown
        with psycopg.connect(api.database_url) as conn:
            decided = conn.execute(
                "SELECT item_key, decision FROM review_decisions WHERE dispute_id = %s",
                (dispute,),
            ).fetchall()
        assert decided == [("payout:round1", "PAID_ELSEWHERE")]
        row = ledger_row(api.database_url, dispute)
        assert (row["status"], row["paid_elsewhere"], row["stripe_refund_id"]) == (
            "SUCCEEDED",
            False,
            refund_id,
        )
    finally:
        delete_dispute(api.database_url, dispute)


@pytest.mark.parametrize("fault", ["a 500", "a 429"])
def test_while_stripe_cannot_be_read_the_event_is_delivered_again_and_nothing_changes(
    api: ApiServer, fake: FakeStripeServer, fault: str
) -> None:
    dispute, refund_id = held_paid_round(api, fake, "failed")
    if fault == "a 500":
        fake.fake.read_failures = 1
    else:
        fake.fake.throttle = 1
    event = refund_event(refund_id, dispute_id=dispute)
    down = deliver(api, event)
    assert down.status_code == 503, down.text
    assert "Stripe could not be read" in down.json()["detail"]
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)
    assert published_rows(api.database_url, dispute) == []

    later = deliver(api, event)  # Stripe delivers again, and Stripe answers now
    assert (later.status_code, later.json()["outcome"]) == (200, "recorded"), later.text
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")


def test_while_stripe_is_unreachable_the_event_is_delivered_again_and_nothing_changes(
    stack: Stack,
) -> None:
    with socket.socket() as closed:  # a port nothing listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with running_api(
        stack,
        stripe_webhook_secret=SecretStr(WEBHOOK_SECRET),
        stripe_api_key=SecretStr(API_KEY),
        stripe_api_base=f"http://127.0.0.1:{port}",
    ) as cut_off:
        dispute, refund_id = paid_round(cut_off.database_url)
        answer = deliver(cut_off, refund_event(refund_id, dispute_id=dispute))
        assert answer.status_code == 503, answer.text
        assert "Stripe could not be read" in answer.json()["detail"]
        assert read_round(cut_off.database_url, dispute) == ("SUCCEEDED", 1, None)
        assert published_rows(cut_off.database_url, dispute) == []


def test_a_key_stripe_refuses_is_a_503_and_an_error_that_does_not_show_the_key(
    api: ApiServer, fake: FakeStripeServer, caplog: pytest.LogCaptureFixture
) -> None:
    dispute, refund_id = held_paid_round(api, fake, "failed")
    fake.fake.refuse_key = True
    try:
        with caplog.at_level(logging.ERROR, logger="services.api.stripe_webhook"):
            answer = deliver(api, refund_event(refund_id, dispute_id=dispute))
    finally:
        fake.fake.refuse_key = False
    assert answer.status_code == 503, answer.text
    assert "STRIPE_API_KEY" in answer.json()["detail"]
    assert API_KEY not in answer.text
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors, "a refused key is logged as an error"
    assert any("STRIPE_API_KEY" in r.getMessage() for r in errors)
    assert API_KEY not in caplog.text
    assert API_KEY[-4:] not in caplog.text
    assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)
    assert published_rows(api.database_url, dispute) == []


def test_a_refund_stripe_does_not_know_changes_nothing(
    api: ApiServer, fake: FakeStripeServer
) -> None:
    """An event about a refund of a round that failed with no refund made (another dispute of
    its order holds the payment), which Stripe does not know either: taken (200), nothing
    changes."""
    dispute = f"d-test-{uuid.uuid4().hex}"
    seed_round(api.database_url, dispute, status="FAILED", error_code="ORDER_ALREADY_REFUNDED")
    refund_id = f"re_{uuid.uuid4().hex[:16]}"
    answer = deliver(api, refund_event(refund_id, dispute_id=dispute))
    assert (answer.status_code, answer.json()["outcome"]) == (200, "refund_not_found"), answer.text
    assert fake.fake.reads[-1] == refund_id
    assert (read_round(api.database_url, dispute) or ("",))[0] == "FAILED"
    assert published_rows(api.database_url, dispute) == []


@pytest.mark.parametrize(
    "round_is", ["paid with it", "failed with it", "failed not knowing of it", "still being paid"]
)
def test_a_refund_of_the_ledgers_round_unknown_to_stripe_is_a_503_and_an_error(
    api: ApiServer, fake: FakeStripeServer, caplog: pytest.LogCaptureFixture, round_is: str
) -> None:
    """Stripe, read with the API's key, does not know a refund of a round the ledger paid with
    it, failed with it (Stripe answered the payout's call with it waiting for the customer),
    or is paying (PENDING: the payout has not recorded its refund yet): the key is of another
    account than the payout's. Stripe is asked to deliver again (503), and the error
    says what to check, so the round's outcome is not dropped."""
    if round_is == "paid with it":
        dispute, refund_id = paid_round(api.database_url)  # Stripe holds no such refund
        status = "SUCCEEDED"
    elif round_is == "failed not knowing of it":
        dispute, refund_id = f"d-test-{uuid.uuid4().hex}", f"re_{uuid.uuid4().hex[:16]}"
        seed_round(api.database_url, dispute, status="FAILED", error_code=STALE_PENDING)
        status = "FAILED"
    elif round_is == "failed with it":
        dispute, refund_id = f"d-test-{uuid.uuid4().hex}", f"re_{uuid.uuid4().hex[:16]}"
        seed_round(
            api.database_url,
            dispute,
            status="FAILED",
            error_code=WAITING_FOR_CUSTOMER,
            refund_id=refund_id,
        )
        status = "FAILED"
    else:
        dispute, refund_id = f"d-test-{uuid.uuid4().hex}", f"re_{uuid.uuid4().hex[:16]}"
        seed_round(api.database_url, dispute, status="PENDING")
        status = "PENDING"
    with caplog.at_level(logging.ERROR, logger="services.api.stripe_webhook"):
        answer = deliver(api, refund_event(refund_id, dispute_id=dispute, status="failed"))
    assert answer.status_code == 503, answer.text
    assert "STRIPE_API_KEY is not of the payout's Stripe account" in answer.text
    assert fake.fake.reads[-1] == refund_id
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(refund_id in e and "STRIPE_API_KEY" in e for e in errors), errors
    assert (read_round(api.database_url, dispute) or ("",))[0] == status
    assert published_rows(api.database_url, dispute) == []


def test_the_refund_is_read_from_stripe_mock_with_the_stripe_client(
    stack: Stack, stripe_api_base: str
) -> None:
    """stripe-mock holds every refund succeeded (its fixture): a failure event for a paid round
    is read back through the real client and changes nothing."""
    with running_api(
        stack,
        stripe_webhook_secret=SecretStr(WEBHOOK_SECRET),
        stripe_api_key=SecretStr("sk_test_123"),
        stripe_api_base=stripe_api_base,
    ) as api:
        dispute, refund_id = paid_round(api.database_url)
        answer = deliver(api, refund_event(refund_id, dispute_id=dispute))
        assert (answer.status_code, answer.json()["outcome"]) == (200, "already_paid"), answer.text
        assert read_round(api.database_url, dispute) == ("SUCCEEDED", 1, None)
