"""The reply guard: a customer reply may state the approved amount and no other.

The settlement model writes the reply; this code checks it. A reply that fails any check is
replaced by :func:`template_reply`, which passes the checks by construction. The checks are
deliberately conservative: a false alarm costs a plainer reply, a miss could promise money.

Amounts are written in major units with two decimals when needed (``INR 689``, ``INR 689.50``);
every currency is assumed to have two decimal places.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

_LETTER = r"[^\W\d_]"
_NUMBER = r"[0-9](?:[0-9]|,(?=[0-9]))*(?:\.[0-9]+)?"
_KNOWN_CODES = {"INR": "INR", "RS": "INR", "RS.": "INR", "USD": "USD", "EUR": "EUR", "GBP": "GBP"}
_SYMBOLS = {"₹": "INR", "$": "USD", "€": "EUR", "£": "GBP"}
_UNIT_WORDS = {"RUPEE": "INR", "RUPEES": "INR", "DOLLAR": "USD", "DOLLARS": "USD"}
"""Currency names, written before a number ("Rupees 500") or after it ("500 rupees")."""
_MINOR_UNITS = ("PAISE", "PAISA")
_MULTIPLIERS = r"lakhs?|crores?|thousand|hundred"
"""Words that scale the number before them ("1 lakh"): such an amount is never exact."""
_BARE_WINDOW = 3
"""A bare number counts as an amount when at most this many words separate it from a money
word ("refund", "voucher", "worth", ...)."""

_MONEY_WORDS = r"refund|voucher|coupon|credit|cashback|compensat|discount|worth|amount|wallet|money"
_MONEY = re.compile(_MONEY_WORDS, re.IGNORECASE)
_APOLOGY = re.compile(r"sorry|apolog", re.IGNORECASE)
_REVIEW = re.compile(
    r"\b(?:will|to|shall|going\s+to)\s+(?:be\s+)?review|\bunder\s+review\b"
    r"|\bfor\s+(?:a\s+|human\s+|manual\s+|further\s+)?review\b|\bbeing\s+reviewed\b"
    r"|\bsent\s+(?:\w+\s+){0,3}(?:to|for)\s+(?:a\s+)?review|\b(?:pending|in)\s+review\b"
    r"|\b(?:is|are|be)\s+reviewing\b",
    re.IGNORECASE,
)
"""A review still to come ("will review", "under review", "pending review", "is reviewing"),
not one done ("we reviewed")."""
_TOKEN = re.compile(rf"{_LETTER}+|{_NUMBER}")
_PROMISES = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"refunded",
        r"\bwill\s+(?:be\s+)?refund",
        r"\brefund\s+(?:of|is|has|was)\b",
        r"\bcredit(?:ed)?\b",
        r"\bissued?\s+(?:a\s+|your\s+|the\s+)?refund",
        r"\bprocess(?:ed)?\s+(?:a\s+|your\s+|the\s+)?refund",
        r"\b(?:are|is)\s+refunding",
        r"\brefund\s+will\b",
        r"\b(?:receive|get|getting|receiving)\s+(?:\w+\s+){0,2}refund",
        r"\brefund\s+(?:is\s+|has\s+been\s+)?(?:on\s+(?:its|the)\s+way|being\s+processed"
        r"|processed|initiated|approved)",
        r"\bmoney\s+back\b",
    )
)
# What a caller-supplied phrase may never carry into a template reply: every stem the guard
# reacts to, and the "/-" that marks rupees.
_BANNED_STEMS = re.compile(
    rf"{_MONEY_WORDS}|rupee|paise|paisa|dollar|lakh|crore|thousand|hundred|sorry|apolog|/-",
    re.IGNORECASE,
)


def format_amount(minor: int, currency: str) -> str:
    """``"INR 689"`` for whole units, ``"INR 689.50"`` otherwise. Raises for negative amounts."""
    if minor < 0:
        raise ValueError(f"amount must be >= 0, got {minor}")
    major, cents = divmod(minor, 100)
    return f"{currency} {major}" if cents == 0 else f"{currency} {major}.{cents:02d}"


def _codes_pattern(currency: str) -> str:
    """Known codes and currency names in any case; the reply's own currency code only as written
    (upper case), so that an ordinary word can never be read as a currency."""
    known = sorted((set(_KNOWN_CODES) - {"RS."}) | set(_UNIT_WORDS), key=len, reverse=True)
    return "|".join([*(re.escape(code) for code in known), f"(?-i:{re.escape(currency)})"])


def _tag(code: str) -> str:
    upper = code.upper()
    return _KNOWN_CODES.get(upper) or _UNIT_WORDS.get(upper) or code


@functools.cache  # one pattern per currency, built once
def _prefix_re(currency: str) -> re.Pattern[str]:
    symbols = "".join(re.escape(s) for s in _SYMBOLS)
    return re.compile(
        rf"(?:(?<!{_LETTER})(?P<code>{_codes_pattern(currency)})\.?|(?P<sym>[{symbols}]))"
        rf"\s*(?P<num>{_NUMBER})",
        re.IGNORECASE,
    )


@functools.cache  # one pattern per currency, built once
def _suffix_re(currency: str) -> re.Pattern[str]:
    units = "|".join(_MINOR_UNITS)
    return re.compile(
        rf"(?P<num>{_NUMBER})\s*(?:(?P<unit>{units}|{_codes_pattern(currency)})(?!{_LETTER})"
        rf"|(?P<dash>/-))",
        re.IGNORECASE,
    )


_SCALED = re.compile(rf"(?P<num>{_NUMBER})\s*(?:{_MULTIPLIERS})(?!{_LETTER})", re.IGNORECASE)


@functools.cache  # one pattern per currency, built once
def _currency_word_re(currency: str) -> re.Pattern[str]:
    """Any currency code, name or symbol, with or without a number."""
    symbols = "".join(re.escape(s) for s in _SYMBOLS)
    units = "|".join([_codes_pattern(currency), *_MINOR_UNITS, r"RS\."])
    return re.compile(
        rf"(?<!{_LETTER})(?:{units})(?!{_LETTER})|[{symbols}]|(?<=[0-9])\s*/-", re.IGNORECASE
    )


def _to_minor(number: str, *, already_minor: bool) -> int | None:
    """Exact minor units of a written number, or ``None`` when it has sub-minor digits."""
    whole, _, fraction = number.replace(",", "").partition(".")
    if already_minor:
        return int(whole) if fraction.strip("0") == "" else None
    if fraction[2:].strip("0"):
        return None
    return int(whole) * 100 + int((fraction[:2] or "0").ljust(2, "0"))


@dataclass(frozen=True)
class MoneyMention:
    """An amount found in a reply: its text, exact minor units (None if inexact), currency
    (None when the text names none)."""

    text: str
    minor: int | None
    currency: str | None


def find_amounts(text: str, currency: str) -> tuple[MoneyMention, ...]:
    """Every money-looking mention in ``text``, in order of appearance.

    Counts: a currency code, name or symbol (INR, Rs, Rs., rupees, ₹, $, USD, dollars, EUR, €,
    GBP, £, ``currency``) before a number; a number before rupees, paise (paisa), dollars, a
    code or "/-"; a number scaled by a word (lakh, crore, thousand, hundred), never exact; a
    bare number of two or more digits within a few words of a money word ("refund", "voucher",
    "worth", ...).
    """
    return tuple(mention for _, _, mention in _located_amounts(text, currency))


def _located_amounts(text: str, currency: str) -> list[tuple[int, int, MoneyMention]]:
    """:func:`find_amounts` with where each mention starts and ends, in order of appearance."""
    found: list[tuple[int, int, MoneyMention]] = []
    covered: list[tuple[int, int]] = []
    for match in _prefix_re(currency).finditer(text):
        code: str | None = match.group("code")
        tag = _SYMBOLS[match.group("sym")] if code is None else _tag(code)
        minor = _to_minor(match.group("num"), already_minor=False)
        found.append((*match.span(), MoneyMention(match.group(0), minor, tag)))
        covered.append(match.span("num"))
    for match in _suffix_re(currency).finditer(text):
        if match.span("num") in covered:
            continue
        unit = match.group("unit") or "INR"  # "/-" marks rupees
        paise = unit.upper() in _MINOR_UNITS
        tag = "INR" if paise else _tag(unit)
        minor = _to_minor(match.group("num"), already_minor=paise)
        found.append((*match.span(), MoneyMention(match.group(0), minor, tag)))
        covered.append(match.span("num"))
    for match in _SCALED.finditer(text):
        if match.span("num") in covered:
            continue
        found.append((*match.span(), MoneyMention(match.group(0), None, None)))
        covered.append(match.span("num"))
    tokens = list(_TOKEN.finditer(text))
    near_refund = {i for i, token in enumerate(tokens) if _MONEY.search(token.group(0))}
    for i, token in enumerate(tokens):
        word = token.group(0)
        if not word[0].isdigit() or sum(c.isdigit() for c in word) < 2:
            continue
        if any(start <= token.start() < end for start, end in covered):
            continue
        if any(abs(i - j) <= _BARE_WINDOW + 1 for j in near_refund):
            minor = _to_minor(word, already_minor=False)
            found.append((*token.span(), MoneyMention(word, minor, None)))
    return sorted(found, key=lambda located: located[0])


def check_reply(
    text: str, approved_minor: int, currency: str, held_items: Sequence[str]
) -> tuple[str, ...]:
    """The guard's failures for one reply; empty means it may be sent.

    - approved > 0: ``format_amount(approved_minor, currency)`` must appear as written;
      approved == 0: the reply must not promise money ("refunded", "will refund", "credited"...);
    - no other amount, and no amount in another currency, may appear;
    - no currency word or symbol outside such an amount ("six hundred rupees");
    - with held items, the reply must say they go to review ("will review", "under review");
    - at most one apology ("sorry"/"apolog...").
    """
    failures: list[str] = []
    stated = format_amount(approved_minor, currency)
    if approved_minor > 0:
        exact = re.compile(
            rf"(?<![0-9A-Za-z]){re.escape(stated)}(?![0-9]|[.,][0-9])", re.IGNORECASE
        )
        if not exact.search(text):
            failures.append(f"does not state the approved amount {stated}")
    else:
        promises = [m.group(0) for p in _PROMISES for m in p.finditer(text)]
        if promises:
            failures.append(f"promises money although nothing is approved: {promises[0]!r}")
    located = _located_amounts(text, currency)
    for _, _, mention in located:
        if mention.currency is not None and mention.currency != _tag(currency):
            failures.append(f"names an amount in another currency: {mention.text!r}")
        elif mention.minor != approved_minor:
            failures.append(f"names an amount other than the approved {stated}: {mention.text!r}")
    for word in _currency_word_re(currency).finditer(text):
        # "/-" marks the number before it ("INR 689/-"): it is covered when that number is.
        at = word.start() - 1 if word.group(0).lstrip().startswith("/-") else word.start()
        if not any(start <= at < end for start, end, _ in located):
            failures.append(f"names money without an amount it may state: {word.group(0)!r}")
    if held_items and not _REVIEW.search(text):
        failures.append("does not say that the held items go to review")
    apologies = len(_APOLOGY.findall(text))
    if apologies > 1:
        failures.append(f"apologises {apologies} times (at most once)")
    return tuple(dict.fromkeys(failures))


def safe_phrase(phrase: str, currency: str) -> str:
    """``phrase`` with everything the guard reacts to removed: currency symbols, codes and
    names, money words ("refund", "credit", "voucher", ...), scaling words ("lakh"), "/-" and
    apology stems. Whitespace collapsed."""
    codes = _currency_word_re(currency)
    cleaned = "".join(c for c in phrase if c not in _SYMBOLS)
    while True:
        stripped = codes.sub(" ", _BANNED_STEMS.sub("", cleaned))
        if stripped == cleaned:
            break
        cleaned = stripped
    return " ".join(cleaned.split())


def _listing(phrases: Sequence[str], currency: str) -> str:
    kept = [p for p in (safe_phrase(p, currency) for p in phrases) if p]
    if len(kept) <= 1:
        return "".join(kept)
    return f"{', '.join(kept[:-1])} and {kept[-1]}"


def template_reply(
    approved_minor: int, currency: str, resolved: Sequence[str], held: Sequence[str]
) -> str:
    """A plain, deterministic reply that passes :func:`check_reply` by construction.

    ``resolved`` and ``held`` are short descriptions ("the late delivery", "the Raita"); they are
    passed through :func:`safe_phrase` and kept away from the amount sentence.
    """
    done = _listing(resolved, currency)
    waiting = _listing(held, currency)
    sentences: list[str] = []
    if approved_minor > 0:
        sentences.append(
            f"We have refunded {format_amount(approved_minor, currency)} to your original "
            "payment method; it should reach you within a few working days."
        )
        if done:
            sentences.append(f"This covers {done}.")
    else:
        sentences.append("We have looked into your complaint about this order.")
        if done:
            sentences.append(f"We have noted {done}.")
    if held:
        subject = waiting or "the rest of your complaint"
        sentences.append(f"A colleague will review {subject} and get back to you with the outcome.")
    sentences.append("We are sorry for the trouble with this order.")
    if approved_minor <= 0 and not held:
        sentences.append("We are not able to offer a refund for this order.")
    return " ".join(sentences)
