"""The payout stage's handler against real PostgreSQL, stripe-mock and an idempotent fake."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from refund_bench import events as ev
from refund_bench.db.payout_rounds import (
    AMOUNT_NOT_PAYABLE,
    IDEMPOTENCY_REFUSED,
    MAY_HAVE_REFUNDED,
    SAVED_SERVER_ERROR,
    UNMENDABLE_FAILURES,
    Reservation,
    RoundToReserve,
    idempotency_key,
    reserve_rounds,
)
from refund_bench.money import payable_step
from refund_bench.resources import pg_pool
from refund_bench.retry import OnRetry, RetryPolicy
from refund_bench.runtime import Context, Emit, Message
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from services.payout.handler import PayoutHandler
from services.payout.ledger import PayoutLedger
from services.payout.payments import PaymentRejected, PaymentsRefusedUs, StripePayments
from tests.fakes.stripe_idempotent import FakeStripe, FakeStripeServer
from tests.ledger_rows import read_round, seed_round
from tests.pg_helpers import sessions_waiting_on

pytestmark = pytest.mark.stack


def _request(
    dispute_id: str,
    amount: int = 68900,
    reference: str | None = None,
    round_: int = 1,
    currency: str = "INR",
) -> Message:
    """A payout request; its payment is the dispute's own unless ``reference`` is given (one
    payment's second dispute is not paid automatically)."""
    event = ev.PayoutRequested(
        dispute_id=dispute_id,
        order_id="order-1840",
        round=round_,
        amount_minor=amount,
        currency=currency,
        payment_reference=reference or f"pi_{dispute_id}",
        requested_at=ev.now(),
    )
    return Message("payout.requested", 0, 0, dispute_id, event.to_avro(), {}, 0)


def _run(
    database: str, api_base: str, *messages: Message, on_retry: OnRetry | None = None
) -> list[list[Emit]]:
    async def go() -> list[list[Emit]]:
        pool = pg_pool(database)
        await pool.open()
        payments = StripePayments("sk_test_123", api_base)
        try:
            handler = PayoutHandler(
                PayoutLedger(pool),
                payments,
                RetryPolicy(base_seconds=0.01, max_seconds=0.02, jitter_seconds=0.0),
                on_retry=on_retry,
            )
            return [list(await handler.handle(m, Context(None))) for m in messages]
        finally:
            await payments.aclose()
            await pool.close()

    return asyncio.run(go())


def _refunds(api_base: str, *requests: dict[str, Any]) -> list[str | PaymentRejected]:
    """Each refund request's refund id, or the rejection it raised, through one client."""

    async def go() -> list[str | PaymentRejected]:
        payments = StripePayments("sk_test_123", api_base)
        results: list[str | PaymentRejected] = []
        try:
            for request in requests:
                try:
                    results.append(await payments.refund(**request))
                except PaymentRejected as exc:
                    results.append(exc)
        finally:
            await payments.aclose()
        return results

    return asyncio.run(go())


def _attempts(database: str, dispute_id: str) -> int:
    """The ledger's count of provider calls begun for the dispute's round 1."""
    row = read_round(database, dispute_id)
    assert row is not None
    return row[1]


def _ledger_statuses(database: str, dispute: str) -> list[str]:
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT status FROM payout_ledger WHERE dispute_id = %s ORDER BY round", (dispute,)
        ).fetchall()
    return [row[0] for row in rows]


@pytest.fixture
def fake() -> Iterator[FakeStripeServer]:
    with FakeStripeServer(FakeStripe()) as server:
        yield server


def test_refund_request_shape_is_accepted_by_stripe_mock(stripe_api_base: str) -> None:
    [refund_id] = _refunds(
        stripe_api_base,
        {
            "payment_reference": "pi_order1840",
            "amount_minor": 68900,
            "currency": "inr",
            "idempotency_key": f"test-{uuid.uuid4()}",
            "metadata": {"dispute_id": "d-shape"},
        },
    )
    assert isinstance(refund_id, str)
    assert refund_id.startswith("re_")


def test_lost_responses_are_retried_with_the_same_key_and_pay_once(
    database: str, fake: FakeStripeServer
) -> None:
    fake.fake.lose_responses = 2
    fake.fake.throttle = 1
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    [outputs] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in outputs] == ["payout.completed"]
    assert len(fake.fake.refunds) == 1, "three attempts, one refund"
    assert fake.fake.requests == 4
    assert _attempts(database, dispute) == 4, "every call to Stripe is counted, retries too"
    refund_id = next(iter(fake.fake.refunds))
    assert outputs[0].value["stripe_refund_id"] == refund_id
    assert outputs[0].value["idempotency_key"] == idempotency_key(dispute, 1)


def test_each_call_to_stripe_retried_is_counted_once_as_a_stripe_retry(
    database: str, fake: FakeStripeServer
) -> None:
    """Stripe throttles the first call: the handler's own retry is counted where it happens
    (``refund_bench_retries_total{kind="stripe"}``), not left to the runtime's retry of the
    whole handler, which sees a success and counts nothing."""
    fake.fake.throttle = 1
    registry = CollectorRegistry()
    on_retry = retry_counter(PrometheusMetrics("payout", registry))
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    [outputs] = _run(database, fake.url, _request(dispute), on_retry=on_retry)
    assert [o.topic for o in outputs] == ["payout.completed"]
    assert fake.fake.requests == 2
    retries = {"stage": "payout", "topic": "", "kind": "stripe"}
    assert registry.get_sample_value("refund_bench_retries_total", retries) == 1


def test_an_answer_broken_off_mid_body_is_retried_with_the_same_key_and_pays_once(
    database: str, fake: FakeStripeServer
) -> None:
    """Stripe took the refund on, but its answer's body broke off: a transient fault of the
    connection, retried under the round's key, not a crash of the stage."""
    fake.fake.cut_bodies = 2
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    [outputs] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in outputs] == ["payout.completed"]
    assert len(fake.fake.refunds) == 1
    assert fake.fake.requests == 3
    assert outputs[0].value["stripe_refund_id"] == next(iter(fake.fake.refunds))
    assert _ledger_statuses(database, dispute) == ["SUCCEEDED"]


def test_a_server_error_stripe_saved_under_the_key_fails_the_round_to_review(
    database: str, fake: FakeStripeServer
) -> None:
    """Stripe began the refund and failed part-way: it saves that 500 under the key and
    answers every retry with it (``Idempotent-Replayed: true``) for a day. The round fails to
    review at the first replay, marked as one that may have refunded, instead of being retried
    until the stage stops, on every redelivery."""
    fake.fake.fail_after_start = 1
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    first, again = _run(database, fake.url, _request(dispute), _request(dispute))
    assert [o.topic for o in first] == ["payout.failed"]
    assert first[0].value["error_code"] == SAVED_SERVER_ERROR
    assert "may exist" in first[0].value["reason"]
    assert (fake.fake.requests, fake.fake.replayed) == (2, 1), "one call and one retry"
    assert again[0].topic == "payout.failed"
    assert fake.fake.requests == 2, "a settled round never reaches Stripe again"
    assert _ledger_statuses(database, dispute) == ["FAILED"]
    assert SAVED_SERVER_ERROR in MAY_HAVE_REFUNDED


def test_a_settled_round_never_reaches_stripe_again(database: str, fake: FakeStripeServer) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    first, again = _run(database, fake.url, _request(dispute), _request(dispute))
    assert fake.fake.requests == 1
    assert first[0].value["stripe_refund_id"] == again[0].value["stripe_refund_id"]
    assert again[0].topic == "payout.completed"
    assert _attempts(database, dispute) == 1, "the insert that opened the round counted its call"


def test_a_round_answered_from_the_ledger_carries_its_outcomes_revision(
    database: str, fake: FakeStripeServer
) -> None:
    """Round 1 waited for the customer, then Stripe reported it refunded (the webhook made it
    SUCCEEDED, revision 1), and later failed after all (FAILED, revision 2). A payout request
    for the round delivered again after each change is answered from the ledger with that
    revision, so the audit record reads it as the outcome it already has, not as one the round
    had before the webhook's change (revision 0), and at the time the ledger took the outcome,
    not when the request came again."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    seed_round(database, dispute, status="SUCCEEDED", refund_id=f"re_{dispute}")
    answers = []
    changes = (
        ("SUCCEEDED", None, 1, datetime(2026, 12, 1, 10, 0, tzinfo=UTC)),
        ("FAILED", "refund_failed", 2, datetime(2026, 12, 2, 11, 30, tzinfo=UTC)),
    )
    for status, code, revision, at in changes:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(
                "UPDATE payout_ledger SET status = %s, error_code = %s, revision = %s,"
                " updated_at = %s WHERE dispute_id = %s AND round = 1",
                (status, code, revision, at, dispute),
            )
        [[answer]] = _run(database, fake.url, _request(dispute))
        outcome = answer.value
        answers.append(
            (answer.topic, outcome["revision"], outcome.get("completed_at") or outcome["failed_at"])
        )
    assert answers == [
        ("payout.completed", 1, changes[0][3]),
        ("payout.failed", 2, changes[1][3]),
    ]
    assert fake.fake.requests == 0


def test_crash_between_stripe_and_ledger_replays_the_same_refund(
    database: str, fake: FakeStripeServer
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    key = idempotency_key(dispute, 1)
    seed_round(database, dispute, status="PENDING", attempts=1)
    # The earlier instance opened the round (its call counted), reached Stripe, then died
    # before recording the outcome.
    _refunds(
        fake.url,
        {
            "payment_reference": f"pi_{dispute}",
            "amount_minor": 68900,
            "currency": "inr",
            "idempotency_key": key,
            "metadata": {"dispute_id": dispute, "round": "1"},
        },
    )
    [outputs] = _run(database, fake.url, _request(dispute))
    assert len(fake.fake.refunds) == 1
    assert outputs[0].value["stripe_refund_id"] == next(iter(fake.fake.refunds))
    assert _attempts(database, dispute) == 2, "the replayed call on a PENDING round is counted"


def test_a_round_pending_past_the_idempotency_window_goes_to_review_not_to_stripe(
    database: str, fake: FakeStripeServer
) -> None:
    """Opened 25 hours ago and never settled (a long outage, say): Stripe may have forgotten
    the key, so another call could refund twice. The round fails to review instead."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    seed_round(database, dispute, status="PENDING", age="25 hours")
    [outputs] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in outputs] == ["payout.failed"]
    assert outputs[0].value["error_code"] == "STALE_PENDING"
    assert "idempotency key" in outputs[0].value["reason"]
    assert fake.fake.requests == 0
    assert _attempts(database, dispute) == 1


def test_a_round_reserved_long_ago_whose_first_call_is_recent_is_replayed_to_stripe(
    database: str, fake: FakeStripeServer
) -> None:
    """Reserved by the settler 25 hours ago, while the payout was down; its first call began an
    hour ago and the payout crashed before recording the answer. Stripe has known the key for an
    hour only: the replay calls again with it and gets the same refund, not a review item."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    seed_round(database, dispute, status="PENDING", age="25 hours", first_call="1 hour")
    _refunds(
        fake.url,
        {
            "payment_reference": f"pi_{dispute}",
            "amount_minor": 68900,
            "currency": "inr",
            "idempotency_key": idempotency_key(dispute, 1),
            "metadata": {"dispute_id": dispute, "round": "1"},
        },
    )
    [outputs] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in outputs] == ["payout.completed"]
    assert outputs[0].value["stripe_refund_id"] == next(iter(fake.fake.refunds))
    assert len(fake.fake.refunds) == 1, "the same refund, replayed under its key"
    assert _attempts(database, dispute) == 2


def test_the_first_call_of_a_reserved_round_records_when_it_began(
    database: str, fake: FakeStripeServer
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    [reserved] = _reserve(database, (dispute, f"pi_{dispute}"))
    assert reserved.status == "PENDING"
    assert _first_call_age_s(database, dispute) is None, "reserved: no call begun"
    [outputs] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in outputs] == ["payout.completed"]
    age = _first_call_age_s(database, dispute)
    assert age is not None
    assert 0 <= age < 600


def _first_call_age_s(database: str, dispute: str) -> float | None:
    with psycopg.connect(database, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXTRACT(EPOCH FROM now() - first_call_at)::float FROM payout_ledger"
            " WHERE dispute_id = %s AND round = 1",
            (dispute,),
        ).fetchone()
    assert row is not None
    return None if row[0] is None else float(row[0])


def test_declined_refund_fails_once_and_is_not_retried(
    database: str, fake: FakeStripeServer
) -> None:
    fake.fake.decline_references.add("pi_declined")
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    first, again = _run(
        database,
        fake.url,
        _request(dispute, reference="pi_declined"),
        _request(dispute, reference="pi_declined"),
    )
    assert [o.topic for o in first] == ["payout.failed"]
    assert first[0].value["error_code"] == "card_declined"
    assert again[0].topic == "payout.failed"
    assert fake.fake.requests == 1
    assert _ledger_statuses(database, dispute) == ["FAILED"]


@pytest.mark.parametrize("status", ["failed", "canceled", "requires_action"])
def test_a_refund_stripe_answers_as_not_refunded_fails_once_and_goes_to_review(
    database: str, fake: FakeStripeServer, status: str
) -> None:
    """Stripe creates the refund but answers it with a status that moved no money: the round
    is a payout failure for a person to follow up, not a completed payout the customer is told
    about. The ledger keeps the refund's id, so that Stripe's later reports of it are known as
    the round's own."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    reference = f"pi_{dispute}"
    fake.fake.refund_status[reference] = status
    first, again = _run(
        database,
        fake.url,
        _request(dispute, reference=reference),
        _request(dispute, reference=reference),
    )
    assert [o.topic for o in first] == [o.topic for o in again] == ["payout.failed"]
    assert first[0].value["error_code"] == f"refund_{status}"
    (refund_id,) = fake.fake.refunds
    assert first[0].value["reason"] == f"Stripe answered refund {refund_id} with status {status}"
    assert fake.fake.requests == 1
    assert _ledger_statuses(database, dispute) == ["FAILED"]
    with psycopg.connect(database) as conn:
        kept = conn.execute(
            "SELECT stripe_refund_id FROM payout_ledger WHERE dispute_id = %s", (dispute,)
        ).fetchone()
    assert kept == (refund_id,)


def test_a_pending_refund_is_a_completed_payout(database: str, fake: FakeStripeServer) -> None:
    """Stripe has taken a ``pending`` refund on; it settles without anything more from us."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    fake.fake.refund_status[f"pi_{dispute}"] = "pending"
    [outputs] = _run(database, fake.url, _request(dispute, reference=f"pi_{dispute}"))
    assert [o.topic for o in outputs] == ["payout.completed"]
    assert outputs[0].value["stripe_refund_id"] == next(iter(fake.fake.refunds))


def test_a_reused_key_with_other_parameters_is_rejected(fake: FakeStripeServer) -> None:
    key = f"k-{uuid.uuid4()}"
    request: dict[str, Any] = {
        "payment_reference": "pi_a",
        "currency": "inr",
        "idempotency_key": key,
        "metadata": {},
    }
    first, reused = _refunds(
        fake.url, {**request, "amount_minor": 100}, {**request, "amount_minor": 999}
    )
    assert isinstance(first, str)
    assert isinstance(reused, PaymentRejected)
    assert reused.code == IDEMPOTENCY_REFUSED
    assert len(fake.fake.refunds) == 1


def test_a_different_amount_for_a_recorded_round_is_a_ledger_conflict(
    database: str, fake: FakeStripeServer
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    first, conflict = _run(database, fake.url, _request(dispute, 68900), _request(dispute, 99999))
    assert first[0].topic == "payout.completed"
    assert conflict[0].topic == "payout.failed"
    assert conflict[0].value["error_code"] == "LEDGER_CONFLICT"
    refund = first[0].value["stripe_refund_id"]
    assert conflict[0].value["reason"] == (
        f"round already recorded for 68900 INR (SUCCEEDED, refund {refund});"
        " 99999 INR requested, not paid"
    )
    assert fake.fake.requests == 1


@pytest.mark.parametrize("recorded", ["paid", "left PENDING by a crash", "reserved"])
def test_a_request_naming_another_payment_for_a_recorded_round_is_a_ledger_conflict(
    database: str, fake: FakeStripeServer, recorded: str
) -> None:
    """Round 1 is recorded against the dispute's payment (paid; left PENDING after its call,
    by a crash; or reserved by the settler, no call yet). A request for it naming another
    payment is refused like one for another amount: never sent to Stripe under the round's
    key (which would refund that other payment), and no call is counted for it."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    if recorded == "paid":
        [first] = _run(database, fake.url, _request(dispute))
        assert first[0].topic == "payout.completed"
        state = f"SUCCEEDED, refund {first[0].value['stripe_refund_id']}"
    elif recorded == "reserved":
        _reserve(database, (dispute, f"pi_{dispute}"))
        state = "PENDING"
    else:
        seed_round(database, dispute, status="PENDING")
        state = "PENDING"
    attempts, requests = _attempts(database, dispute), fake.fake.requests

    [outputs] = _run(database, fake.url, _request(dispute, reference="pi_someone_else"))

    assert [o.topic for o in outputs] == ["payout.failed"]
    assert outputs[0].value["error_code"] == "LEDGER_CONFLICT"
    assert outputs[0].value["reason"] == (
        f"round already recorded for 68900 INR of payment pi_{dispute} ({state});"
        " 68900 INR of payment pi_someone_else requested, not paid"
    )
    assert (fake.fake.requests, _attempts(database, dispute)) == (requests, attempts)
    assert read_round(database, dispute) == (state.split(",")[0], attempts, None)


def test_a_second_dispute_of_one_order_goes_to_review_not_to_stripe(
    database: str, fake: FakeStripeServer
) -> None:
    first, second = f"d-{uuid.uuid4().hex[:10]}", f"d-{uuid.uuid4().hex[:10]}"
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    paid, refused, refused_again, later_round = _run(
        database,
        fake.url,
        _request(first, 4900, reference=payment),
        _request(second, 64000, reference=payment),
        _request(second, 64000, reference=payment),
        _request(first, 64000, reference=payment, round_=2),
    )
    assert paid[0].topic == "payout.completed"
    refund = paid[0].value["stripe_refund_id"]
    for outputs in (refused, refused_again):
        assert [o.topic for o in outputs] == ["payout.failed"]
        assert outputs[0].value["error_code"] == "ORDER_ALREADY_REFUNDED"
        assert outputs[0].value["reason"] == (
            f"the order's payment already has a refund of dispute {first} (round 1, SUCCEEDED,"
            f" refund {refund}); a second dispute of one order is not paid automatically: a"
            " payment operator decides"
        )
    # A later round of the first dispute (a reviewer's approval) is still that dispute's.
    assert later_round[0].topic == "payout.completed"
    assert fake.fake.requests == 2
    assert _attempts(database, second) == 0


@pytest.mark.parametrize(
    "error_code",
    ["card_declined", "refund_failed", "refund_canceled", "ORDER_ALREADY_REFUNDED", None],
)
def test_a_failed_payout_of_an_order_does_not_hold_back_its_next_dispute(
    database: str, fake: FakeStripeServer, error_code: str | None
) -> None:
    """A round that FAILED without moving money leaves the order's next dispute to be paid."""
    declined, next_one = f"d-{uuid.uuid4().hex[:10]}", f"d-{uuid.uuid4().hex[:10]}"
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    seed_round(
        database,
        declined,
        status="FAILED",
        amount=4900,
        payment=payment,
        error_code=error_code,
    )
    [outputs] = _run(database, fake.url, _request(next_one, reference=payment))
    assert [o.topic for o in outputs] == ["payout.completed"]


@pytest.mark.parametrize(
    ("error_code", "paid_elsewhere", "named"),
    [
        *((code, False, f"FAILED {code} and may have been paid") for code in MAY_HAVE_REFUNDED),
        ("card_declined", True, "FAILED and paid elsewhere"),
    ],
)
def test_a_failed_round_that_may_have_refunded_holds_back_the_next_dispute(
    database: str,
    fake: FakeStripeServer,
    error_code: str,
    paid_elsewhere: bool,
    named: str,
) -> None:
    """A round FAILED while its refund may still go through (it waits for the customer, a call
    that reached Stripe was never settled, Stripe had the key already), or one an operator paid
    by hand, is money back for the order: the next dispute is held as after a paid round."""
    first, next_one = f"d-{uuid.uuid4().hex[:10]}", f"d-{uuid.uuid4().hex[:10]}"
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    seed_round(
        database,
        first,
        status="FAILED",
        amount=4900,
        payment=payment,
        error_code=error_code,
        paid_elsewhere=paid_elsewhere,
    )
    [outputs] = _run(database, fake.url, _request(next_one, reference=payment))
    assert [o.topic for o in outputs] == ["payout.failed"]
    assert outputs[0].value["error_code"] == "ORDER_ALREADY_REFUNDED"
    assert f"dispute {first} (round 1, {named});" in outputs[0].value["reason"]
    assert fake.fake.requests == 0
    assert _attempts(database, next_one) == 0


@pytest.mark.parametrize(("amount", "currency"), [(625, "KWD"), (34450, "ISK")])
def test_an_amount_stripe_takes_in_no_step_of_its_currency_fails_without_a_call(
    database: str, fake: FakeStripeServer, amount: int, currency: str
) -> None:
    """KWD 0.625 or ISK 344.50 (priced before pricing rounded to the currency's step): Stripe
    would refuse the refund. The round fails at once, with no call counted; its item may be paid
    again, and a REPAY pays the part Stripe takes (tests/unit/test_pricing.py)."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    for _ in range(2):  # and the same on a redelivery
        [outputs] = _run(database, fake.url, _request(dispute, amount, currency=currency))
        assert [o.topic for o in outputs] == ["payout.failed"]
        assert outputs[0].value["error_code"] == AMOUNT_NOT_PAYABLE
        assert f"only in multiples of {payable_step(currency)} minor" in outputs[0].value["reason"]
    assert fake.fake.requests == 0
    assert _attempts(database, dispute) == 0
    assert _ledger_statuses(database, dispute) == ["FAILED"]
    assert AMOUNT_NOT_PAYABLE not in UNMENDABLE_FAILURES


def test_the_ledger_and_the_code_agree_on_which_failures_may_have_refunded(
    database: str,
) -> None:
    codes = [*MAY_HAVE_REFUNDED, *UNMENDABLE_FAILURES, "card_declined", "refund_failed", None]
    with psycopg.connect(database, autocommit=True) as conn:
        held = {
            code
            for code in codes
            if conn.execute("SELECT payout_failure_may_have_refunded(%s)", (code,)).fetchone()
            == (True,)
        }
    assert held == MAY_HAVE_REFUNDED


def test_a_dispute_opened_while_another_of_its_order_is_being_opened_waits_for_it(
    database: str, fake: FakeStripeServer
) -> None:
    """Rounds of one payment are opened one at a time: a second dispute's round waits for the
    first's to commit, then sees it, and is held."""
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    first, second = f"d-{uuid.uuid4().hex[:10]}", f"d-{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database) as opening:  # the first dispute's round, not committed yet
        opening.execute(
            "SELECT * FROM payout_open_round(%s, 1, 4900, 'INR', %s, %s)",
            (first, payment, idempotency_key(first, 1)),
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(_run, database, fake.url, _request(second, reference=payment))
            _wait_until(
                lambda: (
                    sessions_waiting_on(database, opening.info.backend_pid) > 0 or waiting.done()
                ),
                timeout_s=20,
            )
            assert not waiting.done(), "the second dispute did not wait for the first"
            opening.commit()
            [outputs] = waiting.result(timeout=30)
    assert [o.topic for o in outputs] == ["payout.failed"]
    assert outputs[0].value["error_code"] == "ORDER_ALREADY_REFUNDED"
    assert fake.fake.requests == 0


def _reserve(database: str, *rounds: tuple[str, str]) -> list[Reservation]:
    """The settler's reservations of round 1 (68900 INR) of each (dispute, payment), made in
    one statement."""

    async def go() -> list[Reservation]:
        pool = pg_pool(database)
        await pool.open()
        try:
            return await reserve_rounds(
                pool,
                [RoundToReserve(d, 1, 68900, "INR", payment) for d, payment in rounds],
            )
        finally:
            await pool.close()

    return asyncio.run(go())


def test_a_round_the_settler_reserved_is_paid_with_its_one_call_counted(
    database: str, fake: FakeStripeServer
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    [reserved] = _reserve(database, (dispute, f"pi_{dispute}"))
    assert reserved == Reservation("PENDING", 68900, "INR", None)
    assert reserved.promises(68900, "INR")
    assert not reserved.promises(64000, "INR")
    assert _attempts(database, dispute) == 0, "reserved: no call begun"

    paid, again = _run(database, fake.url, _request(dispute), _request(dispute))

    assert [o.topic for o in paid] == ["payout.completed"]
    assert again[0].value["stripe_refund_id"] == paid[0].value["stripe_refund_id"]
    assert fake.fake.requests == 1
    assert _attempts(database, dispute) == 1
    [found] = _reserve(database, (dispute, f"pi_{dispute}"))
    assert found.status == "SUCCEEDED", "a reservation replayed later finds the paid round"


def test_a_request_for_another_amount_than_the_reservation_is_a_conflict_with_no_call(
    database: str, fake: FakeStripeServer
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    _reserve(database, (dispute, f"pi_{dispute}"))

    [outputs] = _run(database, fake.url, _request(dispute, 99999))

    assert [o.topic for o in outputs] == ["payout.failed"]
    assert outputs[0].value["error_code"] == "LEDGER_CONFLICT"
    assert fake.fake.requests == 0
    assert _attempts(database, dispute) == 0, "no call was begun, none is counted"


def test_of_two_disputes_of_one_order_reserved_together_only_the_reserved_one_is_paid(
    database: str, fake: FakeStripeServer
) -> None:
    """Whichever order the payout gets their requests in, the dispute the ledger reserved is
    paid and the other is held, with no call."""
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    disputes = [f"d-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    reservations = _reserve(database, *((d, payment) for d in disputes))
    statuses = sorted(r.status for r in reservations)
    assert statuses == ["FAILED", "PENDING"]
    held = next(d for d, r in zip(disputes, reservations, strict=True) if r.status == "FAILED")
    reserved = next(d for d in disputes if d != held)
    assert reservations[disputes.index(held)].error_code == "ORDER_ALREADY_REFUNDED"

    held_out, paid = _run(
        database,
        fake.url,
        _request(held, reference=payment),
        _request(reserved, reference=payment),
    )

    assert [o.topic for o in held_out] == ["payout.failed"]
    assert held_out[0].value["error_code"] == "ORDER_ALREADY_REFUNDED"
    assert [o.topic for o in paid] == ["payout.completed"]
    assert fake.fake.requests == 1
    assert (_attempts(database, held), _attempts(database, reserved)) == (0, 1)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"condition not met in {timeout_s}s"
        time.sleep(0.02)


def test_a_key_of_the_other_mode_stops_the_stage_and_leaves_the_round_to_pay(
    database: str, fake: FakeStripeServer
) -> None:
    """A test key for live payments (or a live key for test ones) is the settings, as a 401 is:
    Stripe answers each refund "No such payment_intent ... a similar object exists in live
    mode", and every round would otherwise fail into the review queue."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"
    fake.fake.other_mode_references.add(f"pi_{dispute}")
    with pytest.raises(PaymentsRefusedUs, match="STRIPE_API_KEY is of the other mode"):
        _run(database, fake.url, _request(dispute))
    assert _ledger_statuses(database, dispute) == ["PENDING"]
    fake.fake.other_mode_references.clear()  # the key fixed
    [completed] = _run(database, fake.url, _request(dispute))
    assert [o.topic for o in completed] == ["payout.completed"], "paid once the key is right"


@pytest.mark.parametrize("key", ["sk_live_revoked", "not a key"])
def test_a_key_stripe_refuses_stops_the_stage_and_leaves_the_round_to_pay(
    database: str, stripe_api_base: str, key: str
) -> None:
    """A wrong or revoked STRIPE_API_KEY is the settings, not the refund: the payout stage stops
    (and crash-loops until fixed) instead of failing every round into the review queue; the
    round stays PENDING, to be paid under its key once the key is right."""
    dispute = f"d-{uuid.uuid4().hex[:10]}"

    async def go() -> None:
        pool = pg_pool(database)
        await pool.open()
        payments = StripePayments(key, stripe_api_base)
        try:
            handler = PayoutHandler(PayoutLedger(pool), payments, RetryPolicy(attempts=1))
            await handler.handle(_request(dispute), Context(None))
        finally:
            await payments.aclose()
            await pool.close()

    with pytest.raises(PaymentsRefusedUs, match="HTTP 401 AuthenticationError"):
        asyncio.run(go())
    assert _ledger_statuses(database, dispute) == ["PENDING"]
    # Stripe took no call under the round's key: its 23 hours have not begun, however long the
    # key stays wrong (here: the round's row a day old when the key is fixed).
    with psycopg.connect(database) as conn:
        attempts, first_call_at = conn.execute(
            "UPDATE payout_ledger SET created_at = now() - interval '30 hours'"
            " WHERE dispute_id = %s RETURNING attempts, first_call_at",
            (dispute,),
        ).fetchone() or (None, None)
    assert (attempts, first_call_at) == (0, None)
    [completed] = _run(database, stripe_api_base, _request(dispute))
    assert [o.topic for o in completed] == ["payout.completed"], "paid once the key is right"
