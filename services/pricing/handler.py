"""The pricing stage: verdict.decided + review.decided -> refund.priced, exactly once.

Per dispute, the ``pricing.disputes`` store keeps the verdicts so far, the reviewers' decisions
already applied, the last settlement round, each round's total and what earlier rounds approved.
When the N-th verdict arrives, round 1 is priced; each new review decision re-prices the next
round, which may pay only what earlier rounds have not approved. A payment operator's REPAY of
a round whose refund failed takes that round's amount off what was approved, and the next round
pays it again, whatever was decided since (a later decline or a total held by the cap holds back
only what no round approved before); PAID_ELSEWHERE closes the failure and prices nothing, as
does RESOLVED_ELSEWHERE on a complaint whose extraction failed. A
reviewer's APPROVE covers the total of the round it was made on: a later round above both that
total and the cap is held for review again. A grievance's review may arrive before the dispute's
verdicts (the two topics are read independently); it is kept and applied when round 1 is priced
(or set aside then, if it names a grievance the dispute does not have). Both inputs are keyed by
dispute_id and co-partitioned; the range assignor gives one instance the same partition of both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.db.payout_rounds import PRICING_KEEPS_PAID_S, payout_item_round
from refund_bench.db.snapshots import payment_reference
from refund_bench.domain import (
    DISPUTE_ITEM,
    Category,
    Decision,
    ReviewDecision,
    Ruling,
    review_problem,
)
from refund_bench.errors import InvalidInput
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import PRICING
from services.pricing.table import (
    DEFAULT_CAP_CURRENCY,
    GrievanceVerdict,
    PricedRefund,
    ReviewOverrides,
    line_item_names,
    pay_again,
    price_refund,
)

log = logging.getLogger(__name__)

RETENTION_S = 90 * 24 * 3600.0
"""How long a dispute's state outlives its last write while it waits for its verdicts (or was
last priced before states said whether anything is held): a dispute-level review decision that
comes later finds no dispute and goes to the dead-letter topic with that reason; a
grievance-level one is kept as if it came before the verdicts (with a warning in the log) and
expires unused."""
HELD_RETENTION_S = 10 * 365 * 24 * 3600.0
"""How long a dispute whose last round held anything for review outlives its last write: in
effect until a reviewer decides it, however long the queue takes, since a decision that came
after pricing forgot the dispute would be dead-lettered or kept unused instead of re-pricing."""
SETTLED_RETENTION_S = 7 * 24 * 3600.0
"""How long a settled dispute's state (its last round held nothing for review) that counts no
money paid outlives its last write: long enough to ignore redelivered verdicts."""
PAID_RETENTION_S = PRICING_KEEPS_PAID_S
"""The same for a settled dispute that counts money paid: Stripe may report a refund failed up
to 30 days after taking it on, and a payment operator's REPAY then needs the dispute here (the
desk records a REPAY only within :data:`~refund_bench.db.payout_rounds.REPAY_WINDOW_S`)."""
SnapshotLookup = Callable[[str], Mapping[str, Any]]
StateLookup = Callable[[str], dict[str, Any] | None]


class Taken(NamedTuple):
    """One input applied to its dispute's state (not stored yet)."""

    dispute_id: str
    state: dict[str, Any]
    reprice: bool
    """Whether the input prices the dispute's next round (once all its verdicts are in)."""
    repaid: tuple[int, int] | None = None
    """A payment operator's REPAY: (the failed round, its amount), which the next round pays
    again."""


_PAYING = (Decision.AUTO_APPROVED, Decision.REVIEW_APPROVED)


class PricingHandler:
    def __init__(
        self,
        snapshots: SnapshotLookup,
        cap_minor: int,
        cap_currency: str = DEFAULT_CAP_CURRENCY,
    ) -> None:
        self._snapshots = snapshots
        self._cap_minor = cap_minor
        self._cap_currency = cap_currency

    def spec(self) -> StageSpec:
        return StageSpec.of(PRICING, self.handle, store_retention_s=RETENTION_S, assignment="range")

    def handle(self, message: Message, ctx: Context) -> Sequence[Emit]:
        store = ctx.store()
        if message.topic == t.VERDICT_DECIDED.name:
            taken = self._take_verdict(message, store.get)
        else:
            taken = _take_review(message, store.get)
        if taken is None:  # a redelivery
            return ()
        dispute_id, state, reprice, repaid = taken
        outputs: list[Emit] = []
        complete = len(state["verdicts"]) == state["grievance_total"]
        if complete and (state["round"] == 0 or reprice):
            outputs, state["held"] = self._price(dispute_id, state, repaid)
        store.put(dispute_id, state, retention_s=_retention(state))
        return outputs

    def _take_verdict(self, message: Message, stored: StateLookup) -> Taken | None:
        """The dispute's state with the verdict added; ``None`` for a verdict already in it."""
        verdict = ev.parse(ev.VerdictDecided, message.value)
        message.require_key(verdict.dispute_id)
        ev.known(Category, verdict.category, f"verdict {verdict.grievance_id}")
        ev.known(Ruling, verdict.outcome, f"verdict {verdict.grievance_id}")
        if verdict.grievance_total < 1:
            raise InvalidInput(
                f"verdict {verdict.grievance_id} gives the dispute"
                f" {verdict.grievance_total} grievances"
            )
        state = stored(verdict.dispute_id) or _new_state()
        if state["grievance_total"] is None:  # the dispute's first verdict
            state.update(_dispute_facts(verdict))
        if verdict.grievance_id in state["verdicts"]:
            return None
        _check_facts(state, verdict)
        if verdict.item_name is not None and verdict.item_name not in line_item_names(
            self._snapshots(verdict.snapshot_sha256)
        ):
            raise InvalidInput(
                f"verdict {verdict.grievance_id} names {verdict.item_name!r}, not a line item"
                " of the order"
            )
        state["verdicts"][verdict.grievance_id] = {
            "category": verdict.category,
            "outcome": verdict.outcome,
            "item_name": verdict.item_name,
            "item_quantity": verdict.item_quantity,
        }
        return Taken(verdict.dispute_id, state, reprice=False)

    def _price(
        self, dispute_id: str, state: dict[str, Any], repaid: tuple[int, int] | None
    ) -> tuple[list[Emit], bool]:
        """The ``refund.priced`` of the dispute's next round, and whether it left anything for a
        reviewer (held lines, or the whole dispute); updates ``state``.

        ``repaid`` (a REPAY's failed round and amount, already no longer counted as approved):
        the round pays that amount again (:func:`~services.pricing.table.pay_again`). When that
        is a round of its own (no lines) and the dispute holds anything for a reviewer besides
        (held lines, or the whole dispute), the round after it prices the dispute as it stands,
        held again: the recorder closes the dispute items of rounds before a new one, and the
        desk shows the held lines of the last round.
        """
        verdicts = [
            GrievanceVerdict(
                grievance_id=gid,
                category=Category(v["category"]),
                outcome=Ruling(v["outcome"]),
                item_name=v["item_name"],
                item_quantity=v["item_quantity"],
            )
            for gid, v in state["verdicts"].items()
        ]
        stray = _set_aside_stray_reviews(dispute_id, state) if state["round"] == 0 else []
        snapshot = self._snapshots(state["snapshot_sha256"])

        def priced_now() -> PricedRefund:
            return price_refund(
                verdicts,
                snapshot,
                cap_minor=self._cap_minor,
                cap_currency=self._cap_currency,
                already_approved_minor=state["approved_minor"],
                overrides=_overrides(state["overrides"]),
            )

        priced = priced_now()
        if stray:
            aside = ", ".join(stray)
            note = f"review decisions for grievances not in the dispute set aside: {aside}"
            priced = priced.model_copy(update={"reason": f"{priced.reason}; {note}"})
        if repaid is None:
            return [self._round(dispute_id, state, snapshot, priced)], _holds(priced)
        again = pay_again(priced, *repaid)
        rounds = [self._round(dispute_id, state, snapshot, again)]
        if not again.lines and _holds(priced):
            priced = priced_now()
            rounds.append(self._round(dispute_id, state, snapshot, priced))
        return rounds, _holds(priced)

    def _round(
        self,
        dispute_id: str,
        state: dict[str, Any],
        snapshot: Mapping[str, Any],
        priced: PricedRefund,
    ) -> Emit:
        """``priced`` as the dispute's next round: counted in ``state``, and its event."""
        state["round"] += 1
        state.setdefault("totals", {})[str(state["round"])] = priced.total_minor
        if priced.decision in _PAYING and priced.payable_minor > 0:
            state["approved_minor"] += priced.payable_minor
            state.setdefault("payables", {})[str(state["round"])] = priced.payable_minor
        event = to_event(
            priced,
            dispute_id,
            state["order_id"],
            state["round"],
            state["snapshot_sha256"],
            payment_reference(snapshot),
        )
        return Emit(t.REFUND_PRICED.name, dispute_id, event.to_avro())


def _holds(priced: PricedRefund) -> bool:
    """Whether a round leaves anything for a reviewer: held lines, or the whole dispute. A
    declined dispute leaves nothing (the recorder closes its grievance items), whatever lines
    it still shows held."""
    if priced.decision is Decision.DECLINED:
        return False
    return bool(priced.held_grievances) or priced.decision is Decision.HELD_FOR_REVIEW


def _retention(state: Mapping[str, Any]) -> float | None:
    """How long the dispute's state outlives this write (``None``: :data:`RETENTION_S`): held
    for review, :data:`HELD_RETENTION_S`; settled, as long as a refund of it may still fail if
    it paid anything, else as long as redeliveries come."""
    if state["round"] == 0 or "held" not in state:
        return None
    if state["held"]:
        return HELD_RETENTION_S
    return PAID_RETENTION_S if state["approved_minor"] > 0 else SETTLED_RETENTION_S


def to_event(
    priced: PricedRefund,
    dispute_id: str,
    order_id: str,
    round_: int,
    snapshot_sha256: str,
    payment_reference: str | None,
) -> ev.RefundPriced:
    """The ``refund.priced`` event of one priced round, against the order's payment."""
    return ev.RefundPriced(
        dispute_id=dispute_id,
        order_id=order_id,
        round=round_,
        pricing_version=priced.pricing_version,
        currency=priced.currency,
        order_total_minor=priced.order_total_minor,
        lines=[
            ev.PricedLineEvent(
                grievance_id=line.grievance_id,
                category=line.category.value,
                outcome=line.outcome.value,
                status=line.status.value,
                amount_minor=line.amount_minor,
                proposed_minor=line.proposed_minor,
                rule=line.rule,
                item_name=line.item_name,
                quantity=line.quantity,
            )
            for line in priced.lines
        ],
        total_minor=priced.total_minor,
        already_paid_minor=priced.already_paid_minor,
        payable_minor=priced.payable_minor,
        cap_minor=priced.cap_minor,
        decision=priced.decision.value,
        held_grievances=list(priced.held_grievances),
        reason=priced.reason,
        snapshot_sha256=snapshot_sha256,
        payment_reference=payment_reference,
        priced_at=ev.now(),
    )


def _new_state() -> dict[str, Any]:
    """A dispute's state before anything is known of it (opened by its first verdict, or by a
    grievance review that came first; see :func:`_dispute_facts`)."""
    return {
        "order_id": None,
        "grievance_total": None,
        "snapshot_sha256": None,
        "verdicts": {},
        "reviews": [],
        "overrides": {"grievances": {}, "dispute": None},
        "round": 0,
        "approved_minor": 0,
        "totals": {},
        "payables": {},
        "repaid": [],
    }


def _dispute_facts(verdict: ev.VerdictDecided) -> dict[str, Any]:
    """What every verdict of a dispute carries alike, taken from its first."""
    return {
        "order_id": verdict.order_id,
        "grievance_total": verdict.grievance_total,
        "snapshot_sha256": verdict.snapshot_sha256,
    }


def _set_aside_stray_reviews(dispute_id: str, state: dict[str, Any]) -> list[str]:
    """Drop, before round 1, the kept decisions on grievances the dispute does not have, and
    return those grievance ids.

    Only a decision that came before the verdicts can name one here (a later one is checked as
    it arrives, and dead-lettered). Kept, it would make the dispute's last verdict invalid, and
    the dispute would never be priced; set aside, it is named in round 1's reason.
    """
    grievances: dict[str, str] = state["overrides"]["grievances"]
    stray = sorted(set(grievances) - set(state["verdicts"]))
    if stray:
        log.warning(
            "dispute %s has no grievance %s: the review decisions on them are set aside",
            dispute_id,
            ", ".join(stray),
        )
        state["overrides"]["grievances"] = {
            gid: ruling for gid, ruling in grievances.items() if gid not in stray
        }
    return stray


def _check_facts(state: Mapping[str, Any], verdict: ev.VerdictDecided) -> None:
    """:class:`InvalidInput` for a new verdict that disagrees with the dispute's first about
    what every verdict of it carries alike, or that comes when all of its verdicts are in.

    Kept, it would leave the dispute never priced (a total it can never reach) or price it
    against another order's evidence.
    """
    ev.agrees(
        _dispute_facts(verdict),
        state,
        f"verdict {verdict.grievance_id} disagrees with the dispute's first verdict",
    )
    if len(state["verdicts"]) >= state["grievance_total"]:
        raise InvalidInput(
            f"verdict {verdict.grievance_id} comes after all {state['grievance_total']} verdicts"
            " of the dispute"
        )


def _overrides(raw: Mapping[str, Any]) -> ReviewOverrides:
    dispute = raw.get("dispute")
    return ReviewOverrides(
        grievances={gid: Ruling(r) for gid, r in raw["grievances"].items()},
        dispute=ReviewDecision(dispute) if dispute else None,
        approved_total_minor=raw.get("approved_total_minor"),
    )


def _round_total(state: Mapping[str, Any], review: ev.ReviewDecided) -> int | None:
    """The total of the round an approval was made on: the round its review item names, else
    (a decision published before events named their item) the last priced round. ``None`` for
    a round priced before totals were kept (the approval then covers any total), and for a
    decision that is no approval.

    An approval of a round that was not priced is :class:`InvalidInput`: no reviewer saw a
    total, so there is no total it could cover (taken as any total, it would pay past the cap).
    So is one naming no item once the dispute has more than one priced round: the last round
    may have been priced after the reviewer looked (replayed from a DLQ, say), and its total,
    which may be above the cap, is not one anybody approved.
    """
    if review.decision != ReviewDecision.APPROVE.value:
        return None
    named = DISPUTE_ITEM.fullmatch(review.item_key or "")
    if named is None and state["round"] > 1:
        raise InvalidInput(
            f"review {review.review_id} approves dispute {review.dispute_id} naming no"
            f" dispute:round<n> item, and the dispute has {state['round']} priced rounds: which"
            " total it approves is unknown (decide the open item on the desk)"
        )
    approved_round = int(named[1]) if named else state["round"]
    if not 1 <= approved_round <= state["round"]:
        raise InvalidInput(
            f"review {review.review_id} approves round {approved_round} of dispute"
            f" {review.dispute_id}, which has {state['round']} priced round(s)"
        )
    totals: Mapping[str, int] = state.get("totals", {})
    return totals.get(str(approved_round))


def _take_review(message: Message, stored: StateLookup) -> Taken | None:
    """The dispute's state with the review decision applied; every decision re-prices the
    dispute but PAID_ELSEWHERE. ``None`` for a decision already applied, and for an EXTRACTION
    review's RESOLVED_ELSEWHERE: its complaint was handled outside the pipeline, and the dispute
    may have no state here at all (the extractor priced it, held, itself), so it prices nothing
    and changes nothing."""
    review = ev.parse(ev.ReviewDecided, message.value)
    message.require_key(review.dispute_id)
    problem = review_problem(review.kind, review.decision, review.grievance_id, review.item_key)
    if problem is not None:
        # A grievance's review is kept before the verdicts: as a DECLINE, one would decline the
        # whole dispute it came before.
        raise InvalidInput(f"review {review.review_id}: {problem}")
    if review.kind == "EXTRACTION":
        return None
    state = stored(review.dispute_id)
    if state is None and review.kind == "PAYOUT":
        raise InvalidInput(
            f"review {review.review_id} for unknown dispute: a payout decision on a dispute"
            f" pricing no longer keeps ({PAID_RETENTION_S / 86400:.0f} days after its last"
            " round) or never priced; pay that round by hand"
        )
    if state is None and review.kind != "GRIEVANCE":
        raise InvalidInput(f"review {review.review_id} for unknown dispute")
    if state is None:
        # A grievance's review item is projected from its verdict, which this stage may not
        # have read yet (the two topics are consumed independently): keep the decision until
        # the dispute's verdicts arrive.
        log.warning(
            "review %s of dispute %s came before its verdicts: kept until they arrive",
            review.review_id,
            review.dispute_id,
        )
        state = _new_state()
    if review.review_id in state["reviews"]:
        return None
    taken = Taken(review.dispute_id, state, reprice=True)
    if review.kind == "PAYOUT":
        repaid = _failed_round(state, review)
        taken = taken._replace(reprice=repaid is not None, repaid=repaid)
    else:
        state["overrides"] = _apply(state["overrides"], review, _round_total(state, review))
    state["reviews"].append(review.review_id)
    return taken


def _failed_round(state: dict[str, Any], review: ev.ReviewDecided) -> tuple[int, int] | None:
    """Apply a payment operator's decision on a round whose refund failed (its item
    ``payout:round<n>``, or ``payout:round<n>:again`` for a failure after Stripe refunded it).
    REPAY takes the round's payable amount off what earlier rounds approved, once per round
    whichever item it comes from, and returns (round, amount): the dispute is re-priced, and the
    next round pays it again. PAID_ELSEWHERE changes nothing (the amount stays approved: the
    operator settled it another way, or closed a conflicting request's
    ``payout:round<n>:conflict`` item, which takes nothing else) and returns ``None``.

    ``review`` names its round (:func:`~refund_bench.domain.review_problem` refused it
    otherwise). :class:`InvalidInput` for a REPAY of a round that approved no payment this
    stage knows of or that was paid again before.
    """
    failed = cast(int, payout_item_round(review.item_key))
    if review.decision == ReviewDecision.PAID_ELSEWHERE.value:
        return None
    payable: int | None = state.get("payables", {}).get(str(failed))
    if payable is None:
        raise InvalidInput(
            f"review {review.review_id}: round {failed} of dispute {review.dispute_id} approved"
            " no payment this stage knows of (rounds priced before pricing kept each round's"
            " amount are paid again outside the pipeline)"
        )
    repaid: list[int] = state.setdefault("repaid", [])
    if failed in repaid:
        raise InvalidInput(
            f"review {review.review_id}: round {failed} of dispute {review.dispute_id} was"
            " paid again already"
        )
    repaid.append(failed)
    state["approved_minor"] -= payable
    return failed, payable


def _apply(
    raw: Mapping[str, Any], review: ev.ReviewDecided, round_total: int | None
) -> dict[str, Any]:
    try:
        decision = ReviewDecision(review.decision)
    except ValueError as exc:
        raise InvalidInput(f"unknown review decision {review.decision!r}") from exc
    updated = _overrides(raw).with_review(decision, review.grievance_id, round_total)
    return {
        "grievances": {gid: r.value for gid, r in updated.grievances.items()},
        "dispute": updated.dispute.value if updated.dispute else None,
        "approved_total_minor": updated.approved_total_minor,
    }
