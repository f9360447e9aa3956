"""Parsing a decoded value into its event: what an invalid one's reason says, and what not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from refund_bench import events as ev
from refund_bench.errors import InvalidInput

SECRET_WORDS = "my flat is 4B, call 98450 12345"


def _complaint(**fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "dispute_id": "d-1",
        "order_id": "order-1840",
        "customer_id": "cust-77",
        "text": f"The biryani was cold. {SECRET_WORDS}",
        "received_at": datetime(2026, 12, 4, 19, 0, tzinfo=UTC),
        "channel": "app",
    }
    return {**value, **fields}


def test_a_valid_complaint_parses() -> None:
    complaint = ev.parse(ev.ComplaintReceived, _complaint())
    assert (complaint.dispute_id, complaint.channel) == ("d-1", "app")


@pytest.mark.parametrize("field", ["text", "channel"])
def test_a_nul_character_in_a_complaint_is_invalid_input_naming_the_field(field: str) -> None:
    value = _complaint()
    value[field] = f"{value[field]}\x00{SECRET_WORDS}"
    with pytest.raises(InvalidInput) as caught:
        ev.parse(ev.ComplaintReceived, value)
    assert str(caught.value) == (
        f"ComplaintReceived failed validation: {field}: "
        "Value error, holds a NUL character, which PostgreSQL text cannot store"
    )


ODD_TEXTS = {
    "empty": ("", "is blank"),
    "blank": (" \n\t ", "is blank"),
    "zero-width only": ("\u200b\u200d", "is blank"),
    "a bell": (f"cold \x07{SECRET_WORDS}", "holds U+0007 at position 5"),
    "a right-to-left override": (
        f"refund \u202e{SECRET_WORDS}",
        "holds U+202E at position 7",
    ),
}


@pytest.mark.parametrize(("text", "why"), ODD_TEXTS.values(), ids=ODD_TEXTS.keys())
def test_complaint_text_the_api_would_refuse_is_invalid_input_too(text: str, why: str) -> None:
    """Published straight to Kafka, a complaint meets the intake's text rules: blank text, or
    characters that can make a reviewer misread it, go to the dead-letter topic."""
    with pytest.raises(InvalidInput) as caught:
        ev.parse(ev.ComplaintReceived, _complaint(text=text))
    reason = str(caught.value)
    assert reason.startswith(f"ComplaintReceived failed validation: text: Value error, {why}")
    assert SECRET_WORDS not in reason


def test_complaint_text_with_emoji_and_line_breaks_is_fine() -> None:
    text = "Cold biryani \U0001f469\u200d\U0001f373\nsecond line\ttabbed"
    assert ev.parse(ev.ComplaintReceived, _complaint(text=text)).text == text


ODD_IDS = {
    "empty": "",
    "129 characters": "d" * 129,
    "a space": "d 1",
    "a NUL": "d\x001",
    "not ASCII": "d-\u00e9",
    "a line break": "d-1\n",
}


@pytest.mark.parametrize("field", ["dispute_id", "order_id", "customer_id"])
@pytest.mark.parametrize("odd", ODD_IDS.values(), ids=ODD_IDS.keys())
def test_a_complaint_id_is_what_the_api_accepts_or_invalid_input(field: str, odd: str) -> None:
    """An id is copied into keys, every event of the dispute, cache keys and indexed columns:
    one of megabytes made each of those fail, and stopped a stage."""
    assert ev.parse(ev.ComplaintReceived, _complaint(**{field: "d" * 128}))
    with pytest.raises(InvalidInput) as caught:
        ev.parse(ev.ComplaintReceived, _complaint(**{field: odd}))
    assert str(caught.value) == (
        f"ComplaintReceived failed validation: {field}: "
        f"String should match pattern '{ev.ID_PATTERN}'"
    )


def test_the_reason_names_the_fields_and_never_carries_their_values() -> None:
    value = _complaint(received_at=SECRET_WORDS)
    del value["order_id"]
    with pytest.raises(InvalidInput) as caught:
        ev.parse(ev.ComplaintReceived, value)
    reason = str(caught.value)
    assert reason.startswith("ComplaintReceived failed validation: order_id: Field required")
    assert reason.endswith("(and 1 more)")
    assert SECRET_WORDS not in reason


def _review(**fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "dispute_id": "d-1",
        "review_id": "r-1",
        "kind": "GRIEVANCE",
        "grievance_id": "g3",
        "decision": "UPHOLD",
        "reviewer": "alice",
        "note": "photo shows the leak",
        "decided_at": datetime(2026, 12, 4, 20, 0, tzinfo=UTC),
        "item_key": "grievance:g3",
    }
    return {**value, **fields}


@pytest.mark.parametrize("field", ["kind", "decision", "reviewer", "note"])
def test_a_nul_character_in_a_review_decision_is_invalid_input_for_every_reader(
    field: str,
) -> None:
    """Pricing and the recorder both read review.decided through ev.parse: the recorder's
    insert of such a text would otherwise fail its whole batch, on every redelivery."""
    from services.recorder.projection import rows_for

    assert rows_for("review.decided", _review()), "a valid decision is projected"
    value = _review(**{field: f"g3\x00{SECRET_WORDS}"})
    with pytest.raises(InvalidInput, match=f"ReviewDecided failed validation: {field}: .*NUL"):
        rows_for("review.decided", value)


@pytest.mark.parametrize("field", ["dispute_id", "review_id", "grievance_id", "item_key"])
@pytest.mark.parametrize("odd", ODD_IDS.values(), ids=ODD_IDS.keys())
def test_a_review_decision_id_is_what_the_desk_uses_or_invalid_input(field: str, odd: str) -> None:
    """Pricing keeps review ids in a dispute's state for as long as the dispute is open."""
    assert ev.parse(ev.ReviewDecided, _review(**{field: "r" * 128}))
    with pytest.raises(InvalidInput, match=f"ReviewDecided failed validation: {field}: String"):
        ev.parse(ev.ReviewDecided, _review(**{field: odd}))


@pytest.mark.parametrize(
    ("field", "longest"), [("reviewer", ev.MAX_NAME_CHARS), ("note", ev.MAX_NOTE_CHARS)]
)
def test_a_review_decision_holds_no_longer_name_or_note_than_the_desk_takes(
    field: str, longest: int
) -> None:
    assert ev.parse(ev.ReviewDecided, _review(**{field: "\u00e9" * longest}))
    with pytest.raises(InvalidInput, match=f"ReviewDecided failed validation: {field}: .*at most"):
        ev.parse(ev.ReviewDecided, _review(**{field: "\u00e9" * (longest + 1)}))


def test_a_review_decision_names_its_reviewer() -> None:
    with pytest.raises(InvalidInput, match="reviewer: String should have at least 1 character"):
        ev.parse(ev.ReviewDecided, _review(reviewer=""))
