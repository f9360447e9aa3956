"""The tally handler over a real state store: one verdict per grievance, then a small marker."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.errors import InvalidInput
from refund_bench.runtime.messages import Context, Message
from refund_bench.runtime.state import BatchState, RecordState, StateStore, encode_state
from services.tally.handler import DECIDED, bench_key, handle
from tests.records import with_fields


def _ruling(seat: int, ruling: str = "UPHELD") -> Message:
    value = ev.RulingCast(
        dispute_id="d-1",
        order_id="order-1840",
        grievance_id="g2",
        grievance_total=4,
        category="MISSING_ITEM",
        item_name="Chicken Biryani",
        item_quantity=2,
        judge_seat=seat,
        judge_count=3,
        ruling=ruling,
        model_ruling=ruling,
        confidence=0.9,
        evidence_cited=["derived.missing_items"],
        reasoning="The delivered weight is two portions short of the expected weight. " * 4,
        model="standin-judge",
        prompt_version="judge-v1",
        snapshot_sha256="0" * 64,
        raw_response="{}" * 100,
        cast_at=ev.now(),
    ).to_avro()
    return Message(t.RULING_CAST.name, 0, seat, "d-1", value, {}, 0)


def _store() -> StateStore:
    store = StateStore("benches", "tally.benches.changelog")
    store.open(0)
    return store


def _run(store: StateStore, message: Message) -> list[Mapping[str, Any]]:
    """One record in its own committed batch; the verdicts it emitted."""
    batch = BatchState(store)
    record = RecordState(batch, 0)
    emits = handle(message, Context(record))
    record.merge_into_batch()
    batch.apply()
    return [e.value for e in emits]


def test_the_third_seat_emits_the_verdict_once_and_the_state_shrinks_to_a_marker() -> None:
    store = _store()
    key = bench_key("d-1", "g2")
    assert _run(store, _ruling(0)) == []
    assert _run(store, _ruling(1, "REJECTED")) == []
    assert _run(store, _ruling(1)) == [], "a second ruling of seat 1 is a redelivery"
    pending = store.values(0)[key]
    assert len(pending["bench"]["rulings"]) == 2

    (verdict,) = _run(store, _ruling(2))
    assert (verdict["outcome"], verdict["split"], len(verdict["rulings"])) == ("UPHELD", "2-1", 3)
    marker = store.values(0)[key]
    assert set(marker) == {DECIDED}
    assert len(encode_state(marker) or b"") < len(encode_state(pending) or b"") / 10

    for seat in (0, 1, 2):  # the judge re-publishing the whole bench after a crash
        assert _run(store, _ruling(seat)) == []
    assert store.values(0)[key] == marker


def test_upholds_citing_missing_evidence_make_no_upheld_majority() -> None:
    """Two seats uphold citing only a record the order store does not have (the judge marks
    them), one escalates: the verdict is ESCALATE on a 2-1 split, each ruling keeping its
    mark for the audit."""
    store = _store()
    silent = {"evidence_cited": ["order.packaging_notes"], "cites_missing_evidence": True}
    assert _run(store, with_fields(_ruling(0), **silent)) == []
    assert _run(store, with_fields(_ruling(1), **silent)) == []
    (verdict,) = _run(store, _ruling(2, "ESCALATE"))
    assert (verdict["outcome"], verdict["split"], verdict["votes_upheld"]) == ("ESCALATE", "2-1", 2)
    marks = [r["cites_missing_evidence"] for r in verdict["rulings"]]
    assert marks == [True, True, False]


def test_rulings_citing_no_evidence_are_counted_as_escalate_whoever_wrote_them() -> None:
    """Three UPHELD rulings with no citation (a writer that skipped the judge's rule, a
    record replayed by hand) make no UPHELD verdict: the tally applies the rule itself."""
    store = _store()
    for seat in (0, 1):
        assert _run(store, with_fields(_ruling(seat), evidence_cited=[])) == []
    (verdict,) = _run(store, with_fields(_ruling(2), evidence_cited=[]))
    assert (verdict["outcome"], verdict["split"]) == ("ESCALATE", "3-0")
    assert [r["ruling"] for r in verdict["rulings"]] == ["ESCALATE"] * 3
    assert [r["model_ruling"] for r in verdict["rulings"]] == ["UPHELD"] * 3


def test_state_written_before_the_marker_existed_still_ignores_redeliveries() -> None:
    """An emitted bench kept whole (the earlier state format) is honoured as decided."""
    store = _store()
    for seat in (0, 1, 2):
        _run(store, _ruling(seat))
    key = bench_key("d-1", "g2")
    rulings = [
        {k: v for k, v in _ruling(seat).value.items() if k in _SUMMARY_FIELDS} for seat in (0, 1, 2)
    ]
    old = {"bench": {"judge_count": 3, "rulings": rulings, "emitted": True}, "meta": {}}
    store.install(0, key, encode_state(old), 0.0)
    assert _run(store, _ruling(1)) == []


_SUMMARY_FIELDS = {
    "judge_seat",
    "ruling",
    "model_ruling",
    "confidence",
    "evidence_cited",
    "reasoning",
    "model",
    "prompt_version",
}


def test_a_ruling_keyed_by_another_id_is_invalid_and_counts_for_nothing() -> None:
    """A dispute's bench lives in the partition of its key; counted elsewhere, the ruling would
    sit apart from its dispute's other seats."""
    store = _store()
    stray = dataclasses.replace(_ruling(0), key="d-2")
    with pytest.raises(InvalidInput, match="record key 'd-2' is not its dispute id 'd-1'"):
        _run(store, stray)
    assert store.values(0) == {}
    assert _run(store, _ruling(0)) == [], "the same seat, keyed right, is the first counted"
    assert len(store.values(0)[bench_key("d-1", "g2")]["bench"]["rulings"]) == 1


@pytest.mark.parametrize("confidence", [float("nan"), float("inf"), 1.5, -0.1])
def test_a_ruling_whose_confidence_is_no_probability_is_invalid_and_counts_for_nothing(
    confidence: float,
) -> None:
    """Stored in the bench, a NaN would come back from the changelog as null and make every
    later seat of the grievance fail: its verdict would never come."""
    store = _store()
    odd = with_fields(_ruling(0), confidence=confidence)
    with pytest.raises(InvalidInput, match=r"ruling confidence .* is outside 0\.\.1"):
        _run(store, odd)
    assert store.values(0) == {}
    assert _run(store, _ruling(0)) == []
    assert _run(store, _ruling(1)) == []
    assert len(_run(store, _ruling(2))) == 1, "the three good seats make the verdict"


@pytest.mark.parametrize(
    ("fact", "other"),
    [("category", "QUALITY"), ("item_name", "Raita"), ("item_quantity", 1),
     ("grievance_total", 3), ("order_id", "order-9"), ("snapshot_sha256", "1" * 64)],
)  # fmt: skip
def test_a_ruling_that_says_otherwise_of_its_grievance_is_invalid_and_the_verdict_is_the_seats(
    fact: str, other: object
) -> None:
    """The verdict carries the grievance as its rulings describe it, and pricing prices that:
    one seat describing another claim (full price for a missing item, not half for quality)
    must not decide what is paid."""
    store = _store()
    assert _run(store, _ruling(0)) == []
    assert _run(store, _ruling(1)) == []
    odd = with_fields(_ruling(2), **{fact: other})
    before = store.values(0)
    with pytest.raises(
        InvalidInput,
        match=f"ruling of seat 2 disagrees with the grievance's first ruling: {fact} {other!r}",
    ):
        _run(store, odd)
    assert store.values(0) == before
    [verdict] = _run(store, _ruling(2))
    assert (verdict["category"], verdict["item_quantity"]) == ("MISSING_ITEM", 2)


@pytest.mark.parametrize("judge_count", [0, -1, 16, 10**9])
def test_a_ruling_of_a_bench_no_panel_can_have_is_invalid(judge_count: int) -> None:
    """A first ruling of a bench of 10**9 seats would make the grievance's real rulings
    invalid, and its verdict would never come."""
    store = _store()
    odd = with_fields(_ruling(0), judge_count=judge_count)
    with pytest.raises(InvalidInput, match=f"judge_count {judge_count} is outside 1..15"):
        _run(store, odd)
    assert store.values(0) == {}


def test_a_bench_stored_before_the_facts_were_kept_takes_the_next_rulings() -> None:
    store = _store()
    first = {k: v for k, v in _ruling(0).value.items() if k in _SUMMARY_FIELDS}
    earlier = {"bench": {"judge_count": 3, "rulings": [first], "emitted": False}}
    store.install(0, bench_key("d-1", "g2"), encode_state(earlier), 0.0)
    assert _run(store, _ruling(1)) == []
    [verdict] = _run(store, _ruling(2))
    assert (verdict["split"], verdict["item_name"]) == ("3-0", "Chicken Biryani")


def test_a_corrupt_stored_bench_is_dead_lettered_without_quoting_the_rulings() -> None:
    """A stored bench that cannot be read (its rulings out of seat order, say) dead-letters
    the ruling with a reason naming the rule, not the stored rulings: their reasoning may
    quote the customer, and the reason is logged and kept with the dead letter."""
    store = _store()
    words = "The customer wrote: my flat is 221B and the rider threw the bag"
    stored = [
        {
            **{k: v for k, v in _ruling(seat).value.items() if k in _SUMMARY_FIELDS},
            "reasoning": words,
        }
        for seat in (1, 0)
    ]
    corrupt = {"bench": {"judge_count": 3, "rulings": stored}}
    store.install(0, bench_key("d-1", "g2"), encode_state(corrupt), 0.0)
    with pytest.raises(InvalidInput) as refused:
        _run(store, _ruling(2))
    assert refused.value.reason == (
        "ruling cannot be counted: the stored bench: Value error, rulings must be ordered by"
        " seat, got [1, 0]"
    )
