"""The recorder's review queue against real PostgreSQL: a decision closes the item decided, a
new round closes the dispute items of earlier rounds, a declined dispute its grievance items."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.errors import InvalidInput
from refund_bench.runtime import Context, Message
from refund_bench.runtime.metrics import PrometheusMetrics
from services.recorder.handler import Recorder
from tests.grievances import grievance_message
from tests.kafka_helpers import wait_for
from tests.pg_helpers import is_waiting
from tests.records import with_fields

pytestmark = pytest.mark.stack

AT = datetime(2026, 12, 3, 20, 0, tzinfo=UTC)


def _message(topic: str, dispute_id: str, value: Any) -> Message:
    return Message(topic, 0, 0, dispute_id, value, {}, 0)


def _line(grievance_id: str, status: str) -> ev.PricedLineEvent:
    paid = 150000 if status == "PAY" else 0
    return ev.PricedLineEvent(
        grievance_id=grievance_id,
        category="MISSING_ITEM",
        outcome="UPHELD",
        status=status,
        amount_minor=paid,
        proposed_minor=150000,
        rule="MISSING_ITEM: 1 x 150000 (Thali)",
        item_name="Thali",
        quantity=1,
    )


def _priced(
    dispute_id: str,
    round_: int,
    decision: str = "HELD_FOR_REVIEW",
    lines: list[ev.PricedLineEvent] | None = None,
) -> Message:
    priced = ev.RefundPriced(
        dispute_id=dispute_id,
        order_id="order-1840",
        round=round_,
        pricing_version="v1",
        currency="INR",
        order_total_minor=500000,
        lines=[_line("g1", "PAY")] if lines is None else lines,
        total_minor=150000,
        payable_minor=0,
        cap_minor=100000,
        decision=decision,
        reason="total 150000 exceeds the auto-approve cap 100000",
        snapshot_sha256="0" * 64,
        priced_at=AT,
    )
    return _message(t.REFUND_PRICED.name, dispute_id, priced.to_avro())


def _held_by_the_cap(dispute_id: str) -> Message:
    return _priced(dispute_id, 3)


def _escalated(dispute_id: str, grievance_id: str) -> Message:
    verdict = ev.VerdictDecided(
        dispute_id=dispute_id,
        order_id="order-1840",
        grievance_id=grievance_id,
        grievance_total=2,
        category="PACKAGING",
        item_name="Raita",
        item_quantity=1,
        snapshot_sha256="0" * 64,
        outcome="ESCALATE",
        votes_upheld=1,
        votes_rejected=0,
        votes_escalate=2,
        split="2-1",
        unanimous=False,
        rulings=[],
        decided_at=AT,
    )
    return _message(t.VERDICT_DECIDED.name, dispute_id, verdict.to_avro())


def _payout_failed(
    dispute_id: str, code: str = "card_declined", reason: str = "the card was declined"
) -> Message:
    failed = ev.PayoutFailed(
        dispute_id=dispute_id,
        round=2,
        amount_minor=68900,
        currency="INR",
        error_code=code,
        reason=reason,
        idempotency_key=f"refund-{dispute_id}-2",
        failed_at=AT,
    )
    return _message(t.PAYOUT_FAILED.name, dispute_id, failed.to_avro())


def _payout_completed(dispute_id: str) -> Message:
    completed = ev.PayoutCompleted(
        dispute_id=dispute_id,
        round=2,
        amount_minor=68900,
        currency="INR",
        stripe_refund_id="re_later_failed",
        idempotency_key=f"refund-{dispute_id}-2",
        completed_at=AT,
    )
    return _message(t.PAYOUT_COMPLETED.name, dispute_id, completed.to_avro())


def _decided(dispute_id: str, kind: str, item_key: str | None) -> Message:
    decided = ev.ReviewDecided(
        dispute_id=dispute_id,
        review_id=uuid.uuid4().hex,
        kind=kind,
        decision="APPROVE",
        reviewer="alice",
        decided_at=AT,
        item_key=item_key,
    )
    return _message(t.REVIEW_DECIDED.name, dispute_id, decided.to_avro())


def _queue(database: str, *batches: list[Message]) -> dict[str, str]:
    """Each review item of the messages' dispute and its status, after recording the batches
    one after another."""
    with psycopg.connect(database) as conn:
        recorder = Recorder(conn)
        for batch in batches:
            for message in batch:
                recorder.handle(message, Context(None))
            recorder.flush()
        rows = conn.execute(
            "SELECT item_key, status FROM review_items WHERE dispute_id = %s",
            (batches[0][0].key,),
        ).fetchall()
    return dict(rows)


@pytest.mark.parametrize(
    "item_key",
    [
        "dispute:round3",
        None,  # a decision published before review.decided named its item
    ],
)
def test_approving_the_dispute_leaves_its_failed_payout_open(
    database: str, item_key: str | None
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    queue = _queue(
        database,
        [_held_by_the_cap(dispute), _payout_failed(dispute)],
        [_decided(dispute, "DISPUTE", item_key)],
    )
    assert queue == {"dispute:round3": "DECIDED", "payout:round2": "OPEN"}


def test_a_decision_read_before_its_item_closes_the_item_when_it_comes(database: str) -> None:
    """The projection written again from the topics, which are read apart: a failed payout's
    decision (the desk holds it, and takes no second one) comes in a batch before the failure
    that opens its item. The item opens closed, not OPEN for good; the dispute's other item,
    decided by nobody, opens OPEN."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    decision = with_fields(_decided(dispute, "PAYOUT", "payout:round2"), decision="PAID_ELSEWHERE")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, decision,"
            " reviewer, note, decided_at, published) VALUES (%s, %s, %s, 'PAYOUT',"
            " 'PAID_ELSEWHERE', 'alice', 'refunded by hand', %s, true)",
            (decision.value["review_id"], dispute, "payout:round2", AT),
        )
    queue = _queue(
        database,
        [decision],
        [_payout_failed(dispute), _escalated(dispute, "g2")],
    )
    assert queue == {"payout:round2": "DECIDED", "grievance:g2": "OPEN"}


@pytest.mark.parametrize("batches", [[[1], [2]], [[1, 2]]], ids=["two batches", "one batch"])
def test_a_new_round_supersedes_the_dispute_items_of_earlier_rounds(
    database: str, batches: list[list[int]]
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    queue = _queue(database, *[[_priced(dispute, r) for r in batch] for batch in batches])
    assert queue == {"dispute:round1": "DECIDED", "dispute:round2": "OPEN"}
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT reason FROM review_items WHERE dispute_id = %s AND item_key = %s",
            (dispute, "dispute:round1"),
        ).fetchone()
    assert row is not None
    assert row[0].endswith("(superseded by round 2)")
    # Redelivered, the earlier round neither reopens its item nor closes the later one.
    assert _queue(database, [_priced(dispute, 1)]) == queue


def test_a_repayment_while_held_leaves_the_held_total_an_open_item_and_its_grievances_open(
    database: str,
) -> None:
    """A REPAY while round 2 is held by the cap: pricing's round 3 only pays the failed round
    again (no lines), and its round 4 holds the total again. Round 3 closes round 2's item as
    any new round does, round 4 opens its own, and the held grievance's item stays open."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    queue = _queue(
        database,
        [_escalated(dispute, "g2"), _priced(dispute, 2)],
        [_priced(dispute, 3, "REVIEW_APPROVED", lines=[]), _priced(dispute, 4)],
    )
    assert queue == {
        "grievance:g2": "OPEN",
        "dispute:round2": "DECIDED",
        "dispute:round4": "OPEN",
    }


def test_a_declined_dispute_closes_its_grievance_items_but_not_its_failed_payout(
    database: str,
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    queue = _queue(
        database,
        [_escalated(dispute, "g2"), _payout_failed(dispute)],
        [_priced(dispute, 3, decision="DECLINED")],
    )
    assert queue == {"grievance:g2": "DECIDED", "payout:round2": "OPEN"}


def _escalated_line(grievance_id: str) -> ev.PricedLineEvent:
    """A line the bench escalated: held, and no item of pricing's own (the verdict opens it)."""
    return _line(grievance_id, "HELD").model_copy(update={"outcome": "ESCALATE"})


@pytest.mark.parametrize("repaid", [False, True], ids=["", "then a repayment"])
@pytest.mark.parametrize(
    ("decision", "g2_status", "suffix"),
    [
        ("DECLINED", "HELD", "(the dispute was declined)"),
        ("AUTO_APPROVED", "PAY", "(settled by round 2)"),
    ],
    ids=["declined", "settled by a later round"],
)
def test_a_verdict_read_after_the_round_that_decided_its_grievance_opens_no_item(
    database: str, decision: str, g2_status: str, suffix: str, repaid: bool
) -> None:
    """The recorder reads verdicts and rounds from different topics: a lagging verdict
    partition (or the projection written again from the topics) brings g2's ESCALATE verdict
    after round 2, which declined the dispute or settled g2 on a reviewer's word (and after a
    round 3 that only pays a failed round again, holding no line). Its item is closed as
    round 2 would have closed it, not left in the queue for a second decision."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    g2_line = _escalated_line("g2") if g2_status == "HELD" else _line("g2", g2_status)
    rounds = [
        _priced(dispute, 1, "AUTO_APPROVED", [_line("g1", "PAY"), _escalated_line("g2")]),
        _priced(dispute, 2, decision, [_line("g1", "PAY"), g2_line]),
    ]
    if repaid:
        rounds.append(_priced(dispute, 3, "REVIEW_APPROVED", []))
    assert _queue(database, rounds, [_escalated(dispute, "g2")]) == {"grievance:g2": "DECIDED"}
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT reason, decided_at FROM review_items WHERE dispute_id = %s", (dispute,)
        ).fetchone()
    assert row is not None
    assert row[0].startswith("the bench could not decide (2-1")
    assert row[0].endswith(suffix)
    assert row[1] == AT
    # Redelivered, the verdict does not reopen it.
    assert _queue(database, [_escalated(dispute, "g2")]) == {"grievance:g2": "DECIDED"}


def test_a_verdict_and_the_round_that_declines_written_at_once_by_two_replicas_close_its_item(
    database: str,
) -> None:
    """Two recorder replicas, one reading verdicts, the other rounds: the round that declines
    the dispute is being written (its transaction held open here by a row it waits for) when
    the other replica writes g2's ESCALATE verdict. Each must see the other's rows: the
    verdict's write waits for the round's to commit, then closes the item."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    lines = [_escalated_line("g1"), _escalated_line("g2")]
    _queue(
        database,
        [_escalated(dispute, "g1"), _priced(dispute, 1, "AUTO_APPROVED", lines)],
    )  # g1's item is open, and round 1 is recorded
    declined = _priced(dispute, 2, "DECLINED", lines)
    with (
        psycopg.connect(database) as holder,
        psycopg.connect(database) as rounds_conn,
        psycopg.connect(database) as verdicts_conn,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        # The round's write will wait for g1's item, which the decline closes.
        holder.execute(
            "SELECT 1 FROM review_items WHERE dispute_id = %s AND item_key = 'grievance:g1'"
            " FOR UPDATE",
            (dispute,),
        )
        rounds_pid = rounds_conn.info.backend_pid
        verdicts_pid = verdicts_conn.info.backend_pid

        def record(conn: psycopg.Connection[Any], message: Message) -> None:
            recorder = Recorder(conn)
            recorder.handle(message, Context(None))
            recorder.flush()

        writing_round = pool.submit(record, rounds_conn, declined)
        wait_for(lambda: is_waiting(database, rounds_pid), 30, "the round's write to wait")
        writing_verdict = pool.submit(record, verdicts_conn, _escalated(dispute, "g2"))
        wait_for(
            lambda: writing_verdict.done() or is_waiting(database, verdicts_pid),
            30,
            "the verdict's write to end or to wait",
        )
        holder.rollback()
        writing_round.result(30)
        writing_verdict.result(30)
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT item_key, status FROM review_items WHERE dispute_id = %s", (dispute,)
        ).fetchall()
    assert dict(rows) == {"grievance:g1": "DECIDED", "grievance:g2": "DECIDED"}


@pytest.mark.parametrize(
    "rounds",
    [
        [1],  # round 1 holds g2 for a reviewer
        [1, 2],  # round 2 (a reviewer decided g1, say) still holds it
    ],
)
def test_a_verdict_read_after_rounds_that_still_hold_its_grievance_opens_its_item(
    database: str, rounds: list[int]
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    lines = [_line("g1", "PAY"), _escalated_line("g2")]
    priced = [_priced(dispute, r, "AUTO_APPROVED", lines) for r in rounds]
    assert _queue(database, priced, [_escalated(dispute, "g2")]) == {"grievance:g2": "OPEN"}


@pytest.mark.parametrize("batches", [[[1], [2]], [[1, 2]]], ids=["two batches", "one batch"])
def test_a_line_pricing_held_waits_for_a_reviewer_until_a_round_pays_it(
    database: str, batches: list[list[int]]
) -> None:
    """The bench upheld g2, but its units are beyond what the pickup weight explains next to
    g1's: round 1 holds it and opens its grievance item; round 2 (a reviewer rejected g1, say)
    pays it, and settles the item."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    rounds = {
        1: _priced(dispute, 1, "AUTO_APPROVED", [_line("g1", "PAY"), _line("g2", "HELD")]),
        2: _priced(dispute, 2, "AUTO_APPROVED", [_line("g1", "REJECTED"), _line("g2", "PAY")]),
    }
    first = _queue(database, [rounds[1]])
    assert first == {"grievance:g2": "OPEN"}
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT kind, grievance_id, reason FROM review_items WHERE dispute_id = %s",
            (dispute,),
        ).fetchone()
    assert row == ("GRIEVANCE", "g2", "upheld, held by pricing: MISSING_ITEM: 1 x 150000 (Thali)")

    other = f"d-{uuid.uuid4().hex[:12]}"
    replayed = {
        r: _message(m.topic, other, {**m.value, "dispute_id": other}) for r, m in rounds.items()
    }
    assert _queue(database, *[[replayed[r] for r in batch] for batch in batches]) == {
        "grievance:g2": "DECIDED"
    }
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT reason FROM review_items WHERE dispute_id = %s", (other,)
        ).fetchone()
    assert row is not None
    assert row[0].endswith("(settled by round 2)")
    # Redelivered, round 1 does not reopen it.
    assert _queue(database, [replayed[1]]) == {"grievance:g2": "DECIDED"}


@pytest.mark.parametrize(
    ("kind", "decision", "grievance_id", "item_key"),
    [
        ("PAYOUT", "REPAY", None, None),
        ("PAYOUT", "PAID_ELSEWHERE", None, "dispute:round3"),
        ("GRIEVANCE", "APPROVE", "g2", "payout:round2"),
        ("GRIEVANCE", "UPHOLD", "g9", "grievance:g2"),
        ("DISPUTE", "APPROVE", None, "payout:round2"),
        ("BOGUS", "APPROVE", None, "payout:round2"),
    ],
)
def test_a_decision_pricing_refuses_closes_no_item_and_is_dead_lettered(
    database: str, kind: str, decision: str, grievance_id: str | None, item_key: str | None
) -> None:
    """Pricing dead-letters a decision its kind of review cannot make, or one on an item of
    another kind; had the recorder closed the item, a failed refund or a held grievance would
    leave the queue with nothing paid or decided. Now the items stay open for a decision that
    counts."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    decided = ev.ReviewDecided(
        dispute_id=dispute,
        review_id=uuid.uuid4().hex,
        kind=kind,
        grievance_id=grievance_id,
        decision=decision,
        reviewer="alice",
        decided_at=AT,
        item_key=item_key,
    )
    opened = [_escalated(dispute, "g2"), _held_by_the_cap(dispute), _payout_failed(dispute)]
    with pytest.raises(InvalidInput, match=f"review {decided.review_id}: "):
        _queue(database, opened, [_message(t.REVIEW_DECIDED.name, dispute, decided.to_avro())])
    assert _queue(database, opened) == {
        "grievance:g2": "OPEN",
        "dispute:round3": "OPEN",
        "payout:round2": "OPEN",
    }


@pytest.mark.parametrize(
    "batches",
    [["completed", "failed"], ["failed", "completed"], ["completed+failed"]],
    ids=["in order", "failed first (a replay)", "one batch"],
)
@pytest.mark.parametrize(
    ("code", "reason", "outcome"),
    [
        ("refund_failed", "Stripe reported refund re_1 failed", "FAILED"),
        # The payout refusing a request with another amount: not the round's outcome.
        ("LEDGER_CONFLICT", "round already recorded for 68900 INR (SUCCEEDED)", "COMPLETED"),
    ],
    ids=["reported failed later", "a conflicting request"],
)
def test_a_paid_round_is_failed_by_stripes_report_and_not_by_a_conflicting_request(
    database: str, batches: list[str], code: str, reason: str, outcome: str
) -> None:
    """payout.failed of a round recorded COMPLETED: when Stripe reported the refund failed after
    taking it on, the round is FAILED; when the payout refused a request with another amount
    (LEDGER_CONFLICT), it stays paid. Either way a person is asked (the conflict on an item of
    its own), whatever order the two topics are read in."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    messages = {
        "completed": _payout_completed(dispute),
        "failed": _payout_failed(dispute, code, reason),
    }
    queue = _queue(
        database,
        *[[messages[name] for name in batch.split("+")] for batch in batches],
    )
    item = "payout:round2:conflict" if code == "LEDGER_CONFLICT" else "payout:round2"
    assert queue == {item: "OPEN"}
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT round, outcome, error_code, reason, stripe_refund_id FROM payout_events"
            " WHERE dispute_id = %s",
            (dispute,),
        ).fetchall()
    assert len(rows) == 1, rows
    if outcome == "FAILED":
        # The refund Stripe reported failed is named, whichever event was recorded first.
        assert rows[0] == (2, "FAILED", code, reason, "re_later_failed")
    else:
        assert rows[0] == (2, "COMPLETED", None, None, "re_later_failed")
    # A conflict is a request refused, not an outcome of the round: not in its history.
    history = [(outcome, error) for _, _, outcome, error in _payout_history(database, dispute)]
    expected: list[tuple[str, str | None]] = [("COMPLETED", None)]
    if code != "LEDGER_CONFLICT":
        expected.append(("FAILED", code))
    assert sorted(history, key=str) == sorted(expected, key=str)


def _round_outcome(dispute_id: str, event: str, revision: int) -> Message:
    """An outcome of round 2 of ``dispute_id`` at ``revision``: ``completed`` (Stripe's refund
    went back) or ``failed`` (Stripe reported it failed or waiting for the customer)."""
    if event == "completed":
        completed = ev.PayoutCompleted(
            dispute_id=dispute_id,
            round=2,
            amount_minor=68900,
            currency="INR",
            stripe_refund_id="re_waited",
            idempotency_key=f"refund-{dispute_id}-2",
            completed_at=AT,
            revision=revision,
        )
        return _message(t.PAYOUT_COMPLETED.name, dispute_id, completed.to_avro())
    failed = ev.PayoutFailed(
        dispute_id=dispute_id,
        round=2,
        amount_minor=68900,
        currency="INR",
        error_code="refund_requires_action" if revision < 2 else "refund_failed",
        reason=f"Stripe reported refund re_waited {event} (revision {revision})",
        idempotency_key=f"refund-{dispute_id}-2",
        failed_at=AT,
        revision=revision,
    )
    return _message(t.PAYOUT_FAILED.name, dispute_id, failed.to_avro())


def _payout_event(database: str, dispute_id: str) -> tuple[Any, ...]:
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT outcome, error_code, stripe_refund_id, revision FROM payout_events"
            " WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def _payout_history(database: str, dispute_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT round, revision, outcome, error_code FROM payout_event_history"
            " WHERE dispute_id = %s ORDER BY round, revision",
            (dispute_id,),
        ).fetchall()


@pytest.mark.parametrize(
    "order",
    [
        "completed0 failed1 completed2",
        "completed2 failed1 completed0",
        "failed1 completed2 completed0",
        "completed0+failed1+completed2",
        "completed2+failed1 completed0",
    ],
    ids=["in order", "backwards", "the failure first", "one batch", "a replay after"],
)
def test_a_round_refunded_after_waiting_for_the_customer_is_completed_again(
    database: str, order: str
) -> None:
    """The payout stage's refund was pending (completed, revision 0), Stripe then reported it
    waiting for the customer (failed, 1), then refunded (completed, 2): the round is COMPLETED,
    with no error, whatever order the two topics are read in and however often."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    batches = [
        [_round_outcome(dispute, e[:-1], int(e[-1])) for e in batch.split("+")]
        for batch in order.split()
    ]
    queue = _queue(database, *batches)
    assert queue == {"payout:round2": "OPEN"}, "the operator closes the item on the desk"
    assert _payout_event(database, dispute) == ("COMPLETED", None, "re_waited", 2)
    # The round's whole story is kept, in revision order, once each.
    assert _payout_history(database, dispute) == [
        (2, 0, "COMPLETED", None),
        (2, 1, "FAILED", "refund_requires_action"),
        (2, 2, "COMPLETED", None),
    ]


@pytest.mark.parametrize(
    "order",
    ["failed0 completed1 failed2", "failed2 completed1 failed0", "completed1 failed2+failed0"],
    ids=["in order", "backwards", "mixed"],
)
def test_a_refund_that_fails_after_it_was_refunded_fails_its_round_again(
    database: str, order: str
) -> None:
    """The payout stage's own answer was waiting for the customer (failed, 0); Stripe refunded
    it (completed, 1) and then reported it failed after all (failed, 2): FAILED again, whatever
    the order; redelivered, the refund in between does not undo it."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    batches = [
        [_round_outcome(dispute, e[:-1], int(e[-1])) for e in batch.split("+")]
        for batch in order.split()
    ]
    _queue(database, *batches)
    assert _payout_event(database, dispute) == ("FAILED", "refund_failed", "re_waited", 2)
    _queue(database, [_round_outcome(dispute, "completed", 1)])
    assert _payout_event(database, dispute) == ("FAILED", "refund_failed", "re_waited", 2)
    assert _payout_history(database, dispute) == [
        (2, 0, "FAILED", "refund_requires_action"),
        (2, 1, "COMPLETED", None),
        (2, 2, "FAILED", "refund_failed"),
    ]


def _decided_payout(dispute_id: str, item_key: str) -> Message:
    decided = ev.ReviewDecided(
        dispute_id=dispute_id,
        review_id=uuid.uuid4().hex,
        kind="PAYOUT",
        decision="PAID_ELSEWHERE",
        reviewer="carol",
        decided_at=AT,
        item_key=item_key,
    )
    return _message(t.REVIEW_DECIDED.name, dispute_id, decided.to_avro())


def _failed_again(dispute_id: str, item_key: str | None = "payout:round2:again") -> Message:
    failed = ev.PayoutFailed.model_validate(
        {**_round_outcome(dispute_id, "failed", 3).value, "item_key": item_key}
    )
    return _message(t.PAYOUT_FAILED.name, dispute_id, failed.to_avro())


def test_a_refund_that_fails_again_after_its_item_was_closed_opens_an_item_of_its_own(
    database: str,
) -> None:
    """The round's own item was closed when Stripe refunded the refund that had waited for the
    customer; when it fails after all, its payout.failed names ``payout:round2:again``, which
    opens for a payment operator and is decided on its own. Redelivered, neither failure
    reopens an item or opens another."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    waited = _round_outcome(dispute, "failed", 1)
    refunded = _round_outcome(dispute, "completed", 2)
    closed = _queue(database, [waited], [refunded, _decided_payout(dispute, "payout:round2")])
    assert closed == {"payout:round2": "DECIDED"}
    reopened = _queue(database, [_failed_again(dispute)])
    assert reopened == {"payout:round2": "DECIDED", "payout:round2:again": "OPEN"}
    assert _queue(database, [waited, _failed_again(dispute), refunded]) == reopened
    assert _payout_event(database, dispute) == ("FAILED", "refund_failed", "re_waited", 3)
    decided = _queue(database, [_decided_payout(dispute, "payout:round2:again")])
    assert decided == {"payout:round2": "DECIDED", "payout:round2:again": "DECIDED"}


@pytest.mark.parametrize(
    "item_key",
    ["payout:round3:again", "dispute:round2", "payout:round2:later", "payout:round2:conflict"],
)
def test_a_failure_naming_an_item_not_of_its_round_is_dead_lettered(
    database: str, item_key: str
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    with pytest.raises(InvalidInput, match="names review item"):
        _queue(database, [_failed_again(dispute, item_key)])


def _payout_decision(
    dispute_id: str, decision: str, item_key: str, kind: str = "PAYOUT"
) -> Message:
    decided = ev.ReviewDecided(
        dispute_id=dispute_id,
        review_id=uuid.uuid4().hex,
        kind=kind,
        decision=decision,
        reviewer="carol",
        decided_at=AT,
        item_key=item_key,
    )
    return _message(t.REVIEW_DECIDED.name, dispute_id, decided.to_avro())


@pytest.mark.parametrize(
    ("decided", "still_open"),
    [
        ("payout:round2:conflict", "payout:round2"),
        ("payout:round2", "payout:round2:conflict"),
    ],
)
def test_a_conflicting_request_and_a_failure_of_its_round_are_decided_apart(
    database: str, decided: str, still_open: str
) -> None:
    """The payout refused a request for round 2 with another amount (LEDGER_CONFLICT), and the
    round's refund itself failed: two items, and deciding either leaves the other open, whatever
    order the events came in; redelivered, neither reopens."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    conflict = _payout_failed(
        dispute, "LEDGER_CONFLICT", "round already recorded for 68900 INR (FAILED); 70000 INR"
    )
    failure = _payout_failed(dispute, "refund_failed", "Stripe reported refund re_1 failed")
    assert _queue(database, [conflict, failure]) == {
        "payout:round2": "OPEN",
        "payout:round2:conflict": "OPEN",
    }
    after = _queue(database, [_payout_decision(dispute, "PAID_ELSEWHERE", decided)])
    assert after == {decided: "DECIDED", still_open: "OPEN"}
    assert _queue(database, [failure, conflict]) == after
    with psycopg.connect(database) as conn:
        reasons: dict[str, str] = dict(
            conn.execute(
                "SELECT item_key, reason FROM review_items WHERE dispute_id = %s", (dispute,)
            ).fetchall()
        )
    assert reasons["payout:round2:conflict"].startswith("payout request refused (LEDGER_CONFLICT)")
    assert _payout_event(database, dispute)[:2] == ("FAILED", "refund_failed")


def test_a_repay_of_a_conflicting_request_closes_nothing_and_is_dead_lettered(
    database: str,
) -> None:
    """Nothing was paid for a conflicting request, and paying its round again could pay it
    twice: pricing refuses a REPAY of its item, and the recorder leaves the item open."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    conflict = _payout_failed(dispute, "LEDGER_CONFLICT", "round already recorded (SUCCEEDED)")
    repay = _payout_decision(dispute, "REPAY", "payout:round2:conflict")
    with pytest.raises(InvalidInput, match="cannot decide REPAY"):
        _queue(database, [conflict], [repay])
    assert _queue(database, [conflict]) == {"payout:round2:conflict": "OPEN"}


def test_a_complaint_handled_outside_the_pipeline_closes_its_extraction_item_only(
    database: str,
) -> None:
    """The extractor held a complaint it could not extract (a held round with no lines): a
    reviewer's RESOLVED_ELSEWHERE closes its EXTRACTION item and no other open item of the
    dispute, and neither its redelivery nor the held round's reopens it."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    held = _priced(dispute, 1, lines=[])
    assert _queue(database, [held, _payout_failed(dispute)]) == {
        "extraction": "OPEN",
        "payout:round2": "OPEN",
    }
    decided = _payout_decision(dispute, "RESOLVED_ELSEWHERE", "extraction", kind="EXTRACTION")
    after = _queue(database, [decided])
    assert after == {"extraction": "DECIDED", "payout:round2": "OPEN"}
    assert _queue(database, [decided], [held]) == after


def test_a_batch_that_ends_as_a_deadlocks_victim_is_written_again(database: str) -> None:
    """Two replicas update one dispute's review items from different topics, so PostgreSQL may
    pick one batch's transaction as a deadlock's victim. It rolled back whole: the same write
    is made again after the backoff, instead of the stage stopping. Here the database itself
    raises the deadlock's error (SQLSTATE 40P01) at the batch's first attempt."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    name = f"victim_{uuid.uuid4().hex[:8]}"
    setup = [
        f"CREATE SEQUENCE {name}_tries",
        f"""CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('{name}_tries') = 1 THEN
                    RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01';
                END IF;
                RETURN NEW;
            END $$""",
        f"CREATE TRIGGER {name} BEFORE INSERT ON review_items FOR EACH ROW"
        f" WHEN (NEW.dispute_id = '{dispute}') EXECUTE FUNCTION {name}()",
    ]
    slept: list[float] = []
    with psycopg.connect(database, autocommit=True) as conn:
        for statement in setup:
            conn.execute(statement)
        try:
            recorder = Recorder(conn, sleep=slept.append)
            for message in (_escalated(dispute, "g2"), _payout_failed(dispute)):
                recorder.handle(message, Context(None))
            recorder.flush()
            tries = conn.execute(f"SELECT last_value FROM {name}_tries").fetchone()
        finally:
            conn.execute(f"DROP TRIGGER {name} ON review_items")
            conn.execute(f"DROP FUNCTION {name}()")
            conn.execute(f"DROP SEQUENCE {name}_tries")
    assert len(slept) == 1, "retried once, after the backoff"
    assert tries == (3,), "two items refused at the first try, then both written"
    assert _queue(database, [_escalated(dispute, "g2")]) == {
        "grievance:g2": "OPEN",
        "payout:round2": "OPEN",
    }


def _extracted(dispute_id: str, outcome: str, raw: str) -> Message:
    record = ev.ComplaintExtracted(
        dispute_id=dispute_id,
        order_id="order-1840",
        snapshot_sha256="0" * 64,
        complaint_sha256="1" * 64,
        outcome=outcome,
        grievance_total=0,
        reason="EXTRACTION: the model endpoint refused the complaint (HTTP 400)",
        answers=[
            ev.ExtractorAnswer(
                attempt=1,
                raw_answer=raw,
                problems=["the answer is not JSON: Expecting value"],
                model="m",
                prompt_version="extractor/v3",
                served_model="m-2026-11-01",
                system_fingerprint=None,
            )
        ],
        extracted_at=AT,
    )
    return _message(t.COMPLAINT_EXTRACTED.name, dispute_id, record.to_avro())


def test_what_the_extractor_made_of_a_complaint_is_kept_once(database: str) -> None:
    """The first record of a dispute stays: a redelivery, or another record, changes nothing."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database) as conn:
        recorder = Recorder(conn)
        for raw in ('{"grievances": [', "another answer"):
            recorder.handle(_extracted(dispute, "REFUSED", raw), Context(None))
            recorder.flush()
        rows = conn.execute(
            "SELECT outcome, grievance_total, reason, answers, extracted_at FROM extractions"
            " WHERE dispute_id = %s",
            (dispute,),
        ).fetchall()
    assert rows == [
        (
            "REFUSED",
            0,
            "EXTRACTION: the model endpoint refused the complaint (HTTP 400)",
            [
                {
                    "attempt": 1,
                    "raw_answer": '{"grievances": [',
                    "problems": ["the answer is not JSON: Expecting value"],
                    "model": "m",
                    "prompt_version": "extractor/v3",
                    "served_model": "m-2026-11-01",
                    "system_fingerprint": None,
                }
            ],
            AT,
        )
    ]


def _ruling(dispute_id: str, ruling: str, cast_at: datetime, served: str | None) -> Message:
    cast = ev.RulingCast(
        dispute_id=dispute_id,
        order_id="order-1840",
        grievance_id="g1",
        grievance_total=1,
        category="LATE_DELIVERY",
        judge_seat=0,
        judge_count=3,
        ruling=ruling,
        model_ruling=ruling,
        confidence=0.9,
        evidence_cited=["delay_minutes"],
        reasoning="The order came 50 minutes after its promised time.",
        model="judge-model",
        prompt_version="judge/v4",
        snapshot_sha256="0" * 64,
        raw_response='{"ruling": "' + ruling + '"}',
        cast_at=cast_at,
        seed=7,
        temperature=None if served is None else 0.7,
        served_model=served,
    )
    return _message(t.RULING_CAST.name, dispute_id, cast.to_avro())


def _record(database: str, *batches: list[Message]) -> CollectorRegistry:
    """The recorder's metrics after recording the batches one after another."""
    registry = CollectorRegistry()
    with psycopg.connect(database) as conn:
        recorder = Recorder(conn, metrics=PrometheusMetrics("recorder", registry))
        for batch in batches:
            for message in batch:
                recorder.handle(message, Context(None))
            recorder.flush()
    return registry


def _conflicts(registry: CollectorRegistry, table: str) -> float | None:
    return registry.get_sample_value(
        "refund_bench_facts_conflicting_total", {"stage": "recorder", "topic": "", "kind": table}
    )


@pytest.mark.parametrize("together", [False, True], ids=["two batches", "one batch"])
def test_a_round_priced_again_otherwise_keeps_its_first_record_and_is_reported(
    database: str, together: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A round priced again with other amounts (a replay under other rules): the audit record
    keeps what it recorded first, says which facts the later record states otherwise, and
    counts it, so that the record and the topic are not left to disagree unnoticed."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    first = _priced(dispute, 1)
    again = _priced(dispute, 1, "AUTO_APPROVED", [_line("g1", "PAY"), _line("g2", "PAY")])
    batches = [[first, again]] if together else [[first], [again]]
    with caplog.at_level(logging.WARNING, logger="services.recorder.handler"):
        registry = _record(database, *batches)
    with psycopg.connect(database) as conn:
        stored = conn.execute(
            "SELECT decision, jsonb_array_length(lines) FROM priced_refunds"
            " WHERE dispute_id = %s AND round = 1",
            (dispute,),
        ).fetchall()
    assert stored == [("HELD_FOR_REVIEW", 1)]
    assert _conflicts(registry, "priced_refunds") == 1.0
    (warning,) = [r.getMessage() for r in caplog.records if dispute in r.getMessage()]
    assert warning == (
        f"priced_refunds keeps the row it holds for ('{dispute}', 1); a later event's row"
        " differs in decision and was not recorded"
    )


def test_a_fact_delivered_again_or_cast_again_with_other_times_and_provenance_is_no_conflict(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A redelivery changes nothing and reports nothing; neither does a ruling cast again from
    the cache by another process after a crash, which names another time and no provenance."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    later = datetime(2026, 12, 3, 20, 5, tzinfo=UTC)
    first = [_priced(dispute, 1), _ruling(dispute, "UPHELD", AT, "judge-model-2026-11-01")]
    again = [_priced(dispute, 1), _ruling(dispute, "UPHELD", later, None)]
    with caplog.at_level(logging.WARNING, logger="services.recorder.handler"):
        registry = _record(database, first, again, [*first, *again])
    assert _conflicts(registry, "priced_refunds") is None
    assert _conflicts(registry, "rulings") is None
    assert not [r for r in caplog.records if dispute in r.getMessage()]
    with psycopg.connect(database) as conn:
        stored = conn.execute(
            "SELECT cast_at, served_model FROM rulings WHERE dispute_id = %s", (dispute,)
        ).fetchall()
    assert stored == [(AT, "judge-model-2026-11-01")]


def _reworded(message: Message) -> Message:
    """``message``'s round with its reason and its lines' rules worded otherwise."""
    lines = [{**line, "rule": f"{line['rule']} (reworded)"} for line in message.value["lines"]]
    return with_fields(message, reason="reworded by a later release", lines=lines)


@pytest.mark.parametrize(
    ("recorded", "again"),
    [
        (lambda d: _priced(d, 1), lambda d: _reworded(_priced(d, 1))),
        (
            lambda d: _ruling(d, "UPHELD", AT, None),
            lambda d: with_fields(_ruling(d, "UPHELD", AT, None), reasoning="worded otherwise"),
        ),
        # Stripe's final word on a refund that waited for the customer: the same revision.
        (_payout_failed, lambda d: _payout_failed(d, "refund_failed", "the refund failed")),
    ],
    ids=["a round's reason and rules", "a ruling's reasoning", "a failure's final code"],
)
def test_what_a_release_may_reword_or_a_later_report_may_refine_is_no_conflict(
    database: str,
    recorded: Callable[[str], Message],
    again: Callable[[str], Message],
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    with caplog.at_level(logging.WARNING, logger="services.recorder.handler"):
        registry = _record(database, [recorded(dispute)], [again(dispute)])
    assert not [r.getMessage() for r in caplog.records if dispute in r.getMessage()]
    for table in ("priced_refunds", "rulings", "payout_event_history", "review_items"):
        assert _conflicts(registry, table) is None, table


@pytest.mark.parametrize(
    ("table", "recorded", "changed", "stored"),
    [
        (
            "grievances",
            grievance_message,
            {"category": "QUALITY"},
            "SELECT category FROM grievances",
        ),
        (
            "extractions",
            lambda d: _extracted(d, "REFUSED", "no"),
            {"grievance_total": 2},
            "SELECT grievance_total FROM extractions",
        ),
        (
            "rulings",
            lambda d: _ruling(d, "UPHELD", AT, None),
            {"ruling": "REJECTED"},
            "SELECT ruling FROM rulings",
        ),
        (
            "verdicts",
            lambda d: _escalated(d, "g2"),
            {"outcome": "REJECTED"},
            "SELECT outcome FROM verdicts",
        ),
        (
            "priced_refunds",
            lambda d: _priced(d, 1),
            {"payable_minor": 150000},
            "SELECT payable_minor FROM priced_refunds",
        ),
        (
            "payout_event_history",
            _payout_completed,
            {"stripe_refund_id": "re_other"},
            "SELECT stripe_refund_id FROM payout_event_history",
        ),
    ],
)
def test_a_fact_stated_otherwise_under_a_stored_key_is_reported_and_the_first_stands(
    database: str,
    table: str,
    recorded: Callable[[str], Message],
    changed: dict[str, Any],
    stored: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every table whose rows state facts: a later record under the same key that states one
    otherwise is counted and logged with the column, and the stored row keeps its value."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    first = recorded(dispute)
    with caplog.at_level(logging.WARNING, logger="services.recorder.handler"):
        registry = _record(database, [first], [with_fields(first, **changed)])
    ((column, value),) = changed.items()
    with psycopg.connect(database) as conn:
        (kept,) = conn.execute(f"{stored} WHERE dispute_id = %s", (dispute,)).fetchall()
    assert kept != (value,)
    assert _conflicts(registry, table) == 1.0
    (warning,) = [r.getMessage() for r in caplog.records if dispute in r.getMessage()]
    assert warning.startswith(f"{table} keeps the row it holds for ('{dispute}'"), warning
    assert warning.endswith(f"differs in {column} and was not recorded"), warning
