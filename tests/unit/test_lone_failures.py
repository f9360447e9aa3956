"""When a request the endpoint keeps failing is its own failure, and when it is an outage's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.lone_failures import LoneFailures

POISON = b'{"messages": "the request that fails"}'


def _answer_others(lone: LoneFailures, count: int, first: int = 0) -> None:
    for n in range(first, first + count):
        lone.answered(b"another request %d" % n, f"d-another-{n}")


def _fail_while_others_answered(lone: LoneFailures, answered: int = 10) -> str | None:
    """One failing call of ``POISON`` (dispute d-poison) during which ``answered`` other
    calls were answered."""
    mark = lone.mark("d-poison")
    _answer_others(lone, answered)
    return lone.failed(POISON, "d-poison", mark)


def test_a_request_failing_while_others_are_answered_fails_alone_on_its_third_call() -> None:
    lone = LoneFailures()

    first, second, third = (_fail_while_others_answered(lone) for _ in range(3))

    assert (first, second) == (None, None)
    assert third == (
        "it failed on 3 calls in a row, each retried, while the endpoint answered 30 calls of"
        " other disputes and failed 0"
    )
    assert len(lone) == 0, "given up on: forgotten"


def test_an_outage_never_makes_a_request_fail_alone() -> None:
    lone = LoneFailures()
    _answer_others(lone, 100)  # answered before the outage: not during the calls
    for n in range(20):
        mark = lone.mark("d-poison")
        assert lone.failed(POISON, "d-poison", mark) is None, n
        other = lone.mark("d-other")
        assert lone.failed(b"another request", "d-other", other) is None


def _fail_during_an_outage(lone: LoneFailures, other: int = 0) -> str | None:
    """One failing call of ``POISON`` during which another dispute's call failed too, and
    nothing was answered."""
    mark = lone.mark("d-poison")
    other_mark = lone.mark(f"d-other-{other}")
    assert lone.failed(b"other %d" % other, f"d-other-{other}", other_mark) is None
    return lone.failed(POISON, "d-poison", mark)


def test_a_call_during_which_other_disputes_failed_and_none_was_answered_starts_over() -> None:
    lone = LoneFailures()
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is None
    assert _fail_during_an_outage(lone) is None  # back to 0
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is not None


def test_calls_during_which_nothing_else_ended_count() -> None:
    """A stage that stopped fetching while its oldest batch waits asks nothing else: the
    request's later calls see no other call end, and still count."""
    lone = LoneFailures()
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone, answered=0) is None
    assert _fail_while_others_answered(lone, answered=0) is not None


def test_calls_before_any_other_dispute_is_answered_do_not_count() -> None:
    """A stage with nothing else to ask waits for other work before it gives up on one; and
    the failures of an outage in a quiet stage are not held against a request once the
    endpoint answers someone again."""
    lone = LoneFailures()
    for n in range(10):
        assert _fail_while_others_answered(lone, answered=0) is None, n
    assert _fail_while_others_answered(lone) is None  # the first call that counts
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is not None


def test_answers_to_the_requests_own_dispute_are_no_sign_the_endpoint_is_up() -> None:
    """One grievance of the dispute answered, the request failing: nothing else was asked."""
    lone = LoneFailures(calls=1)
    mark = lone.mark("d-poison")
    lone.answered(b"another grievance", "d-poison")
    assert lone.failed(POISON, "d-poison", mark) is None
    mark = lone.mark("d-poison")
    _answer_others(lone, 1)
    assert lone.failed(POISON, "d-poison", mark) is not None


def test_an_answer_to_the_request_sets_its_count_back() -> None:
    lone = LoneFailures()
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is None
    lone.answered(POISON, "d-poison")
    assert len(lone) == 0
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is None
    assert _fail_while_others_answered(lone) is not None


@pytest.mark.parametrize(("answered", "fails_alone"), [(8, False), (9, True)])
def test_a_request_fails_alone_only_while_nine_tenths_of_the_other_calls_are_answered(
    answered: int, fails_alone: bool
) -> None:
    """Per failing call, ``answered`` others answered and one other dispute's call failed:
    8 of 9 (89%) is an endpoint failing too often to blame the request; 9 of 10 is not."""
    lone = LoneFailures()
    reasons = []
    for n in range(3):
        mark = lone.mark("d-poison")
        _answer_others(lone, answered, first=10 * n)
        failing = lone.mark(f"d-other-{n}")
        assert lone.failed(b"other %d" % n, f"d-other-{n}", failing) is None
        reasons.append(lone.failed(POISON, "d-poison", mark))
    assert reasons[:2] == [None, None]
    assert (reasons[2] is not None) == fails_alone, reasons[2]
    if not fails_alone:  # it counts on: more answers bring the share up
        mark = lone.mark("d-poison")
        _answer_others(lone, 30, first=100)
        assert lone.failed(POISON, "d-poison", mark) is not None


def test_failures_of_the_requests_own_dispute_are_not_held_against_it() -> None:
    """A grievance's three judge seats fail together: each fails alone all the same."""
    lone = LoneFailures()
    seats = [POISON + b" seat %d" % seat for seat in range(3)]
    reasons: list[str | None] = []
    for _ in range(3):
        marks = [lone.mark("d-poison") for _ in seats]
        _answer_others(lone, 10)
        reasons = [lone.failed(seat, "d-poison", m) for seat, m in zip(seats, marks, strict=True)]
    assert all(reason is not None for reason in reasons), reasons


def test_the_oldest_failing_requests_are_forgotten_beyond_the_limit() -> None:
    lone = LoneFailures(max_requests=2)
    for request in (b"a", b"b", b"c"):
        mark = lone.mark(request.decode())
        _answer_others(lone, 1)
        assert lone.failed(request, request.decode(), mark) is None
    assert len(lone) == 2
    # "a" was forgotten: two more failing calls do not give up on it, a third does.
    for _ in range(2):
        mark = lone.mark("a")
        _answer_others(lone, 1)
        assert lone.failed(b"a", "a", mark) is None
    mark = lone.mark("a")
    _answer_others(lone, 1)
    assert lone.failed(b"a", "a", mark) is not None


@pytest.mark.parametrize(
    ("calls", "share", "message"),
    [(0, 0.9, "calls"), (3, 0.0, "answered_share"), (3, 1.5, "answered_share")],
)
def test_settings_out_of_range_are_refused(calls: int, share: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoneFailures(calls=calls, answered_share=share)


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 3)),  # (request, dispute) of each failure
        max_size=60,
    )
)
def test_nothing_fails_alone_while_the_endpoint_answers_nothing(
    failures: list[tuple[int, int]],
) -> None:
    lone = LoneFailures(calls=1, answered_share=0.1)
    for request, dispute in failures:
        mark = lone.mark(f"d-{dispute}")
        assert lone.failed(b"%d" % request, f"d-{dispute}", mark) is None


@given(
    st.lists(st.sampled_from(["answered", "nothing", "outage"]), min_size=1, max_size=40),
    st.integers(1, 4),
)
def test_a_request_fails_alone_after_enough_calls_from_an_answer_on_with_no_outage_between(
    during: list[str], calls: int
) -> None:
    """Per failing call, what else happened: others answered, nothing else ended, or another
    dispute's call failed with none answered (an outage's call, which starts the count over).
    The count starts with a call that saw another dispute answered."""
    lone = LoneFailures(calls=calls)
    in_a_row = 0  # counted from the first call that saw another dispute answered
    for n, kind in enumerate(during):
        if kind == "outage":
            assert _fail_during_an_outage(lone, other=n) is None, (during, calls)
            in_a_row = 0
            continue
        reason = _fail_while_others_answered(lone, answered=5 if kind == "answered" else 0)
        if kind == "answered" or in_a_row > 0:
            in_a_row += 1
        expected = in_a_row >= calls
        assert (reason is not None) == expected, (during, calls)
        if expected:
            in_a_row = 0


def test_two_disputes_asking_the_same_are_counted_apart() -> None:
    """One complaint sent twice makes the same request body for two disputes."""
    lone = LoneFailures()
    for dispute in ("d-first", "d-second", "d-first", "d-second"):
        mark = lone.mark(dispute)
        _answer_others(lone, 10)
        assert lone.failed(POISON, dispute, mark) is None, dispute
    mark = lone.mark("d-first")
    _answer_others(lone, 10)
    assert lone.failed(POISON, "d-first", mark) is not None
