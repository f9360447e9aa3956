"""The template reply, sent instead of a model's reply that fails the guard (or of none).

:func:`template_reply` is plain and deterministic, and passes
:func:`~services.settler.guard.check_reply` by construction: it checks itself and names the
items more generically until it passes. :func:`safe_phrase` strips from a caller's phrase
everything the guard reacts to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.settler.amounts import (
    SUM_WORDS,
    SYMBOLS,
    currency_word_re,
    format_amount,
    hidden_characters,
    name_spans,
    normalised,
)
from services.settler.guard import APOLOGY, MONEY_TALK, OFF_SCRIPT, STRONG_PROMISES, check_reply

_MONEY_WORDS = r"refund|voucher|coupon|credit|cashback|compensat|discount|worth|amount|wallet|money"
# What a caller-supplied phrase may never carry into a template reply: every stem the guard
# reacts to, and the "/-" that marks rupees.
_BANNED_STEMS = re.compile(
    rf"{_MONEY_WORDS}|rupee|paise|paisa|dollar|lakh|crore|thousand|hundred|/-", re.IGNORECASE
)


def safe_phrase(phrase: str, currency: str, item_names: Sequence[str] = ()) -> str:
    """``phrase`` with everything the guard reacts to removed: digits and other numerals,
    currency signs, codes and names, wording that promises money ("pay back", "reimburse",
    :data:`~services.settler.guard.STRONG_PROMISES`), money words ("refund", "credit",
    "voucher", ...), numbers in words ("fifty", "lakh"), "/-", characters that do not show
    (:func:`~services.settler.amounts.hidden_characters`), apologies
    (:data:`~services.settler.guard.APOLOGY`) and what
    :data:`~services.settler.guard.OFF_SCRIPT` forbids (links, credentials, free things). Read
    as the guard reads it (:func:`~services.settler.amounts.normalised`); whitespace
    collapsed. The digits of an item's name it quotes (``item_names``: "the missing Chicken 65")
    are kept, as the guard reads them as a name. What it leaves may still trip a check in the
    template's sentence (a negation next to "review", say): :func:`template_reply` checks
    itself for that."""
    codes = currency_word_re(currency)
    read = normalised(phrase)
    hidden = set(hidden_characters(read))
    named = {at for start, end in name_spans(read, item_names) for at in range(start, end)}
    cleaned = "".join(
        c
        for at, c in enumerate(read)
        if c not in SYMBOLS and (not c.isnumeric() or at in named) and c not in hidden
    )
    while True:
        stripped = cleaned
        for promise in STRONG_PROMISES:
            stripped = promise.sub(" ", stripped)
        stripped = MONEY_TALK.sub(" ", stripped)
        stripped = APOLOGY.sub("", _BANNED_STEMS.sub("", stripped))
        stripped = codes.sub(" ", SUM_WORDS.sub(" ", stripped))
        for _, pattern in OFF_SCRIPT:
            stripped = pattern.sub(" ", stripped)
        if stripped == cleaned:
            break
        cleaned = stripped
    return " ".join(cleaned.split())


def _listing(phrases: Sequence[str], currency: str, item_names: Sequence[str]) -> str:
    kept = [p for p in (safe_phrase(p, currency, item_names) for p in phrases) if p]
    if len(kept) <= 1:
        return "".join(kept)
    return f"{', '.join(kept[:-1])} and {kept[-1]}"


def template_reply(
    approved_minor: int,
    currency: str,
    resolved: Sequence[str],
    held: Sequence[str],
    *,
    earlier_refund: bool = False,
    held_names: Sequence[str] = (),
    item_names: Sequence[str] = (),
) -> str:
    """A plain, deterministic reply that passes :func:`~services.settler.guard.check_reply`,
    with the same ``held_names`` (the items only held lines name) as the reply's own check.

    ``resolved`` and ``held`` are short descriptions ("the late delivery", "the Raita"); they are
    passed through :func:`safe_phrase` and kept away from the amount sentence. A reply that
    still fails the guard (an item named "No Onion Pizza" next to "will review", say) names
    the resolved items, then the held ones, then both only generically ("the rest of your
    complaint"); that last wording passes by construction.
    ``earlier_refund``: an earlier round's reply told the customer of a refund (a later round's
    reply must not read as if nothing had been refunded, nor as if this amount covered
    everything).
    ``held_names``: a resolved item whose name holds one ("the missing Boondi Raita" with
    "Raita" held) would read as covering the held item: the resolved items are then not named.
    ``item_names``: the items the round's lines name, whose digits the guard reads as names
    (:func:`safe_phrase` keeps them).
    """
    done = _listing(resolved, currency, item_names)
    waiting = _listing(held, currency, item_names)
    for named_done, named_waiting in ((done, waiting), ("", waiting), (done, "")):
        reply = _template(
            approved_minor, currency, named_done, named_waiting, bool(held), earlier_refund
        )
        try:
            refused = check_reply(
                reply,
                approved_minor,
                currency,
                held,
                earlier_refund=earlier_refund,
                held_names=held_names,
                item_names=item_names,
            )
        except Exception:  # noqa: BLE001 - a guard fault on an item name: use plainer words
            refused = ("unreadable",)
        if not refused:
            return reply
    return _template(approved_minor, currency, "", "", bool(held), earlier_refund)


def _template(
    approved_minor: int,
    currency: str,
    done: str,
    waiting: str,
    held: bool,
    earlier_refund: bool,
) -> str:
    """:func:`template_reply`'s words for the listings ``done`` and ``waiting`` ("" for none)."""
    sentences: list[str] = []
    if approved_minor > 0:
        besides = ", in addition to our earlier refund for this order" if earlier_refund else ""
        sentences.append(
            f"We have refunded {format_amount(approved_minor, currency)} to your original "
            f"payment method{besides}; it should reach you within a few working days."
        )
        if done:
            covers = "Together they cover" if earlier_refund else "This covers"
            sentences.append(f"{covers} {done}.")
    else:
        sentences.append("We have looked into your complaint about this order.")
        if done:
            sentences.append(f"We have noted {done}.")
    if held:
        subject = waiting or "the rest of your complaint"
        sentences.append(f"A colleague will review {subject} and get back to you with the outcome.")
    sentences.append("We are sorry for the trouble with this order.")
    if approved_minor <= 0 and earlier_refund:
        sentences.append("What our earlier reply said about this order still stands.")
    elif approved_minor <= 0 and not held:
        sentences.append("We are not able to offer a refund for this order.")
    return " ".join(sentences)
