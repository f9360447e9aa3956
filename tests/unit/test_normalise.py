"""Code-side normalisation of a judge's ruling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.domain import Ruling
from services.extractor.evidence import build_snapshot, evidence_fields
from services.judge.normalise import normalise, normalise_ruling
from tests.unit.orders import ARTICLE_ORDER

FIELDS = evidence_fields(build_snapshot(ARTICLE_ORDER))


@pytest.mark.parametrize("ruling", ["UPHELD", "REJECTED", "ESCALATE"])
def test_a_grounded_ruling_is_taken_as_given(ruling: str) -> None:
    assert normalise_ruling(ruling, ["derived.sla_exceeded"], FIELDS) is Ruling(ruling)


@pytest.mark.parametrize("ruling", ["UPHELD", "REJECTED"])
def test_a_decisive_ruling_citing_nothing_known_escalates(ruling: str) -> None:
    assert normalise_ruling(ruling, [], FIELDS) is Ruling.ESCALATE
    assert normalise_ruling(ruling, ["the customer's tone", "order.tip"], FIELDS) is (
        Ruling.ESCALATE
    )
    assert normalise_ruling(ruling, ["order_id"], FIELDS) is Ruling.ESCALATE


def test_escalate_needs_no_citation() -> None:
    assert normalise_ruling("ESCALATE", [], FIELDS) is Ruling.ESCALATE


@pytest.mark.parametrize("word", ["", "APPROVED", "upheld-ish", "YES", "U P H E L D"])
def test_unknown_ruling_words_escalate(word: str) -> None:
    result = normalise(word, ["delivered_at"], FIELDS)
    assert result.ruling is Ruling.ESCALATE
    assert "unknown ruling" in result.reason
    assert result.model_ruling == word


def test_case_whitespace_prefixes_and_comma_lists_are_tolerated() -> None:
    result = normalise(
        " upheld\n", ["Evidence.Derived.SLA_Exceeded, `placed_at`; nonsense"], FIELDS
    )
    assert result.ruling is Ruling.UPHELD
    assert result.cited_known == ("Evidence.Derived.SLA_Exceeded", "placed_at")
    assert result.cited_unknown == ("nonsense",)
    assert not result.changed


def test_audit_reason_says_why_code_overrode_the_model() -> None:
    result = normalise("REJECTED", ["vibes"], FIELDS)
    assert result.changed
    assert result.reason == "REJECTED cites only fields not in the snapshot: vibes"
    assert (
        normalise("UPHELD", [], FIELDS).reason == "UPHELD cites no field of the evidence snapshot"
    )


def test_item_keyed_derived_fields_are_citable() -> None:
    cited = ["derived.missing_units_estimate.Hyderabadi Biryani"]
    assert normalise_ruling("UPHELD", cited, FIELDS) is Ruling.UPHELD


@given(st.text(max_size=12), st.lists(st.text(max_size=20), max_size=4))
def test_result_is_escalate_unless_a_known_ruling_cites_a_known_field(
    word: str, cited: list[str]
) -> None:
    result = normalise(word, cited, FIELDS)
    assert result.ruling in set(Ruling)
    if result.ruling is not Ruling.ESCALATE:
        assert word.strip().upper() == result.ruling.value
        assert result.cited_known


@given(st.sampled_from(["UPHELD", "REJECTED"]), st.lists(st.text(max_size=20), max_size=4))
def test_nothing_is_grounded_in_an_empty_snapshot(word: str, cited: list[str]) -> None:
    assert normalise_ruling(word, cited, frozenset()) is Ruling.ESCALATE
