"""Payout rounds as the settler and the payout share them: the idempotency key of a round, and
the reservation the settler makes before its reply promises money.

The ledger (``payout_ledger``, one row per dispute and settlement round) decides which dispute
of an order is paid automatically: the first whose round is opened while no other dispute of
the same payment has one that may have refunded it (any but a FAILED one that moved no money).
The settler reserves the round (the database function ``payout_claim_round`` without a provider
call) before it writes the reply, and the reply promises the money only if the reservation is
PENDING. The payout then finds the same row, so the reply and the payment cannot disagree,
however close together two disputes of one order come.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from refund_bench.domain import PAYOUT_ITEM, payout_item_is_conflict

NOT_REFUNDED_STATUSES = frozenset({"failed", "canceled", "requires_action"})
"""Stripe refund statuses that mean no money went back (``requires_action``: not without the
customer doing something first). ``pending`` counts as paid: Stripe has taken the refund on, and
reports a later failure through its webhook (:mod:`services.api.refund_failures`)."""

REFUNDED_STATUSES = frozenset({"succeeded", "pending"})
"""Stripe refund statuses the ledger counts as paid (see :data:`NOT_REFUNDED_STATUSES`)."""


def not_refunded_code(status: str) -> str:
    """The error code of a round whose refund Stripe answered, or later reported, with
    ``status`` (one of :data:`NOT_REFUNDED_STATUSES`): ``refund_<status>``."""
    return f"refund_{status}"


ORDER_ALREADY_REFUNDED = "ORDER_ALREADY_REFUNDED"
"""The error code of a round the ledger opened FAILED because another dispute of the same
payment has a round that may have refunded it (any round but a FAILED one that moved no money,
see :data:`MAY_HAVE_REFUNDED`; ``payout_claim_round``): no refund was attempted."""

IDEMPOTENCY_REFUSED = "IdempotencyError"
"""The error code of a round whose idempotency key Stripe refused: it had taken the key with other
parameters, so an earlier call under it may have created a refund."""

SAVED_SERVER_ERROR = "STRIPE_SAVED_SERVER_ERROR"
"""The error code of a round whose key Stripe answers with a server error it saved: the refund
began at Stripe and failed part-way (it may exist), and every retry under the key gets the same
answer until the key expires, so retrying would only stall the stage."""

AMOUNT_NOT_PAYABLE = "AMOUNT_NOT_PAYABLE"
"""The error code of a round whose amount Stripe takes in no multiple of the currency's step
(:func:`~refund_bench.money.payable_step`: KWD 0.625, ISK 344.50, priced before pricing rounded
to it): it was failed without a call. A REPAY pays the part Stripe takes (KWD 0.620)."""

LEDGER_CONFLICT = "LEDGER_CONFLICT"
"""The error code of a payout request for a round the ledger holds with another amount, currency
or payment: the request was refused, and says nothing of how the round itself ended."""

STALE_PENDING = "STALE_PENDING"
"""The error code of a round still PENDING after the idempotency window: a call to Stripe may
have been made and its refund created, so nothing pays that round again by itself."""

UNMENDABLE_FAILURES = {
    ORDER_ALREADY_REFUNDED: "another dispute of the same order was refunded first, and a new"
    " round would be held the same way",
    STALE_PENDING: "an earlier call to Stripe may have created its refund; find a refund with"
    " this dispute_id and round in its metadata at Stripe, and pay by hand only if there is none",
    not_refunded_code("requires_action"): "Stripe's refund waits for the customer and may still go"
    " through, so paying another way meanwhile could refund twice: let it complete (once Stripe"
    " reports it succeeded, the ledger records the round paid), or cancel it at Stripe (once"
    " Stripe reports it canceled, the round can be paid again here)",
    IDEMPOTENCY_REFUSED: "Stripe had taken this round's key for another request, which may have"
    " created a refund; find a refund with this dispute_id and round in its metadata at Stripe,"
    " and pay by hand only if there is none",
    SAVED_SERVER_ERROR: "Stripe failed part-way through this round's refund and answers its key"
    " with that error for a day; find a refund with this dispute_id and round in its metadata at"
    " Stripe, and pay by hand only if there is none",
    "charge_already_refunded": "Stripe has refunded the payment in full already",
    "charge_disputed": "the customer disputed the payment with their bank (a chargeback), and"
    " Stripe refunds nothing on a disputed payment",
}
"""Error codes of a FAILED round that paying again cannot mend, and why (for the review desk)."""

WAITING_FOR_CUSTOMER = not_refunded_code("requires_action")
"""A round whose refund waits for the customer at Stripe: never paid another way meanwhile.
Like every round of :data:`MAY_HAVE_REFUNDED`, it turns back: SUCCEEDED once Stripe's webhook
reports its refund succeeded (:mod:`services.api.refund_failures`), and the desk then closes
its item."""


CONFLICT_NOT_REPAYABLE = (
    "it is a request for this round with another amount, currency or payment than the ledger"
    " holds, which the payout refused: nothing was paid for it, and paying the round again could"
    " pay it twice"
)
"""Why a conflicting payout request's item (``LEDGER_CONFLICT``) is never paid again."""
CONFLICT_HOW_TO_CLOSE = (
    "Find out why the amount changed (the reason names both); if the customer is owed more than"
    " the round pays, pay the difference by hand; then close it here"
)


def how_to_close(
    error_code: str | None,
    status: str | None = None,
    repaid_on: str | None = None,
    settled_on: str | None = None,
    *,
    paid_elsewhere: bool = False,
) -> str:
    """What the desk tells a payment operator to do with a round paying again cannot mend
    (``status``: the round's status in the ledger; ``repaid_on``, ``settled_on``: the round's
    other item a REPAY, or a PAID_ELSEWHERE, was recorded on, if any; ``paid_elsewhere``: the
    ledger's mark of a round settled another way before)."""
    if repaid_on is not None:
        return (
            f"It was paid again from {repaid_on}, so nothing is left to pay for it: do not pay"
            " the customer another way; close it here"
        )
    if settled_on is not None:
        return (
            f"It was settled another way from {settled_on}, so nothing is left to pay for it:"
            " do not pay the customer again; close it here"
        )
    if status == "SUCCEEDED":
        return "Stripe refunded this round, so nothing is left to pay for it: close it here"
    if error_code == WAITING_FOR_CUSTOMER:
        return (
            "Do not pay the customer another way while it waits; once Stripe reports the refund"
            " succeeded, the ledger records the round paid, and you close it here"
        )
    if paid_elsewhere and status == "FAILED":
        return (
            "It was settled another way before its refund failed: find out what the customer"
            " has been paid, pay by hand only what is still owed, then close it here"
        )
    return "Settle it with the customer another way, then close it here"


MAY_HAVE_REFUNDED = frozenset(
    {STALE_PENDING, not_refunded_code("requires_action"), IDEMPOTENCY_REFUSED, SAVED_SERVER_ERROR}
)
"""Error codes of a FAILED round under which money may still have gone back: such a round holds
the order's other disputes for a payment operator, as a paid one does (the database function
``payout_failure_may_have_refunded`` says the same; so does a round settled PAID_ELSEWHERE).
Stripe's word on the round's own refund settles it (:mod:`services.api.refund_failures`):
refunded, the round turns SUCCEEDED and holds them as every paid round does; failed or
canceled, it takes that code (``refund_failed``, ``refund_canceled``), and may be paid
again."""


PRICING_KEEPS_PAID_S = 35 * 24 * 3600.0
"""How long pricing keeps a settled dispute that counts money paid after its last round: Stripe
may report a refund failed up to 30 days after taking it on, and a REPAY needs the dispute
there (pricing prices the new round)."""
REPAY_WINDOW_S = PRICING_KEEPS_PAID_S - 24 * 3600.0
"""How long after a dispute's last priced round the desk records a REPAY: a day less than
pricing keeps it, so that a REPAY recorded reaches pricing while it still has the dispute."""


def why_not_repayable(
    status: str | None,
    error_code: str | None,
    last_priced_age_s: float | None = None,
    *,
    paid_elsewhere: bool = False,
    repaid_on: str | None = None,
    settled_on: str | None = None,
) -> str | None:
    """``None`` when paying a round again (a new round for its amount) can mend it: the round is
    FAILED in the ledger for a reason that may pass, was neither settled another way
    (``paid_elsewhere``; ``settled_on``: the other review item of the round it was settled on)
    nor paid again on another of its review items (``repaid_on``, that item's key: a round
    failing again after a refund has two), and the dispute's last round was
    priced less than :data:`REPAY_WINDOW_S` ago (``last_priced_age_s``). Otherwise why not, as
    a reviewer reads it.

    A round is never paid again after its refund went back: a FAILED row turns back only while
    its refund may still go through (:data:`MAY_HAVE_REFUNDED`, never repayable), to SUCCEEDED
    when Stripe reports that refund succeeded, and a repayable FAILED row stays FAILED."""
    if status != "FAILED":
        held = "not in the payout ledger" if status is None else f"{status} in the payout ledger"
        return f"it is {held}, and only a FAILED refund can be paid again"
    unmendable = UNMENDABLE_FAILURES.get(error_code or "")
    if unmendable is not None:
        return unmendable
    if repaid_on is not None:
        return f"it was paid again already, in a new round (REPAY on {repaid_on})"
    if settled_on is not None:
        return f"it was settled another way already (PAID_ELSEWHERE on {settled_on})"
    if paid_elsewhere:
        return (
            "a payment operator settled it another way before (PAID_ELSEWHERE), and Stripe's"
            " refund has failed since: find out what the customer has been paid, and pay by hand"
            " only what is still owed"
        )
    if last_priced_age_s is not None and last_priced_age_s > REPAY_WINDOW_S:
        return (
            f"its dispute was last priced {last_priced_age_s / 86400:.0f} days ago, and pricing"
            f" keeps a paid dispute {PRICING_KEEPS_PAID_S / 86400:.0f} days, so it could not"
            " price the new round"
        )
    return None


def settled_on_other_item(
    item_key: str,
    opened_at: datetime,
    settled: tuple[str, datetime] | None,
    *,
    paid_elsewhere: bool,
) -> str | None:
    """The key of the round's other failure item whose settlement by hand settled the failure
    ``item_key`` reports too, or ``None``. ``settled``: the round's PAID_ELSEWHERE decision on a
    failure item (its item key, when it was decided), if any; ``opened_at``: when ``item_key``
    opened; ``paid_elsewhere``: the ledger row's mark. A settlement counts only while the row
    still carries the mark, and only if it was decided after ``item_key`` opened: a failure
    reported since is news to the operator who settled."""
    if settled is None or not paid_elsewhere:
        return None
    key, decided_at = settled
    return key if key != item_key and decided_at > opened_at else None


def payout_item(settlement_round: int) -> str:
    """The key of the review item a failed payout of this round opens."""
    return f"payout:round{settlement_round}"


def payout_again_item(settlement_round: int) -> str:
    """The key of the review item this round opens when its refund fails again after Stripe
    had refunded it following a failure that might still have refunded, or fails after a
    payment operator settled the round another way: the round's own item
    (:func:`payout_item`) may have been decided then, and an item takes one decision."""
    return f"{payout_item(settlement_round)}:again"


def payout_conflict_item(settlement_round: int) -> str:
    """The key of the review item a ``LEDGER_CONFLICT`` of this round opens: a request the
    payout refused, apart from the round's own item (:func:`payout_item`), which its failure, if
    any, opens; deciding one leaves the other open."""
    return f"{payout_item(settlement_round)}:conflict"


def is_payout_failure_item(item_key: str | None) -> bool:
    """Whether ``item_key`` is the item of a round whose refund failed (:func:`payout_item`,
    :func:`payout_again_item`): one a REPAY may pay again, and a PAID_ELSEWHERE settles."""
    return payout_item_round(item_key) is not None and not payout_item_is_conflict(item_key)


def payout_item_round(item_key: str | None) -> int | None:
    """The round a payout review item's key names (:func:`payout_item`,
    :func:`payout_again_item`, :func:`payout_conflict_item`); ``None`` for any other key."""
    named = PAYOUT_ITEM.fullmatch(item_key or "")
    return None if named is None else int(named[1])


def idempotency_key(dispute_id: str, settlement_round: int) -> str:
    """The one key used for every attempt to pay this dispute's round."""
    return f"refund-bench:{dispute_id}:round-{settlement_round}"


@dataclass(frozen=True)
class RoundToReserve:
    dispute_id: str
    round: int
    amount_minor: int
    currency: str
    payment_reference: str


@dataclass(frozen=True)
class Reservation:
    """The round's ledger row as stored after the reservation (new or found)."""

    status: str
    amount_minor: int
    currency: str
    error_code: str | None

    def promises(self, amount_minor: int, currency: str) -> bool:
        """True when the payout will pay (or has paid) exactly this amount for the round: the
        reply may say so. False for a round held (``ORDER_ALREADY_REFUNDED``), failed, or
        recorded for another amount (the payout reports a ``LEDGER_CONFLICT``)."""
        return (
            self.status in ("PENDING", "SUCCEEDED")
            and self.amount_minor == amount_minor
            and self.currency == currency
        )


_RESERVE_SQL = """
SELECT r.dispute_id, r.round, r.status, r.amount_minor, r.currency, r.error_code
FROM unnest(%s::text[], %s::integer[], %s::bigint[], %s::text[], %s::text[], %s::text[])
     WITH ORDINALITY AS q (dispute_id, round, amount_minor, currency, reference, key, n)
CROSS JOIN LATERAL payout_claim_round(q.dispute_id, q.round, q.amount_minor, q.currency,
                                      q.reference, q.key, false) AS r
ORDER BY q.n
"""
"""One statement (one transaction) for many rounds, taken in the order given."""


async def reserve_rounds(
    pool: AsyncConnectionPool[Any], rounds: list[RoundToReserve]
) -> list[Reservation]:
    """Reserve each round (see the module); one :class:`Reservation` per round, in order.

    The rounds are reserved in the order of their payment references, so that two statements
    that lock several payments (two settler replicas) always lock them in the same order and
    cannot deadlock. A round asked for twice is reserved once.
    """
    distinct = sorted(
        dict.fromkeys(rounds), key=lambda r: (r.payment_reference, r.dispute_id, r.round)
    )
    async with pool.connection() as conn:
        cur = await conn.execute(
            _RESERVE_SQL,
            (
                [r.dispute_id for r in distinct],
                [r.round for r in distinct],
                [r.amount_minor for r in distinct],
                [r.currency for r in distinct],
                [r.payment_reference for r in distinct],
                [idempotency_key(r.dispute_id, r.round) for r in distinct],
            ),
        )
        rows = await cur.fetchall()
    found = {
        (dispute_id, round_): Reservation(status, amount, currency, error_code)
        for dispute_id, round_, status, amount, currency, error_code in rows
    }
    return [found[(r.dispute_id, r.round)] for r in rounds]
