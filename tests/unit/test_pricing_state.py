"""The pricing handler over a real state store: how long it keeps a dispute."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.errors import InvalidInput
from refund_bench.runtime.messages import Context, Message
from refund_bench.runtime.state import RETENTION_HEADER, BatchState, RecordState, StateStore
from services.extractor.evidence import build_snapshot
from services.pricing.handler import (
    HELD_RETENTION_S,
    PAID_RETENTION_S,
    SETTLED_RETENTION_S,
    PricingHandler,
)
from tests.records import with_fields
from tests.unit.orders import ARTICLE_ORDER, BIRYANI, RAITA

SNAPSHOT = build_snapshot(ARTICLE_ORDER)
GRIEVANCES = (
    ("g1", "LATE_DELIVERY", None, None),
    ("g2", "MISSING_ITEM", BIRYANI, 2),
    ("g3", "PACKAGING", RAITA, 1),
    ("g4", "PARTNER_CONDUCT", None, None),
)


def _verdict(gid: str, raita: str, **facts: Any) -> Message:
    category, item, quantity = next((c, i, q) for g, c, i, q in GRIEVANCES if g == gid)
    outcome = raita if gid == "g3" else "UPHELD"
    value = ev.VerdictDecided(
        dispute_id="d-1",
        order_id=facts.get("order_id", "order-1840"),
        grievance_id=gid,
        grievance_total=facts.get("grievance_total", len(GRIEVANCES)),
        category=category,
        item_name=item,
        item_quantity=quantity,
        snapshot_sha256=facts.get("snapshot_sha256", "0" * 64),
        outcome=outcome,
        votes_upheld=3,
        votes_rejected=0,
        votes_escalate=0,
        split="3-0",
        unanimous=True,
        rulings=[],
        decided_at=ev.now(),
    ).to_avro()
    return Message(t.VERDICT_DECIDED.name, 0, 0, "d-1", value, {}, 0)


def _review(decision: str) -> Message:
    value = ev.ReviewDecided(
        dispute_id="d-1",
        review_id="r-1",
        kind="GRIEVANCE",
        grievance_id="g3",
        decision=decision,
        reviewer="alice",
        decided_at=ev.now(),
    ).to_avro()
    return Message(t.REVIEW_DECIDED.name, 0, 0, "d-1", value, {}, 0)


def _headers(store: StateStore, handler: PricingHandler, message: Message) -> Mapping[str, Any]:
    """The changelog headers of the dispute's write for ``message`` (committed afterwards)."""
    batch = BatchState(store)
    record = RecordState(batch, 0)
    handler.handle(message, Context(record))
    record.merge_into_batch()
    ((_p, key, _value, headers),) = list(batch.changelog_records())
    assert key == "d-1"
    batch.apply()
    return headers


def _handler(cap_minor: int = 100_000) -> tuple[StateStore, PricingHandler]:
    store = StateStore("disputes", "pricing.disputes.changelog", retention_s=90 * 86400.0)
    store.open(0)
    return store, PricingHandler(lambda _sha: SNAPSHOT, cap_minor=cap_minor)


def _refused(store: StateStore, handler: PricingHandler, message: Message, reason: str) -> None:
    """``message`` is InvalidInput (``reason`` matched), and the store is left as it was."""
    before = store.values(0)
    with pytest.raises(InvalidInput, match=reason):
        handler.handle(message, Context(RecordState(BatchState(store), 0)))
    assert store.values(0) == before


def test_a_dispute_with_nothing_held_is_kept_as_long_as_a_refund_of_it_may_still_fail() -> None:
    """Paid: until Stripe can no longer report the refund failed (a REPAY then finds it)."""
    store, handler = _handler()
    for gid in ("g1", "g2", "g3"):
        assert _headers(store, handler, _verdict(gid, "UPHELD")) == {}, "not priced yet"
    settled = _headers(store, handler, _verdict("g4", "UPHELD"))
    assert settled == {RETENTION_HEADER: repr(PAID_RETENTION_S).encode()}


def test_a_dispute_that_paid_nothing_is_kept_only_as_long_as_redeliveries_come() -> None:
    store, handler = _handler()
    for gid in ("g1", "g2", "g3"):
        _headers(store, handler, with_fields(_verdict(gid, "UPHELD"), outcome="REJECTED"))
    rejected = with_fields(_verdict("g4", "UPHELD"), outcome="REJECTED")
    settled = _headers(store, handler, rejected)
    assert settled == {RETENTION_HEADER: repr(SETTLED_RETENTION_S).encode()}


def test_a_dispute_waiting_for_a_reviewer_is_kept_until_decided() -> None:
    """However long the queue takes: a decision that came after pricing forgot the dispute
    would be dead-lettered or kept unused, never priced."""
    store, handler = _handler()
    for gid in ("g1", "g2", "g3"):
        assert _headers(store, handler, _verdict(gid, "ESCALATE")) == {}, "not priced yet"
    held = _headers(store, handler, _verdict("g4", "ESCALATE"))
    assert held == {RETENTION_HEADER: repr(HELD_RETENTION_S).encode()}, "the raita line is held"
    assert HELD_RETENTION_S >= 10 * 365 * 86400
    decided = _headers(store, handler, _review("UPHOLD"))
    assert decided == {RETENTION_HEADER: repr(PAID_RETENTION_S).encode()}


def _priced(store: StateStore, handler: PricingHandler, message: Message) -> Mapping[str, Any]:
    """The one ``refund.priced`` value ``message`` leads to (its state write applied)."""
    batch = BatchState(store)
    record = RecordState(batch, 0)
    (emit,) = handler.handle(message, Context(record))
    record.merge_into_batch()
    batch.apply()
    return emit.value


def _kept(store: StateStore, handler: PricingHandler, message: Message) -> None:
    """``message`` is kept in the state (applied) and prices nothing yet."""
    batch = BatchState(store)
    record = RecordState(batch, 0)
    assert list(handler.handle(message, Context(record))) == []
    record.merge_into_batch()
    batch.apply()


def _decided(
    review_id: str, kind: str, decision: str, item_key: str | None, grievance_id: str = "g3"
) -> Message:
    value = ev.ReviewDecided(
        dispute_id="d-1",
        review_id=review_id,
        kind=kind,
        grievance_id=grievance_id if kind == "GRIEVANCE" else None,
        decision=decision,
        reviewer="alice",
        decided_at=ev.now(),
        item_key=item_key,
    ).to_avro()
    return Message(t.REVIEW_DECIDED.name, 0, 0, "d-1", value, {}, 0)


def test_an_approval_covers_the_round_it_was_made_on_not_a_later_larger_total() -> None:
    """Cap 50000: the article's 68900 is held and approved; upholding the raita raises the
    total to 74900, which goes back to review instead of being paid on the old approval."""
    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    held = _priced(store, handler, _verdict("g3", "ESCALATE"))
    assert (held["round"], held["decision"], held["total_minor"]) == (1, "HELD_FOR_REVIEW", 68900)

    approved = _priced(store, handler, _decided("r-1", "DISPUTE", "APPROVE", "dispute:round1"))
    assert (approved["decision"], approved["payable_minor"]) == ("REVIEW_APPROVED", 68900)
    assert approved["payment_reference"] == ARTICLE_ORDER.payment_reference, "from the snapshot"

    larger = _priced(store, handler, _decided("r-2", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (larger["round"], larger["decision"], larger["total_minor"]) == (
        3,
        "HELD_FOR_REVIEW",
        74900,
    )
    assert larger["payable_minor"] == 0

    again = _priced(store, handler, _decided("r-3", "DISPUTE", "APPROVE", "dispute:round3"))
    assert (again["decision"], again["payable_minor"]) == ("REVIEW_APPROVED", 6000)


def test_an_approval_naming_no_round_is_invalid_once_there_are_several() -> None:
    """An APPROVE with no item (published before decisions named their item, replayed from
    the DLQ, say) after a later round priced a larger total: which total it approves is unknown,
    so it goes to the DLQ instead of covering a total above the cap nobody saw. On a dispute of
    one priced round it approves that round's total, as before."""
    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    _priced(store, handler, _verdict("g3", "ESCALATE"))
    larger = _priced(store, handler, _decided("r-1", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (larger["round"], larger["decision"], larger["total_minor"]) == (
        2,
        "HELD_FOR_REVIEW",
        74900,
    )
    _refused(
        store,
        handler,
        _decided("r-2", "DISPUTE", "APPROVE", None),
        "naming no dispute:round<n> item, and the dispute has 2 priced rounds",
    )

    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    _priced(store, handler, _verdict("g3", "ESCALATE"))
    approved = _priced(store, handler, _decided("r-1", "DISPUTE", "APPROVE", None))
    assert (approved["decision"], approved["payable_minor"]) == ("REVIEW_APPROVED", 68900)


def test_a_grievance_review_that_comes_before_the_verdicts_is_applied_in_round_one() -> None:
    """The recorder projected the raita's verdict and a reviewer upheld it while pricing had
    not yet read the verdicts: the decision waits in the state instead of the DLQ."""
    store, handler = _handler()
    _kept(store, handler, _decided("r-1", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    priced = _priced(store, handler, _verdict("g3", "ESCALATE"))
    assert (priced["round"], priced["total_minor"], priced["payable_minor"]) == (1, 74900, 74900)
    assert priced["held_grievances"] == []


def test_a_review_kept_for_a_grievance_the_dispute_lacks_is_set_aside_and_round_one_priced() -> (
    None
):
    """A decision on g9 came before the verdicts of a dispute of four grievances: it is named in
    round 1's reason, and the dispute is priced as the verdicts say."""
    store, handler = _handler()
    _kept(store, handler, _decided("r-1", "GRIEVANCE", "UPHOLD", "grievance:g9", grievance_id="g9"))
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    priced = _priced(store, handler, _verdict("g3", "ESCALATE"))
    assert (priced["round"], priced["total_minor"], priced["held_grievances"]) == (1, 68900, ["g3"])
    assert priced["reason"].endswith(
        "; review decisions for grievances not in the dispute set aside: g9"
    )
    upheld = _priced(store, handler, _decided("r-2", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (upheld["round"], upheld["total_minor"], upheld["payable_minor"]) == (2, 74900, 6000)
    assert "set aside" not in upheld["reason"]


def test_a_later_review_for_a_grievance_the_dispute_lacks_is_invalid() -> None:
    store, handler = _handler()
    for gid in ("g1", "g2", "g3", "g4"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    stray = _decided("r-1", "GRIEVANCE", "REJECT", "grievance:g9", grievance_id="g9")
    _refused(store, handler, stray, r"review overrides for grievances not in the dispute: \['g9'\]")


def test_a_dispute_review_for_an_unknown_dispute_is_invalid() -> None:
    store, handler = _handler()
    approval = _decided("r-1", "DISPUTE", "APPROVE", "dispute:round1")
    _refused(store, handler, approval, "for unknown dispute")


@pytest.mark.parametrize(
    ("kind", "item_key", "reason"),
    [
        ("GRIEVANCE", "grievance:g3", "r-1: a GRIEVANCE review cannot decide APPROVE"),
        ("DISPUTE", "dispute:round1", "approves round 1 of dispute d-1, which has 0 priced"),
    ],
)
def test_an_approval_before_any_round_was_priced_is_invalid_and_changes_nothing(
    kind: str, item_key: str, reason: str
) -> None:
    """Taken as an approval of any total, it would pay round one past the cap."""
    store, handler = _handler(cap_minor=50_000)
    _headers(store, handler, _verdict("g1", "ESCALATE"))  # the dispute is known, not priced
    _refused(store, handler, _decided("r-1", kind, "APPROVE", item_key), reason)
    for gid in ("g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    held = _priced(store, handler, _verdict("g3", "ESCALATE"))
    assert (held["decision"], held["total_minor"], held["payable_minor"]) == (
        "HELD_FOR_REVIEW",
        68900,
        0,
    )


def test_an_approval_of_a_round_not_yet_priced_is_invalid() -> None:
    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "ESCALATE"))
    _priced(store, handler, _verdict("g3", "ESCALATE"))
    approval = _decided("r-1", "DISPUTE", "APPROVE", "dispute:round2")
    _refused(store, handler, approval, "approves round 2 of dispute d-1, which has 1")


@pytest.mark.parametrize("kind", ["verdict", "review"])
def test_a_record_keyed_by_another_id_is_invalid_and_changes_no_state(kind: str) -> None:
    store, handler = _handler()
    message = _verdict("g1", "UPHELD") if kind == "verdict" else _review("UPHOLD")
    stray = dataclasses.replace(message, key=None)
    _refused(store, handler, stray, "record key None is not its dispute id 'd-1'")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("category", "DELIVERY_VIBES", "'DELIVERY_VIBES' is not a valid Category"),
        ("outcome", "MAYBE", "'MAYBE' is not a valid Ruling"),
    ],
)
def test_a_verdict_in_terms_this_version_does_not_know_is_invalid_and_not_kept(
    field: str, value: str, reason: str
) -> None:
    store, handler = _handler()
    unknown = with_fields(_verdict("g1", "UPHELD"), **{field: value})
    _refused(store, handler, unknown, f"verdict g1: {reason}")


@pytest.mark.parametrize("total", [0, -1])
def test_a_verdict_giving_its_dispute_no_grievances_is_invalid(total: int) -> None:
    store, handler = _handler()
    reason = f"verdict g1 gives the dispute {total} grievances"
    _refused(store, handler, _verdict("g1", "UPHELD", grievance_total=total), reason)


@pytest.mark.parametrize(
    ("fact", "other"),
    [("grievance_total", 2), ("grievance_total", 5), ("order_id", "order-9"),
     ("snapshot_sha256", "1" * 64)],
)  # fmt: skip
def test_a_verdict_disagreeing_with_the_disputes_first_is_invalid_and_the_dispute_still_prices(
    fact: str, other: object
) -> None:
    """A total it can never reach would leave the dispute unpriced; a total it has reached would
    price it without a grievance; another order or snapshot would price it on other evidence."""
    store, handler = _handler()
    _headers(store, handler, _verdict("g1", "UPHELD"))
    reason = f"verdict g2 disagrees with the dispute's first verdict: {fact} {other!r}, not"
    _refused(store, handler, _verdict("g2", "UPHELD", **{fact: other}), reason)
    for gid in ("g2", "g3"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    priced = _priced(store, handler, _verdict("g4", "UPHELD"))
    assert (priced["round"], priced["total_minor"]) == (1, 74900)


@pytest.mark.parametrize("sha", ["0" * 63 + "\x00", "A" * 64, "0" * 63, "0" * 65, ""])
def test_a_verdict_whose_snapshot_hash_is_no_hash_is_invalid_before_any_lookup(sha: str) -> None:
    """Pricing looks the snapshot up by its hash in PostgreSQL, which refuses a NUL in a query:
    such a verdict used to stop the stage at every redelivery instead of being dead-lettered."""
    looked_up: list[str] = []

    def lookup(wanted: str) -> dict[str, Any]:
        looked_up.append(wanted)
        return SNAPSHOT

    store = StateStore("disputes", "pricing.disputes.changelog", retention_s=90 * 86400.0)
    store.open(0)
    handler = PricingHandler(lookup, cap_minor=100_000)
    for gid in ("g1", "g2", "g3"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    looked_up.clear()
    last = with_fields(_verdict("g4", "UPHELD"), snapshot_sha256=sha)
    _refused(store, handler, last, "VerdictDecided failed validation: snapshot_sha256: ")
    assert looked_up == []


def test_a_verdict_after_all_of_the_disputes_verdicts_is_invalid() -> None:
    store, handler = _handler()
    for gid in ("g1", "g2", "g3", "g4"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    stray = with_fields(_verdict("g1", "UPHELD"), grievance_id="g5")
    _refused(store, handler, stray, "verdict g5 comes after all 4 verdicts of the dispute")


def test_a_verdict_naming_an_item_not_on_the_order_is_invalid_when_it_comes() -> None:
    """Checked only when the dispute's last verdict came, it dead-lettered that last verdict
    instead, and the dispute was never priced."""
    store, handler = _handler()
    stray = with_fields(_verdict("g2", "UPHELD"), item_name="No Such Dish")
    _refused(store, handler, stray, "verdict g2 names 'No Such Dish', not a line item")
    for gid in ("g1", "g2", "g3"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    priced = _priced(store, handler, _verdict("g4", "UPHELD"))
    assert (priced["round"], priced["total_minor"]) == (1, 74900)


@pytest.mark.parametrize("decision", ["DECLINE", "APPROVE"])
def test_a_grievance_review_deciding_the_whole_dispute_is_invalid(decision: str) -> None:
    """Kept before the verdicts as a grievance's review, a DECLINE declined the whole dispute
    at round 1: nothing paid for four upheld grievances."""
    store, handler = _handler()
    stray = _decided("r-1", "GRIEVANCE", decision, "grievance:g3")
    _refused(store, handler, stray, f"a GRIEVANCE review cannot decide {decision}")
    for gid in ("g1", "g2", "g3"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    priced = _priced(store, handler, _verdict("g4", "UPHELD"))
    assert (priced["decision"], priced["payable_minor"]) == ("AUTO_APPROVED", 74900)


def _outputs(store: StateStore, handler: PricingHandler, message: Message) -> list[dict[str, Any]]:
    """The ``refund.priced`` values ``message`` leads to (none, or one), its write applied."""
    batch = BatchState(store)
    record = RecordState(batch, 0)
    emits = list(handler.handle(message, Context(record)))
    record.merge_into_batch()
    batch.apply()
    return [dict(emit.value) for emit in emits]


def _article_paid(store: StateStore, handler: PricingHandler) -> Mapping[str, Any]:
    """Round 1 of the article: 68900 paid automatically, the raita held."""
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    paid = _priced(store, handler, _verdict("g3", "ESCALATE"))
    assert (paid["round"], paid["decision"], paid["payable_minor"]) == (1, "AUTO_APPROVED", 68900)
    return paid


def test_repaying_a_failed_round_pays_its_amount_again_in_a_new_round_once() -> None:
    store, handler = _handler()
    _article_paid(store, handler)
    again = _priced(store, handler, _decided("r-1", "PAYOUT", "REPAY", "payout:round1"))
    assert (again["round"], again["decision"], again["total_minor"]) == (2, "AUTO_APPROVED", 68900)
    assert (again["already_paid_minor"], again["payable_minor"]) == (0, 68900)
    assert again["reason"].endswith("; round 1's refund of 68900 failed: no longer counted as paid")
    assert again["held_grievances"] == ["g3"], "the raita still waits for its reviewer"

    assert _outputs(store, handler, _decided("r-1", "PAYOUT", "REPAY", "payout:round1")) == []
    twice = _decided("r-2", "PAYOUT", "REPAY", "payout:round1")
    _refused(store, handler, twice, "r-2: round 1 of dispute d-1 was paid again already")

    upheld = _priced(store, handler, _decided("r-3", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (upheld["round"], upheld["already_paid_minor"], upheld["payable_minor"]) == (
        3,
        68900,
        6000,
    )


def test_a_round_whose_refund_failed_again_is_paid_again_from_its_second_item_once() -> None:
    """Round 1's refund waited for the customer, Stripe refunded it (its item closed as
    settled), then reported it failed after all: the second failure's item
    ``payout:round1:again`` pays it again, once; a REPAY on the round's own item after that is
    refused."""
    store, handler = _handler()
    _article_paid(store, handler)
    closed = _decided("r-1", "PAYOUT", "PAID_ELSEWHERE", "payout:round1")
    assert _outputs(store, handler, closed) == []
    again = _priced(store, handler, _decided("r-2", "PAYOUT", "REPAY", "payout:round1:again"))
    assert (again["round"], again["already_paid_minor"], again["payable_minor"]) == (2, 0, 68900)
    assert again["reason"].endswith("; round 1's refund of 68900 failed: no longer counted as paid")
    twice = _decided("r-3", "PAYOUT", "REPAY", "payout:round1")
    _refused(store, handler, twice, "r-3: round 1 of dispute d-1 was paid again already")


def test_closing_a_conflicting_request_prices_nothing_and_leaves_its_round_repayable() -> None:
    """A request for round 1 with another amount was refused (LEDGER_CONFLICT); its item is
    closed, which prices nothing. Round 1's own failure is decided apart: a REPAY of it still
    pays it again."""
    store, handler = _handler()
    _article_paid(store, handler)
    closed = _decided("r-1", "PAYOUT", "PAID_ELSEWHERE", "payout:round1:conflict")
    assert _outputs(store, handler, closed) == []
    again = _priced(store, handler, _decided("r-2", "PAYOUT", "REPAY", "payout:round1"))
    assert (again["round"], again["payable_minor"]) == (2, 68900)


def test_a_round_settled_elsewhere_prices_nothing_and_stays_paid() -> None:
    store, handler = _handler()
    _article_paid(store, handler)
    settled = _decided("r-1", "PAYOUT", "PAID_ELSEWHERE", "payout:round1")
    assert _outputs(store, handler, settled) == []
    upheld = _priced(store, handler, _decided("r-2", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (upheld["round"], upheld["already_paid_minor"], upheld["payable_minor"]) == (
        2,
        68900,
        6000,
    )


def test_closing_an_extraction_item_of_a_dispute_pricing_never_saw_prices_nothing() -> None:
    """The extractor priced the dispute, held, itself (its complaint's extraction failed):
    pricing has no state for it. Closing its EXTRACTION item prices nothing, keeps nothing and
    is not dead-lettered; neither is its redelivery."""
    store, handler = _handler()
    closed = _decided("r-1", "EXTRACTION", "RESOLVED_ELSEWHERE", "extraction")
    assert _outputs(store, handler, closed) == []
    assert _outputs(store, handler, closed) == []
    assert store.values(0) == {}


def test_closing_an_extraction_item_changes_nothing_pricing_keeps() -> None:
    store, handler = _handler()
    _article_paid(store, handler)
    before = store.values(0)
    closed = _decided("r-1", "EXTRACTION", "RESOLVED_ELSEWHERE", "extraction")
    assert _outputs(store, handler, closed) == []
    assert store.values(0) == before
    wrong = _decided("r-2", "EXTRACTION", "RESOLVED_ELSEWHERE", "dispute:round1")
    _refused(store, handler, wrong, "an EXTRACTION review must name its extraction item")


def test_a_decision_that_prices_nothing_keeps_a_held_dispute_until_decided() -> None:
    """Round 1 paid 68900 and holds the raita line; its refund failed and was settled by hand.
    That decision re-prices nothing, and the raita line still waits for a reviewer."""
    store, handler = _handler()
    _article_paid(store, handler)
    settled = _headers(store, handler, _decided("r-1", "PAYOUT", "PAID_ELSEWHERE", "payout:round1"))
    assert settled == {RETENTION_HEADER: repr(HELD_RETENTION_S).encode()}


def test_repaying_an_approved_round_above_the_cap_stays_within_the_approval() -> None:
    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    _priced(store, handler, _verdict("g3", "ESCALATE"))  # 68900 held by the cap
    approved = _priced(store, handler, _decided("r-1", "DISPUTE", "APPROVE", "dispute:round1"))
    assert (approved["round"], approved["payable_minor"]) == (2, 68900)
    again = _priced(store, handler, _decided("r-2", "PAYOUT", "REPAY", "payout:round2"))
    assert (again["round"], again["decision"], again["payable_minor"]) == (
        3,
        "REVIEW_APPROVED",
        68900,
    )


def _article_paid_then_held(store: StateStore, handler: PricingHandler) -> None:
    """Cap 70000: round 1 pays 68900 automatically; upholding the raita raises the total to
    74900, which round 2 holds for a reviewer (its item ``dispute:round2``)."""
    _article_paid(store, handler)
    held = _priced(store, handler, _decided("r-1", "GRIEVANCE", "UPHOLD", "grievance:g3"))
    assert (held["round"], held["decision"], held["total_minor"]) == (2, "HELD_FOR_REVIEW", 74900)
    assert (held["already_paid_minor"], held["payable_minor"]) == (68900, 0)


def test_a_repay_after_a_reviewer_declined_a_larger_total_still_pays_the_failed_round() -> None:
    """Round 1's 68900 was approved (automatically) and its refund failed with no money moved;
    a reviewer then declined round 2's larger total. The decline holds back the 6000 above what
    was approved, not round 1's amount: the REPAY pays 68900 again."""
    store, handler = _handler(cap_minor=70_000)
    _article_paid_then_held(store, handler)
    declined = _priced(store, handler, _decided("r-2", "DISPUTE", "DECLINE", "dispute:round2"))
    assert (declined["round"], declined["decision"], declined["payable_minor"]) == (
        3,
        "DECLINED",
        0,
    )
    again = _priced(store, handler, _decided("r-3", "PAYOUT", "REPAY", "payout:round1"))
    assert (again["round"], again["decision"]) == (4, "REVIEW_APPROVED")
    assert (again["total_minor"], again["already_paid_minor"], again["payable_minor"]) == (
        68900,
        0,
        68900,
    )
    assert again["lines"] == [], "the repayment alone: no line is promised beyond it"
    assert again["reason"].startswith("round 1's refund of 68900 failed and is paid again")
    assert "the dispute without it is DECLINED (a reviewer declined the dispute)" in again["reason"]

    rejected = _priced(store, handler, _decided("r-4", "GRIEVANCE", "REJECT", "grievance:g3"))
    assert (rejected["decision"], rejected["already_paid_minor"], rejected["payable_minor"]) == (
        "DECLINED",
        68900,
        0,
    ), "still declined: nothing above what was approved"


@pytest.mark.parametrize(("decision", "more"), [("APPROVE", 6000), ("DECLINE", 0)])
def test_a_repay_while_a_larger_total_waits_for_a_reviewer_pays_now_and_holds_the_rest(
    decision: str, more: int
) -> None:
    """Round 2 holds the larger total 74900 for a reviewer when round 1's refund of 68900 fails.
    The REPAY pays 68900 in round 3 at once, not only with an approval of the total; round 4
    holds the total again (round 3 closed round 2's review item), and its approval pays the
    6000 left, its decline nothing more."""
    store, handler = _handler(cap_minor=70_000)
    _article_paid_then_held(store, handler)
    again, held = _outputs(store, handler, _decided("r-2", "PAYOUT", "REPAY", "payout:round1"))
    assert (again["round"], again["decision"], again["payable_minor"]) == (
        3,
        "REVIEW_APPROVED",
        68900,
    )
    assert (again["total_minor"], again["already_paid_minor"], again["lines"]) == (68900, 0, [])
    assert "the dispute without it is HELD_FOR_REVIEW (total 74900 exceeds" in again["reason"]
    assert (held["round"], held["decision"], held["total_minor"]) == (4, "HELD_FOR_REVIEW", 74900)
    assert (held["already_paid_minor"], held["payable_minor"]) == (68900, 0)

    decided = _priced(store, handler, _decided("r-3", "DISPUTE", decision, "dispute:round4"))
    assert (decided["round"], decided["already_paid_minor"], decided["payable_minor"]) == (
        5,
        68900,
        more,
    )


def test_a_repay_on_a_declined_dispute_with_a_line_still_held_is_the_repayment_alone() -> None:
    """A declined dispute leaves nothing for a reviewer, whatever lines it shows held: the
    REPAY prices the repayment and no further declined round (the customer would be sent a
    refusal right after the repayment), and the dispute is not kept as waiting for review."""
    store, handler = _handler()
    _article_paid(store, handler)
    declined = _priced(store, handler, _decided("r-1", "DISPUTE", "DECLINE", "dispute:round1"))
    assert (declined["decision"], declined["held_grievances"]) == ("DECLINED", ["g3"])
    batch = BatchState(store)
    record = RecordState(batch, 0)
    repay = _decided("r-2", "PAYOUT", "REPAY", "payout:round1")
    emits = list(handler.handle(repay, Context(record)))
    record.merge_into_batch()
    ((_partition, _key, _value, headers),) = list(batch.changelog_records())
    batch.apply()
    (again,) = [dict(emit.value) for emit in emits]
    assert (again["round"], again["decision"], again["payable_minor"]) == (
        3,
        "REVIEW_APPROVED",
        68900,
    )
    assert headers == {RETENTION_HEADER: repr(PAID_RETENTION_S).encode()}, "paid, nothing held"


def test_a_repayment_round_holds_nothing_and_the_held_line_is_priced_again_after_it() -> None:
    """Round 1 paid 68900 and holds the raita; a reviewer then rejected the biryanis, so the
    dispute as it stands pays less than round 1 did. The REPAY still pays 68900, in a round of
    its own that holds nothing; the round after it holds the raita line again, so that the desk
    shows what upholding it pays."""
    store, handler = _handler()
    _article_paid(store, handler)
    rejected = _priced(store, handler, _decided("r-1", "GRIEVANCE", "REJECT", "grievance:g2", "g2"))
    assert (rejected["round"], rejected["payable_minor"]) == (2, 0)
    again, held = _outputs(store, handler, _decided("r-2", "PAYOUT", "REPAY", "payout:round1"))
    assert (again["round"], again["decision"], again["payable_minor"]) == (
        3,
        "REVIEW_APPROVED",
        68900,
    )
    assert (again["lines"], again["held_grievances"]) == ([], [])
    assert (held["round"], held["held_grievances"], held["payable_minor"]) == (4, ["g3"], 0)
    (raita,) = [line for line in held["lines"] if line["grievance_id"] == "g3"]
    assert raita["status"] == "HELD"


@pytest.mark.parametrize(
    ("decision", "item_key", "reason"),
    [
        ("REPAY", "payout:round2", "round 2 of dispute d-1 approved no payment this stage knows"),
        ("REPAY", "dispute:round1", "a PAYOUT review must name its payout:round<n> item"),
        ("PAID_ELSEWHERE", None, "a PAYOUT review must name its payout:round<n> item, not None"),
        ("UPHOLD", "payout:round1", "a PAYOUT review cannot decide UPHOLD"),
        ("REPAY", "payout:round1:conflict", "payout:round1:conflict, a payout request refused"),
    ],
)
def test_a_payout_decision_on_no_paid_round_is_invalid_and_changes_nothing(
    decision: str, item_key: str | None, reason: str
) -> None:
    store, handler = _handler()
    _article_paid(store, handler)
    _refused(store, handler, _decided("r-1", "PAYOUT", decision, item_key), reason)


def test_a_round_held_by_the_cap_cannot_be_repaid() -> None:
    store, handler = _handler(cap_minor=50_000)
    for gid in ("g1", "g2", "g3"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    held = _priced(store, handler, _verdict("g4", "UPHELD"))
    assert (held["decision"], held["payable_minor"]) == ("HELD_FOR_REVIEW", 0)
    repay = _decided("r-1", "PAYOUT", "REPAY", "payout:round1")
    _refused(store, handler, repay, "round 1 of dispute d-1 approved no payment")


_REVIEWS = st.one_of(
    st.tuples(st.just("GRIEVANCE"), st.sampled_from(["UPHOLD", "REJECT"]), st.just(0)),
    st.tuples(st.just("DISPUTE"), st.sampled_from(["APPROVE", "DECLINE"]), st.integers(1, 8)),
    st.tuples(st.just("PAYOUT"), st.sampled_from(["REPAY", "PAID_ELSEWHERE"]), st.integers(1, 8)),
)
_ITEM = {"GRIEVANCE": "grievance:g3", "DISPUTE": "dispute:round{}", "PAYOUT": "payout:round{}"}


@given(
    cap=st.sampled_from([50_000, 70_000, 100_000]),
    raita=st.sampled_from(["UPHELD", "ESCALATE"]),
    reviews=st.lists(_REVIEWS, max_size=12),
)
def test_rounds_that_count_as_paid_never_exceed_the_total_and_each_failure_is_repaid_once(
    cap: int, raita: str, reviews: list[tuple[str, str, int]]
) -> None:
    """Any sequence of reviewers' and payment operators' decisions, any of the paid rounds
    failing: a paying round brings what counts as paid (the rounds not repaid) exactly to its
    total, never past the order or the cap without an approval; a round is repaid only if it
    paid, and once, for its whole amount whatever was decided since; a redelivered decision
    prices nothing."""
    store, handler = _handler(cap_minor=cap)
    for gid in ("g1", "g2", "g4"):
        _headers(store, handler, _verdict(gid, "UPHELD"))
    rounds = [_priced(store, handler, _verdict("g3", raita))]
    paid: dict[int, int] = {}
    repaid: set[int] = set()

    def account(priced: Mapping[str, Any]) -> None:
        counted = sum(amount for r, amount in paid.items() if r not in repaid)
        assert priced["already_paid_minor"] == counted
        if priced["decision"] == "AUTO_APPROVED":
            assert priced["total_minor"] <= cap
        if priced["payable_minor"] > 0:
            assert priced["decision"] in ("AUTO_APPROVED", "REVIEW_APPROVED")
            assert counted + priced["payable_minor"] == priced["total_minor"]
            assert priced["total_minor"] <= ARTICLE_ORDER.charged_total_minor
            paid[priced["round"]] = priced["payable_minor"]

    account(rounds[0])
    for n, (kind, decision, round_) in enumerate(reviews):
        message = _decided(f"r-{n}", kind, decision, _ITEM[kind].format(round_))
        repays = kind == "PAYOUT" and decision == "REPAY"
        try:
            priced = _outputs(store, handler, message)
        except InvalidInput:
            assert kind != "GRIEVANCE"
            if repays:
                assert round_ not in paid or round_ in repaid
            continue
        if repays:
            assert round_ in paid
            assert round_ not in repaid
            assert priced[0]["payable_minor"] == paid[round_], "whatever was decided since"
            repaid.add(round_)
        if kind == "PAYOUT" and decision == "PAID_ELSEWHERE":
            assert priced == []
        elif repays and len(priced) == 2:  # held for review besides: held again after it
            assert (priced[1]["decision"], priced[1]["payable_minor"]) == ("HELD_FOR_REVIEW", 0)
        else:
            assert len(priced) == 1
        for value in priced:
            assert value["round"] == len(rounds) + 1
            rounds.append(value)
            account(value)
        assert _outputs(store, handler, message) == [], "a redelivery"


def test_a_payout_decision_on_a_dispute_pricing_does_not_keep_is_invalid_and_says_so() -> None:
    store, handler = _handler()
    repay = _decided("r-1", "PAYOUT", "REPAY", "payout:round1")
    _refused(store, handler, repay, r"no longer keeps \(35 days after its last round\)")
