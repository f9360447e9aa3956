"""The versioned pricing table and the auto-approve cap: how much money a dispute may move.

Pure and deterministic: the same verdicts, snapshot, cap, earlier approvals and review decisions
always give the same :class:`PricedRefund`. All amounts are ``int`` minor units; nothing here is
ever taken from a model's output. Safety bounds, in order:

- a line pays only when its (reviewed) outcome is UPHELD; ESCALATE lines are HELD and pay 0;
  so is an UPHELD line whose rule needs evidence the order does not record (a late delivery
  without its times), until a reviewer's UPHOLD, which pays it (the flat amount), and one
  priced by an item that names none (packaging "everything leaked": which item's price is for a
  person to say; a reviewer's UPHOLD of it pays 0, and the reviewer approves or declines the
  dispute knowing that);
- a line naming an item without a quantity claims all the units ordered (the extractor's
  contract: an item named without a number is all its units);
- QUALITY pays half, rounded down to an amount Stripe takes in the order's currency (a whole
  minor unit; ten in the three-decimal currencies, a hundred in ISK and UGX:
  :func:`~refund_bench.money.payable_step`), of the units it covers;
- quantities never exceed what was ordered, and the lines naming one item together never pay more
  than that item's line total; LATE_DELIVERY and BILLING pay at most once per dispute;
- QUALITY pays half of the units no other line refunded in full (MISSING_ITEM, WRONG_ITEM,
  PACKAGING) or for quality: each unit at most once; a unit refunded in full after it was
  compensated for quality (a reviewer upholds it missing) is paid the rest of its price only;
- the missing units the bench upheld are paid only as far as the pickup-weight shortfall
  explains them together (each item's estimate in the snapshot explains it alone): a line
  beyond that is HELD for a reviewer, whose UPHOLD pays it;
- the total never exceeds what the order cost (``charged_total_minor``);
- a total above the cap is never paid automatically: it waits for a reviewer's APPROVE;
- what is payable this round is the total minus what earlier rounds approved, never below 0,
  rounded down to the currency's step (:func:`~refund_bench.money.payable_step`);
- a round a payment operator's REPAY prices pays the failed round's amount again
  (:func:`pay_again`), whatever the dispute's later decisions: a decline or a total held by
  the cap holds back only what no round approved before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from refund_bench.domain import (
    MAX_ORDER_MINOR,
    Category,
    Decision,
    LineItem,
    LineStatus,
    MinorUnits,
    OrderRecord,
    ReviewDecision,
    Ruling,
    round_half_up_div,
)
from refund_bench.errors import InvalidInput, error_summary
from refund_bench.events import validation_reason
from refund_bench.money import payable_part, payable_step

PRICING_VERSION = "2026-12-07.v7"
DEFAULT_CAP_MINOR: MinorUnits = 100_000
CapMinor = Annotated[int, Field(ge=0, le=MAX_ORDER_MINOR)]
"""An auto-approve cap as a setting: above any order's total it caps nothing, and a larger one
could not be written to Avro (a long)."""
DEFAULT_CAP_CURRENCY = "INR"
CapCurrency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
"""The currency whose minor units the auto-approve cap counts (ISO 4217). An order in another
currency has no cap it could be paid under: its refund goes to a person, since 100000 minor
units are INR 1,000 but EUR 1,000 or JPY 100,000."""
LATE_DELIVERY_FLAT_MINOR: Mapping[str, MinorUnits] = {"INR": 4900}
"""Flat late-delivery compensation per currency; a currency not listed pays 0 for lateness."""

_ITEM_PRICED = frozenset(
    {Category.MISSING_ITEM, Category.WRONG_ITEM, Category.PACKAGING, Category.QUALITY}
)
_FULL_REFUND = _ITEM_PRICED - {Category.QUALITY}
"""The categories whose lines refund their units in full (QUALITY pays half)."""
_ONCE_PER_DISPUTE = frozenset({Category.LATE_DELIVERY, Category.BILLING})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GrievanceVerdict(_Frozen):
    """The tally's outcome for one grievance, with the item and quantity the claim names."""

    grievance_id: str
    category: Category
    outcome: Ruling
    item_name: str | None = None
    item_quantity: int | None = None


class ReviewOverrides(_Frozen):
    """Reviewers' decisions so far: per-grievance UPHELD/REJECTED, and APPROVE/DECLINE for the
    dispute as a whole."""

    grievances: Mapping[str, Ruling] = Field(default_factory=dict)
    dispute: ReviewDecision | None = None
    approved_total_minor: MinorUnits | None = Field(default=None, ge=0)
    """With APPROVE: the dispute total the reviewer approved. A later round whose total is above
    both it and the cap goes back to review. ``None`` (an approval recorded before totals were):
    the approval covers any total."""

    @field_validator("grievances")
    @classmethod
    def _decisive(cls, value: Mapping[str, Ruling]) -> Mapping[str, Ruling]:
        bad = sorted(gid for gid, ruling in value.items() if ruling is Ruling.ESCALATE)
        if bad:
            raise ValueError(f"a review override must be UPHELD or REJECTED: {bad}")
        return dict(value)

    @field_validator("dispute")
    @classmethod
    def _dispute_level(cls, value: ReviewDecision | None) -> ReviewDecision | None:
        if value not in (None, ReviewDecision.APPROVE, ReviewDecision.DECLINE):
            raise ValueError(f"a dispute review must be APPROVE or DECLINE, got {value}")
        return value

    def with_review(
        self,
        decision: ReviewDecision,
        grievance_id: str | None,
        approved_total_minor: MinorUnits | None = None,
    ) -> ReviewOverrides:
        """These overrides plus one ``review.decided``; a later review of the same target wins.

        UPHOLD/REJECT need a ``grievance_id``; APPROVE/DECLINE apply to the dispute, APPROVE up
        to ``approved_total_minor`` (the total of the round the reviewer approved). A payout
        decision (REPAY, PAID_ELSEWHERE) overrides nothing: :class:`InvalidInput`.
        """
        if decision is ReviewDecision.APPROVE:
            bound = approved_total_minor
            if self.dispute is ReviewDecision.APPROVE:
                # Two approvals both hold: the larger total is approved (None: any total).
                earlier = self.approved_total_minor
                bound = None if earlier is None or bound is None else max(earlier, bound)
            return ReviewOverrides(
                grievances=self.grievances, dispute=decision, approved_total_minor=bound
            )
        if decision is ReviewDecision.DECLINE:
            return ReviewOverrides(grievances=self.grievances, dispute=decision)
        if decision not in (ReviewDecision.UPHOLD, ReviewDecision.REJECT):
            raise InvalidInput(f"review decision {decision} overrides no verdict")
        if grievance_id is None:
            raise InvalidInput(f"review decision {decision} needs a grievance_id")
        ruling = Ruling.UPHELD if decision is ReviewDecision.UPHOLD else Ruling.REJECTED
        return ReviewOverrides(
            grievances={**self.grievances, grievance_id: ruling},
            dispute=self.dispute,
            approved_total_minor=self.approved_total_minor,
        )

    def approves(self, total_minor: MinorUnits, cap_minor: MinorUnits) -> bool:
        """True when a reviewer's APPROVE covers a dispute total of ``total_minor``."""
        if self.dispute is not ReviewDecision.APPROVE:
            return False
        bound = self.approved_total_minor
        return bound is None or total_minor <= max(bound, cap_minor)


class PricedLine(_Frozen):
    """One grievance's line: what it pays now and what its rule gives if upheld."""

    grievance_id: str
    category: Category
    outcome: Ruling
    status: LineStatus
    amount_minor: MinorUnits = Field(ge=0)
    proposed_minor: MinorUnits = Field(ge=0)
    rule: str
    item_name: str | None = None
    quantity: int | None = None


class PricedRefund(_Frozen):
    """The priced refund of one settlement round (the body of ``refund.priced``)."""

    lines: tuple[PricedLine, ...]
    total_minor: MinorUnits = Field(ge=0)
    already_paid_minor: MinorUnits = Field(ge=0)
    payable_minor: MinorUnits = Field(ge=0)
    cap_minor: MinorUnits = Field(ge=0)
    decision: Decision
    held_grievances: tuple[str, ...]
    reason: str
    order_total_minor: MinorUnits = Field(ge=0)
    currency: str
    pricing_version: str = PRICING_VERSION


class _Derived(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    delay_minutes: int | None
    sla_exceeded: bool | None
    overcharge_minor: int = Field(ge=0)
    expected_items_total_minor: int = Field(ge=0)


def _read_snapshot(snapshot: Mapping[str, Any]) -> tuple[OrderRecord, _Derived]:
    order = _snapshot_part(OrderRecord, snapshot, "order")
    return order, _snapshot_part(_Derived, snapshot, "derived")


_Part = TypeVar("_Part", bound=BaseModel)


def _snapshot_part(model: type[_Part], snapshot: Mapping[str, Any], name: str) -> _Part:
    """``snapshot[name]`` read as ``model``; :class:`InvalidInput` naming the field and the
    rule that failed, never the value (the order's text, a customer's among it)."""
    try:
        return model.model_validate(snapshot[name])
    except ValidationError as exc:
        reason = validation_reason(exc, name)
        raise InvalidInput(f"evidence snapshot is malformed: {reason}") from exc
    except (KeyError, TypeError) as exc:
        raise InvalidInput(f"evidence snapshot is malformed: {error_summary(exc)}") from exc


def _natural_key(grievance_id: str) -> tuple[str, int, str]:
    match = re.fullmatch(r"(\D*)(\d+)", grievance_id)
    if match is None:
        return (grievance_id, -1, grievance_id)
    return (match.group(1), int(match.group(2)), grievance_id)


class _Rule:
    """One line's rule result before the per-item and per-dispute bounds."""

    def __init__(
        self,
        amount: int,
        text: str,
        quantity: int | None = None,
        *,
        unrecorded: bool = False,
        proposed: int | None = None,
    ) -> None:
        self.amount = amount
        self.text = text
        self.quantity = quantity
        self.unrecorded = unrecorded
        """The evidence the rule needs is not recorded: the line waits for a person."""
        self.proposed = amount if proposed is None else proposed
        """What the line would pay upheld: ``amount``, or, for a line that waits for a person,
        what their UPHOLD pays (the desk shows it on the line and on its button)."""


def _item_rule(
    verdict: GrievanceVerdict, item: LineItem | None, units_open: int, currency: str
) -> _Rule:
    """A line naming an item: the units claimed (all those ordered when it names no quantity),
    at most those ordered, at the unit price; QUALITY pays half, rounded down to a multiple of
    the step Stripe takes ``currency`` in (:func:`~refund_bench.money.payable_part`), and only
    for units still open (``units_open``: neither refunded in full nor compensated for quality
    by a line priced before). A line naming no item has no price the order records: unrecorded."""
    category = verdict.category
    if item is None:
        # Which item's price applies is for a person to say, never a price of 0 by itself.
        return _Rule(0, f"{category}: no item named", unrecorded=True)
    claimed = item.quantity if verdict.item_quantity is None else verdict.item_quantity
    quantity = max(0, min(claimed, item.quantity))
    note = "" if quantity == claimed else f" (claimed {claimed}, ordered {item.quantity})"
    if category is Category.QUALITY and quantity > units_open:
        closed = item.quantity - units_open
        note = (
            f" (claimed {claimed}; {closed} of the {item.quantity} ordered already refunded"
            " in full or for quality)"
        )
        quantity = units_open
    price = item.unit_price_minor * quantity
    basis = f"{quantity} x {item.unit_price_minor} ({item.name}){note}"
    if category is Category.QUALITY:
        half = payable_part(price // 2, currency)
        return _Rule(half, f"QUALITY: half of {basis} = {half}", quantity)
    return _Rule(price, f"{category}: {basis}", quantity)


def _rule(
    verdict: GrievanceVerdict,
    order: OrderRecord,
    derived: _Derived,
    item: LineItem | None,
    bounds: _Bounds,
    *,
    by_reviewer: bool = False,
) -> _Rule:
    """The line's rule; ``by_reviewer``: a reviewer upheld it, which stands in for evidence
    the rule needs and the order does not record (a late delivery without its times)."""
    category = verdict.category
    if category in _ITEM_PRICED:
        return _item_rule(
            verdict, item, bounds.units_open.get(item.name, 0) if item else 0, order.currency
        )
    if category is Category.LATE_DELIVERY:
        flat = LATE_DELIVERY_FLAT_MINOR.get(order.currency)
        sla = order.delivery_sla_minutes
        if flat is None:
            return _Rule(0, f"LATE_DELIVERY: 0, no flat amount for {order.currency}")
        if derived.sla_exceeded is None:
            if by_reviewer:
                return _Rule(
                    flat,
                    f"LATE_DELIVERY: flat {flat}, upheld by a reviewer (delivery time or SLA not"
                    " recorded)",
                )
            # Missing evidence is for a person to judge, never a price of 0 by itself; their
            # UPHOLD pays the flat amount, which the line proposes.
            text = "LATE_DELIVERY: delivery time or SLA not recorded"
            return _Rule(0, text, unrecorded=True, proposed=flat)
        if not derived.sla_exceeded:
            return _Rule(
                0,
                f"LATE_DELIVERY: 0, delivered {derived.delay_minutes} min after placing, "
                f"within the SLA of {sla} min",
            )
        return _Rule(
            flat,
            f"LATE_DELIVERY: flat {flat} (delivered {derived.delay_minutes} min after placing, "
            f"SLA {sla} min)",
        )
    if category is Category.BILLING:
        over = derived.overcharge_minor
        if over == 0:
            return _Rule(0, "BILLING: 0, the charged total is not above the expected total")
        return _Rule(
            over,
            f"BILLING: overcharge {over} (charged {order.charged_total_minor}, "
            f"expected {derived.expected_items_total_minor})",
        )
    return _Rule(0, f"{category}: no monetary compensation, 0")


class _Bounds:
    """Per-item budgets, per-dispute categories already paid, and the pickup-weight shortfall
    the missing units paid so far account for."""

    def __init__(self, order: OrderRecord) -> None:
        self.left = {item.name: item.unit_price_minor * item.quantity for item in order.line_items}
        self.units_open = {item.name: item.quantity for item in order.line_items}
        """Units not yet refunded in full (MISSING_ITEM, WRONG_ITEM, PACKAGING) nor compensated
        for quality: what a QUALITY line may still pay half of."""
        self.unit_price = {item.name: item.unit_price_minor for item in order.line_items}
        self.quality_units = {item.name: 0 for item in order.line_items}
        """Units compensated for quality and not refunded in full since."""
        self.quality_paid = {item.name: 0 for item in order.line_items}
        """What the QUALITY lines paid for those units."""
        self.paid_by: dict[Category, str] = {}
        self.currency = order.currency
        self.shortfall_g = order.pickup_shortfall_g
        self.missing_g = 0
        """Weight of the missing units paid so far (those of weighed items)."""

    def unexplained(self, verdict: GrievanceVerdict, rule: _Rule, item: LineItem | None) -> str:
        """Why the shortfall cannot explain this upheld MISSING_ITEM line's units on top of
        those paid so far, or ``""`` when it can, or the weights are not recorded.

        Units are explained while, all together, they weigh no more than the shortfall plus
        half of one of this line's units: for a single line, exactly when the snapshot's
        estimate (shortfall / unit weight, rounded half up) is at least the quantity.
        """
        if (
            verdict.category is not Category.MISSING_ITEM
            or self.shortfall_g is None
            or item is None
            or not item.unit_weight_g
            or not rule.quantity
        ):
            return ""
        weight = item.unit_weight_g
        if 2 * (self.missing_g + rule.quantity * weight) <= 2 * self.shortfall_g + weight:
            return ""
        explained = round_half_up_div(max(0, self.shortfall_g - self.missing_g), weight)
        return (
            f"{rule.text}; held: the pickup weight was {self.shortfall_g} g short, "
            f"{self.missing_g} g of it is paid on other lines, and the rest explains "
            f"{min(explained, rule.quantity)} of these {rule.quantity} units"
        )

    def quality_overlap(self, verdict: GrievanceVerdict, rule: _Rule) -> tuple[int, int]:
        """For a line refunding units in full: how many of its units a QUALITY line priced
        before compensated already (it takes the open units first), and what those units were
        paid for quality. A unit refunded in full is paid its price once, all told: this line
        pays it less what it was paid for quality. Lines priced in the bench's pass never
        overlap (QUALITY comes after); a reviewer's UPHOLD of a missing item after the bench's
        QUALITY on the same units does."""
        name = verdict.item_name
        if verdict.category not in _FULL_REFUND or name is None or not rule.quantity:
            return 0, 0
        units = min(self.quality_units[name], max(0, rule.quantity - self.units_open[name]))
        if units == 0:
            return 0, 0
        remaining = self.quality_units[name] - units
        # What the QUALITY lines would have paid for the units they keep; the rest was paid for
        # these (never less than 0: several QUALITY lines each round their half down).
        keeps = payable_part(self.unit_price[name] * remaining // 2, self.currency)
        return units, max(0, self.quality_paid[name] - keeps)

    def bound(self, verdict: GrievanceVerdict, rule: _Rule) -> _Rule:
        category = verdict.category
        if category in _ONCE_PER_DISPUTE and category in self.paid_by:
            return _Rule(0, f"{category}: 0, already paid by {self.paid_by[category]}")
        units, paid = self.quality_overlap(verdict, rule)
        if paid > 0:
            less = min(paid, rule.amount)
            rule = _Rule(
                rule.amount - less,
                f"{rule.text}; less {less} paid for quality on {units} of these units",
                rule.quantity,
            )
        if category in _ITEM_PRICED and verdict.item_name is not None:
            left = self.left[verdict.item_name]
            if rule.amount > left:
                text = f"{rule.text}; capped at {left} left of the {verdict.item_name} line total"
                return _Rule(left, text, rule.quantity)
        return rule

    def consume(
        self, verdict: GrievanceVerdict, amount: int, rule: _Rule, item: LineItem | None
    ) -> None:
        if amount <= 0:
            return
        if verdict.category is Category.MISSING_ITEM and item is not None and item.unit_weight_g:
            self.missing_g += (rule.quantity or 0) * item.unit_weight_g
        if verdict.category in _ONCE_PER_DISPUTE:
            self.paid_by[verdict.category] = verdict.grievance_id
        if verdict.category in _ITEM_PRICED and verdict.item_name is not None:
            name = verdict.item_name
            units, paid = self.quality_overlap(verdict, rule)
            self.quality_units[name] -= units
            self.quality_paid[name] -= min(paid, self.quality_paid[name])
            self.left[name] -= amount
            open_units = self.units_open[name]
            taken = min(open_units, rule.quantity or 0)
            self.units_open[name] = open_units - taken
            if verdict.category is Category.QUALITY:
                self.quality_units[name] += taken
                self.quality_paid[name] += amount


def _line(
    verdict: GrievanceVerdict, outcome: Ruling, rule: _Rule, held: bool = False
) -> PricedLine:
    if outcome is Ruling.UPHELD and not held:
        status = LineStatus.PAY if rule.amount > 0 else LineStatus.ZERO
        amount = rule.amount
    elif outcome is Ruling.REJECTED:
        status, amount = LineStatus.REJECTED, 0
    else:
        status, amount = LineStatus.HELD, 0
    return PricedLine(
        grievance_id=verdict.grievance_id,
        category=verdict.category,
        outcome=outcome,
        status=status,
        amount_minor=amount,
        proposed_minor=rule.proposed,
        rule=rule.text,
        item_name=verdict.item_name,
        quantity=rule.quantity if rule.quantity is not None else verdict.item_quantity,
    )


def line_item_names(snapshot: Mapping[str, Any]) -> frozenset[str]:
    """The names of the order's line items in ``snapshot``, read without validating the rest
    (:func:`price_refund` does, once per round); :class:`InvalidInput` when there is no list of
    line items to read them from."""
    order = snapshot.get("order")
    items = order.get("line_items") if isinstance(order, Mapping) else None
    if not isinstance(items, list):
        raise InvalidInput("evidence snapshot is malformed: no line items")
    return frozenset(item["name"] for item in items if isinstance(item, Mapping) and "name" in item)


def _check_inputs(
    verdicts: Sequence[GrievanceVerdict],
    order: OrderRecord,
    cap_minor: int,
    already_approved_minor: int,
    overrides: ReviewOverrides,
) -> dict[str, LineItem]:
    if cap_minor < 0:
        raise InvalidInput(f"cap_minor must be >= 0, got {cap_minor}")
    if not 0 <= already_approved_minor <= order.charged_total_minor:
        raise InvalidInput(
            f"already approved {already_approved_minor} is outside 0..{order.charged_total_minor}"
        )
    ids = [v.grievance_id for v in verdicts]
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"duplicate grievance ids in {ids}")
    unknown = sorted(set(overrides.grievances) - set(ids))
    if unknown:
        raise InvalidInput(f"review overrides for grievances not in the dispute: {unknown}")
    items = {item.name: item for item in order.line_items}
    for verdict in verdicts:
        if verdict.item_name is not None and verdict.item_name not in items:
            raise InvalidInput(
                f"{verdict.grievance_id} names {verdict.item_name!r}, not a line item of the order"
            )
    return items


def price_refund(
    verdicts: Sequence[GrievanceVerdict],
    snapshot: Mapping[str, Any],
    *,
    cap_minor: MinorUnits = DEFAULT_CAP_MINOR,
    cap_currency: str = DEFAULT_CAP_CURRENCY,
    already_approved_minor: MinorUnits = 0,
    overrides: ReviewOverrides | None = None,
) -> PricedRefund:
    """Price one settlement round of a dispute.

    ``snapshot`` is the evidence snapshot of :mod:`services.extractor.evidence`;
    ``already_approved_minor`` is what earlier rounds approved. ``cap_minor`` counts minor units
    of ``cap_currency``; an order in another currency is priced with a cap of 0 (a person
    approves any amount: :func:`cap_for`). Raises :class:`InvalidInput` for
    a malformed snapshot, an item name not on the order, duplicate grievance ids, overrides of
    unknown grievances, a negative cap, or an earlier approval outside ``0..order total``.
    """
    overrides = overrides or ReviewOverrides()
    order, derived = _read_snapshot(snapshot)
    items = _check_inputs(verdicts, order, cap_minor, already_approved_minor, overrides)

    ordered = sorted(verdicts, key=lambda v: _natural_key(v.grievance_id))
    outcomes = {
        v.grievance_id: overrides.grievances.get(v.grievance_id, v.outcome) for v in ordered
    }
    bounds = _Bounds(order)

    def pass_of(verdict: GrievanceVerdict) -> int:
        """0: upheld by the bench, 1: upheld by a reviewer, 2: not upheld."""
        if outcomes[verdict.grievance_id] is not Ruling.UPHELD:
            return 2
        return 1 if overrides.grievances.get(verdict.grievance_id) is Ruling.UPHELD else 0

    lines: dict[str, PricedLine] = {}
    # Upheld lines claim the per-item budgets first; the rest are proposed against what is left.
    # The bench's UPHELD is bounded by the weights, a reviewer's UPHOLD is not, and comes after:
    # upholding one line never holds another that a round before paid. Within a pass, QUALITY
    # lines come after the lines that refund units in full, so that they pay half of the units
    # those left only (a missing naan is not also half refunded as soggy).
    in_pass_order = sorted(ordered, key=lambda v: v.category is Category.QUALITY)
    for current in (0, 1, 2):
        for verdict in in_pass_order:
            if pass_of(verdict) != current:
                continue
            outcome = outcomes[verdict.grievance_id]
            item = items.get(verdict.item_name) if verdict.item_name is not None else None
            found = _rule(verdict, order, derived, item, bounds, by_reviewer=current == 1)
            rule = bounds.bound(verdict, found)
            why_held = bounds.unexplained(verdict, rule, item) if current == 0 else ""
            if current == 0 and rule.unrecorded:
                why_held = f"{rule.text}: held for a reviewer"
            if why_held:
                rule = _Rule(rule.amount, why_held, rule.quantity, proposed=rule.proposed)
            line = _line(verdict, outcome, rule, held=bool(why_held))
            bounds.consume(verdict, line.amount_minor, rule, item)
            lines[verdict.grievance_id] = line
    priced = tuple(lines[v.grievance_id] for v in ordered)
    cap = cap_for(order.currency, cap_minor, cap_currency)
    return _decide(priced, order, cap, already_approved_minor, overrides, cap_currency)


def cap_for(currency: str, cap_minor: MinorUnits, cap_currency: str) -> MinorUnits:
    """The auto-approve cap of an order in ``currency``: ``cap_minor`` when it is the cap's
    currency, else 0 (the cap's number means another amount there)."""
    return cap_minor if currency == cap_currency else 0


def _decide(
    lines: tuple[PricedLine, ...],
    order: OrderRecord,
    cap_minor: int,
    already: int,
    overrides: ReviewOverrides,
    cap_currency: str,
) -> PricedRefund:
    pay_sum = sum(line.amount_minor for line in lines if line.status is LineStatus.PAY)
    total = min(pay_sum, order.charged_total_minor)
    held = tuple(line.grievance_id for line in lines if line.status is LineStatus.HELD)
    # Stripe takes what is left only in its currency's steps: what is below one (an earlier
    # round's amount or a line's unit price off them) is not payable here.
    outstanding = payable_part(max(0, total - already), order.currency)
    notes: list[str] = []
    if pay_sum > total:
        notes.append(f"lines sum to {pay_sum}, clamped to the order total {total}")
    if held:
        notes.append(f"held for review: {', '.join(held)}")

    dispute = overrides.dispute
    if dispute is ReviewDecision.DECLINE:
        decision, payable, why = Decision.DECLINED, 0, "a reviewer declined the dispute"
    elif overrides.approves(total, cap_minor):
        decision, payable = Decision.REVIEW_APPROVED, outstanding
        why = f"a reviewer approved total {total}; {already} approved before, {payable} payable"
    elif total > cap_minor:
        decision, payable = Decision.HELD_FOR_REVIEW, 0
        why = (
            f"total {total} exceeds the auto-approve cap {cap_minor}"
            if order.currency == cap_currency
            else f"total {total} in {order.currency}, for which no auto-approve cap is set (the"
            f" cap counts {cap_currency})"
        )
        if dispute is ReviewDecision.APPROVE:
            why += f" and the total {overrides.approved_total_minor} a reviewer approved"
        why += "; nothing paid automatically"
    elif outstanding > 0:
        decision, payable = Decision.AUTO_APPROVED, outstanding
        why = (
            f"total {total} within the cap {cap_minor}; {already} approved before, "
            f"{payable} payable"
        )
    elif held:
        decision, payable = Decision.HELD_FOR_REVIEW, 0
        why = f"nothing payable now (total {total}, {already} approved before)"
    else:
        decision, payable = Decision.NOTHING_TO_PAY, 0
        why = f"nothing payable (total {total}, {already} approved before)"
    if 0 < payable < total - already:
        notes.append(
            f"{total - already - payable} below {order.currency}'s step of"
            f" {payable_step(order.currency)} minor units kept back: Stripe refunds it in steps"
            " only"
        )
    return PricedRefund(
        lines=lines,
        total_minor=total,
        already_paid_minor=already,
        payable_minor=payable,
        cap_minor=cap_minor,
        decision=decision,
        held_grievances=held,
        reason="; ".join([why, *notes]),
        order_total_minor=order.charged_total_minor,
        currency=order.currency,
    )


def pay_again(priced: PricedRefund, failed_round: int, failed_minor: MinorUnits) -> PricedRefund:
    """The round a payment operator's REPAY of ``failed_round`` prices: it pays that round's
    ``failed_minor`` again, whatever the dispute's later decisions.

    ``priced`` is the dispute priced with ``failed_minor`` no longer counted as approved. When it
    pays at least that much (nothing decided since took the amount back), it is the round,
    noted. Otherwise (a later round is held by the cap or for a reviewer, or a reviewer declined
    the dispute; those hold back only what no round approved before) the round is the
    repayment alone: no lines and nothing held, ``REVIEW_APPROVED`` (a person decided it), paying
    ``failed_minor`` (rounded down to the currency's step: a round priced off it before),
    never more than the order total less what the other rounds approved, its
    total what all rounds then approved, and its reason how the dispute is priced besides.
    """
    if priced.decision in (Decision.AUTO_APPROVED, Decision.REVIEW_APPROVED) and (
        priced.payable_minor >= failed_minor
    ):
        note = f"round {failed_round}'s refund of {failed_minor} failed: no longer counted as paid"
        return priced.model_copy(update={"reason": f"{priced.reason}; {note}"})
    already = priced.already_paid_minor
    # A round that failed off its currency's step is paid rounded down to it.
    payable = payable_part(
        max(0, min(failed_minor, priced.order_total_minor - already)), priced.currency
    )
    return priced.model_copy(
        update={
            "lines": (),
            "held_grievances": (),
            "total_minor": already + payable,
            "payable_minor": payable,
            "decision": Decision.REVIEW_APPROVED,
            "reason": (
                f"round {failed_round}'s refund of {failed_minor} failed and is paid again:"
                f" {already} approved before, {payable} payable; the dispute without it is"
                f" {priced.decision.value} ({priced.reason}), which holds back only what no"
                " round approved before"
            ),
        }
    )
