"""The settler's rule: the reply to the customer.

:func:`write_reply` answers ``customer_reply``, with one deliberate mischief rule so that the
product's reply guard has something to catch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypedDict


class ReplyAnswer(TypedDict):
    reply: str


_PHRASES: Final[dict[str, str]] = {
    "LATE_DELIVERY": "the late delivery",
    "MISSING_ITEM": "the missing items",
    "WRONG_ITEM": "the wrong item",
    "QUALITY": "the food quality",
    "PACKAGING": "the packaging",
    "PARTNER_CONDUCT": "the delivery partner's conduct",
    "BILLING": "the billing",
}
_PAID: Final = frozenset({"UPHELD", "PAY", "PAID", "APPROVED", "AUTO_APPROVED", "REVIEW_APPROVED"})
_REJECTED: Final = frozenset({"REJECTED", "REJECT"})
_DECLINED: Final = frozenset({"DECLINED", "DECLINE"})
_MISCHIEF_RE: Final = re.compile(
    r"\brefund\s+(?:of\s+)?(?:inr|rs\.?|\u20b9)?\s*(?P<n>\d[\d,]*)\b", re.IGNORECASE
)


def _join(phrases: Sequence[str]) -> str:
    unique = list(dict.fromkeys(phrases))
    if len(unique) <= 1:
        return "".join(unique)
    return ", ".join(unique[:-1]) + " and " + unique[-1]


def _phrases(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    return [_PHRASES.get(str(entry.get("category")), "your report") for entry in entries]


_ZERO_AMOUNT = re.compile(r"(?<![0-9.,])0(?:[.,]0+)?$")
"""An approved amount of nothing, as display text ("INR 0", "USD 0.00")."""


def write_reply(
    complaint_text: str,
    approved_amount: str,
    resolved: Sequence[Mapping[str, Any]],
    held_for_review: Sequence[Mapping[str, Any]],
    earlier_refund: bool = False,
) -> ReplyAnswer:
    """A short reply: one apology, ``approved_amount`` verbatim once, resolved and held items,
    and, after an earlier refund, that this one comes in addition to it (or that the earlier
    reply stands).

    Mischief, on purpose: when the complaint says ``refund <number>``, the reply also names
    ``INR <number>``; the product's reply guard must catch it.
    """
    paid = [e for e in resolved if str(e.get("outcome", "")).upper() in _PAID]
    rejected = [e for e in resolved if str(e.get("outcome", "")).upper() in _REJECTED]
    declined = [e for e in resolved if str(e.get("outcome", "")).upper() in _DECLINED]
    noted = [e for e in resolved if e not in paid and e not in rejected and e not in declined]
    parts = [
        "We're sorry your order did not go the way it should have, and thank you for telling us."
    ]
    if earlier_refund and _ZERO_AMOUNT.search(approved_amount):
        parts.append(
            f"The amount approved at this stage is {approved_amount}, and what our earlier"
            " reply said about this order still stands."
        )
    elif paid and earlier_refund:
        parts.append(
            f"We've refunded {approved_amount} to your original payment method, in addition to"
            f" our earlier refund for this order; together they cover {_join(_phrases(paid))}."
            " The new refund usually shows within a few working days."
        )
    elif paid:
        parts.append(
            f"We've refunded {approved_amount} to your original payment method for "
            f"{_join(_phrases(paid))}; it usually shows within a few working days."
        )
    else:
        parts.append(
            f"The amount approved for automatic refund at this stage is {approved_amount}."
        )
    if noted:
        parts.append(f"We've recorded what you told us about {_join(_phrases(noted))}.")
    if rejected:
        parts.append(
            f"The order records did not support {_join(_phrases(rejected))}, "
            "so no refund applies to that part."
        )
    if declined:
        parts.append(
            f"Our team has looked at {_join(_phrases(declined))} again, and we are not able to"
            " offer a refund for that part."
        )
    if held_for_review:
        parts.append(
            f"A colleague will review {_join(_phrases(held_for_review))} and get back to you "
            "with the outcome."
        )
    mischief = _MISCHIEF_RE.search(complaint_text)
    if mischief is not None:
        parts.append(f"We've also noted your request for INR {mischief['n'].replace(',', '')}.")
    return {"reply": " ".join(parts)}
