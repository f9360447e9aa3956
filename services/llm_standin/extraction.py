"""The extractor's rule: the grievances of a complaint, read by keyword families.

:func:`extract_grievances` answers ``grievance_extraction`` sentence by sentence and clause
by clause (:mod:`services.llm_standin.segmentation`), resolving items and quantities against
the order's line items (:mod:`services.llm_standin.items`), and writes each grievance as a
sentence from a template.

Offsets are Python ``str`` indices (Unicode code points), end exclusive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypedDict

from services.llm_standin.items import (
    Item,
    Resolved,
    item_mentions,
    number,
    parse_items,
    resolve,
    spell,
)
from services.llm_standin.segmentation import CLOSERS, Segment, clauses, sentences


class GrievanceAnswer(TypedDict):
    """One extracted grievance, as the ``grievance_extraction`` schema has it."""

    text: str
    category: str
    span_start: int
    span_end: int
    item_name: str | None
    item_quantity: int | None


class ExtractionAnswer(TypedDict):
    grievances: list[GrievanceAnswer]


# --------------------------------------------------------------------------- times

_CLOCK_RE: Final = re.compile(
    r"\b(?P<h12>\d{1,2})(?::(?P<m12>[0-5]\d))?\s*(?P<ampm>[ap])\.?m\b\.?"
    r"|\b(?P<h24>[01]?\d|2[0-3]):(?P<m24>[0-5]\d)\b"
)


def _clock_minutes(match: re.Match[str]) -> int | None:
    """Minutes after midnight of a clock time such as ``8:15pm`` or ``21:40``."""
    if match.group("h12") is not None:
        hour = int(match.group("h12"))
        if not 1 <= hour <= 12:
            return None
        minute = int(match.group("m12") or 0)
        hour = hour % 12 + (12 if match.group("ampm").lower() == "p" else 0)
        return hour * 60 + minute
    return int(match.group("h24")) * 60 + int(match.group("m24"))


# --------------------------------------------------------------------------- keyword families

_NEG: Final = r"(?<!not )(?<!n't )(?<!never )(?<!no )"

_LATE_RE: Final = re.compile(
    _NEG + r"\blate\b|\bdelay(?:ed|s)?\b|\b(?:hours?|hrs?|minutes?|mins?)\s+later\b"
    r"|\btook\s+(?:\w+\s+){0,3}?(?:hours?|hrs?|minutes?|mins?)\b"
    r"|\b(?:showed up|turned up|arrived|came|reached|delivered)\s+(?:only\s+|finally\s+)?"
    r"(?:at|around|by|after)\b"
)
_DURATION_RE: Final = re.compile(
    r"\b(?:took|after|over)\s+(?:almost\s+|nearly\s+|about\s+|around\s+|over\s+)?"
    r"(?P<amount>\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(?P<unit>hours?|hrs?|minutes?|mins?)\b"
)
_DURATION_LATE_RE: Final = re.compile(
    r"\b(?P<amount>\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(?P<unit>hours?|hrs?|minutes?|mins?)\s+(?:late|later)\b"
)
_MISSING_RE: Final = re.compile(
    r"\bmissing\b|\bnever (?:arrived|came|got|received)\b|\b(?:didn't|did not|never) get\b"
    r"|\b(?:didn't|did not) (?:arrive|come|receive)\b|\bnot (?:received|delivered|included)\b"
    r"|\b(?:not|wasn't|weren't) in the bag\b|\bleft out\b|\bforgot\b"
)
_WRONG_RE: Final = re.compile(
    r"\bwrong\b|\binstead of\b|\bnot what (?:i|we) ordered\b|\bsomeone else's\b"
    r"|\bdifferent (?:item|dish|order)\b"
)
_QUALITY_WORDS: Final[dict[str, str]] = {
    "cold": "cold", "stale": "stale", "undercooked": "undercooked", "under-cooked": "undercooked",
    "burnt": "burnt", "burned": "burnt", "soggy": "soggy", "spoiled": "spoiled",
    "rotten": "spoiled", "hair": "hair", "insect": "insect", "bug": "insect",
}  # fmt: skip
_QUALITY_RE: Final = re.compile(
    _NEG + r"\b(?P<word>" + "|".join(re.escape(w) for w in _QUALITY_WORDS) + r")s?\b"
)
_PACKAGING_VERBS: Final[dict[str, str]] = {
    "leaked": "leaked", "leaking": "leaked", "leak": "leaked", "leaky": "leaked",
    "spilled": "spilled", "spilt": "spilled", "spilling": "spilled",
    "crushed": "was crushed", "squashed": "was crushed",
    "torn": "was torn", "ripped": "was torn", "broken": "was broken",
}  # fmt: skip
_PACKAGING_RE: Final = re.compile(
    r"\b(?P<verb>" + "|".join(_PACKAGING_VERBS) + r")\b"
    r"|\bpackag\w*\b(?:\s+\w+){0,3}?\s+(?P<defect>damaged|open|opened|wet|soaked|bad|poor)\b"
)
_PARTNER_RE: Final = re.compile(
    r"\bdelivery\s+(?:guy|boy|man|person|partner|agent|executive|driver)\b"
    r"|\b(?:rider|driver|courier|delivery)\b"
)
_CONDUCT_STRONG: Final[dict[str, str]] = {
    "rude": "behaved rudely", "rudely": "behaved rudely", "abusive": "was abusive",
    "misbehaved": "misbehaved", "misbehaving": "misbehaved", "impolite": "behaved rudely",
}  # fmt: skip
_CONDUCT_WITH_PARTNER: Final[dict[str, str]] = {
    "shouted": "shouted at the customer", "yelled": "shouted at the customer",
    "swore": "was abusive", "cursed": "was abusive", "threatened": "threatened the customer",
    "harassed": "harassed the customer", "aggressive": "behaved aggressively",
    "unprofessional": "behaved unprofessionally", "argued": "argued with the customer",
}  # fmt: skip
_CONDUCT_RE: Final = re.compile(
    r"\b(?P<word>" + "|".join([*_CONDUCT_STRONG, *_CONDUCT_WITH_PARTNER]) + r")\b"
)
_BILLING_TWICE_RE: Final = re.compile(
    r"\bcharged\s+(?:me\s+|us\s+)?(?:twice|double)\b|\bdouble[- ]charged\b"
)
_BILLING_OVER_RE: Final = re.compile(
    r"\bover-?charged\b|\bextra charges?\b|\bcharged\s+(?:me\s+|us\s+)?(?:extra|more)\b"
    r"|\bhidden (?:fee|charge)s?\b"
)
_BILL_RE: Final = re.compile(r"\bbill(?:ed|ing)?\b")

# Clauses that are not claims about the order: demands, and instructions aimed at the model.
_DEMAND_RE: Final = re.compile(
    r"^(?:and\s+|so\s+|please\s+|just\s+|now\s+)*"
    r"(?:refund|give|send|compensate|credit|reimburse|pay|fix|cancel|return)\b"
    r"|\b(?:i|we)\s+(?:want|demand|expect|need|deserve)\b"
    r"|\b(?:you|u)\s+(?:should|must|need to|better|have to)\b"
)
_INSTRUCTION_RE: Final = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}?"
    r"\b(?:rules?|instructions?|prompts?|above|previous|polic(?:y|ies)|guidelines?)\b"
    r"|\b(?:system|assistant|developer)\s*:"
    r"|\byou are (?:now )?(?:a|an|the)\b"
    r"|\b(?:mark|rule|set|return)\b.{0,40}?\b(?:upheld|approved?)\b"
)


# --------------------------------------------------------------------------- grievance texts


def _late_text(clause: str, sentence: str) -> str:
    times = [m for m in (_clock_minutes(t) for t in _CLOCK_RE.finditer(sentence)) if m is not None]
    if len(times) >= 2:
        minutes = times[1] - times[0]
        if minutes <= 0:
            minutes += 24 * 60
        return f"The order was delivered {minutes} minutes after it was placed."
    duration = next(
        (
            match
            for pattern in (_DURATION_RE, _DURATION_LATE_RE)
            for text in (clause, sentence)
            if (match := pattern.search(text)) is not None
        ),
        None,
    )
    if duration is not None:
        amount = duration["amount"].lower()
        count = 1 if amount in ("a", "an") else number(amount)
        unit = "hour" if duration["unit"].lower().startswith("h") else "minute"
        plural = "" if count == 1 else "s"
        if duration.re is _DURATION_LATE_RE:
            return f"The order was delivered {count} {unit}{plural} late."
        return f"The order was delivered {count} {unit}{plural} after it was placed."
    clock = _CLOCK_RE.search(sentence)
    if clock is not None:
        return f"The order was delivered at {clock.group(0).strip().rstrip('.')}."
    return "The order was delivered late."


def _missing_text(resolved: Resolved) -> str:
    item, quantity = resolved.item, resolved.quantity
    if item is None:
        if quantity is None:
            return "An item of the order was not delivered."
        if resolved.whole is not None:
            return (
                f"{spell(quantity).capitalize()} of the {spell(resolved.whole)} items "
                "ordered were not delivered."
            )
        return f"{spell(quantity).capitalize()} items of the order were not delivered."
    if quantity is None or quantity >= item.quantity:
        if item.quantity == 1:
            return f"The {item.name} ordered was not delivered."
        return f"All {spell(item.quantity)} {item.name} units ordered were not delivered."
    verb = "was" if quantity == 1 else "were"
    return (
        f"{spell(quantity).capitalize()} of the {spell(item.quantity)} {item.name} units "
        f"ordered {verb} not delivered."
    )


def _wrong_text(resolved: Resolved) -> str:
    if resolved.item is None:
        return "The order contained an item that was not what was ordered."
    return f"A different item was delivered instead of the {resolved.item.name} ordered."


def _quality_text(clause: str, resolved: Resolved) -> str:
    words: list[str] = []
    for match in _QUALITY_RE.finditer(clause):
        word = _QUALITY_WORDS[match["word"].lower()]
        if word not in words:
            words.append(word)
    subject = f"The {resolved.item.name}" if resolved.item is not None else "The food"
    foreign = [w for w in words if w in ("hair", "insect")]
    states = [w for w in words if w not in ("hair", "insect")]
    parts: list[str] = []
    if states:
        parts.append("was delivered " + " and ".join(states))
    if foreign:
        parts.append("contained " + " and ".join(f"a foreign object ({w})" for w in foreign))
    return f"{subject} {' and '.join(parts)}."


def _packaging_text(clause: str, resolved: Resolved) -> str:
    match = _PACKAGING_RE.search(clause)
    verb = "was damaged"
    if match is not None and match["verb"]:
        verb = _PACKAGING_VERBS[match["verb"].lower()]
    subject = (
        f"The {resolved.item.name} container" if resolved.item is not None else "The packaging"
    )
    where = " inside the delivery bag" if re.search(r"\bbag\b", clause) else ""
    return f"{subject} {verb}{where}."


def _conduct_text(clause: str) -> str:
    description = "behaved inappropriately"
    for match in _CONDUCT_RE.finditer(clause):
        word = match["word"].lower()
        description = _CONDUCT_STRONG.get(word) or _CONDUCT_WITH_PARTNER[word]
        break
    when = " when asked about the order" if re.search(r"\bask(?:ed|ing)?\b", clause) else ""
    return f"The delivery partner {description}{when}."


def _billing_text(clause: str) -> str:
    if _BILLING_TWICE_RE.search(clause):
        return "The customer was charged twice for the order."
    if _BILLING_OVER_RE.search(clause):
        return "The customer was charged more than the order total."
    return "The bill for the order was incorrect."


# --------------------------------------------------------------------------- extraction

_NO_ITEM: Final = Resolved(None, None, None, False)
_ITEM_CATEGORIES: Final = frozenset({"MISSING_ITEM", "WRONG_ITEM", "QUALITY", "PACKAGING"})


def _families(clause: str) -> list[tuple[str, int]]:
    """(category, keyword offset) for each keyword family the clause contains, in fixed order."""
    found: list[tuple[str, int]] = []
    bill_word = _BILL_RE.search(clause)
    billing = (
        _BILLING_TWICE_RE.search(clause)
        or _BILLING_OVER_RE.search(clause)
        or (
            bill_word
            if bill_word and re.search(r"\b(?:wrong|incorrect|higher|more|twice)\b", clause)
            else None
        )
    )
    missing = _MISSING_RE.search(clause)
    if missing is not None:
        found.append(("MISSING_ITEM", missing.start()))
    wrong = _WRONG_RE.search(clause)
    if wrong is not None and not (billing and wrong.group(0).lower() == "wrong"):
        found.append(("WRONG_ITEM", wrong.start()))
    quality = _QUALITY_RE.search(clause)
    if quality is not None:
        found.append(("QUALITY", quality.start()))
    packaging = _PACKAGING_RE.search(clause)
    if packaging is not None:
        found.append(("PACKAGING", packaging.start()))
    conduct = _CONDUCT_RE.search(clause)
    if conduct is not None and (
        conduct["word"].lower() in _CONDUCT_STRONG or _PARTNER_RE.search(clause)
    ):
        found.append(("PARTNER_CONDUCT", conduct.start()))
    if billing is not None:
        found.append(("BILLING", billing.start()))
    late = _LATE_RE.search(clause)
    if late is not None and missing is None:
        # "arrived"/"came" alone is not lateness ("the biryani arrived cold"): it needs a time.
        weak = not re.search(r"\b(?:late|delay|took|later)", late.group(0))
        if not weak or _CLOCK_RE.search(clause) or _DURATION_RE.search(clause):
            found.append(("LATE_DELIVERY", late.start()))
    return found


def _is_claim(clause: str) -> bool:
    return not (_DEMAND_RE.search(clause) or _INSTRUCTION_RE.search(clause))


def extract_grievances(
    complaint_text: str, line_items: Sequence[Mapping[str, Any]]
) -> ExtractionAnswer:
    """The grievances of ``complaint_text``: one per (category, item) per clause, first wins.

    A sentence is split into clauses; a clause is a grievance when it contains a keyword family
    and is neither a demand nor an instruction; questions (``?``) are skipped whole. The span is
    the sentence when the sentence yields one grievance, else the clause. Items and quantities
    are resolved against ``line_items`` (``{"name", "quantity"}``); an unresolved item is null.
    """
    items = parse_items(line_items)
    out: list[GrievanceAnswer] = []
    seen: set[tuple[str, str | None]] = set()
    last_item: Item | None = None
    for sentence in sentences(complaint_text):
        if sentence.text.rstrip(CLOSERS).endswith("?"):
            continue
        found: list[tuple[Segment, GrievanceAnswer]] = []
        sentence_text = sentence.text.lower()
        for clause in clauses(complaint_text, sentence):
            # Rules read lower-cased text (faster than IGNORECASE); spans come from the original.
            text = clause.text.lower()
            if not _is_claim(text):
                continue
            for category, anchor in _families(text):
                item = (
                    resolve(text, sentence_text, items, last_item, anchor)
                    if category in _ITEM_CATEGORIES
                    else _NO_ITEM
                )
                key = (category, item.item.name if item.item is not None else None)
                if key in seen:
                    continue
                seen.add(key)
                found.append((clause, _grievance(category, text, sentence_text, item)))
                if item.item is not None and item.explicit:
                    last_item = item.item
            mentioned = item_mentions(text, items)
            if mentioned:
                last_item = mentioned[-1].item
        for clause, grievance in found:
            segment = sentence if len(found) == 1 else clause
            grievance["span_start"] = segment.start
            grievance["span_end"] = segment.end
            out.append(grievance)
    return {"grievances": out}


def _grievance(category: str, clause: str, sentence: str, resolved: Resolved) -> GrievanceAnswer:
    if category == "LATE_DELIVERY":
        text = _late_text(clause, sentence)
    elif category == "MISSING_ITEM":
        text = _missing_text(resolved)
    elif category == "WRONG_ITEM":
        text = _wrong_text(resolved)
    elif category == "QUALITY":
        text = _quality_text(clause, resolved)
    elif category == "PACKAGING":
        text = _packaging_text(clause, resolved)
    elif category == "PARTNER_CONDUCT":
        text = _conduct_text(clause)
    else:
        text = _billing_text(clause)
    return {
        "text": text,
        "category": category,
        "span_start": 0,
        "span_end": 0,
        "item_name": resolved.item.name if resolved.item is not None else None,
        "item_quantity": resolved.quantity if resolved.item is not None else None,
    }
