"""What a judge is shown of a grievance: the restatement beside the customer's own words."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from refund_bench import events as ev
from refund_bench.domain import Category
from refund_bench.llm.roles import (
    EXTRACTOR_PROMPT_VERSION,
    JUDGE_PROMPT_VERSION,
    GrievanceForJudge,
    build_judge_request,
    load_prompt,
)
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER
from services.extractor.evidence import freeze

SPAN = "Two of the four were missing completely."


def _extracted(span_text: str | None) -> ev.GrievanceExtracted:
    snapshot = freeze(ARTICLE_ORDER)
    start = ARTICLE_COMPLAINT.index(SPAN)
    return ev.GrievanceExtracted(
        dispute_id="d-1",
        order_id=ARTICLE_ORDER.order_id,
        grievance_id="g2",
        grievance_total=4,
        category="MISSING_ITEM",
        text="2 of the 4 Chicken Biryani ordered were not delivered.",
        span_start=start,
        span_end=start + len(SPAN),
        span_text=span_text,
        item_name="Chicken Biryani",
        item_quantity=2,
        snapshot_sha256=snapshot.sha256,
        snapshot_json=snapshot.json,
        extractor_model="m",
        extractor_prompt_version="extractor/v1",
        extracted_at=datetime(2026, 12, 3, 19, 0, tzinfo=UTC),
    )


def _shown(grievance: ev.GrievanceExtracted) -> dict[str, Any]:
    request = build_judge_request(
        GrievanceForJudge.of(grievance, Category.MISSING_ITEM),
        freeze(ARTICLE_ORDER).data,
        prompt=load_prompt(JUDGE_PROMPT_VERSION),
    )
    shown: dict[str, Any] = json.loads(request.messages[-1]["content"])["grievance"]
    return shown


def test_a_judge_reads_the_customers_words_beside_the_restatement() -> None:
    shown = _shown(_extracted(SPAN))
    assert shown["span_text"] == SPAN, "the customer never named the dish; a judge can see that"
    assert shown["text"] == "2 of the 4 Chicken Biryani ordered were not delivered."
    assert (shown["item_name"], shown["item_quantity"]) == ("Chicken Biryani", 2)


def test_a_grievance_extracted_before_the_words_travelled_is_shown_without_them() -> None:
    shown = _shown(_extracted(None))
    assert "span_text" not in shown
    assert set(shown) == {"grievance_id", "category", "text", "item_name", "item_quantity"}


def test_the_judges_prompt_tells_them_what_the_words_are_for() -> None:
    prompt = load_prompt(JUDGE_PROMPT_VERSION)
    assert JUDGE_PROMPT_VERSION == "judge/v3"
    assert "`span_text`" in prompt.text
    assert "goes beyond `span_text`" in prompt.text


def test_the_judges_read_an_item_named_without_a_number_as_the_extractor_resolves_it() -> None:
    """The extractor gives such a claim the whole ordered quantity; a judge told that more units
    than the words state means ESCALATE must be told that this is not more, or a faithful judge
    escalates every "the biryani was cold" on an order of four."""
    extractor = " ".join(load_prompt(EXTRACTOR_PROMPT_VERSION).text.split())
    judge = " ".join(load_prompt(JUDGE_PROMPT_VERSION).text.split())
    assert "whole ordered quantity when the customer names the item without a number" in extractor
    assert "An item named without a number" in judge
    assert "equal to the ordered quantity does not go beyond those words" in judge


def test_each_draw_of_each_seat_has_a_seed_of_its_own() -> None:
    """A redraw of an unreadable answer is not the same request again, and never another
    seat's draw: every draw of a bench of up to 15 seats has its own seed."""
    from refund_bench.llm_setup import JudgePanelSettings
    from services.judge.handler import DRAWS_PER_SEAT, redraw_seed

    panel = JudgePanelSettings(judge_count=15)
    seeds = [
        redraw_seed(panel.seat_seed(seat), draw)
        for seat in range(15)
        for draw in range(DRAWS_PER_SEAT)
    ]
    assert len(set(seeds)) == len(seeds)
    assert [redraw_seed(panel.seat_seed(seat), 0) for seat in range(15)] == [
        panel.seat_seed(seat) for seat in range(15)
    ]


def test_a_cached_answer_keeps_the_seed_it_was_drawn_with() -> None:
    from services.judge.handler import seal, unseal

    raw = '{"ruling": "UPHELD",\n "confidence": 0.9, "evidence_cited": [], "reasoning": "x"}'
    assert unseal(seal(raw, 1_001_003)) == (raw, 1_001_003, None)
    assert unseal(seal("", 1000)) == ("", 1000, None)
    assert unseal(raw) == (raw, None, None), "an answer cached before answers carried their seed"
    assert unseal("seed=x\n{}") == ("seed=x\n{}", None, None)
    assert unseal(f"seed=1000\n{raw}") == (raw, 1000, None), "cached before draws were marked"
    nested = "seed=1 unreadable=" + "[" * 100_000 + "\n{}"
    assert unseal(nested) == (nested, None, None), "a corrupt value is an answer, not a crash"


@pytest.mark.parametrize(
    "reason",
    ["the answer was cut short (finish_reason is 'length')", "line 1\nline 2 \u00e9", ""],
)
def test_a_cached_answer_keeps_why_no_draw_could_be_read(reason: str) -> None:
    """A seat whose every draw was malformed is cached with why: the text of its last draw,
    which may parse (cut short at its closing brace), is never read as a ruling."""
    from services.judge.handler import MAX_UNREADABLE_REASON_CHARS, seal, unseal

    raw = '{"ruling": "UPHELD", "confidence": 0.9, "evidence_cited": [], "reasoning": "x"}'
    assert unseal(seal(raw, 2_001_006, reason)) == (raw, 2_001_006, reason)
    long = unseal(seal(raw, 1000, "x" * 50_000)).unreadable
    assert long is not None
    assert long.startswith("x" * MAX_UNREADABLE_REASON_CHARS)
    assert len(long) < MAX_UNREADABLE_REASON_CHARS + 100
