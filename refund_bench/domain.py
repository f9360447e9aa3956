"""The product's shared vocabulary: categories, rulings, decisions and the evidence model.

Money is always an ``int`` of minor units (paise for INR). No float ever holds an amount.
"""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

MinorUnits = int
"""An amount of money in integer minor units (e.g. paise)."""


MAX_JUDGES = 15
"""The most judge seats a bench may have (``JUDGE_COUNT``); the tally refuses rulings of a
larger bench."""


class Category(StrEnum):
    """The fixed set of checkable grievance categories."""

    LATE_DELIVERY = "LATE_DELIVERY"
    MISSING_ITEM = "MISSING_ITEM"
    WRONG_ITEM = "WRONG_ITEM"
    QUALITY = "QUALITY"
    PACKAGING = "PACKAGING"
    PARTNER_CONDUCT = "PARTNER_CONDUCT"
    BILLING = "BILLING"


class Ruling(StrEnum):
    """One judge's ruling, and also a counted verdict's outcome."""

    UPHELD = "UPHELD"
    REJECTED = "REJECTED"
    ESCALATE = "ESCALATE"


class LineStatus(StrEnum):
    """What happens to one priced line."""

    PAY = "PAY"
    ZERO = "ZERO"
    HELD = "HELD"
    REJECTED = "REJECTED"


class Decision(StrEnum):
    """The dispute-level decision of one settlement round."""

    AUTO_APPROVED = "AUTO_APPROVED"
    REVIEW_APPROVED = "REVIEW_APPROVED"
    HELD_FOR_REVIEW = "HELD_FOR_REVIEW"
    NOTHING_TO_PAY = "NOTHING_TO_PAY"
    DECLINED = "DECLINED"


class ExtractionOutcome(StrEnum):
    """What the extractor made of one complaint (``complaint.extracted``)."""

    EXTRACTED = "EXTRACTED"
    """Its grievances went to the judges."""
    NOTHING_CHECKABLE = "NOTHING_CHECKABLE"
    """It holds no checkable grievance: a reply, with nothing to pay."""
    HELD = "HELD"
    """No valid answer after one repair, or a repair that left a valid grievance out."""
    REFUSED = "REFUSED"
    """The endpoint refused the complaint, or failed it alone."""


class ReviewDecision(StrEnum):
    """A human reviewer's decision (``review.decided``): UPHOLD/REJECT for one grievance,
    APPROVE/DECLINE for a whole dispute, REPAY/PAID_ELSEWHERE for a round whose refund failed,
    RESOLVED_ELSEWHERE for a complaint whose extraction failed."""

    UPHOLD = "UPHOLD"
    REJECT = "REJECT"
    APPROVE = "APPROVE"
    DECLINE = "DECLINE"
    REPAY = "REPAY"
    """Pay the failed round's amount again, in a new settlement round (a new ledger row and
    idempotency key)."""
    PAID_ELSEWHERE = "PAID_ELSEWHERE"
    """A payment operator refunded the failed round another way: nothing more is paid."""
    RESOLVED_ELSEWHERE = "RESOLVED_ELSEWHERE"
    """A complaint whose extraction failed was handled outside the pipeline (resubmitted
    corrected, answered by support): its EXTRACTION item is closed, and nothing is priced."""


DECISIONS_BY_KIND: dict[str, tuple[ReviewDecision, ...]] = {
    "GRIEVANCE": (ReviewDecision.UPHOLD, ReviewDecision.REJECT),
    "DISPUTE": (ReviewDecision.APPROVE, ReviewDecision.DECLINE),
    "PAYOUT": (ReviewDecision.REPAY, ReviewDecision.PAID_ELSEWHERE),
    "EXTRACTION": (ReviewDecision.RESOLVED_ELSEWHERE,),
}
"""What a reviewer may decide per kind of review item. A complaint whose extraction failed is
handled outside the pipeline (a corrected complaint is a new dispute); its EXTRACTION item is
only closed, saying so."""

EXTRACTION_ITEM = "extraction"
"""The key of a dispute's EXTRACTION review item (its complaint's extraction failed)."""

DISPUTE_ITEM = re.compile(r"dispute:round([0-9]+)")
"""The key of a DISPUTE review item: the round whose total it approves or declines."""
PAYOUT_ITEM = re.compile(r"payout:round([0-9]+)(?::(again|conflict))?")
"""The key of a PAYOUT review item: the round whose refund failed (``payout:round<n>``), or
failed again after Stripe had refunded it following a wait for the customer
(``payout:round<n>:again``; the round's own item may have been decided when Stripe refunded
it, and the desk records one decision per item), or a request for the round that the payout
refused because the ledger holds the round with another amount, currency or payment
(``payout:round<n>:conflict``, a
``LEDGER_CONFLICT``: the round itself may be paid, and has its own item if it failed)."""
_ITEM_KEY_OF_KIND = {"DISPUTE": DISPUTE_ITEM, "PAYOUT": PAYOUT_ITEM}


def payout_item_is_conflict(item_key: str | None) -> bool:
    """Whether ``item_key`` names a conflicting payout request (``payout:round<n>:conflict``)."""
    named = PAYOUT_ITEM.fullmatch(item_key or "")
    return named is not None and named[2] == "conflict"


def a_kind(kind: str) -> str:
    """``kind`` with its indefinite article, as messages name it ("a PAYOUT", "an EXTRACTION")."""
    return f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind}"


def decisions_for(kind: str, item_key: str | None) -> tuple[ReviewDecision, ...] | None:
    """What a reviewer may decide on the item ``item_key`` of ``kind``; ``None`` for an unknown
    kind. Those of :data:`DECISIONS_BY_KIND`, except that a conflicting
    payout request's item is only closed (PAID_ELSEWHERE, which prices nothing): nothing was paid
    for that request, and paying its round again could pay it twice."""
    if kind == "PAYOUT" and payout_item_is_conflict(item_key):
        return (ReviewDecision.PAID_ELSEWHERE,)
    return DECISIONS_BY_KIND.get(kind)


def review_problem(
    kind: str, decision: str, grievance_id: str | None, item_key: str | None
) -> str | None:
    """Why a ``review.decided`` cannot be applied as it stands, or ``None``: a decision its kind
    of review cannot make, or an item that is not of its kind (a GRIEVANCE review decides
    ``grievance:<its grievance_id>``, a DISPUTE review a ``dispute:round<n>`` item or, published
    before decisions named their items, none; a PAYOUT review must name ``payout:round<n>``,
    ``payout:round<n>:again`` or ``payout:round<n>:conflict``, and decides only PAID_ELSEWHERE
    on the last, see :func:`decisions_for`; an EXTRACTION review names the ``extraction`` item).
    Pricing and the recorder both refuse such a decision, so neither acts on it alone."""
    allowed = DECISIONS_BY_KIND.get(kind)
    if allowed is None:
        return f"unknown kind of review {kind!r}"
    if decision not in allowed:
        return f"{a_kind(kind)} review cannot decide {decision}"
    if kind == "GRIEVANCE":
        if grievance_id is None:
            return "a GRIEVANCE review names no grievance_id"
        if item_key not in (None, f"grievance:{grievance_id}"):
            return f"a review of grievance {grievance_id} cannot decide item {item_key!r}"
        return None
    if kind == "EXTRACTION":
        if item_key != EXTRACTION_ITEM:
            return f"an EXTRACTION review must name its {EXTRACTION_ITEM} item, not {item_key!r}"
        return None
    if kind == "PAYOUT" and not _ITEM_KEY_OF_KIND[kind].fullmatch(item_key or ""):
        return f"a PAYOUT review must name its payout:round<n> item, not {item_key!r}"
    if decision not in (decisions_for(kind, item_key) or ()):
        return (
            f"a review of {item_key}, a payout request refused for the round's recorded amount,"
            f" cannot decide {decision}: nothing was paid for it, and it is only closed"
        )
    if item_key is not None and not _ITEM_KEY_OF_KIND[kind].fullmatch(item_key):
        return f"a {kind} review cannot decide item {item_key!r}"
    return None


def name_key(name: str) -> str:
    """What two spellings of one item name have in common: Unicode NFC form, case folded,
    runs of whitespace as one space, no space at either end."""
    return " ".join(unicodedata.normalize("NFC", name).casefold().split())


def round_half_up_div(numerator: int, denominator: int) -> int:
    """round(numerator / denominator), halves up, in integers; numerator >= 0, denominator > 0."""
    return (2 * numerator + denominator) // (2 * denominator)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


MAX_ORDER_MINOR = 10**15
"""The most an order, one of its lines or its fee may come to, in minor units: far above any real
order, and low enough that no sum or product pricing makes leaves Avro's ``long``."""
MAX_LINE_QUANTITY = 1_000_000


CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$", to_upper=True)]
"""A three-letter currency code, read in any case and kept in capitals ("inr", as Stripe writes
codes, is INR): the pricing table, the cap and the replies name codes in capitals."""


class LineItem(_Frozen):
    """One line of an order, as recorded by the order store."""

    name: str
    quantity: int = Field(ge=1, le=MAX_LINE_QUANTITY)
    unit_price_minor: MinorUnits = Field(ge=0, le=MAX_ORDER_MINOR)
    unit_weight_g: int | None = Field(default=None, ge=0)


class OrderRecord(_Frozen):
    """Raw evidence for one order, as loaded from the order store.

    Optional fields are ``None`` when the store has no record: absence is evidence of silence,
    never of the contrary.
    """

    order_id: str
    customer_id: str
    currency: CurrencyCode = "INR"
    placed_at: str
    delivered_at: str | None
    delivery_sla_minutes: int | None = Field(ge=1)
    line_items: tuple[LineItem, ...]
    delivery_fee_minor: MinorUnits = Field(default=0, ge=0, le=MAX_ORDER_MINOR)
    charged_total_minor: MinorUnits = Field(ge=0, le=MAX_ORDER_MINOR)
    pickup_weight_expected_g: int | None = Field(default=None, ge=0)
    pickup_weight_actual_g: int | None = Field(default=None, ge=0)
    partner_rating_at_handover: int | None = None
    packaging_condition_recorded: bool = False
    packaging_notes: str | None = None
    partner_conduct_reports: tuple[str, ...] = ()
    payment_reference: str = ""

    @model_validator(mode="after")
    def _items_within_bounds(self) -> Self:
        if self.items_total_minor > MAX_ORDER_MINOR:
            raise ValueError(
                f"the line items come to {self.items_total_minor}, above {MAX_ORDER_MINOR}"
            )
        return self

    @property
    def pickup_shortfall_g(self) -> int | None:
        """Expected minus actual pickup weight (negative: heavier than expected); ``None``
        unless both are recorded."""
        if self.pickup_weight_expected_g is None or self.pickup_weight_actual_g is None:
            return None
        return self.pickup_weight_expected_g - self.pickup_weight_actual_g

    @property
    def items_total_minor(self) -> MinorUnits:
        """Sum of unit price times quantity over the line items."""
        return sum(item.unit_price_minor * item.quantity for item in self.line_items)
