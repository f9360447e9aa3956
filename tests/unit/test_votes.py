"""Counting a bench, and the tally state that makes each verdict come out exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from refund_bench.domain import Ruling
from services.tally.votes import (
    BenchState,
    RulingSummary,
    add_ruling,
    count_votes,
    is_complete,
    tally,
)

U, R, E = Ruling.UPHELD, Ruling.REJECTED, Ruling.ESCALATE


def summary(seat: int, ruling: Ruling = U, reasoning: str = "weights") -> RulingSummary:
    return RulingSummary(
        judge_seat=seat,
        ruling=ruling,
        model_ruling=ruling.value,
        confidence=0.8,
        evidence_cited=("derived.pickup_weight_shortfall_g",),
        reasoning=reasoning,
        model="stand-in",
        prompt_version="judge.v1",
    )


def bench(*rulings: Ruling) -> dict[int, Ruling]:
    return dict(enumerate(rulings))


@pytest.mark.parametrize(
    ("rulings", "outcome", "split", "unanimous"),
    [
        ((U, U, U), U, "3-0", True),
        ((U, U, E), U, "2-1", False),
        ((R, E, R), R, "2-1", False),
        ((E, E, U), E, "2-1", False),  # the article's g3: two judges saw silent evidence
        ((U, R, E), E, "1-1-1", False),
        ((E, E, E), E, "3-0", True),
        ((U,), U, "1-0", True),
        ((U, R), E, "1-1", False),
        ((U, U, R, R, E), E, "2-2-1", False),
        ((U, U, U, R, R), U, "3-2", False),
    ],
)
def test_count_votes(
    rulings: tuple[Ruling, ...], outcome: Ruling, split: str, unanimous: bool
) -> None:
    count = count_votes(bench(*rulings), len(rulings))
    assert (count.outcome, count.split, count.unanimous) == (outcome, split, unanimous)
    assert count.votes_upheld == rulings.count(U)
    assert count.votes_rejected == rulings.count(R)
    assert count.votes_escalate == rulings.count(E)


@pytest.mark.parametrize(
    ("rulings", "k", "message"),
    [
        ({0: U, 1: U}, 3, "incomplete"),
        ({0: U, 1: U, 3: U}, 3, "outside"),
        ({-1: U, 0: U, 1: U}, 3, "outside"),
        ({}, 0, "at least 1"),
    ],
)
def test_count_votes_only_counts_complete_benches(
    rulings: dict[int, Ruling], k: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        count_votes(rulings, k)


def test_state_collects_seats_and_completes_once() -> None:
    state, new = add_ruling(None, 1, summary(1, E), 3)
    assert new
    assert not is_complete(state)
    state, new = add_ruling(state, 0, summary(0, U), 3)
    assert new
    assert state.seats() == {0, 1}
    assert [r.judge_seat for r in state.rulings] == [0, 1]
    state, new = add_ruling(state, 2, summary(2, E), 3)
    assert new
    assert is_complete(state)
    assert tally(state).outcome is E


def test_duplicate_seat_is_ignored_and_first_ruling_wins() -> None:
    state, _ = add_ruling(None, 0, summary(0, U, "first"), 3)
    again, new = add_ruling(state, 0, summary(0, R, "redelivered"), 3)
    assert not new
    assert again is state
    assert again.rulings[0].reasoning == "first"


def test_a_complete_bench_takes_no_new_seat() -> None:
    """A ruling redelivered once the bench is complete (as the tally kept decided benches
    before their marker) is never new, so it never makes a second verdict."""
    state: BenchState | None = None
    for seat in range(3):
        state, _ = add_ruling(state, seat, summary(seat), 3)
    assert state is not None
    after, new = add_ruling(state, 1, summary(1, R), 3)
    assert not new
    assert after is state


@pytest.mark.parametrize("emitted", [True, False])
def test_a_bench_stored_with_the_earlier_emitted_flag_loads_and_is_stored_without_it(
    emitted: bool,
) -> None:
    rulings = [summary(seat).model_dump(mode="json") for seat in range(3)]
    stored = {"judge_count": 3, "rulings": rulings, "emitted": emitted}
    state = BenchState.from_dict(stored)
    assert is_complete(state)
    assert state.to_dict() == {"judge_count": 3, "rulings": rulings}
    assert "emitted" not in state.to_json()
    assert BenchState.from_json(f'{{"judge_count": 1, "emitted": {str(emitted).lower()}}}')


@pytest.mark.parametrize(
    ("seat", "summary_seat", "k", "message"),
    [(3, 3, 3, "outside"), (-1, 0, 3, "outside"), (1, 2, 3, "does not match"), (0, 0, 0, "least")],
)
def test_add_ruling_rejects_bad_seats(seat: int, summary_seat: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        add_ruling(None, seat, summary(summary_seat), k)


def test_judge_count_must_match_the_stored_bench() -> None:
    state, _ = add_ruling(None, 0, summary(0), 3)
    with pytest.raises(ValueError, match="differs"):
        add_ruling(state, 1, summary(1), 5)


def test_tally_of_an_incomplete_bench_raises() -> None:
    state, _ = add_ruling(None, 0, summary(0), 3)
    with pytest.raises(ValueError, match="incomplete"):
        tally(state)


def test_state_round_trips_through_json_and_dict() -> None:
    state, _ = add_ruling(None, 2, summary(2, E), 3)
    state, _ = add_ruling(state, 0, summary(0, U), 3)
    assert BenchState.from_json(state.to_json()) == state
    assert BenchState.from_dict(state.to_dict()) == state
    assert state.to_dict()["rulings"][0]["ruling"] == "UPHELD"


@pytest.mark.parametrize(
    "doc",
    [
        {"judge_count": 3, "rulings": [summary(0).model_dump(), summary(0).model_dump()]},
        {"judge_count": 1, "rulings": [summary(1).model_dump()]},
        {"judge_count": 3, "rulings": [summary(1).model_dump(), summary(0).model_dump()]},
        {"judge_count": 3, "unexpected": True},
    ],
)
def test_corrupt_state_documents_are_refused(doc: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BenchState.from_dict(doc)


def test_summary_from_a_ruling_cast_value() -> None:
    value = {
        **summary(1).model_dump(),
        "dispute_id": "d-1",
        "grievance_id": "g2",
        "raw_response": "{}",
        "evidence_cited": ["derived.pickup_weight_shortfall_g"],
    }
    assert RulingSummary.from_ruling_cast(value) == summary(1)


@pytest.mark.parametrize(
    ("rulings", "silent", "outcome", "split"),
    [
        ((U, E, E), {0}, E, "2-1"),  # the article's raita: the one UPHELD cites no record
        ((U, U, E), {0, 1}, E, "2-1"),  # two seats taking the customer at their word
        ((U, U, E), {1}, E, "2-1"),
        ((U, U, U), {2}, U, "3-0"),  # two grounded upholds are a majority of three
        ((U, U, U), {0, 1, 2}, E, "3-0"),  # all upheld, none on a record: not a unanimous ESCALATE
        ((U,), {0}, E, "1-0"),
        ((R, R, U), {2}, R, "2-1"),
    ],
)
def test_upholds_citing_missing_evidence_count_in_the_split_but_never_make_a_majority(
    rulings: tuple[Ruling, ...], silent: set[int], outcome: Ruling, split: str
) -> None:
    count = count_votes(bench(*rulings), len(rulings), on_missing_evidence=frozenset(silent))
    assert count.outcome is outcome
    assert count.split == split
    assert count.votes_upheld == rulings.count(U)
    assert count.unanimous == (rulings.count(outcome) == len(rulings))


def test_the_tally_of_a_bench_reads_the_mark_of_each_seat() -> None:
    state = BenchState(
        judge_count=3,
        rulings=(
            summary(0).model_copy(update={"cites_missing_evidence": True}),
            summary(1).model_copy(update={"cites_missing_evidence": True}),
            summary(2, E),
        ),
    )
    assert tally(state).outcome is E
    assert BenchState.from_json(state.to_json()) == state
    restored = BenchState.from_dict(
        {
            "judge_count": 1,
            "rulings": [summary(0).model_dump(mode="json", exclude={"cites_missing_evidence"})],
        }
    )
    assert not restored.rulings[0].cites_missing_evidence, "a bench stored before the mark"


def test_a_rejection_marked_as_citing_missing_evidence_is_counted_as_escalate() -> None:
    value = {
        **summary(1, R).model_dump(mode="json"),
        "cites_missing_evidence": True,
    }
    assert RulingSummary.from_ruling_cast(value).ruling is E
    upheld = {**summary(1).model_dump(mode="json"), "cites_missing_evidence": True}
    assert RulingSummary.from_ruling_cast(upheld).ruling is U, "counted in the split"


@pytest.mark.parametrize("ruling", ["UPHELD", "REJECTED"])
def test_a_decisive_ruling_citing_nothing_is_counted_as_escalate_whoever_wrote_it(
    ruling: str,
) -> None:
    value = {
        **summary(1).model_dump(mode="json"),
        "ruling": ruling,
        "model_ruling": ruling,
        "evidence_cited": [],
    }
    counted = RulingSummary.from_ruling_cast(value)
    assert counted.ruling is E
    assert counted.model_ruling == ruling


# --- properties ---------------------------------------------------------------------------

benches = st.integers(min_value=1, max_value=9).flatmap(
    lambda k: st.lists(st.sampled_from(list(Ruling)), min_size=k, max_size=k)
)


@given(benches)
def test_outcome_is_a_strict_majority_or_escalate(rulings: list[Ruling]) -> None:
    k = len(rulings)
    count = count_votes(dict(enumerate(rulings)), k)
    if count.outcome is not E:
        assert 2 * rulings.count(count.outcome) > k
    else:
        assert 2 * rulings.count(U) <= k
        assert 2 * rulings.count(R) <= k
    if 2 * rulings.count(E) > k:
        assert count.outcome is E
    groups = [int(n) for n in count.split.split("-")]
    assert sum(groups) == k
    assert groups == sorted(groups, reverse=True)
    assert count.unanimous == (len(set(rulings)) == 1)
    assert count.votes_upheld + count.votes_rejected + count.votes_escalate == k


@given(benches, st.data())
def test_an_upheld_majority_always_has_a_majority_of_seats_citing_recorded_evidence(
    rulings: list[Ruling], data: st.DataObject
) -> None:
    k = len(rulings)
    silent = frozenset(data.draw(st.sets(st.integers(min_value=0, max_value=k - 1))))
    count = count_votes(dict(enumerate(rulings)), k, on_missing_evidence=silent)
    grounded = sum(1 for seat, r in enumerate(rulings) if r is U and seat not in silent)
    assert (count.outcome is U) == (2 * grounded > k)
    assert count == count_votes(dict(enumerate(rulings)), k, on_missing_evidence=silent)
    unmarked = count_votes(dict(enumerate(rulings)), k)
    assert (count.split, count.votes_upheld) == (unmarked.split, unmarked.votes_upheld)
    assert count.unanimous == (rulings == [count.outcome] * k), "every seat ruled the verdict"
    if unmarked.outcome is not U:
        assert count.outcome is unmarked.outcome, "the mark only ever takes an UPHELD away"


@given(benches, st.data())
def test_order_of_arrival_and_duplicates_never_change_the_state(
    rulings: list[Ruling], data: st.DataObject
) -> None:
    k = len(rulings)
    arrivals = data.draw(st.lists(st.integers(min_value=0, max_value=k - 1), max_size=3 * k))
    arrivals += data.draw(st.permutations(list(range(k))))
    state: BenchState | None = None
    first: dict[int, Ruling] = {}
    for seat in arrivals:
        flipped = rulings[seat] if seat not in first else data.draw(st.sampled_from(list(Ruling)))
        before = state
        state, new = add_ruling(state, seat, summary(seat, flipped), k)
        if seat in first:
            assert not new
            assert state == before
        else:
            assert new
            first[seat] = flipped
    assert state is not None
    assert is_complete(state)
    assert tally(state) == count_votes(dict(enumerate(rulings)), k)
    assert BenchState.from_json(state.to_json()) == state
