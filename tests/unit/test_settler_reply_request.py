"""What the settler's model is asked: the outcome each line is told with, and the prompt's words.

A round whose reply states no refund tells of no line as paid, so that a model (here the
stand-in's rule) writes a reply the guard accepts; the default prompt promises no timing and
asks for review wording the guard reads as a review to come.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from refund_bench import events as ev
from refund_bench.llm.roles import SETTLER_PROMPT_VERSION, LlmRequest, load_prompt
from services.llm_standin.answers import answer
from services.settler.amounts import format_amount
from services.settler.handler import (
    ReplyLines,
    _only_held,
    approved_minor,
    guard_failures,
    reply_lines,
    reply_request,
    template_for,
)
from tests.priced_lines import LineSpec, priced_lines

COMPLAINT = "My biryani never came, the order was an hour late and the raita leaked."
LINES: tuple[LineSpec, ...] = (
    ("g1", "LATE_DELIVERY", "UPHELD", "PAY", 4900, None),
    ("g2", "MISSING_ITEM", "UPHELD", "PAY", 64000, "Hyderabadi Biryani"),
    ("g3", "PACKAGING", "ESCALATE", "HELD", 0, "Raita"),
    ("g4", "PARTNER_CONDUCT", "UPHELD", "ZERO", 0, None),
    ("g5", "QUALITY", "REJECTED", "REJECTED", 0, "Gulab Jamun"),
)
"""A round's priced lines: two paid, one held, one upheld at zero, one rejected."""
ITEM_NAMES = ["Gulab Jamun", "Hyderabadi Biryani", "Raita"]


def _priced(
    decision: str, payable: int, *, already_paid: int = 0, statuses: dict[str, str] | None = None
) -> ev.RefundPriced:
    """A round of :data:`LINES` (a line's status replaced by ``statuses``) priced ``decision``."""
    statuses = statuses or {}
    return ev.RefundPriced(
        dispute_id="d-1",
        order_id="order-1840",
        round=2 if already_paid else 1,
        pricing_version="v1",
        currency="INR",
        order_total_minor=134000,
        lines=priced_lines(
            (gid, category, outcome, statuses.get(gid, status), amount, item)
            for gid, category, outcome, status, amount, item in LINES
        ),
        total_minor=68900,
        already_paid_minor=already_paid,
        payable_minor=payable,
        cap_minor=100000,
        decision=decision,
        held_grievances=[gid for gid, *_, status, _, _ in LINES if status == "HELD"],
        snapshot_sha256="0" * 64,
        payment_reference="pi_1840",
        priced_at=datetime(2026, 12, 3, 21, 0, tzinfo=UTC),
    )


def _request(lines: ReplyLines, says: int, *, earlier_refund: bool = False) -> LlmRequest:
    """The model's request for a round told as ``lines``, stating ``says``."""
    return reply_request(
        COMPLAINT,
        format_amount(says, "INR"),
        lines,
        prompt=load_prompt(SETTLER_PROMPT_VERSION),
        earlier_refund=earlier_refund,
    )


def _document(lines: ReplyLines, says: int, *, earlier_refund: bool = False) -> dict[str, Any]:
    """The JSON document the model reads for a round told as ``lines``, stating ``says``."""
    document: dict[str, Any] = json.loads(
        _request(lines, says, earlier_refund=earlier_refund).user_document
    )
    return document


def _outcomes(document: dict[str, Any]) -> dict[str, str]:
    return {entry["text"]: entry["outcome"] for entry in document["resolved"]}


def _standin_failures(lines: ReplyLines, says: int, *, earlier_refund: bool) -> list[str]:
    """The guard's failures, as the handler checks it, for the stand-in's reply to the round."""
    request = _request(lines, says, earlier_refund=earlier_refund)
    text = answer("customer_reply", list(request.messages), seed=None, temperature=0.2).get("reply")
    assert isinstance(text, str)
    return guard_failures(
        text,
        says,
        "INR",
        lines.held,
        earlier_refund=earlier_refund,
        held_names=_only_held(lines.held_lines, lines.resolved),
        where="d-1 round 1",
        item_names=ITEM_NAMES,
    )


def test_a_declined_dispute_tells_the_model_of_no_line_as_paid() -> None:
    lines = reply_lines(_priced("DECLINED", 0), says=0)
    document = _document(lines, 0)
    assert _outcomes(document) == {
        "the late delivery": "DECLINED",
        "the missing Hyderabadi Biryani": "DECLINED",
        "the delivery partner's conduct": "DECLINED",
        "the quality of the Gulab Jamun": "REJECTED",
    }
    assert document["held_for_review"] == []
    assert document["approved_amount"] == "INR 0"


@pytest.mark.parametrize("earlier_refund", [False, True])
def test_the_standins_reply_to_a_declined_dispute_passes_the_guard(earlier_refund: bool) -> None:
    lines = reply_lines(_priced("DECLINED", 0), says=0)
    assert _standin_failures(lines, 0, earlier_refund=earlier_refund) == []


@pytest.mark.parametrize(
    ("decision", "statuses", "held"),
    [
        ("NOTHING_TO_PAY", {"g3": "ZERO"}, []),
        ("HELD_FOR_REVIEW", {}, ["the packaging of the Raita"]),
    ],
)
def test_a_round_paying_nothing_more_tells_of_its_paid_lines_as_zero(
    decision: str, statuses: dict[str, str], held: list[str]
) -> None:
    """Its lines were refunded by an earlier round: nothing is refunded for them now, and an
    earlier reply that did not tell of a refund (the ledger held that round) is not assumed."""
    lines = reply_lines(_priced(decision, 0, already_paid=68900, statuses=statuses), says=0)
    outcomes = _outcomes(_document(lines, 0))
    assert outcomes["the late delivery"] == outcomes["the missing Hyderabadi Biryani"] == "ZERO"
    assert "PAY" not in outcomes.values()
    assert lines.held == held
    assert _standin_failures(lines, 0, earlier_refund=False) == []


def test_a_paying_round_tells_of_its_paid_lines_as_paid() -> None:
    priced = _priced("AUTO_APPROVED", 68900)
    lines = reply_lines(priced, says=approved_minor(priced))
    outcomes = _outcomes(_document(lines, 68900))
    assert outcomes == {
        "the late delivery": "PAY",
        "the missing Hyderabadi Biryani": "PAY",
        "the delivery partner's conduct": "ZERO",
        "the quality of the Gulab Jamun": "REJECTED",
    }
    assert lines.held == ["the packaging of the Raita"]
    assert _standin_failures(lines, 68900, earlier_refund=False) == []


def test_a_round_the_ledger_holds_sends_the_lines_it_would_pay_to_review() -> None:
    lines = reply_lines(_priced("AUTO_APPROVED", 68900), says=0)
    document = _document(lines, 0)
    assert _outcomes(document) == {
        "the delivery partner's conduct": "ZERO",
        "the quality of the Gulab Jamun": "REJECTED",
    }
    assert lines.held == [
        "the packaging of the Raita",
        "the late delivery",
        "the missing Hyderabadi Biryani",
    ]
    assert [entry["text"] for entry in document["held_for_review"]] == lines.held
    assert _standin_failures(lines, 0, earlier_refund=False) == []


def test_the_template_for_a_declined_dispute_notes_its_upheld_lines_and_offers_nothing() -> None:
    lines = reply_lines(_priced("DECLINED", 0), says=0)
    reply = template_for(
        0,
        "INR",
        lines.resolved,
        lines.held,
        held_names=_only_held(lines.held_lines, lines.resolved),
        item_names=ITEM_NAMES,
    )
    assert "We have noted the late delivery, the missing Hyderabadi Biryani and" in reply
    assert "We are not able to offer a refund for this order." in reply
    failures = guard_failures(
        reply, 0, "INR", [], earlier_refund=False, held_names=[], where="-", item_names=ITEM_NAMES
    )
    assert failures == []


_TIMING = re.compile(
    r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty-four|forty-eight)"
    r"\s+(?:working\s+|business\s+|calendar\s+)?(?:hours?|days?|weeks?)\b",
    re.IGNORECASE,
)


def test_the_default_settler_prompt_promises_no_number_of_days_or_hours() -> None:
    text = load_prompt(SETTLER_PROMPT_VERSION).text
    assert _TIMING.findall(text) == []
    assert "within a few working days" in " ".join(text.split())


def test_the_default_settler_prompts_review_wording_is_a_review_the_guard_accepts() -> None:
    """Each wording the prompt gives for the review, in a reply, is a review to come."""
    text = " ".join(load_prompt(SETTLER_PROMPT_VERSION).text.split())
    wordings = [q for q in re.findall(r'"([^"]*)"', text) if "review" in q]
    assert wordings
    for wording in wordings:
        sentence = wording.replace("...", "the packaging of the Raita").strip()
        reply = f"We are sorry about your order. {sentence[0].upper()}{sentence[1:]}."
        failures = guard_failures(
            reply,
            0,
            "INR",
            ["the packaging of the Raita"],
            earlier_refund=False,
            held_names=["Raita"],
            where="-",
            item_names=ITEM_NAMES,
        )
        assert failures == [], reply
