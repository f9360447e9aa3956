"""The stand-in's answers: transparent, deterministic rules, one pure function per role.

These rules are NOT the product's judgement. They exist so that the pipeline can be exercised
end to end (and under load) without a real model: they read the same JSON documents a model
would read and return answers of the same shape. Every rule is written down in ``README.md``.

- :func:`extract_grievances` answers ``grievance_extraction`` by keyword families, sentence by
  sentence, resolving items and quantities against the order's line items.
- :func:`judge_grievance` answers ``judge_ruling`` from the evidence snapshot's ``derived`` and
  ``order`` blocks; silent evidence escalates, except on a "credulous" seat (``seed % 3 == 0``).
- :func:`write_reply` answers ``customer_reply``, with one deliberate mischief rule so that the
  product's reply guard has something to catch.
- :func:`answer` dispatches on the schema name; :func:`schema_errors` checks an answer against
  the JSON schema the request sent.

Offsets are Python ``str`` indices (Unicode code points), end exclusive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

import orjson

# --------------------------------------------------------------------------- answer shapes

ROLE_BY_SCHEMA: Final[dict[str, str]] = {
    "grievance_extraction": "extractor",
    "judge_ruling": "judge",
    "customer_reply": "settler",
}


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


class RulingAnswer(TypedDict):
    """One judge's answer, as the ``judge_ruling`` schema has it."""

    ruling: Literal["UPHELD", "REJECTED", "ESCALATE"]
    confidence: float
    evidence_cited: list[str]
    reasoning: str


class ReplyAnswer(TypedDict):
    reply: str


class RuleError(Exception):
    """The request cannot be answered: the server turns this into an HTTP 400 with ``message``
    and, when a request setting (not the messages) is at fault, that setting's name as the
    error's ``param``, as OpenAI does."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


# --------------------------------------------------------------------------- numbers and times

_NUMBER_WORDS: Final[dict[str, int]] = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "both": 2,
}  # fmt: skip
_WORD_FOR: Final[dict[int, str]] = {
    value: word for word, value in _NUMBER_WORDS.items() if word != "both"
}
_NUM: Final = r"(?:\d{1,3}|" + "|".join(_NUMBER_WORDS) + ")"


def _number(token: str) -> int:
    token = token.lower()
    return int(token) if token.isdigit() else _NUMBER_WORDS[token]


def _spell(value: int) -> str:
    return _WORD_FOR.get(value, str(value))


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


# --------------------------------------------------------------------------- text segmentation


@dataclass(frozen=True)
class _Segment:
    start: int
    end: int
    text: str


def _trimmed(text: str, start: int, end: int) -> _Segment | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return _Segment(start, end, text[start:end]) if start < end else None


_CLOSERS: Final = "\"'\u201d\u2019)"


_SENTENCE_END_RE: Final = re.compile(r"[.!?]+[" + re.escape(_CLOSERS) + r"]*(?=\s|$)|\n")


def sentences(text: str) -> list[_Segment]:
    """Split ``text`` at ``.``, ``!``, ``?`` (followed by a space or the end) and at newlines.

    Each sentence keeps its terminal punctuation (and closing quotes) and is trimmed of
    surrounding whitespace. "8:15pm" or "2.5 hours" do not end a sentence.
    """
    out: list[_Segment] = []
    start = 0
    for end in _SENTENCE_END_RE.finditer(text):
        stop = end.start() if end.group(0) == "\n" else end.end()
        segment = _trimmed(text, start, stop)
        if segment is not None:
            out.append(segment)
        start = end.end()
    tail = _trimmed(text, start, len(text))
    if tail is not None:
        out.append(tail)
    return out


_CLAUSE_SEPARATOR_RE: Final = re.compile(
    r"\s*;\s*|\s+[-\u2013\u2014]+\s+|\s*,\s*(?:and|but|so|plus|also)\s+|\s*,\s*|\s+but\s+",
    re.IGNORECASE,
)


def _clauses(text: str, sentence: _Segment) -> list[_Segment]:
    out: list[_Segment] = []
    cursor = 0
    for separator in _CLAUSE_SEPARATOR_RE.finditer(sentence.text):
        piece = _trimmed(text, sentence.start + cursor, sentence.start + separator.start())
        if piece is not None:
            out.append(piece)
        cursor = separator.end()
    piece = _trimmed(text, sentence.start + cursor, sentence.end)
    if piece is not None:
        out.append(piece)
    return out


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
_PRONOUN_RE: Final = re.compile(r"\b(?:it|they|them|those|these|that one)\b")


# --------------------------------------------------------------------------- items


@dataclass(frozen=True)
class _Item:
    name: str
    quantity: int
    full: re.Pattern[str]  # the whole name, plural allowed
    tokens: tuple[tuple[str, re.Pattern[str]], ...]  # distinctive words of the name


_STOP_TOKENS: Final = frozenset({"with", "and", "the", "extra", "large", "small", "half", "full"})


def _items(line_items: Sequence[Mapping[str, Any]]) -> list[_Item]:
    out: list[_Item] = []
    for index, raw in enumerate(line_items):
        name = raw.get("name")
        quantity = raw.get("quantity")
        if not isinstance(name, str) or not name.strip():
            raise RuleError(f"line_items[{index}].name must be a non-empty string")
        if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            raise RuleError(f"line_items[{index}].quantity must be a positive integer")
        tokens = tuple(
            (token, re.compile(r"\b" + _plural(token) + r"\b"))
            for token in re.findall(r"[a-z]+", name.lower())
            if len(token) >= 4 and token not in _STOP_TOKENS
        )
        full = re.compile(r"\b" + _plural(name.lower()) + r"\b")
        out.append(_Item(name=name, quantity=quantity, full=full, tokens=tokens))
    return out


def _plural(token: str) -> str:
    return re.escape(token) + r"(?:s|es)?"


@dataclass(frozen=True)
class _Mention:
    item: _Item
    start: int  # offset in the clause text


def _mentions(clause: str, items: Sequence[_Item]) -> list[_Mention]:
    """Items named in lower-cased ``clause``: the full name or a distinctive word (plural ok).

    A word shared by several items (``chicken``) names none of them unless it is the only match.
    """
    lowered = clause  # callers pass lower-cased text
    found: dict[str, _Mention] = {}
    for item in items:
        full = item.full.search(lowered)
        if full is not None:
            found[item.name] = _Mention(item, full.start())
    token_hits: dict[str, list[tuple[_Item, int]]] = {}
    for item in items:
        if item.name in found:
            continue
        for token, pattern in item.tokens:
            hit = pattern.search(lowered)
            if hit is not None:
                token_hits.setdefault(token, []).append((item, hit.start()))
    for hits in token_hits.values():
        if len(hits) == 1:
            item, start = hits[0]
            if item.name not in found:
                found[item.name] = _Mention(item, start)
    return sorted(found.values(), key=lambda mention: mention.start)


_DETERMINERS: Final = r"(?:the|my|our|your|their|his|her|those|these)"
_OF_THE_RE: Final = re.compile(
    r"\b(?P<part>" + _NUM + r")\s+of\s+" + _DETERMINERS + r"\s+(?P<whole>" + _NUM + r")\b"
)


_NOT_BETWEEN: Final = r"(?!(?:" + _DETERMINERS + r"|hours?|hrs?|minutes?|mins?|times)\b)"
"""Words that end a number's reach: "after 2 hours the biryani" states no biryani count."""
_QUANTITY_BEFORE_RE: Final = re.compile(
    r"\b(?P<n>" + _NUM + r"|an?)\s+(?:of\s+" + _DETERMINERS + r"\s+)?"
    r"(?:" + _NOT_BETWEEN + r"[a-z\-]+\s+){0,2}$"
)


def _quantity_before(clause: str, start: int) -> int | None:
    """A number word or digit before the item mention at ``start``: right before it, or with
    "of the" or up to two other words (adjectives: "two cold biryanis") in between."""
    before = clause[:start]
    match = _QUANTITY_BEFORE_RE.search(before)
    if match is None:
        return None
    token = match.group("n").lower()
    return 1 if token in ("a", "an") else _number(token)


@dataclass(frozen=True)
class _Resolved:
    item: _Item | None
    quantity: int | None
    whole: int | None  # the "four" in "two of the four"
    explicit: bool  # the clause states the quantity


def _nearest(mentions: Sequence[_Mention], anchor: int) -> _Mention:
    """The mention that the keyword at ``anchor`` is about: the closest one before it, else after.

    "the raita never came" names its subject first; "missing the raita" names it after.
    """
    before = [m for m in mentions if m.start <= anchor]
    if before:
        return before[-1]
    return min(mentions, key=lambda m: m.start - anchor)


def _resolve(
    clause: str, sentence: str, items: Sequence[_Item], last_item: _Item | None, anchor: int
) -> _Resolved:
    """Resolve which line item (and how many units) the keyword at ``anchor`` is about. A
    stated count below one ("0 of the 4 biryanis") states none: the item's ordered quantity."""
    resolved = _resolve_stated(clause, sentence, items, last_item, anchor)
    if resolved.quantity is not None and resolved.quantity < 1:
        whole = resolved.item.quantity if resolved.item is not None else None
        return _Resolved(resolved.item, whole, resolved.whole, False)
    return resolved


def _resolve_stated(
    clause: str, sentence: str, items: Sequence[_Item], last_item: _Item | None, anchor: int
) -> _Resolved:
    source = clause
    mentions = _mentions(clause, items)
    if not mentions:
        in_sentence = _mentions(sentence, items)
        if len(in_sentence) == 1:
            source, mentions = sentence, in_sentence
    of_the = _OF_THE_RE.search(clause)
    if mentions:
        mention = _nearest(mentions, anchor) if source is clause else mentions[0]
        item = mention.item
        if of_the is not None and len(mentions) == 1:
            return _Resolved(item, _number(of_the["part"]), _number(of_the["whole"]), True)
        stated = _quantity_before(source, mention.start)
        if stated is not None:
            return _Resolved(item, stated, None, True)
        return _Resolved(item, item.quantity, None, False)
    if of_the is not None:
        part, whole = _number(of_the["part"]), _number(of_the["whole"])
        candidates = [item for item in items if item.quantity == whole]
        if len(candidates) == 1:
            return _Resolved(candidates[0], part, whole, True)
        return _Resolved(None, part, whole, True)
    if last_item is not None and _PRONOUN_RE.search(clause):
        return _Resolved(last_item, last_item.quantity, None, False)
    if len(items) == 1:
        return _Resolved(items[0], items[0].quantity, None, False)
    return _Resolved(None, None, None, False)


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
        count = 1 if amount in ("a", "an") else _number(amount)
        unit = "hour" if duration["unit"].lower().startswith("h") else "minute"
        plural = "" if count == 1 else "s"
        if duration.re is _DURATION_LATE_RE:
            return f"The order was delivered {count} {unit}{plural} late."
        return f"The order was delivered {count} {unit}{plural} after it was placed."
    clock = _CLOCK_RE.search(sentence)
    if clock is not None:
        return f"The order was delivered at {clock.group(0).strip().rstrip('.')}."
    return "The order was delivered late."


def _missing_text(resolved: _Resolved) -> str:
    item, quantity = resolved.item, resolved.quantity
    if item is None:
        if quantity is None:
            return "An item of the order was not delivered."
        if resolved.whole is not None:
            return (
                f"{_spell(quantity).capitalize()} of the {_spell(resolved.whole)} items "
                "ordered were not delivered."
            )
        return f"{_spell(quantity).capitalize()} items of the order were not delivered."
    if quantity is None or quantity >= item.quantity:
        if item.quantity == 1:
            return f"The {item.name} ordered was not delivered."
        return f"All {_spell(item.quantity)} {item.name} units ordered were not delivered."
    verb = "was" if quantity == 1 else "were"
    return (
        f"{_spell(quantity).capitalize()} of the {_spell(item.quantity)} {item.name} units "
        f"ordered {verb} not delivered."
    )


def _wrong_text(resolved: _Resolved) -> str:
    if resolved.item is None:
        return "The order contained an item that was not what was ordered."
    return f"A different item was delivered instead of the {resolved.item.name} ordered."


def _quality_text(clause: str, resolved: _Resolved) -> str:
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


def _packaging_text(clause: str, resolved: _Resolved) -> str:
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

_NO_ITEM: Final = _Resolved(None, None, None, False)
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
    items = _items(line_items)
    out: list[GrievanceAnswer] = []
    seen: set[tuple[str, str | None]] = set()
    last_item: _Item | None = None
    for sentence in sentences(complaint_text):
        if sentence.text.rstrip(_CLOSERS).endswith("?"):
            continue
        found: list[tuple[_Segment, GrievanceAnswer]] = []
        sentence_text = sentence.text.lower()
        for clause in _clauses(complaint_text, sentence):
            # Rules read lower-cased text (faster than IGNORECASE); spans come from the original.
            text = clause.text.lower()
            if not _is_claim(text):
                continue
            for category, anchor in _families(text):
                item = (
                    _resolve(text, sentence_text, items, last_item, anchor)
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
            mentioned = _mentions(text, items)
            if mentioned:
                last_item = mentioned[-1].item
        for clause, grievance in found:
            segment = sentence if len(found) == 1 else clause
            grievance["span_start"] = segment.start
            grievance["span_end"] = segment.end
            out.append(grievance)
    return {"grievances": out}


def _grievance(category: str, clause: str, sentence: str, resolved: _Resolved) -> GrievanceAnswer:
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


# --------------------------------------------------------------------------- judging

Strength = Literal["supports", "contradicts", "ambiguous", "silent"]


@dataclass(frozen=True)
class _Finding:
    strength: Strength
    cited: tuple[str, ...]
    reasoning: str


def _section(evidence: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    body = evidence.get(name)
    if not isinstance(body, Mapping):
        raise RuleError(f"evidence.{name} must be an object")
    return body


def _late(order: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    cited = ("derived.delay_minutes", "order.delivery_sla_minutes")
    exceeded = derived.get("sla_exceeded")
    delay, sla = derived.get("delay_minutes"), order.get("delivery_sla_minutes")
    if exceeded is True:
        over = derived.get("minutes_over_sla")
        return _Finding(
            "supports",
            cited,
            f"The order took {delay} minutes against a {sla}-minute delivery SLA, "
            f"{over} minutes over it.",
        )
    if exceeded is False:
        return _Finding(
            "contradicts",
            cited,
            f"The order took {delay} minutes, within its {sla}-minute delivery SLA.",
        )
    absent = tuple(
        f"order.{name}"
        for name in ("delivered_at", "delivery_sla_minutes")
        if order.get(name) is None
    )
    return _Finding(
        "silent",
        absent or ("derived.sla_exceeded",),
        "The snapshot cannot say whether the SLA was exceeded: the delivery time or the SLA is "
        "not recorded.",
    )


def _missing(grievance: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    cited = ("derived.missing_units_estimate", "derived.pickup_weight_shortfall_g")
    estimates = derived.get("missing_units_estimate")
    shortfall = derived.get("pickup_weight_shortfall_g")
    if not isinstance(estimates, Mapping):
        return _Finding(
            "silent",
            ("order.pickup_weight_expected_g", "order.pickup_weight_actual_g"),
            "No pickup weights are recorded, so nothing shows whether units were missing.",
        )
    item = grievance.get("item_name")
    quantity = grievance.get("item_quantity")
    claimed = quantity if isinstance(quantity, int) and quantity > 0 else 1
    if not isinstance(item, str):
        known = [value for value in estimates.values() if isinstance(value, int)]
        if known and len(known) == len(estimates) and all(value == 0 for value in known):
            return _Finding(
                "contradicts", cited, f"The pickup weight shows no shortfall ({shortfall} g)."
            )
        return _Finding(
            "ambiguous", cited, "The grievance names no item, so the estimate cannot be matched."
        )
    estimate = next(
        (value for name, value in estimates.items() if name.casefold() == item.casefold()), None
    )
    if estimate is None:
        return _Finding(
            "silent",
            ("derived.missing_units_estimate",),
            f"The snapshot has no missing-unit estimate for {item}.",
        )
    facts = (
        f"The pickup weight was {shortfall} g short, an estimated {estimate} missing {item} "
        f"unit(s) against {claimed} claimed."
    )
    if estimate >= claimed:
        return _Finding("supports", cited, facts)
    if estimate == 0:
        return _Finding("contradicts", cited, facts)
    return _Finding("ambiguous", cited, facts)


_DAMAGE_RE: Final = re.compile(
    r"(?<!no )(?<!not )\b(?:leak\w*|spill\w*|spilt|damag\w*|crush\w*|torn|broken|wet|soaked"
    r"|open(?:ed)?)\b",
    re.IGNORECASE,
)
_INTACT_RE: Final = re.compile(
    r"\b(?:intact|sealed|undamaged|no (?:damage|leaks?|spills?)|good condition|dry)\b",
    re.IGNORECASE,
)


def _packaging(order: Mapping[str, Any]) -> _Finding:
    if order.get("packaging_condition_recorded") is not True:
        return _Finding(
            "silent",
            ("order.packaging_condition_recorded",),
            "The packaging condition was not recorded at handover, so the evidence is silent.",
        )
    cited = ("order.packaging_condition_recorded", "order.packaging_notes")
    notes = order.get("packaging_notes")
    text = notes if isinstance(notes, str) else ""
    damaged, intact = bool(_DAMAGE_RE.search(text)), bool(_INTACT_RE.search(text))
    if damaged and not intact:
        return _Finding("supports", cited, f"The recorded packaging notes say: {text!r}.")
    if intact and not damaged:
        return _Finding("contradicts", cited, f"The recorded packaging notes say: {text!r}.")
    return _Finding(
        "ambiguous", cited, "The packaging was recorded but the notes neither confirm nor deny it."
    )


def _conduct(order: Mapping[str, Any]) -> _Finding:
    reports = order.get("partner_conduct_reports")
    cited = ("order.partner_conduct_reports",)
    if isinstance(reports, list) and reports:
        return _Finding(
            "supports", cited, f"{len(reports)} conduct report(s) about the partner are on record."
        )
    return _Finding("silent", cited, "No conduct report about the delivery partner is on record.")


def _record_list(order: Mapping[str, Any], key: str, category: str) -> _Finding:
    records = order.get(key)
    if isinstance(records, list) and records:
        return _Finding(
            "supports", (f"order.{key}",), f"The order has {len(records)} {key} record(s)."
        )
    return _Finding(
        "silent",
        (f"order.{key}",),
        f"The snapshot holds no record that could confirm or contradict a {category} claim.",
    )


def _billing(order: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    over = derived.get("overcharge_minor")
    cited = ("derived.overcharge_minor", "order.charged_total_minor")
    if isinstance(over, int) and over > 0:
        return _Finding(
            "supports", cited, f"The charge exceeds the expected total by {over} minor units."
        )
    if over == 0:
        return _Finding(
            "contradicts",
            cited,
            f"The charged total {order.get('charged_total_minor')} matches the expected total.",
        )
    return _Finding("silent", cited, "The snapshot has no overcharge figure.")


def judge_grievance(
    grievance: Mapping[str, Any], evidence: Mapping[str, Any], seed: int | None
) -> RulingAnswer:
    """Rule on one grievance from the snapshot only.

    Supports -> UPHELD (0.9), contradicts -> REJECTED (0.9), ambiguous -> ESCALATE (0.6),
    silent -> ESCALATE (0.6) citing the absent record, except that a seat whose ``seed`` is a
    multiple of 3 is "credulous" and upholds silent evidence (0.35): the stand-in's dissent.
    """
    order, derived = _section(evidence, "order"), _section(evidence, "derived")
    category = grievance.get("category")
    if category == "LATE_DELIVERY":
        finding = _late(order, derived)
    elif category == "MISSING_ITEM":
        finding = _missing(grievance, derived)
    elif category == "PACKAGING":
        finding = _packaging(order)
    elif category == "PARTNER_CONDUCT":
        finding = _conduct(order)
    elif category == "WRONG_ITEM":
        finding = _record_list(order, "item_substitutions", "wrong-item")
    elif category == "QUALITY":
        finding = _record_list(order, "quality_reports", "food-quality")
    elif category == "BILLING":
        finding = _billing(order, derived)
    else:
        finding = _Finding("ambiguous", ("grievance.category",), f"Unknown category {category!r}.")
    if finding.strength == "supports":
        return _ruling("UPHELD", 0.9, finding)
    if finding.strength == "contradicts":
        return _ruling("REJECTED", 0.9, finding)
    if finding.strength == "silent" and seed is not None and seed % 3 == 0:
        return _ruling("UPHELD", 0.35, finding, " Taking the customer at their word.")
    return _ruling("ESCALATE", 0.6, finding)


def _ruling(
    ruling: Literal["UPHELD", "REJECTED", "ESCALATE"],
    confidence: float,
    finding: _Finding,
    addendum: str = "",
) -> RulingAnswer:
    return {
        "ruling": ruling,
        "confidence": confidence,
        "evidence_cited": list(finding.cited),
        "reasoning": finding.reasoning + addendum,
    }


# --------------------------------------------------------------------------- the reply

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
_REJECTED: Final = frozenset({"REJECTED", "REJECT", "DECLINED", "DECLINE"})
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
    noted = [e for e in resolved if e not in paid and e not in rejected]
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
            " The new refund should reflect within three working days."
        )
    elif paid:
        parts.append(
            f"We've refunded {approved_amount} to your original payment method for "
            f"{_join(_phrases(paid))}; it should reflect within three working days."
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
    if held_for_review:
        parts.append(
            f"A colleague will review {_join(_phrases(held_for_review))} and contact you "
            "within 24 hours."
        )
    mischief = _MISCHIEF_RE.search(complaint_text)
    if mischief is not None:
        parts.append(f"We've also noted your request for INR {mischief['n'].replace(',', '')}.")
    return {"reply": " ".join(parts)}


# --------------------------------------------------------------------------- dispatch


def _user_document(messages: object) -> Mapping[str, Any]:
    if not isinstance(messages, list):
        raise RuleError("messages must be a list")
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if not isinstance(content, str):
                raise RuleError("the user message content must be a string (a JSON document)")
            try:
                document = orjson.loads(content)
            except ValueError as exc:
                raise RuleError(f"the user message is not a JSON document: {exc}") from exc
            if not isinstance(document, Mapping):
                raise RuleError("the user message must be a JSON object")
            return document
    raise RuleError("no user message")


def _optional(document: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """``document[key]`` if present (of type ``kind``), else ``default``: a field a later
    prompt version added."""
    if key not in document:
        return default
    return _require(document, key, kind)


def _require(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise RuleError(f"user document: {key!r} is missing or has the wrong type")
    return value


def answer(
    schema_name: str, messages: object, *, seed: int | None, temperature: float | None
) -> ExtractionAnswer | RulingAnswer | ReplyAnswer:
    """The stand-in's answer to one chat-completions request, chosen by ``schema_name``.

    Raises :class:`RuleError` for an unknown schema, a malformed user document, or a judge
    request at temperature 0 (the product rule: independent judges need temperature > 0).
    """
    if schema_name not in ROLE_BY_SCHEMA:
        raise RuleError(
            f"unknown response_format.json_schema.name {schema_name!r}: the stand-in answers "
            f"{sorted(ROLE_BY_SCHEMA)}",
            "response_format",
        )
    if schema_name == "judge_ruling" and temperature is not None and temperature <= 0:
        raise RuleError(
            "judge_ruling requests must use temperature > 0: at temperature 0 the K judges "
            "are one opinion counted K times",
            "temperature",
        )
    document = _user_document(messages)
    if schema_name == "grievance_extraction":
        return extract_grievances(
            _require(document, "complaint_text", str), _require(document, "line_items", list)
        )
    if schema_name == "judge_ruling":
        return judge_grievance(
            _require(document, "grievance", Mapping), _require(document, "evidence", Mapping), seed
        )
    return write_reply(
        _require(document, "complaint_text", str),
        _require(document, "approved_amount", str),
        _require(document, "resolved", list),
        _require(document, "held_for_review", list),
        _optional(document, "earlier_refund", bool, False),
    )


# --------------------------------------------------------------------------- schema check

_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


def _is_type(value: object, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _JSON_TYPES.get(name, ()))


def schema_errors(instance: object, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Why ``instance`` does not validate against ``schema`` (empty when it does).

    Covers the subset strict structured outputs use: type (or a list of types), enum, const,
    properties, required, additionalProperties false, items, anyOf, minimum, maximum.
    """
    errors: list[str] = []
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(not schema_errors(instance, option, path) for option in options):
            errors.append(f"{path}: matches none of anyOf")
        return errors
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is_type(instance, k) for k in kinds):
            return [f"{path}: expected {kind}, got {type(instance).__name__}"]
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: {instance!r} not in {schema['enum']}")
    if "const" in schema and instance != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}")
    if isinstance(instance, int | float) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{path}: {instance} < minimum {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{path}: {instance} > maximum {schema['maximum']}")
    if isinstance(instance, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in instance:
                errors.append(f"{path}: missing required {key!r}")
        for key, value in instance.items():
            if key in properties:
                errors.extend(schema_errors(value, properties[key], f"{path}.{key}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected property {key!r}")
    if isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        for index, value in enumerate(instance):
            errors.extend(schema_errors(value, schema["items"], f"{path}[{index}]"))
    return errors
