"""Which line item of the order, and how many units of it, a clause of a complaint is about.

Items are named by their full name or a distinctive word (plural allowed); quantities by a
number word or digit before the item, or "two of the four"; "it"/"they" refer to the last item
named, and an order with a single line item resolves to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from services.llm_standin.errors import RuleError

# --------------------------------------------------------------------------- numbers

_NUMBER_WORDS: Final[dict[str, int]] = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "both": 2,
}  # fmt: skip
_WORD_FOR: Final[dict[int, str]] = {
    value: word for word, value in _NUMBER_WORDS.items() if word != "both"
}
_NUM: Final = r"(?:\d{1,3}|" + "|".join(_NUMBER_WORDS) + ")"


def number(token: str) -> int:
    """The count a digit string or a number word ("two", "both") stands for."""
    token = token.lower()
    return int(token) if token.isdigit() else _NUMBER_WORDS[token]


def spell(value: int) -> str:
    """``value`` as a number word (one to twelve), else in digits."""
    return _WORD_FOR.get(value, str(value))


# --------------------------------------------------------------------------- items


@dataclass(frozen=True)
class Item:
    """A line item of the order and the patterns that name it in lower-cased text."""

    name: str
    quantity: int
    full: re.Pattern[str]  # the whole name, plural allowed
    tokens: tuple[tuple[str, re.Pattern[str]], ...]  # distinctive words of the name


_STOP_TOKENS: Final = frozenset({"with", "and", "the", "extra", "large", "small", "half", "full"})


def parse_items(line_items: Sequence[Mapping[str, Any]]) -> list[Item]:
    """The order's ``line_items`` (``{"name", "quantity"}``) as :class:`Item` values; raises
    :class:`~services.llm_standin.errors.RuleError` for a malformed one."""
    out: list[Item] = []
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
        out.append(Item(name=name, quantity=quantity, full=full, tokens=tokens))
    return out


def _plural(token: str) -> str:
    return re.escape(token) + r"(?:s|es)?"


@dataclass(frozen=True)
class Mention:
    """A line item named in a clause, and where."""

    item: Item
    start: int  # offset in the clause text


def item_mentions(clause: str, items: Sequence[Item]) -> list[Mention]:
    """Items named in lower-cased ``clause``: the full name or a distinctive word (plural ok).

    A word shared by several items (``chicken``) names none of them unless it is the only match.
    """
    lowered = clause  # callers pass lower-cased text
    found: dict[str, Mention] = {}
    for item in items:
        full = item.full.search(lowered)
        if full is not None:
            found[item.name] = Mention(item, full.start())
    token_hits: dict[str, list[tuple[Item, int]]] = {}
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
                found[item.name] = Mention(item, start)
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
    return 1 if token in ("a", "an") else number(token)


@dataclass(frozen=True)
class Resolved:
    """The line item a keyword is about, and how many units of it (``None``: unresolved)."""

    item: Item | None
    quantity: int | None
    whole: int | None  # the "four" in "two of the four"
    explicit: bool  # the clause states the quantity


def _nearest(mentions: Sequence[Mention], anchor: int) -> Mention:
    """The mention that the keyword at ``anchor`` is about: the closest one before it, else after.

    "the raita never came" names its subject first; "missing the raita" names it after.
    """
    before = [m for m in mentions if m.start <= anchor]
    if before:
        return before[-1]
    return min(mentions, key=lambda m: m.start - anchor)


_PRONOUN_RE: Final = re.compile(r"\b(?:it|they|them|those|these|that one)\b")


def resolve(
    clause: str, sentence: str, items: Sequence[Item], last_item: Item | None, anchor: int
) -> Resolved:
    """Resolve which line item (and how many units) the keyword at ``anchor`` is about. A
    stated count below one ("0 of the 4 biryanis") states none: the item's ordered quantity."""
    resolved = _resolve_stated(clause, sentence, items, last_item, anchor)
    if resolved.quantity is not None and resolved.quantity < 1:
        whole = resolved.item.quantity if resolved.item is not None else None
        return Resolved(resolved.item, whole, resolved.whole, False)
    return resolved


def _resolve_stated(
    clause: str, sentence: str, items: Sequence[Item], last_item: Item | None, anchor: int
) -> Resolved:
    source = clause
    mentions = item_mentions(clause, items)
    if not mentions:
        in_sentence = item_mentions(sentence, items)
        if len(in_sentence) == 1:
            source, mentions = sentence, in_sentence
    of_the = _OF_THE_RE.search(clause)
    if mentions:
        mention = _nearest(mentions, anchor) if source is clause else mentions[0]
        item = mention.item
        if of_the is not None and len(mentions) == 1:
            return Resolved(item, number(of_the["part"]), number(of_the["whole"]), True)
        stated = _quantity_before(source, mention.start)
        if stated is not None:
            return Resolved(item, stated, None, True)
        return Resolved(item, item.quantity, None, False)
    if of_the is not None:
        part, whole = number(of_the["part"]), number(of_the["whole"])
        candidates = [item for item in items if item.quantity == whole]
        if len(candidates) == 1:
            return Resolved(candidates[0], part, whole, True)
        return Resolved(None, part, whole, True)
    if last_item is not None and _PRONOUN_RE.search(clause):
        return Resolved(last_item, last_item.quantity, None, False)
    if len(items) == 1:
        return Resolved(items[0], items[0].quantity, None, False)
    return Resolved(None, None, None, False)
