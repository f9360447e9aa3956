"""The six stages end to end on the real stack: the article's case and the guard rails."""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from refund_bench.disputes import Story
from refund_bench.domain import MAX_ORDER_MINOR
from refund_bench.events import ID_PATTERN
from refund_bench.llm_setup import JudgePanelSettings
from refund_bench.runtime.dlq import MAX_KEY_BYTES
from refund_bench.samples import SAMPLE_COMPLAINTS, SampleComplaint
from services.llm_standin.app import SYSTEM_FINGERPRINT
from tests.e2e.pipeline import Pipeline

pytestmark = pytest.mark.stack

_SEED_BASE: int = JudgePanelSettings.model_fields["judge_seed_base"].default
"""Seat k's first draw uses seed _SEED_BASE + k (the judge's default JUDGE_SEED_BASE)."""
_TEMPERATURE: float = JudgePanelSettings.model_fields["judge_temperature"].default


def _sample(label: str) -> SampleComplaint:
    return next(s for s in SAMPLE_COMPLAINTS if s.label == label)


def _submit(pipeline: Pipeline, label: str) -> str:
    sample = _sample(label)
    return pipeline.submit(sample.order_id, sample.customer_id, sample.text)


def test_the_articles_complaint_end_to_end(pipeline: Pipeline) -> None:
    dispute = _submit(pipeline, "article")
    story = pipeline.wait_final(dispute)

    assert [(g["grievance_id"], g["category"]) for g in story.grievances] == [
        ("g1", "LATE_DELIVERY"),
        ("g2", "MISSING_ITEM"),
        ("g3", "PACKAGING"),
        ("g4", "PARTNER_CONDUCT"),
    ]
    missing = story.grievances[1]
    assert (missing["item_name"], missing["item_quantity"]) == ("Hyderabadi Biryani", 2)
    assert len(story.rulings) == 12, "4 grievances x 3 judges"
    assert {(r["judge_seat"], r["seed"]) for r in story.rulings} == {
        (seat, _SEED_BASE + seat) for seat in range(3)
    }, "every ruling names its seat's seed"
    assert {
        (r["temperature"], r["served_model"], r["system_fingerprint"]) for r in story.rulings
    } == {(_TEMPERATURE, "standin-judge", SYSTEM_FINGERPRINT)}, "and what drew it"
    extraction = pipeline.wait_extraction(dispute)
    assert (extraction["outcome"], extraction["grievance_total"]) == ("EXTRACTED", 4)
    [answer] = extraction["answers"]
    assert (answer["problems"], answer["served_model"]) == ([], "standin-extractor")
    assert len(json.loads(answer["raw_answer"])["grievances"]) == 4, "the answer, kept as it came"
    assert {r["snapshot_sha256"] for r in story.rulings} == {story.dispute["snapshot_sha256"]}  # type: ignore[index]

    verdicts = {v["grievance_id"]: v for v in story.verdicts}
    assert verdicts["g3"]["outcome"] == "ESCALATE"
    assert verdicts["g3"]["split"] == "2-1"
    raita = Counter(r["ruling"] for r in story.rulings if r["grievance_id"] == "g3")
    assert raita == {"ESCALATE": 2, "UPHELD": 1}
    [upheld] = [r for r in story.rulings if r["grievance_id"] == "g3" and r["ruling"] == "UPHELD"]
    assert upheld["cites_missing_evidence"], "no packaging record: the uphold makes no majority"
    assert not any(r["cites_missing_evidence"] for r in story.rulings if r["grievance_id"] != "g3")
    assert [verdicts[g]["outcome"] for g in ("g1", "g2", "g4")] == ["UPHELD"] * 3

    [priced] = story.priced
    lines = {line["grievance_id"]: line for line in priced["lines"]}
    assert (lines["g1"]["status"], lines["g1"]["amount_minor"]) == ("PAY", 4900)
    assert (lines["g2"]["status"], lines["g2"]["amount_minor"]) == ("PAY", 64000)
    assert (lines["g3"]["status"], lines["g3"]["amount_minor"]) == ("HELD", 0)
    assert (lines["g4"]["status"], lines["g4"]["amount_minor"]) == ("ZERO", 0)
    assert (priced["total_minor"], priced["payable_minor"]) == (68900, 68900)
    assert priced["decision"] == "AUTO_APPROVED"

    assert [(p["round"], p["outcome"], p["amount_minor"]) for p in story.payouts] == [
        (1, "COMPLETED", 68900)
    ]
    [ledger] = story.ledger
    assert (ledger["status"], ledger["attempts"]) == ("SUCCEEDED", 1)
    assert ledger["stripe_refund_id"].startswith("re_")
    [sent] = pipeline.stripe_refunds(ledger["payment_reference"])
    assert (sent.form["amount"], sent.idempotency_key) == ("68900", ledger["idempotency_key"])
    [reply] = story.replies
    assert "INR 689" in reply["text"]
    assert reply["amount_minor"] == 68900
    assert (reply["served_model"], reply["system_fingerprint"]) == (
        "standin-settler",
        SYSTEM_FINGERPRINT,
    ), "the reply names what wrote it"
    assert [i["grievance_id"] for i in story.review_items if i["status"] == "OPEN"] == ["g3"]
    [raita_item] = story.review_items
    assert raita_item["reason"] == (
        "the bench could not decide (2-1: 1 upheld, 0 rejected, 2 escalate); upheld rulings"
        " citing evidence the order store has no record of (1) make no majority"
    )
    assert pipeline.llm_calls(dispute) == 14, "1 extraction + 4 x 3 judges + 1 reply"


def test_a_second_complaint_about_a_paid_order_goes_to_a_human_not_to_stripe(
    pipeline: Pipeline,
) -> None:
    sample = _sample("article")
    order_id = pipeline.own_order(sample.order_id)
    first = pipeline.submit(order_id, sample.customer_id, sample.text, own_order=False)
    paid = pipeline.wait_final(first)
    assert [(p["round"], p["amount_minor"], p["outcome"]) for p in paid.payouts] == [
        (1, 68900, "COMPLETED")
    ]

    again = pipeline.submit(order_id, sample.customer_id, sample.text, own_order=False)
    story = pipeline.wait_final(again)

    assert story.latest_round is not None
    assert story.latest_round["payable_minor"] == 68900  # priced on its own evidence, as before
    assert [(p["round"], p["outcome"], p["error_code"]) for p in story.payouts] == [
        (1, "FAILED", "ORDER_ALREADY_REFUNDED")
    ]
    assert story.paid_minor == 0
    (reply,) = story.replies
    assert reply["amount_minor"] == 0, "the reply promises nothing the payout will not pay"
    assert "INR 689" not in reply["text"]
    (item,) = [i for i in story.review_items if i["kind"] == "PAYOUT"]
    assert item["status"] == "OPEN"
    assert f"already has a refund of dispute {first} (round 1, SUCCEEDED" in item["reason"]
    # No provider call was begun for it.
    assert [(r["status"], r["attempts"], r["stripe_refund_id"]) for r in story.ledger] == [
        ("FAILED", 0, None)
    ]
    [sent] = pipeline.stripe_refunds(paid.ledger[0]["payment_reference"])
    assert sent.idempotency_key == paid.ledger[0]["idempotency_key"], "the first dispute's only"


def test_two_complaints_about_one_order_at_once_promise_and_pay_one_refund(
    pipeline: Pipeline,
) -> None:
    """Published together, neither dispute is in the ledger when the other is settled. One
    reply promises the refund and that dispute is paid; the other promises nothing and goes
    to a payment operator, with no call to Stripe."""
    sample = _sample("article")
    order_id = pipeline.own_order(sample.order_id)
    disputes = [
        pipeline.submit(order_id, sample.customer_id, sample.text, own_order=False)
        for _ in range(2)
    ]
    stories = {dispute: pipeline.wait_final(dispute) for dispute in disputes}

    promised = [d for d in disputes if stories[d].replies[0]["amount_minor"] == 68900]
    assert len(promised) == 1, {d: s.replies for d, s in stories.items()}
    [held] = [d for d in disputes if d not in promised]
    assert stories[promised[0]].paid_minor == 68900
    assert stories[held].replies[0]["amount_minor"] == 0
    assert "INR 689" not in stories[held].replies[0]["text"]
    assert stories[held].paid_minor == 0
    assert [(p["outcome"], p["error_code"]) for p in stories[held].payouts] == [
        ("FAILED", "ORDER_ALREADY_REFUNDED")
    ]
    assert [(r["status"], r["attempts"]) for r in stories[held].ledger] == [("FAILED", 0)]
    assert [(r["status"], r["attempts"]) for r in stories[promised[0]].ledger] == [("SUCCEEDED", 1)]


def test_a_refund_above_the_cap_is_held_for_a_human(pipeline: Pipeline) -> None:
    dispute = _submit(pipeline, "over-cap")
    story = pipeline.wait_final(dispute)
    [priced] = story.priced
    assert priced["total_minor"] == 120000 > priced["cap_minor"] == 100000
    assert (priced["decision"], priced["payable_minor"]) == ("HELD_FOR_REVIEW", 0)
    assert story.payouts == []
    assert story.ledger == []
    assert [(i["kind"], i["status"]) for i in story.review_items] == [("DISPUTE", "OPEN")]
    assert "review" in story.replies[0]["text"].lower()


def test_silent_evidence_escalates_and_contradicted_evidence_rejects(pipeline: Pipeline) -> None:
    dispute = _submit(pipeline, "on-time")
    story = pipeline.wait_final(dispute)
    verdicts = {v["category"]: v for v in story.verdicts}
    assert verdicts["LATE_DELIVERY"]["outcome"] == "REJECTED", "delivered inside the SLA"
    assert verdicts["QUALITY"]["outcome"] == "ESCALATE", "no quality record: silent evidence"
    quality = [r for r in story.rulings if r["grievance_id"] == verdicts["QUALITY"]["grievance_id"]]
    assert all(r["ruling"] != "REJECTED" for r in quality)
    assert story.priced[0]["decision"] == "HELD_FOR_REVIEW"
    assert story.payouts == []
    assert story.ledger == [], "the settler reserves a payout's ledger row before its reply"


def test_instructions_in_the_complaint_cannot_change_any_amount(pipeline: Pipeline) -> None:
    dispute = _submit(pipeline, "injection")
    story = pipeline.wait_final(dispute)
    [grievance] = story.grievances
    assert (grievance["category"], grievance["item_name"]) == ("MISSING_ITEM", "Garlic Naan")
    [priced] = story.priced
    assert (priced["total_minor"], priced["payable_minor"]) == (6000, 6000)
    [reply] = story.replies
    assert reply["source"] == "TEMPLATE", (
        "the model echoed the injected amount; the guard caught it"
    )
    assert any("10000" in failure for failure in reply["guard_failures"])
    assert reply["model_answer"] is not None, "the refused answer is kept for audit"
    assert "10000" in reply["model_answer"]
    assert "10000" not in reply["text"]
    assert "INR 60" in reply["text"]
    assert [(p["outcome"], p["amount_minor"]) for p in story.payouts] == [("COMPLETED", 6000)]


def test_an_overcharge_is_refunded_exactly(pipeline: Pipeline) -> None:
    story = pipeline.wait_final(_submit(pipeline, "billing"))
    assert [v["outcome"] for v in story.verdicts] == ["UPHELD"]
    assert [(p["outcome"], p["amount_minor"]) for p in story.payouts] == [("COMPLETED", 3000)]


def test_a_complaint_without_a_checkable_grievance_still_gets_a_reply(pipeline: Pipeline) -> None:
    dispute = _submit(pipeline, "no-grievance")
    story = pipeline.wait_final(dispute)
    assert story.grievances == []
    assert story.rulings == []
    assert story.priced[0]["decision"] == "NOTHING_TO_PAY"
    extraction = pipeline.wait_extraction(dispute)
    assert (extraction["outcome"], len(extraction["answers"])) == ("NOTHING_CHECKABLE", 1)
    assert story.replies
    assert story.payouts == []
    assert story.ledger == [], "the settler reserves a payout's ledger row before its reply"
    assert pipeline.llm_calls(dispute) == 2, "one extraction, one reply, no judges"


# What each of these sample complaints is owed when every model answer is clean.
FAULT_FREE_PAYABLE = {"article": 68900, "billing": 3000, "injection": 6000}
FAULT_KINDS = ("429", "5xx", "malformed", "timeout")


def _paid_more_by_a_redraw(story: Story, latest: dict[str, Any], owed: int) -> bool:
    """Whether all of what ``latest`` pays above ``owed`` is on lines a redrawn seat upheld.

    A seat whose answer could not be read draws again with another seed (its ruling names it);
    the new draw is a fresh sample, as a model's would be. The stand-in upholds a claim the
    snapshot is silent on for a seed that is a multiple of 3: on a clean run only seat 2 does,
    after a redraw another seat may too. That can pay a silent-evidence grievance the clean run
    held, and nothing else.
    """
    redrawn = {
        r["grievance_id"]
        for r in story.rulings
        if r["model_ruling"] == "UPHELD"
        and r["seed"] is not None
        and r["seed"] != _SEED_BASE + r["judge_seat"]
    }
    extra = sum(
        line["amount_minor"]
        for line in latest["lines"]
        if line["grievance_id"] in redrawn and line["status"] == "PAY"
    )
    return bool(redrawn) and latest["payable_minor"] - owed <= extra


def test_a_failing_llm_slows_the_pipeline_but_loses_nothing(pipeline: Pipeline) -> None:
    """A storm of 429s first (the next 40 calls), one fault of each other kind, then random
    faults of every kind (from a fixed seed; the order of the requests still varies).

    No dispute is lost. A dispute paid less than its fault-free amount shows why: a seat's
    answer that could not be read (ESCALATE), or an extraction sent to a human, and what was
    not paid waits in the review queue. A dispute paid more owes all of the excess to a seat
    that was redrawn after an unreadable answer and upheld a silent-evidence claim.
    """
    before = pipeline.llm_stats()
    injected_before = Counter(before["faults_injected"])
    pipeline.set_llm_faults(
        next_faults=["429"] * 40 + ["timeout", "5xx", "malformed"],
        seed=20261207,
        rate_429=0.25,
        rate_5xx=0.1,
        rate_malformed=0.1,
        rate_timeout=0.05,
        timeout_seconds=10,
    )
    labels = ("article", "billing", "injection") * 3
    try:
        disputes = [_submit(pipeline, label) for label in labels]
        stories = [pipeline.wait_final(d, timeout_s=240) for d in disputes]
    finally:
        pipeline.set_llm_faults(
            next_faults=[],
            seed=before["seed"],
            rate_429=0.0,
            rate_5xx=0.0,
            rate_malformed=0.0,
            rate_timeout=0.0,
            timeout_seconds=30.0,  # the stand-in's default
        )
    injected = Counter(pipeline.llm_stats()["faults_injected"]) - injected_before
    assert all(injected[kind] > 0 for kind in FAULT_KINDS), f"every kind injected: {injected}"
    assert injected["429"] >= 40, "the storm"

    paid_in_full = 0
    for label, story in zip(labels, stories, strict=True):
        latest = story.latest_round
        assert latest is not None
        owed = FAULT_FREE_PAYABLE[label]
        if latest["payable_minor"] > 0:
            assert [(p["outcome"], p["amount_minor"]) for p in story.payouts] == [
                ("COMPLETED", latest["payable_minor"])
            ]
        if latest["payable_minor"] > owed:
            assert _paid_more_by_a_redraw(story, latest, owed), (label, latest, story.rulings)
        if latest["payable_minor"] >= owed:
            paid_in_full += 1
            continue
        # Paid less: the noise made something undecidable, and a human has it.
        unreadable = [r for r in story.rulings if r["model_ruling"] == "UNREADABLE"]
        extraction = [i for i in story.review_items if i["kind"] == "EXTRACTION"]
        assert unreadable or extraction, (label, latest, story.rulings)
        assert any(i["status"] == "OPEN" for i in story.review_items), (label, latest)
    assert paid_in_full >= 6, f"only {paid_in_full} of {len(stories)} paid in full under faults"
    seeds = [(r["judge_seat"], r["seed"]) for story in stories for r in story.rulings]
    redraws = [seed for seat, seed in seeds if seed is not None and seed != _SEED_BASE + seat]
    assert redraws, "answers cut short were drawn again, and the rulings name the new seeds"


def test_a_complaint_the_llm_fails_alone_goes_to_review_and_the_judge_goes_on(
    pipeline: Pipeline,
) -> None:
    """The stand-in answers 500 to every judge request of one dispute (the article's: 12
    requests), while it answers everyone else's. Each request is given up on as failing alone
    after three calls, each with the client's full retries (about 50 s): its seat rules
    ESCALATE (``NO_ANSWER``), the dispute waits for a person and nothing is paid. Complaints
    submitted meanwhile, one a second, are paid in full: the judge never stopped."""
    poison = f"d-{uuid.uuid4().hex[:16]}"
    restarts = dict(pipeline.launcher.restarts)
    pipeline.set_llm_faults(fail_disputes={poison: "judge"})
    sample, others = _sample("article"), []
    try:
        pipeline.submit(sample.order_id, sample.customer_id, sample.text, poison)
        deadline = time.monotonic() + 180
        while not pipeline.story(poison).is_final():
            assert time.monotonic() < deadline, f"{poison} not final after 180 s"
            others.append(_submit(pipeline, "billing"))  # the traffic the endpoint answers
            time.sleep(1)  # the pace of that traffic, not a wait for a result
    finally:
        pipeline.set_llm_faults(fail_disputes={})
    story = pipeline.story(poison)

    assert len(story.rulings) == 12
    assert {(r["ruling"], r["model_ruling"]) for r in story.rulings} == {("ESCALATE", "NO_ANSWER")}
    assert all("it failed on 3 calls in a row" in r["reasoning"] for r in story.rulings)
    latest = story.latest_round
    assert latest is not None
    assert latest["payable_minor"] == 0
    assert story.payouts == []
    assert any(i["status"] == "OPEN" for i in story.review_items), story.review_items
    # The extraction, 12 judge requests of three calls of five attempts each, and the reply.
    assert pipeline.llm_calls(poison) == 1 + 12 * 3 * 5 + 1
    assert len(others) >= 30, "the traffic ran while the requests failed"
    for other in others:
        paid = pipeline.wait_final(other, timeout_s=120)
        assert paid.paid_minor == FAULT_FREE_PAYABLE["billing"], (other, paid.priced)
    assert pipeline.launcher.restarts == restarts, "no stage exited"


def _dead_letter(pipeline: Pipeline, dispute: str) -> Any:
    """The dead letter the extractor wrote for ``dispute`` (waits for it)."""
    from refund_bench.codec import Codec, framing_from_registry_url
    from tests.kafka_helpers import read_committed

    dlq = "complaint.received.dlq"
    codec = Codec(framing_from_registry_url(pipeline.stack.registry_url), {dlq: "dead_letter"})

    key = dispute[:MAX_KEY_BYTES]  # a dead letter keeps at most this much of its key

    def mine(records: list[Any]) -> bool:
        return any(r.key == key for r in records)

    def decode(raw: bytes | None) -> Any:
        return codec.decode(dlq, raw)

    records = read_committed(pipeline.stack.kafka, dlq, until=mine, timeout_s=60, decode=decode)
    [dead] = [r for r in records if r.key == key]
    return dead


def test_a_complaint_about_an_unknown_order_goes_to_the_dlq_with_the_reason(
    pipeline: Pipeline,
) -> None:
    dispute = pipeline.submit("order-does-not-exist", "cust-1", "Two samosas were missing.")
    dead = _dead_letter(pipeline, dispute)
    assert dead.value["reason"] == "unknown order 'order-does-not-exist'"
    assert dead.headers["dlq.reason"] == b"unknown order 'order-does-not-exist'"
    assert dead.headers["dlq.stage"] == b"extractor"
    assert pipeline.story(dispute).dispute is None


def test_a_complaint_about_an_order_the_store_holds_wrongly_goes_to_the_dlq_alone(
    pipeline: Pipeline,
) -> None:
    """An order whose store row holds an amount no order has (one the refund could not even be
    written with) is named in the dead letter; the complaint after it is paid as usual."""
    sample = _sample("article")
    order_id = pipeline.own_order(sample.order_id)
    with psycopg.connect(pipeline.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE order_line_items SET unit_price_minor = %s WHERE order_id = %s AND line_no = 1",
            (2**62, order_id),
        )
    poisoned = pipeline.submit(order_id, sample.customer_id, sample.text, own_order=False)
    dispute = _submit(pipeline, "article")

    dead = _dead_letter(pipeline, poisoned)
    assert dead.value["reason"] == (
        f"order {order_id!r} in the order store cannot be used as evidence:"
        f" line_items.0.unit_price_minor: Input should be less than or equal to {MAX_ORDER_MINOR}"
    )
    story = pipeline.wait_for_payout(dispute, 1)
    assert [(p["outcome"], p["amount_minor"]) for p in story.payouts] == [("COMPLETED", 68900)]
    assert pipeline.story(poisoned).dispute is None


_UNSTORABLE = {
    "a NUL in its text": (
        {"text": "The raita leaked\x00 all over the bag."},
        "text: Value error, holds a NUL character, which PostgreSQL text cannot store",
    ),
    "a dispute id of 10,000 characters": (
        {"dispute_id": "d-" + secrets.token_urlsafe(7500)[:9998]},
        f"dispute_id: String should match pattern '{ID_PATTERN}'"
        f" [original key cut to {MAX_KEY_BYTES} of 10000 bytes]",
    ),
}


@pytest.mark.parametrize(("odd", "reason"), _UNSTORABLE.values(), ids=_UNSTORABLE.keys())
def test_a_complaint_postgresql_cannot_store_goes_to_the_dlq_alone(
    pipeline: Pipeline, odd: dict[str, str], reason: str
) -> None:
    """A complaint the order store cannot hold (PostgreSQL text holds no NUL; an index entry
    holds at most 2,704 bytes) fails its own validation, not the database calls the extractor
    makes for a whole batch: the complaint published right after it is paid.

    Published the way an upstream service that does not validate would (this project's own
    publisher refuses such a complaint before it reaches Kafka)."""
    from refund_bench import topics as t
    from refund_bench.codec import Codec, framing_from_registry_url
    from tests.kafka_helpers import produce_values

    sample = _sample("article")
    codec = Codec(
        framing_from_registry_url(pipeline.stack.registry_url),
        {t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema},
    )
    poisoned = odd.get("dispute_id", f"d-{uuid.uuid4().hex[:16]}")
    complaint: dict[str, Any] = {
        "dispute_id": poisoned,
        "order_id": pipeline.own_order(sample.order_id),
        "customer_id": sample.customer_id,
        "text": "The raita leaked all over the bag.",
        "received_at": datetime.now(UTC),
        "channel": "app",
        **odd,
    }
    produce_values(pipeline.stack.kafka, t.COMPLAINT_RECEIVED.name, [(poisoned, complaint)], codec)
    dispute = _submit(pipeline, "article")

    dead = _dead_letter(pipeline, poisoned)
    assert dead.value["reason"] == f"ComplaintReceived failed validation: {reason}"
    assert dead.headers["dlq.stage"] == b"extractor"
    story = pipeline.wait_for_payout(dispute, 1)
    assert [(p["outcome"], p["amount_minor"]) for p in story.payouts] == [("COMPLETED", 68900)]
    assert pipeline.story(poisoned).dispute is None
