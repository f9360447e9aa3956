"""Code-side normalisation of a judge's ruling."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from refund_bench.domain import Category, LineItem, Ruling
from services.extractor.evidence import (
    build_snapshot,
    claim_unrecorded,
    evidence_fields,
    silent_fields,
)
from services.judge.normalise import normalise, normalise_ruling
from tests.unit.orders import ARTICLE_ORDER, article_order

SNAPSHOT = build_snapshot(ARTICLE_ORDER)
FIELDS = evidence_fields(SNAPSHOT)


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


@pytest.mark.parametrize(
    "said",
    [
        "order.packaging_notes: null",
        "order.packaging_notes = null",
        "order.packaging_notes=None",
        "order.packaging_notes (null)",
        "order.packaging_notes is empty",
        "`order.packaging_notes`: not recorded",
        "Packaging notes are null per order.packaging_notes.",
        "**order.packaging_notes**: null",
        "[order.packaging_notes] null",
        "order.packaging_notes->null",
        "{order.packaging_notes: null}",
    ],
)
def test_a_field_cited_with_what_the_judge_says_of_it_is_that_field(said: str) -> None:
    """A REJECTED that cites a silent field with its value written beside it rests on silence
    as much as one citing the bare path: ESCALATE, not a field left unread."""
    silent = silent_fields(SNAPSHOT)
    rejected = normalise("REJECTED", [said, "order.partner_conduct_reports"], FIELDS, silent)
    assert rejected.ruling is Ruling.ESCALATE
    assert rejected.cited_known == ("order.packaging_notes", "order.partner_conduct_reports")
    assert rejected.cited_unknown == ()
    upheld = normalise("UPHELD", [said], FIELDS, silent)
    assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, True)


def test_the_longest_field_a_citation_begins_with_is_the_one_it_cites() -> None:
    """An item's name may hold a space or a parenthesis: the citation is read as the whole
    name, not as a shorter item's that the name begins with."""
    order = article_order(
        line_items=(
            LineItem(name="Biryani", quantity=1, unit_price_minor=30000, unit_weight_g=400),
            LineItem(name="Biryani (Large)", quantity=1, unit_price_minor=40000),
        )
    )
    snapshot = build_snapshot(order)
    fields, silent = evidence_fields(snapshot), silent_fields(snapshot)
    cited = ["derived.missing_units_estimate.Biryani (Large): null"]
    rejected = normalise("REJECTED", cited, fields, silent)
    assert rejected.cited_known == ("derived.missing_units_estimate.Biryani (Large)",)
    assert rejected.ruling is Ruling.ESCALATE
    # Words after a field that begin no other field leave the citation unknown, as before.
    unknown = normalise("REJECTED", ["order.tip: 20"], fields, silent)
    assert (unknown.ruling, unknown.cited_unknown) == (Ruling.ESCALATE, ("order.tip: 20",))


def test_every_field_a_citation_names_counts_not_only_the_first() -> None:
    """A silent field named second in a citation escalates a rejection as if named alone."""
    both = normalise(
        "REJECTED",
        ["derived.delay_minutes is 85 and order.packaging_notes is null"],
        FIELDS,
        silent_fields(SNAPSHOT),
    )
    assert both.cited_known == ("derived.delay_minutes", "order.packaging_notes")
    assert both.ruling is Ruling.ESCALATE


def test_a_plain_word_that_is_a_fields_short_name_cites_it_only_with_a_value() -> None:
    """ "currency" is a field's short name and an English word: in a judge's sentence it cites
    nothing, so the sentence stays an unknown citation; "currency: INR" cites the field."""
    for plain in ("paid in the right currency", "Currency mismatch suspected"):
        assert normalise("UPHELD", [plain], FIELDS).ruling is Ruling.ESCALATE
    assert normalise("UPHELD", ["currency: INR"], FIELDS).cited_known == ("currency",)


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


@st.composite
def written(
    draw: st.DrawFn,
    words: Sequence[str],
    prefixes: Sequence[str] = ("",),
    quotes: Sequence[str] = ("",),
) -> str:
    """One of ``words`` as a model may write it and normalisation reads it: in any mix of
    cases, after one of ``prefixes``, between one of ``quotes``, with whitespace around."""
    word = draw(st.sampled_from(prefixes)) + draw(st.sampled_from(words))
    upper = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    cased = "".join(c.upper() if u else c.lower() for c, u in zip(word, upper, strict=True))
    quote = draw(st.sampled_from(quotes))
    space = st.text(alphabet=" \t\r\n", max_size=2)
    return draw(space) + quote + cased + quote + draw(space)


RULING_WORDS = written([ruling.value for ruling in Ruling]) | st.text(max_size=12)
"""The three ruling words as a model may write them, or any other text."""
CITATIONS = st.lists(
    st.tuples(
        written(sorted(FIELDS), ("", "evidence.", "snapshot."), ("", "`", '"', "'")), st.just(True)
    )
    | st.tuples(st.text(max_size=20), st.just(False)),
    max_size=4,
)
"""Citations, each a field of ``FIELDS`` as a model may write it (``True``) or any text."""


@example(" Upheld\n", [("the customer's tone", False)])
@example("rejected", [("`Evidence.Order.Placed_At`", True), ("vibes", False)])
@given(RULING_WORDS, CITATIONS)
def test_result_is_escalate_unless_a_known_ruling_cites_a_known_field(
    word: str, citations: list[tuple[str, bool]]
) -> None:
    """The model's UPHELD or REJECTED, in any case and spacing, stands when it cites a field of
    the snapshot, in any case, prefixed or quoted; anything else is ESCALATE."""
    result = normalise(word, [cited for cited, _ in citations], FIELDS)
    if any(is_field for _, is_field in citations):
        assert result.cited_known
    said = word.strip().upper()
    decisive = said in (Ruling.UPHELD.value, Ruling.REJECTED.value)
    expected = Ruling(said) if decisive and result.cited_known else Ruling.ESCALATE
    assert result.ruling is expected


@given(st.sampled_from(["UPHELD", "REJECTED"]), st.lists(st.text(max_size=20), max_size=4))
def test_nothing_is_grounded_in_an_empty_snapshot(word: str, cited: list[str]) -> None:
    assert normalise_ruling(word, cited, frozenset()) is Ruling.ESCALATE


SILENT_ORDER = article_order(delivered_at=None, partner_conduct_reports=())
SILENT_SNAPSHOT = build_snapshot(SILENT_ORDER)
SILENT_FIELDS = evidence_fields(SILENT_SNAPSHOT)
SILENT = silent_fields(SILENT_SNAPSHOT)


@pytest.mark.parametrize(
    "cited",
    [
        ["delivered_at"],
        ["order.delivered_at", "derived.delay_minutes", "derived.sla_exceeded"],
        ["derived.absent_records"],
        ["order.packaging_condition_recorded", "packaging_notes"],
        ["partner_conduct_reports"],
        ["absent_records", "the customer's tone"],
    ],
)
def test_a_rejection_resting_only_on_missing_records_escalates(cited: list[str]) -> None:
    result = normalise("REJECTED", cited, SILENT_FIELDS, SILENT)
    assert result.ruling is Ruling.ESCALATE
    assert "missing evidence is never a rejection" in result.reason
    assert result.changed


@pytest.mark.parametrize(
    "cited",
    [
        ["delivered_at", "order.pickup_weight_actual_g"],
        ["order.delivered_at", "order.delivery_sla_minutes"],
        ["derived.sla_exceeded", "order.placed_at"],
    ],
)
def test_a_rejection_citing_a_missing_record_escalates_whatever_else_it_cites(
    cited: list[str],
) -> None:
    """A recorded fact beside it (the SLA, the order time) does not make up for the missing
    delivery time the rejection also rests on."""
    result = normalise("REJECTED", cited, SILENT_FIELDS, SILENT)
    assert result.ruling is Ruling.ESCALATE
    assert "missing evidence is never a rejection" in result.reason


def test_a_rejection_citing_only_recorded_facts_stands() -> None:
    cited = ["order.pickup_weight_actual_g", "order.placed_at"]
    assert normalise_ruling("REJECTED", cited, SILENT_FIELDS, SILENT) is Ruling.REJECTED
    # On time is a recorded fact: false is not silence for sla_exceeded.
    assert normalise_ruling("REJECTED", ["sla_exceeded"], FIELDS, silent_fields(SNAPSHOT)) is (
        Ruling.REJECTED
    )


def test_an_upheld_on_silent_evidence_stands_as_a_dissent_marked_for_the_tally() -> None:
    """The article's credulous seat upholds the raita claim citing the packaging flag, which
    is false (nothing recorded): the ruling stands, marked, and the tally never lets it make
    an UPHELD majority."""
    cited = ["order.packaging_condition_recorded"]
    result = normalise("UPHELD", cited, FIELDS, silent_fields(SNAPSHOT))
    assert result.ruling is Ruling.UPHELD
    assert result.cites_missing_evidence
    assert not result.changed


@pytest.mark.parametrize(
    ("ruling", "cited", "marked"),
    [
        ("UPHELD", ["derived.sla_exceeded"], False),
        ("UPHELD", ["derived.sla_exceeded", "order.packaging_notes"], True),
        ("ESCALATE", ["order.packaging_notes"], True),
        ("ESCALATE", [], False),
        ("REJECTED", ["order.packaging_condition_recorded"], True),
    ],
)
def test_a_ruling_is_marked_when_it_cites_any_field_holding_no_record(
    ruling: str, cited: list[str], marked: bool
) -> None:
    result = normalise(ruling, cited, FIELDS, silent_fields(SNAPSHOT))
    assert result.cites_missing_evidence is marked


ABSENT_ORDER = article_order(
    pickup_weight_expected_g=None, pickup_weight_actual_g=None, partner_rating_at_handover=None
)
ABSENT_SNAPSHOT = build_snapshot(ABSENT_ORDER)
ABSENT_FIELDS = evidence_fields(ABSENT_SNAPSHOT)
ABSENT = silent_fields(ABSENT_SNAPSHOT)


@pytest.mark.parametrize(
    "cited",
    [
        ["pickup_weights", "derived.line_totals_minor"],
        ["derived.absent_records.pickup_weights", "order.line_items"],
        ["absent_records.partner_rating", "order.placed_at"],
    ],
)
def test_an_absent_record_cited_by_its_name_is_missing_evidence(cited: list[str]) -> None:
    """``derived.absent_records`` names records (``pickup_weights``), not fields: a rejection
    citing one by that name rests on silence too, whatever recorded fact it also cites."""
    assert {"partner_rating", "pickup_weights"} <= set(ABSENT_SNAPSHOT["derived"]["absent_records"])
    result = normalise("REJECTED", cited, ABSENT_FIELDS, ABSENT)
    assert result.ruling is Ruling.ESCALATE
    assert result.cites_missing_evidence
    assert "missing evidence is never a rejection" in result.reason


def test_only_the_records_actually_absent_are_citable_by_name() -> None:
    """The article's order has its pickup weights: ``pickup_weights`` names nothing absent
    there, so citing it is citing no field of the snapshot."""
    assert "pickup_weights" not in FIELDS
    assert {"packaging_condition", "derived.absent_records.packaging_condition"} <= (
        silent_fields(SNAPSHOT)
    )
    assert {"pickup_weights", "absent_records.pickup_weights"} <= ABSENT
    assert ABSENT <= ABSENT_FIELDS


def test_silent_fields_are_exactly_the_empty_records() -> None:
    silent = silent_fields(SNAPSHOT)
    assert {"order.packaging_condition_recorded", "order.packaging_notes"} <= silent
    assert "derived.absent_records" in silent
    assert "packaging_notes" in silent
    for recorded in ("order.delivered_at", "derived.sla_exceeded", "derived.overcharge_minor"):
        assert recorded not in silent
        assert recorded in FIELDS
    assert silent <= FIELDS
    assert {"order.delivered_at", "derived.delay_minutes", "order.partner_conduct_reports"} <= (
        SILENT
    )


NO_RAITA_WEIGHT = build_snapshot(
    article_order(
        line_items=[
            {
                "name": "Hyderabadi Biryani",
                "quantity": 4,
                "unit_price_minor": 32000,
                "unit_weight_g": 550,
            },
            {"name": "Raita", "quantity": 1, "unit_price_minor": 6000, "unit_weight_g": None},
        ]
    )
)
"""The article's order without the raita's unit weight: its missing-unit estimate is null."""


@pytest.mark.parametrize(
    "parent",
    [
        "derived.missing_units_estimate",
        "missing_units_estimate",
        "Evidence.Derived.Missing_Units_Estimate",
        "order.line_items",
        "line_items",
        "order.line_items.1",
        "order.line_items[1]",
        "line_items[1]",
    ],
)
def test_a_ruling_citing_an_object_that_holds_a_silent_field_rests_on_silence(
    parent: str,
) -> None:
    """The estimates and the line items are recorded, but one of the values in them is not:
    which part a rejection citing the whole rests on is not on record, so it is ESCALATE. An
    UPHELD citing the whole is not marked: a missing-item claim citing every item's estimate
    rests on its own item's (the Biryani's 2 here), and marking it would send every such claim
    on an order with one unweighed item to review."""
    fields, silent = evidence_fields(NO_RAITA_WEIGHT), silent_fields(NO_RAITA_WEIGHT)
    assert NO_RAITA_WEIGHT["derived"]["missing_units_estimate"] == {
        "Hyderabadi Biryani": 2,
        "Raita": None,
    }
    assert parent not in silent

    rejected = normalise("REJECTED", [parent, "order.placed_at"], fields, silent)
    assert rejected.ruling is Ruling.ESCALATE
    assert rejected.cites_missing_evidence
    assert "missing evidence is never a rejection" in rejected.reason
    assert parent in rejected.reason
    upheld = normalise("UPHELD", [parent], fields, silent)
    assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, False)
    null_itself = normalise("UPHELD", ["derived.missing_units_estimate.Raita"], fields, silent)
    assert (null_itself.ruling, null_itself.cites_missing_evidence) == (Ruling.UPHELD, True)


@pytest.mark.parametrize(
    "recorded",
    [
        "derived.missing_units_estimate.Hyderabadi Biryani",
        "order.line_items.0",
        "line_items[0]",
        "order.line_items[1].unit_price_minor",
        "derived.line_totals_minor",
    ],
)
def test_a_ruling_citing_only_recorded_values_beside_a_silent_one_stands(recorded: str) -> None:
    fields, silent = evidence_fields(NO_RAITA_WEIGHT), silent_fields(NO_RAITA_WEIGHT)
    result = normalise("REJECTED", [recorded], fields, silent)
    assert (result.ruling, result.cites_missing_evidence) == (Ruling.REJECTED, False)


def test_only_a_path_a_silent_field_lies_under_holds_it() -> None:
    """``a.b`` holds ``a.b.c``, ``a.b.0.c`` and ``a.b[0].c``, not ``a.bc``: a field whose name
    merely begins like a silent one's is not above it."""
    allowed = frozenset({"a.b", "a.bc", "x.y", "x.y.0", "x.y[0]", "x.y.0.z", "x.y[0].z"})
    assert normalise_ruling("REJECTED", ["a.b"], allowed, frozenset({"a.bc"})) is Ruling.REJECTED
    for silent in ({"x.y.0.z"}, {"x.y[0].z"}):
        assert normalise_ruling("REJECTED", ["x.y"], allowed, frozenset(silent)) is (
            Ruling.ESCALATE
        )
    assert normalise_ruling("REJECTED", ["x.y[0]"], allowed, frozenset({"x.y[0].z"})) is (
        Ruling.ESCALATE
    )
    assert normalise_ruling("REJECTED", ["x.y.0.z"], allowed, frozenset({"x.y"})) is (
        Ruling.REJECTED
    ), "a field below a silent one is not silent for that"


COMMA_ITEM = "Biryani, large"
COMMA_ORDER = article_order(
    line_items=[
        {"name": COMMA_ITEM, "quantity": 4, "unit_price_minor": 32000, "unit_weight_g": None},
        {"name": "Raita", "quantity": 1, "unit_price_minor": 6000, "unit_weight_g": 200},
    ]
)
COMMA_SNAPSHOT = build_snapshot(COMMA_ORDER)


def test_a_field_named_after_an_item_with_a_comma_is_cited_whole() -> None:
    """An item's name may hold a comma: the field it keys is one citation, not two unknown
    halves. A rejection citing it where it holds no record (no unit weight, so no estimate)
    rests on missing evidence; an upheld claim citing its line total is grounded."""
    fields, silent = evidence_fields(COMMA_SNAPSHOT), silent_fields(COMMA_SNAPSHOT)
    estimate = f"derived.missing_units_estimate.{COMMA_ITEM}"
    assert estimate in silent

    rejected = normalise("REJECTED", ["order.placed_at", estimate], fields, silent)
    assert rejected.ruling is Ruling.ESCALATE
    assert rejected.cited_known == ("order.placed_at", estimate)
    assert "missing evidence is never a rejection" in rejected.reason

    upheld = normalise("UPHELD", [f"line_totals_minor.{COMMA_ITEM}"], fields, silent)
    assert upheld.ruling is Ruling.UPHELD
    assert upheld.cited_unknown == ()
    # An entry that is no field whole is read as a list, whose fields may hold a comma too.
    listed = normalise("UPHELD", [f"placed_at, {estimate}"], fields, silent)
    assert listed.cited_known == ("placed_at", estimate)
    assert listed.cites_missing_evidence
    said = normalise("REJECTED", [f"{estimate}: null"], fields, silent)
    assert (said.ruling, said.cited_known) == (Ruling.ESCALATE, (estimate,))


@pytest.mark.parametrize(
    ("category", "unrecorded"),
    [
        (Category.LATE_DELIVERY, False),
        (Category.MISSING_ITEM, False),
        (Category.PACKAGING, True),  # the article's raita: no packaging record
        (Category.PARTNER_CONDUCT, False),
        (Category.QUALITY, True),  # the order store keeps no quality record
        (Category.WRONG_ITEM, True),
        (Category.BILLING, False),
    ],
)
def test_which_claims_of_the_articles_order_rest_on_absent_records(
    category: Category, unrecorded: bool
) -> None:
    assert claim_unrecorded(category, FIELDS, silent_fields(SNAPSHOT)) is unrecorded


@pytest.mark.parametrize(("notes", "unrecorded"), [(None, True), ("", True), ("sealed", False)])
def test_a_packaging_check_recorded_without_notes_is_silent_on_the_packaging(
    notes: str | None, unrecorded: bool
) -> None:
    """The flag says a check was recorded; only its notes say what it found. A judge citing
    the flag alone cannot rest a ruling on a check that wrote nothing down."""
    order = article_order(packaging_condition_recorded=True, packaging_notes=notes)
    snapshot = build_snapshot(order)
    fields, silent = evidence_fields(snapshot), silent_fields(snapshot)
    assert claim_unrecorded(Category.PACKAGING, fields, silent, "Raita") is unrecorded
    flag = ["order.packaging_condition_recorded"]
    rejected = normalise("REJECTED", flag, fields, silent, claim_unrecorded=unrecorded)
    upheld = normalise("UPHELD", flag, fields, silent, claim_unrecorded=unrecorded)
    if unrecorded:
        assert rejected.ruling is Ruling.ESCALATE
        assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, True)
    else:
        assert rejected.ruling is Ruling.REJECTED
        assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, False)


def test_a_missing_item_claim_without_pickup_weights_rests_on_nothing_whatever_is_cited() -> None:
    """The judges cite the line items (recorded), not the absent weights: the claim itself has
    no record to rest on, so an UPHELD is marked and a REJECTED escalates all the same."""
    assert claim_unrecorded(Category.MISSING_ITEM, ABSENT_FIELDS, ABSENT)
    cited = ["order.line_items", "derived.line_totals_minor"]
    upheld = normalise("UPHELD", cited, ABSENT_FIELDS, ABSENT, claim_unrecorded=True)
    assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, True)
    rejected = normalise("REJECTED", cited, ABSENT_FIELDS, ABSENT, claim_unrecorded=True)
    assert rejected.ruling is Ruling.ESCALATE
    assert "rules on a claim whose records the order store does not have" in rejected.reason
    grounded = normalise("UPHELD", cited, ABSENT_FIELDS, ABSENT)
    assert not grounded.cites_missing_evidence, "the same citations on a recorded claim"
    for escalated in ([], cited):  # an ESCALATE needs no record: marked only for what it cites
        unsure = normalise("ESCALATE", escalated, ABSENT_FIELDS, ABSENT, claim_unrecorded=True)
        assert not unsure.cites_missing_evidence


@pytest.mark.parametrize("ruling", ["UPHELD", "REJECTED"])
def test_a_decisive_ruling_whose_citations_were_cut_escalates(ruling: str) -> None:
    """Grounded in what was kept, but the model cited more than a ruling keeps: what the rest
    says (an absent record, say) is not on record, so the ruling neither pays nor refuses."""
    result = normalise(ruling, ["derived.sla_exceeded"], FIELDS, citations_cut=True)
    assert result.ruling is Ruling.ESCALATE
    assert "cites more evidence than a ruling keeps" in result.reason
    assert normalise_ruling(ruling, ["derived.sla_exceeded"], FIELDS, citations_cut=True) is (
        Ruling.ESCALATE
    )
    assert normalise_ruling(ruling, ["derived.sla_exceeded"], FIELDS) is Ruling(ruling)


def test_an_escalate_whose_citations_were_cut_is_as_ruled_and_marked_for_what_it_cites() -> None:
    silent = silent_fields(SNAPSHOT)
    field = sorted(silent & FIELDS)[0]
    result = normalise("ESCALATE", [field], FIELDS, silent, citations_cut=True)
    assert result.ruling is Ruling.ESCALATE
    assert not result.changed
    assert result.cites_missing_evidence


def test_a_missing_item_claim_about_an_unweighed_item_rests_on_silence() -> None:
    """The pickup weights say nothing of how many units of an item with no unit weight are
    missing: a claim about it is unrecorded whatever a ruling cites (an UPHELD is marked, so
    three seats upholding it make no majority, and pricing would otherwise pay it in full); a
    claim about a weighed item of the same order is not."""
    fields, silent = evidence_fields(NO_RAITA_WEIGHT), silent_fields(NO_RAITA_WEIGHT)
    assert claim_unrecorded(Category.MISSING_ITEM, fields, silent, "Raita")
    assert not claim_unrecorded(Category.MISSING_ITEM, fields, silent, "Hyderabadi Biryani")
    packaging = [claim_unrecorded(Category.PACKAGING, fields, silent, i) for i in ("Raita", None)]
    assert packaging[0] == packaging[1], "an item adds records to a missing-item claim only"
    cited = ["derived.missing_units_estimate", "order.pickup_weight_actual_g"]
    raita = claim_unrecorded(Category.MISSING_ITEM, fields, silent, "Raita")
    upheld = normalise("UPHELD", cited, fields, silent, claim_unrecorded=raita)
    assert (upheld.ruling, upheld.cites_missing_evidence) == (Ruling.UPHELD, True)
    rejected = normalise("REJECTED", ["order.pickup_weight_actual_g"], fields, silent, raita)
    assert rejected.ruling is Ruling.ESCALATE
