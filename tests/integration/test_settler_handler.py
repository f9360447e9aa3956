"""The settler's handler against real PostgreSQL, Redis and the LLM stand-in: what the reply
says is waiting, when a payout is requested, and which model failures stop the stage."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import SecretStr

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.db.snapshots import DisputeToFreeze, freeze_dispute
from refund_bench.domain import LineItem
from refund_bench.errors import InvalidInput, TransientError
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache, uncounted
from refund_bench.llm.client import LlmRejected
from refund_bench.llm.roles import SETTLER_PROMPT_VERSION, load_prompt
from refund_bench.llm_setup import LlmStageSettings, redis_client
from refund_bench.resources import pg_pool
from refund_bench.runtime import Context, Emit, Message
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER
from services.extractor.evidence import FrozenSnapshot, freeze
from services.llm_standin.app import SYSTEM_FINGERPRINT
from services.settler.handler import SettlerHandler
from tests.fakes.chat_completion import FixedAnswerServer, completion
from tests.ledger_rows import read_round, seed_round
from tests.priced_lines import LineSpec, priced_lines
from tests.records import with_fields
from tests.standin import Standin

pytestmark = pytest.mark.stack

AT = datetime(2026, 12, 3, 21, 0, tzinfo=UTC)
LINES: tuple[LineSpec, ...] = (
    ("g1", "LATE_DELIVERY", "UPHELD", "PAY", 4900, None),
    ("g2", "MISSING_ITEM", "UPHELD", "PAY", 64000, "Hyderabadi Biryani"),
    ("g3", "PACKAGING", "ESCALATE", "HELD", 0, "Raita"),
    ("g4", "PARTNER_CONDUCT", "UPHELD", "ZERO", 0, None),
)
"""The article's priced lines."""


def _priced(
    dispute_id: str,
    decision: str,
    payable: int,
    cap: int = 100000,
    snapshot: FrozenSnapshot | None = None,
    payment_reference: str | None = None,
    round_: int = 1,
    already_paid: int = 0,
) -> Message:
    """The article's priced round for ``dispute_id``, against ``snapshot`` (default: the
    article's order); with no ``payment_reference``, as pricing wrote it before the event
    carried one."""
    snapshot = snapshot or freeze(ARTICLE_ORDER)
    priced = ev.RefundPriced(
        dispute_id=dispute_id,
        order_id=ARTICLE_ORDER.order_id,
        round=round_,
        pricing_version="v1",
        currency="INR",
        order_total_minor=ARTICLE_ORDER.charged_total_minor,
        lines=priced_lines(LINES, proposed_when_zero=6000),
        total_minor=68900,
        already_paid_minor=already_paid,
        payable_minor=payable,
        cap_minor=cap,
        decision=decision,
        held_grievances=["g3"],
        snapshot_sha256=snapshot.sha256,
        payment_reference=payment_reference,
        priced_at=AT,
    )
    return Message(t.REFUND_PRICED.name, 0, 0, dispute_id, priced.to_avro(), {}, 0)


def _settle(
    database: str,
    redis_url: str,
    standin: Standin,
    message: Message,
    snapshot: FrozenSnapshot,
    complaint: str = ARTICLE_COMPLAINT,
    cache_prefix: str | None = None,
    endpoint: FixedAnswerServer | None = None,
    on_call: OnCall = uncounted,
) -> Sequence[Emit]:
    """What the settler emits for ``message``, its dispute and snapshot stored first."""
    [emits] = _settle_together(
        database,
        redis_url,
        standin,
        [message],
        snapshot,
        complaint,
        cache_prefix,
        endpoint,
        on_call=on_call,
    )
    return emits


def _settle_together(
    database: str,
    redis_url: str,
    standin: Standin,
    messages: Sequence[Message],
    snapshot: FrozenSnapshot,
    complaint: str = ARTICLE_COMPLAINT,
    cache_prefix: str | None = None,
    endpoint: FixedAnswerServer | None = None,
    between: Callable[[], None] | None = None,
    on_call: OnCall = uncounted,
) -> list[Sequence[Emit]]:
    """What one settler emits for each of ``messages``, handled concurrently (as the records
    of one batch are), their disputes and the snapshot stored first; its answer cache under
    ``cache_prefix`` (default: one of its own), its model the stand-in's or ``endpoint``'s.
    With ``between``, the messages are handled one after another instead, and ``between`` is
    called after each but the last. The handler's calls are counted by ``on_call``."""

    async def go() -> list[Sequence[Emit]]:
        pool = pg_pool(database)
        await pool.open()
        redis = redis_client(LlmStageSettings(redis_url=SecretStr(redis_url)))
        llm = (
            standin.client("standin-settler", temperature=0.2)
            if endpoint is None
            else endpoint.client(temperature=0.2)
        )
        prefix = cache_prefix or f"test-settler-{uuid.uuid4().hex}:"
        cache = RedisResponseCache(redis, prefix, 600)
        try:
            for message in messages:
                await freeze_dispute(
                    pool,
                    DisputeToFreeze(
                        dispute_id=message.key or "",
                        order_id=ARTICLE_ORDER.order_id,
                        customer_id=ARTICLE_ORDER.customer_id,
                        complaint_text=complaint,
                        received_at=AT,
                        snapshot_json=snapshot.json,
                        snapshot_sha256=snapshot.sha256,
                        channel="app",
                    ),
                )
            handler = SettlerHandler(
                pool, llm, cache, load_prompt(SETTLER_PROMPT_VERSION), on_call=on_call
            )
            if between is None:
                handled = (handler.handle(m, Context(None)) for m in messages)
                return list(await asyncio.gather(*handled))
            emitted: list[Sequence[Emit]] = []
            for number, message in enumerate(messages):
                if number:
                    between()
                emitted.append(await handler.handle(message, Context(None)))
            return emitted
        finally:
            await llm.aclose()
            await redis.aclose()
            await pool.close()

    return asyncio.run(go())


def _reply(emits: Sequence[Emit]) -> str:
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    text: str = reply["text"]
    return text


def test_held_by_the_cap_the_reply_says_the_upheld_lines_wait_for_review_too(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "HELD_FOR_REVIEW", payable=0, cap=10000)
    emits = _settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER))
    reply = _reply(emits)
    review = reply[reply.index("will review") :]
    for waiting in ("late delivery", "missing", "packaging"):  # the stand-in names categories
        assert waiting in review.lower(), reply
    assert "INR 0" in reply
    assert [e.topic for e in emits] == [t.REPLY_PUBLISHED.name]


def test_a_declined_dispute_tells_of_no_review_to_come(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    emits = _settle(
        database, redis_url, standin, _priced(dispute, "DECLINED", 0), freeze(ARTICLE_ORDER)
    )
    reply = _reply(emits)
    assert "review" not in reply.lower(), reply
    assert [e.topic for e in emits] == [t.REPLY_PUBLISHED.name]


def test_no_reply_is_stored_for_a_payment_that_cannot_be_made(
    database: str, redis_url: str, standin: Standin
) -> None:
    """An order with no payment reference: the round goes to the DLQ before a reply that says
    "refunded" is stored."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    snapshot = freeze(ARTICLE_ORDER.model_copy(update={"payment_reference": ""}))
    message = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)
    with pytest.raises(InvalidInput, match="no payment reference"):
        _settle(database, redis_url, standin, message, snapshot)
    with psycopg.connect(database) as conn:
        stored = conn.execute("SELECT count(*) FROM replies WHERE dispute_id = %s", (dispute,))
        assert stored.fetchone() == (0,)


def test_a_line_of_a_category_this_version_does_not_know_is_invalid_and_stores_nothing(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900)
    lines = [{**line, "category": "DELIVERY_VIBES"} for line in message.value["lines"][:1]]
    unknown = with_fields(message, lines=lines)
    with pytest.raises(InvalidInput, match="'DELIVERY_VIBES' is not a valid Category"):
        _settle(database, redis_url, standin, unknown, freeze(ARTICLE_ORDER))
    with psycopg.connect(database) as conn:
        stored = conn.execute(
            "SELECT (SELECT count(*) FROM replies WHERE dispute_id = %(d)s),"
            " (SELECT count(*) FROM payout_ledger WHERE dispute_id = %(d)s)",
            {"d": dispute},
        )
        assert stored.fetchone() == (0, 0), "no reply stored, no round reserved"


def test_a_decision_this_version_does_not_know_is_invalid_and_stores_nothing(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A round decided in a way this version cannot read (a newer or faulty pricing) is
    dead-lettered: it is not read as "nothing to pay", whose reply would be stored for good."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    unknown = with_fields(_priced(dispute, "AUTO_APPROVED", 68900), decision="PARTLY_APPROVED")
    with pytest.raises(InvalidInput, match="decision: 'PARTLY_APPROVED' is not a valid Decision"):
        _settle(database, redis_url, standin, unknown, freeze(ARTICLE_ORDER))
    with psycopg.connect(database) as conn:
        stored = conn.execute("SELECT count(*) FROM replies WHERE dispute_id = %s", (dispute,))
        assert stored.fetchone() == (0,)


def test_a_model_reply_too_long_to_check_gets_the_template(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The complaint makes the model quote a 4,400-digit "refund" (more digits than Python
    turns into an int): the reply is refused whole as too long and the template is sent,
    instead of the check raising on every redelivery of the cached answer."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    complaint = f"{ARTICLE_COMPLAINT} Please refund {'7' * 4400} as my reference says."
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    emits = _settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER), complaint)
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert reply["source"] == "TEMPLATE"
    (failure,) = reply["guard_failures"]
    assert failure.endswith("characters long, more than the 2000 a reply may be"), failure
    assert "INR 689" in reply["text"]
    kept = _model_answer(database, dispute)
    assert kept is not None, "the answer the template replaced is kept for audit"
    assert "7" * 4400 in kept
    assert _served(database, dispute) == ("standin-settler", "standin-settler", SYSTEM_FINGERPRINT)


def test_a_reply_names_what_served_the_models_answer_when_this_process_drew_it(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The reply records the model and fingerprint the endpoint's response named for the
    answer it sends. Written again from the cached answer (another process, after the first
    crashed before storing its reply), it names the model configured and nothing served: no
    record of who drew an answer is kept beside it."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    prefix = f"test-settler-{uuid.uuid4().hex}:"
    calls_before = standin.stats()["by_dispute"].get(dispute, 0)

    drawn = _settle(
        database, redis_url, standin, message, freeze(ARTICLE_ORDER), cache_prefix=prefix
    )
    assert _reply_event(drawn)["source"] == "MODEL"
    assert _served(database, dispute) == ("standin-settler", "standin-settler", SYSTEM_FINGERPRINT)

    with psycopg.connect(database) as conn:
        conn.execute("DELETE FROM replies WHERE dispute_id = %s", (dispute,))
    again = _settle(
        database, redis_url, standin, message, freeze(ARTICLE_ORDER), cache_prefix=prefix
    )

    assert _reply_event(again)["text"] == _reply_event(drawn)["text"]
    assert standin.stats()["by_dispute"].get(dispute, 0) == calls_before + 1, "one draw in all"
    assert _served(database, dispute) == ("standin-settler", None, None)


def test_a_reply_written_again_by_the_process_that_drew_its_answer_names_what_served_it(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The same process writes a round's reply again from the cached answer (its first reply
    was not stored: say the handler was retried after the cache write's reply was lost): the
    process drew that answer, so the reply names what served it, with no second draw."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    calls_before = standin.stats()["by_dispute"].get(dispute, 0)

    def forget_the_reply() -> None:
        with psycopg.connect(database) as conn:
            conn.execute("DELETE FROM replies WHERE dispute_id = %s", (dispute,))

    first, again = _settle_together(
        database,
        redis_url,
        standin,
        [message, message],
        freeze(ARTICLE_ORDER),
        between=forget_the_reply,
    )

    assert _reply_event(again)["text"] == _reply_event(first)["text"]
    assert standin.stats()["by_dispute"].get(dispute, 0) == calls_before + 1, "one draw in all"
    assert _served(database, dispute) == ("standin-settler", "standin-settler", SYSTEM_FINGERPRINT)


def test_an_unreadable_draw_replaced_by_the_template_names_what_served_it(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The model's answer is cut short at the token limit: the template is sent, and the reply
    keeps the text that came and names the model and fingerprint the endpoint's response named
    for the draw."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    body = completion(
        '{"reply": "We are refunding INR 689',
        "length",
        model="settler-2026-11-01",
        system_fingerprint="fp_cut",
    )
    outcomes: list[CallOutcome] = []
    with FixedAnswerServer(body) as server:
        emits = _settle(
            database,
            redis_url,
            standin,
            message,
            freeze(ARTICLE_ORDER),
            endpoint=server,
            on_call=outcomes.append,
        )

    reply = _reply_event(emits)
    assert reply["source"] == "TEMPLATE"
    assert reply["guard_failures"][0].startswith("unreadable model answer: the answer was cut")
    assert outcomes == ["made", "unreadable"], "the answer paid for and not read is counted"
    assert _served(database, dispute) == ("any-model", "settler-2026-11-01", "fp_cut")
    assert _round_one_reply(database, dispute, "model_answer") == (
        '{"reply": "We are refunding INR 689',
    )


def test_a_whole_answer_that_is_not_the_reply_asked_for_is_counted_unreadable_once(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A whole answer in the wrong shape (a gateway's own JSON, say) is stored, replaced by
    the template and counted unreadable; its redelivery sends the reply stored, and counts
    nothing again."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    outcomes: list[CallOutcome] = []
    cache = f"test-settler-{uuid.uuid4().hex}:"
    with FixedAnswerServer(completion('{"message": "We are refunding you."}', "stop")) as server:
        for _ in range(2):
            emits = _settle(
                database,
                redis_url,
                standin,
                message,
                freeze(ARTICLE_ORDER),
                cache_prefix=cache,
                endpoint=server,
                on_call=outcomes.append,
            )
            assert _reply_event(emits)["source"] == "TEMPLATE"
    assert len(server.requests) == 1
    assert outcomes == ["made", "unreadable"]


def _served(database: str, dispute: str) -> tuple[Any, ...]:
    """Round 1's reply: the model configured, and the model and fingerprint served."""
    return _round_one_reply(database, dispute, "model", "served_model", "system_fingerprint")


def _round_one_reply(database: str, dispute: str, *columns: str) -> tuple[Any, ...]:
    """``columns`` of round 1's stored reply."""
    query = sql.SQL("SELECT {} FROM replies WHERE dispute_id = %s AND round = 1").format(
        sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with psycopg.connect(database) as conn:
        row = conn.execute(query, (dispute,)).fetchone()
    assert row is not None, "no reply stored"
    return tuple(row)


def test_a_model_reply_sent_keeps_no_second_copy(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    emits = _settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER))
    assert _reply_event(emits)["source"] == "MODEL"
    assert _model_answer(database, dispute) is None


def _model_answer(database: str, dispute: str) -> str | None:
    """The model answer kept with round 1's reply (``None``: none kept)."""
    (answer,) = _round_one_reply(database, dispute, "model_answer")
    return None if answer is None else str(answer)


def _round_one_refunded(
    database: str, redis_url: str, standin: Standin
) -> tuple[str, FrozenSnapshot]:
    """A new dispute, on a payment of its own, whose round 1 was settled: its reply says
    INR 689 refunded."""
    snapshot = freeze(
        ARTICLE_ORDER.model_copy(update={"payment_reference": f"pi_{uuid.uuid4().hex[:12]}"})
    )
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    first = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)
    assert (
        _reply_event(_settle(database, redis_url, standin, first, snapshot))["amount_minor"]
        == 68900
    )
    return dispute, snapshot


def test_a_later_round_names_no_earlier_refund_the_earlier_reply_did_not_state(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Round 1 was approved, but another dispute of the order had been paid, so the ledger held
    it and its reply promised nothing. Round 2, approved by a reviewer and held the same way,
    still counts round 1's amount as approved before; its reply must not speak of an earlier
    refund the customer was never told of (the guard held it to, and the template said that
    "what our earlier reply said" stands)."""
    dispute, snapshot = _after_an_earlier_round(database, "SUCCEEDED", refund_id="re_earlier")
    first = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)
    assert _reply_event(_settle(database, redis_url, standin, first, snapshot))["amount_minor"] == 0
    second = _priced(
        dispute, "REVIEW_APPROVED", 6000, snapshot=snapshot, round_=2, already_paid=68900
    )

    reply = _reply_event(_settle(database, redis_url, standin, second, snapshot))

    assert (reply["source"], reply["guard_failures"]) == ("MODEL", []), reply
    assert "earlier" not in reply["text"].lower(), reply["text"]


def test_a_later_round_settled_before_the_reply_of_the_round_before_keeps_it_in_view(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The settler handles rounds concurrently, and a reviewer may decide round 1's held item
    before the settler has stored round 1's reply: round 2, with nothing more to pay, must not
    tell the customer that no refund is offered while round 1's reply tells of INR 689."""
    snapshot = freeze(
        ARTICLE_ORDER.model_copy(update={"payment_reference": f"pi_{uuid.uuid4().hex[:12]}"})
    )
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    second = _priced(dispute, "NOTHING_TO_PAY", 0, snapshot=snapshot, round_=2, already_paid=68900)
    reply = _reply_event(_settle(database, redis_url, standin, second, snapshot))
    assert "not able to offer a refund" not in reply["text"], reply["text"]
    assert "earlier" in reply["text"], reply["text"]


def test_a_later_rounds_template_reply_does_not_deny_the_earlier_refund(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Round 2 of a dispute round 1 paid, with nothing more to pay and the model's answer
    unreadable: the template does not tell the customer that no refund is offered."""
    dispute, snapshot = _round_one_refunded(database, redis_url, standin)
    standin.faults(next_faults=["malformed"])
    message = _priced(dispute, "NOTHING_TO_PAY", 0, snapshot=snapshot, round_=2, already_paid=68900)
    emits = _settle(database, redis_url, standin, message, snapshot)
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert reply["source"] == "TEMPLATE"
    assert "not able to offer a refund" not in reply["text"]
    assert "What our earlier reply said about this order still stands." in reply["text"]


def test_a_later_round_that_pays_more_says_it_comes_on_top_of_the_earlier_refund(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Round 2 of a dispute round 1 paid: the model is told of the earlier refund (not its
    amount), and its reply, which the guard holds to mentioning it, says so, instead of
    reading as if INR 60 were all the customer gets back."""
    dispute, snapshot = _round_one_refunded(database, redis_url, standin)
    message = _priced(
        dispute, "REVIEW_APPROVED", 6000, snapshot=snapshot, round_=2, already_paid=68900
    )
    emits = _settle(database, redis_url, standin, message, snapshot)
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert (reply["source"], reply["amount_minor"], reply["guard_failures"]) == ("MODEL", 6000, [])
    assert (
        "INR 60 to your original payment method, in addition to our earlier refund"
        in (reply["text"])
    )
    assert "INR 689" not in reply["text"]


def test_a_round_that_only_pays_a_failed_round_again_promises_that_amount_and_requests_it(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A payment operator's REPAY while the dispute is held or declined is a round of the
    repayment alone (no lines): the reply promises exactly its amount and names nothing as
    covered or waiting, and the payout is requested."""
    snapshot = freeze(
        ARTICLE_ORDER.model_copy(update={"payment_reference": f"pi_{uuid.uuid4().hex[:12]}"})
    )
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    priced = _priced(dispute, "REVIEW_APPROVED", 68900, snapshot=snapshot, round_=4)
    message = with_fields(priced, lines=[], held_grievances=[])
    emits = _settle(database, redis_url, standin, message, snapshot)
    reply = _reply_event(emits)
    assert (reply["amount_minor"], reply["guard_failures"]) == (68900, [])
    assert "INR 689" in reply["text"]
    assert "review" not in reply["text"].lower()
    [request] = [e.value for e in emits if e.topic == t.PAYOUT_REQUESTED.name]
    assert (request["round"], request["amount_minor"]) == (4, 68900)


def test_a_wrong_api_key_stops_the_settler(database: str, redis_url: str, standin: Standin) -> None:
    standin.faults(next_faults=["401"])
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    with pytest.raises(LlmRejected) as caught:
        _settle(
            database,
            redis_url,
            standin,
            _priced(dispute, "AUTO_APPROVED", 68900),
            freeze(ARTICLE_ORDER),
        )
    assert caught.value.status == 401


def _after_an_earlier_round(
    database: str, status: str, *, refund_id: str | None = None, error_code: str | None = None
) -> tuple[str, FrozenSnapshot]:
    """A new dispute and its snapshot: the article's order with a payment of its own, which an
    earlier dispute's round 1 (``status``, with its refund id or error code) already used."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    order = ARTICLE_ORDER.model_copy(update={"payment_reference": f"pi_{dispute}"})
    seed_round(
        database,
        f"d-{uuid.uuid4().hex[:12]}",
        status=status,
        payment=order.payment_reference,
        refund_id=refund_id,
        error_code=error_code,
    )
    return dispute, freeze(order)


def test_a_second_dispute_of_a_refunded_order_is_promised_nothing(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Another dispute of the same payment was paid: the payout will hold this round for a
    person, so the reply says what waits for review and names no refund; the request is still
    made, for the payout to record and queue."""
    dispute, snapshot = _after_an_earlier_round(database, "SUCCEEDED", refund_id="re_earlier")
    message = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)

    emits = _settle(database, redis_url, standin, message, snapshot)

    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert reply["amount_minor"] == 0
    assert "INR 689" not in reply["text"]
    assert "refunded" not in reply["text"].lower(), reply["text"]
    review = reply["text"][reply["text"].index("will review") :].lower()
    for waiting in ("late delivery", "missing", "packaging"):
        assert waiting in review, reply["text"]
    (request,) = [e.value for e in emits if e.topic == t.PAYOUT_REQUESTED.name]
    assert (request["amount_minor"], request["payment_reference"]) == (68900, f"pi_{dispute}")


def test_a_dispute_whose_orders_earlier_payout_failed_is_promised_its_refund(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute, snapshot = _after_an_earlier_round(database, "FAILED", error_code="card_declined")
    message = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)

    emits = _settle(database, redis_url, standin, message, snapshot)

    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert reply["amount_minor"] == 68900
    assert "INR 689" in reply["text"]


def test_two_disputes_of_one_order_settled_together_promise_one_refund_the_one_paid(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Neither dispute's round is in the ledger yet, and both are settled at once: one reply
    promises the refund, the other nothing. Paid in the opposite order, the payout pays the
    promised one and holds the other, because the reply was written after the settler reserved
    the round."""
    payment = f"pi_{uuid.uuid4().hex[:12]}"
    snapshot = freeze(ARTICLE_ORDER.model_copy(update={"payment_reference": payment}))
    disputes = [f"d-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    messages = [_priced(d, "AUTO_APPROVED", 68900, snapshot=snapshot) for d in disputes]

    settled = _settle_together(database, redis_url, standin, messages, snapshot)

    replies = {d: _reply_event(emits) for d, emits in zip(disputes, settled, strict=True)}
    promised = [d for d in disputes if replies[d]["amount_minor"] == 68900]
    assert len(promised) == 1, replies
    [other] = [d for d in disputes if d not in promised]
    assert replies[other]["amount_minor"] == 0
    assert "refunded" not in replies[other]["text"].lower(), replies[other]["text"]
    assert read_round(database, promised[0]) == ("PENDING", 0, None), "reserved, no call begun"
    assert read_round(database, other) == ("FAILED", 0, "ORDER_ALREADY_REFUNDED")
    requests = {
        d: [e.value for e in emits if e.topic == t.PAYOUT_REQUESTED.name]
        for d, emits in zip(disputes, settled, strict=True)
    }
    assert all(len(found) == 1 for found in requests.values()), "both go to the payout"


def test_a_replayed_round_is_promised_what_its_reservation_holds(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The round was reserved before an earlier instance stopped without storing its reply;
    meanwhile another dispute of the order was paid. The replay keeps the reservation's word."""
    dispute, snapshot = _after_an_earlier_round(database, "FAILED", error_code="card_declined")
    seed_round(database, dispute, status="PENDING", attempts=0, payment=f"pi_{dispute}")
    seed_round(
        database,
        f"d-{uuid.uuid4().hex[:12]}",
        status="SUCCEEDED",
        payment=f"pi_{dispute}",
        refund_id="re_later",
    )

    emits = _settle(
        database,
        redis_url,
        standin,
        _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot),
        snapshot,
    )

    assert _reply_event(emits)["amount_minor"] == 68900
    assert read_round(database, dispute) == ("PENDING", 0, None)


def _reply_event(emits: Sequence[Emit]) -> dict[str, Any]:
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    return dict(reply)


def test_the_payment_reference_the_event_carries_is_the_one_paid(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Pricing puts the snapshot's payment reference in the event; the settler takes it from
    there instead of reading the snapshot again (an older event falls back to the snapshot,
    as every other test here shows)."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    carried = f"pi_{dispute}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=carried)

    emits = _settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER))

    (request,) = [e.value for e in emits if e.topic == t.PAYOUT_REQUESTED.name]
    assert request["payment_reference"] == carried != ARTICLE_ORDER.payment_reference
    assert _reply_event(emits)["amount_minor"] == 68900


def test_redis_out_of_reach_is_retried_not_answered_with_the_template(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Redis out of reach is not the model unavailable: the settler raises Redis's
    TransientError, which the runtime retries, instead of storing the template reply that every
    replay of the round would then publish. Once Redis answers, the reply is the model's."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "AUTO_APPROVED", 68900, payment_reference=f"pi_{dispute}")
    with pytest.raises(TransientError) as raised:
        _settle(database, nobody, standin, message, freeze(ARTICLE_ORDER))
    assert raised.value.dependency == "redis"
    emits = _settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER))
    (reply,) = [e.value for e in emits if e.topic == t.REPLY_PUBLISHED.name]
    assert reply["source"] == "MODEL", reply["guard_failures"]


def test_a_round_priced_again_with_another_amount_pays_nothing(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Round 1 was held for review and told so. A verdict replayed after pricing's state of the
    dispute expired prices round 1 again, now approved: that round's reply promised nothing, so
    its payout must not be requested. The record is dead-lettered with the reason, and nothing
    is reserved in the ledger."""
    dispute, snapshot = f"d-{uuid.uuid4().hex[:12]}", freeze(ARTICLE_ORDER)
    held = _settle(
        database, redis_url, standin, _priced(dispute, "HELD_FOR_REVIEW", 0, cap=50000), snapshot
    )
    assert _reply_event(held)["amount_minor"] == 0

    with pytest.raises(InvalidInput, match=r"round 1 was priced again.* 0 approved.* 68900"):
        _settle(database, redis_url, standin, _priced(dispute, "AUTO_APPROVED", 68900), snapshot)
    assert read_round(database, dispute) is None, "nothing reserved, nothing to pay"


def test_a_round_delivered_again_is_answered_as_before(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The same round again, approved but held back by the ledger (another dispute of its
    payment was paid): the stored reply and the request are sent again, nothing refused."""
    dispute, snapshot = _after_an_earlier_round(database, "SUCCEEDED", refund_id="re_earlier")
    message = _priced(dispute, "AUTO_APPROVED", 68900, snapshot=snapshot)

    first = _settle(database, redis_url, standin, message, snapshot)
    again = _settle(database, redis_url, standin, message, snapshot)

    assert _reply_event(again) == _reply_event(first)
    assert _reply_event(again)["amount_minor"] == 0
    requests = [
        [e.value for e in emits if e.topic == t.PAYOUT_REQUESTED.name] for emits in (first, again)
    ]
    assert [[r["amount_minor"] for r in found] for found in requests] == [[68900], [68900]]


def test_a_reply_may_quote_an_item_whose_name_holds_digits(
    database: str, redis_url: str, standin: Standin
) -> None:
    """ "Chicken 65", a dish common on Indian menus: its digits are the item's name. A model
    reply naming it used to fail the guard as an amount other than the approved one, and the
    template then cut the name to "the missing Chicken"."""
    order = ARTICLE_ORDER.model_copy(
        update={
            "line_items": (
                *ARTICLE_ORDER.line_items,
                LineItem(name="Chicken 65", quantity=1, unit_price_minor=28900),
            ),
            "charged_total_minor": ARTICLE_ORDER.charged_total_minor + 28900,
        }
    )
    snapshot = freeze(order)
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    line = ev.PricedLineEvent(
        grievance_id="g1",
        category="MISSING_ITEM",
        outcome="UPHELD",
        status="PAY",
        amount_minor=28900,
        proposed_minor=28900,
        rule="MISSING_ITEM: 1 x 28900 (Chicken 65)",
        item_name="Chicken 65",
        quantity=1,
    )
    message = _priced(dispute, "AUTO_APPROVED", 28900, snapshot=snapshot)
    priced = ev.parse(ev.RefundPriced, message.value).model_copy(
        update={
            "lines": [line],
            "total_minor": 28900,
            "held_grievances": [],
            "payment_reference": f"pi_{dispute}",
            "order_total_minor": order.charged_total_minor,
        }
    )
    message = Message(t.REFUND_PRICED.name, 0, 0, dispute, priced.to_avro(), {}, 0)
    written = (
        "We have refunded INR 289 to your original payment method for the missing Chicken 65;"
        " it should reach you within three working days. We are sorry it did not arrive."
    )
    with FixedAnswerServer(completion(json.dumps({"reply": written}))) as server:
        emits = _settle(database, redis_url, standin, message, snapshot, endpoint=server)
    reply = _reply_event(emits)
    assert (reply["text"], reply["source"], reply["guard_failures"]) == (written, "MODEL", [])


def test_a_complaint_held_before_anything_was_judged_gets_the_models_reply(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The extractor held the complaint (its answer could not be validated): no lines. The
    model used to be told nothing was held, so its reply never said a colleague would look,
    failed the guard, and every such complaint got the template after a call paid for."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = _priced(dispute, "HELD_FOR_REVIEW", 0)
    priced = ev.parse(ev.RefundPriced, message.value).model_copy(
        update={"lines": [], "total_minor": 0, "held_grievances": []}
    )
    message = Message(t.REFUND_PRICED.name, 0, 0, dispute, priced.to_avro(), {}, 0)
    reply = _reply_event(_settle(database, redis_url, standin, message, freeze(ARTICLE_ORDER)))
    assert (reply["source"], reply["guard_failures"]) == ("MODEL", []), reply
    assert "review" in reply["text"].lower()
