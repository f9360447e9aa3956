"""Validation of the extraction model's answer against the complaint text and the order.

The model proposes grievances; this code decides whether the proposal is well-formed: known
category, a real span of the complaint, an item that is on the order, a plausible quantity, no
duplicates. It never looks at evidence and never decides whether a grievance is true.

Spans are offsets in the complaint as a Python ``str`` (code points), ``span_end`` exclusive.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from refund_bench.domain import Category, LineItem, name_key
from refund_bench.errors import InvalidInput
from refund_bench.events import readable_text

REQUIRED_KEYS = ("text", "category", "span_start", "span_end", "item_name", "item_quantity")
NEEDS_ITEM = frozenset({Category.MISSING_ITEM, Category.WRONG_ITEM})
DEFAULT_MAX_GRIEVANCES = 20
MAX_GRIEVANCE_TEXT_CHARS = 500
"""A grievance's text restates one checkable claim; judges, reviewers and customers read it."""


class ExtractedGrievance(BaseModel):
    """One validated grievance; ``item_name`` is the exact name of a line item of the order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grievance_id: str
    category: Category
    text: str
    span_start: int = Field(ge=0)
    span_end: int = Field(ge=1)
    item_name: str | None = None
    item_quantity: int | None = Field(default=None, ge=1)


Claim = tuple[Category, str | None]
"""What one grievance claims: its category and the line item it names (the order's spelling)."""


Unresolved = tuple[Category, str]
"""A grievance whose item could not be placed on the order: its category, and how it names the
item (or that it names none, where its category needs one), in readable words."""


class ExtractionInvalid(InvalidInput):
    """The model's answer is unusable; ``problems`` lists every reason, in readable words, and
    ``passed`` what a repair must keep of the grievances whose category and text say what they
    claim: groups of claims, of each of which the repair must make one. A claim nothing was
    found wrong with is a group of its own, and so is one at fault for its span, its text's
    length or its quantity (its item is on the order, or it needs none); the claims one text is
    said as about one item are one group (the repair keeps either), and about two items, two;
    in an answer over the grievance limit, all are one group (the repair drops some, not all).
    ``quantities``: the units each claim on an item without fault, made once, claims (all
    the units ordered for an item named without a number): a repair that makes the claim keeps
    them (:func:`quantities_changed`). ``unresolved``: the grievances whose item could not be
    placed (not on the order, ambiguous, or none named where the category needs one); for
    each, the repair must make a claim of its category about an item no claim of ``passed``
    names, or, where its category needs no item, a claim of it about none, since what the
    customer said is still a grievance even when the model could not place it on the order
    (none in an answer over the limit).

    A handler may re-ask the model with the problems; unhandled, it goes to the DLQ.
    """

    def __init__(
        self,
        problems: Sequence[str],
        passed: Sequence[Sequence[Claim]] = (),
        unresolved: Sequence[Unresolved] = (),
        quantities: Mapping[Claim, int] | None = None,
    ) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.quantities: dict[Claim, int] = dict(quantities or {})
        groups = (tuple(dict.fromkeys(group)) for group in passed if group)
        self.passed: tuple[tuple[Claim, ...], ...] = tuple(dict.fromkeys(groups))
        self.unresolved: tuple[Unresolved, ...] = tuple(unresolved)
        super().__init__("; ".join(self.problems))


def _claim_described(claim: Claim) -> str:
    category, item = claim
    return f"{category}" + (f" for {item!r}" if item is not None else "")


def claims_left_out(
    passed: Sequence[Sequence[Claim]],
    grievances: Sequence[ExtractedGrievance],
    unresolved: Sequence[Unresolved] = (),
) -> tuple[str, ...]:
    """The groups of ``passed`` (:attr:`ExtractionInvalid.passed`) of which ``grievances`` (the
    answer repairing it) makes no claim, and the ``unresolved`` grievances
    (:attr:`ExtractionInvalid.unresolved`) of a category it makes too few new claims of, in
    readable words. A repair fixes what was wrong; a claim it drops that had nothing wrong with
    it is the complaint read differently, and one it drops because its item could not be
    placed on the order is a grievance left unjudged: which reading is right is for a person.
    No grievance is judged here: only the two answers are compared, by category and item."""
    made = {(g.category, g.item_name) for g in grievances}
    left_out = [
        _claim_described(group[0])
        if len(group) == 1
        else "one of " + ", ".join(_claim_described(claim) for claim in group)
        for group in passed
        if not made.intersection(group)
    ]
    named = {claim for group in passed for claim in group}
    for category in dict.fromkeys(category for category, _ in unresolved):
        if category not in NEEDS_ITEM and (category, None) in made:
            continue  # placed on no item, as its category may be: kept, or merged into that one
        wanted = [said for of, said in unresolved if of is category]
        new = {claim for claim in made if claim[0] is category and claim not in named}
        if len(new) < len(wanted):
            left_out += [f"{category} {said}" for said in wanted]
    return tuple(left_out)


def quantities_changed(
    quantities: Mapping[Claim, int], grievances: Sequence[ExtractedGrievance]
) -> tuple[str, ...]:
    """The claims of ``grievances`` (the answer repairing one) that claim other units of their
    item than the same claim without fault did in the answer repaired (``quantities``:
    :attr:`ExtractionInvalid.quantities`), in readable words. A repair mends what was wrong;
    two of four biryanis become four only by reading the complaint anew, which is for a
    person."""
    return tuple(
        f"{g.category} for {g.item_name!r}: {quantities[claim]} units in the first answer,"
        f" {g.item_quantity} in the repair"
        for g in grievances
        if (claim := (g.category, g.item_name)) in quantities
        and g.item_quantity != quantities[claim]
    )


def _norm_statement(text: str) -> str:
    return name_key(text).rstrip(".!?;:, ")


_WORD = re.compile(r"[^\W_]+")
"""A word of letters and digits: all of one in ASCII text."""


def _word_list(text: str) -> list[str]:
    """The words of ``text``: runs of letters and digits, with the combining marks written on
    them. Devanagari's, Tamil's and other scripts' vowel signs are marks, not letters: without
    them "बिरयानी" would be the fragments "ब", "रय", "न", and parts of words would match."""
    if text.isascii():
        return _WORD.findall(text)
    words: list[str] = []
    start: int | None = None
    for at, char in enumerate(text):
        if char.isalnum() or (start is not None and unicodedata.category(char)[0] == "M"):
            if start is None:
                start = at
        elif start is not None:
            words.append(text[start:at])
            start = None
    if start is not None:
        words.append(text[start:])
    return words


def _singular(word: str) -> str:
    """A plural's usual singular ("biryanis", "sandwiches", "potatoes"); other words as they
    are."""
    if (
        len(word) > 4
        and word.endswith("es")
        and word[:-2].endswith(("ch", "sh", "x", "ss", "z", "o"))
    ):
        return word[:-2]
    if len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


_FILLER = frozenset(
    {"the", "a", "an", "my", "our", "your", "their", "of", "some", "both", "all", "whole", "one"}
)
"""Words a claim wraps around an item's name ("the fries", "both of my biryanis")."""


def _words(text: str) -> frozenset[str]:
    return frozenset(_singular(word) for word in _word_list(name_key(text)))


_COUNTS = frozenset(
    {
        *("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
        *("eleven", "twelve", "dozen", "half", "halve", "couple", "pair"),
    }
)
"""Words that say how many: with the digits, a count in a claimed item's name."""


def _is_count(word: str) -> bool:
    """Whether ``word`` may say how many: it holds a digit ("2", "x2", "500ml"), or is a number
    word, in the singular or not ("two", "halves", "pairs")."""
    return any(char.isdigit() for char in word) or _singular(word) in _COUNTS


def counts_named(claimed: str, item: LineItem) -> list[str]:
    """The words of ``claimed`` (an item's name as a claim gives it) that say how many of
    ``item`` it claims ("2 biryanis", "biryani x2", "two of the biryanis", "half the naans"):
    words with digits and number words, but those of the item's own name ("7 Up", "Two-Cheese
    Pizza", "Cola 500ml", and "500ml" of "Cola (500 ml)")."""
    own = _words(item.name)
    listed = _word_list(name_key(item.name))
    joined = {first + second for first, second in itertools.pairwise(listed)}
    return [
        word
        for word in _word_list(name_key(claimed))
        if _is_count(word) and _singular(word) not in own and word not in joined
    ]


def _claim_words(text: str) -> frozenset[str]:
    """The words of a claimed name that may name the item: not its filler, nor a number."""
    return frozenset(word for word in _words(text) if word not in _FILLER and not word.isdigit())


def _matching(words: frozenset[str], line_items: Sequence[LineItem]) -> list[LineItem]:
    return [
        item
        for item in line_items
        if words and (named := _words(item.name)) and (words <= named or named <= words)
    ]


def _pick(
    words: frozenset[str], line_items: Sequence[LineItem]
) -> tuple[LineItem | None, list[LineItem]]:
    """The one item ``words`` name (:func:`resolve_item`), if one, and every item they match."""
    matches = _matching(words, line_items)
    if len(matches) == 1:
        return matches[0], matches
    same = [item for item in matches if _words(item.name) == words]
    # "my biryanis" on an order of "Biryani" and "Chicken Biryani": the name it states.
    return (same[0] if len(same) == 1 else None), matches


def resolve_item(claimed: str, line_items: Sequence[LineItem]) -> tuple[LineItem | None, str]:
    """Resolve a claimed item name to one line item, or ``(None, problem)``.

    Case-insensitive; an exact name wins. Otherwise whole words, plurals made singular: the
    claim's words all in the item's name ("biryanis" -> "Hyderabadi Biryani"), or the name's
    words all in the claim ("the Raita container" -> "Raita"), and only one item may match,
    unless exactly one of them is named by the claim's words and no more ("the biryanis" ->
    "Biryani", not "Chicken Biryani").
    The claim's numbers and filler words ("the", "my", "both of") are left out, and when they
    pick out no one item, its counts too ("two of the biryanis", "two diet cokes" from "Coke"
    and "Diet Coke"), but not before: "half tandoori chicken" is the "Tandoori Chicken (Half)"
    of an order that has a "(Full)" too. A claim that picks one item with its count words and
    another without them ("two cheese pizzas" on "Two-Cheese Pizza" and "Cheese Pizza") is
    ambiguous.
    Parts of words never match: "Steak" is not "Tea". A claim may add words to a name, so "Iced
    Tea" still resolves to an order's only "Tea": the judges and the item's price bound what
    follows.
    """
    wanted = name_key(claimed)
    if not wanted:
        return None, "item_name is empty (use null when the claim names no item)"
    exact = [item for item in line_items if name_key(item.name) == wanted]
    if len(exact) == 1:
        return exact[0], ""
    words = _claim_words(claimed)
    item, matches = _pick(words, line_items)
    uncounted = frozenset(word for word in words if not _is_count(word))
    if uncounted != words:  # a count the claim may wrap around the name: "two of the biryanis"
        without, more = _pick(uncounted, line_items)
        if item is None:
            item, matches = without, matches or more
        elif without is not None and without is not item:
            # "two cheese pizzas" on "Two-Cheese Pizza" and "Cheese Pizza": name or count?
            matches = [item, without]
            item = None
    if item is not None:
        return item, ""
    if len(matches) > 1:
        listed = ", ".join(repr(item.name) for item in matches)
        return None, f"item_name {claimed!r} is ambiguous: it matches {listed}"
    return None, f"item_name {claimed!r} is not on the order"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Fault:
    """A grievance at fault whose category and text still say what it claims: its category,
    its text, and whether its claim is ``placed`` (its item resolved, though its quantity or
    span may be wrong, or none named where its category needs none: ``item_name``, the
    order's spelling) or its item could not be placed on the order (``claimed`` says how it
    was named)."""

    category: Category
    text: str
    placed: bool
    item_name: str | None
    claimed: str | None


def _check_one(
    index: int, raw: object, complaint: str, line_items: Sequence[LineItem]
) -> tuple[list[str], dict[str, Any] | None, _Fault | None]:
    """Problems of one grievance (``where`` prefixed), and its cleaned fields when it has none,
    or, with problems, what it claims when its category is known and its text says something
    (whatever else is wrong: its span, its item, its quantity)."""
    where = f"grievance {index}"
    if not isinstance(raw, Mapping):
        return [f"{where} is not an object (got {type(raw).__name__})"], None, None
    missing = [key for key in REQUIRED_KEYS if key not in raw]
    if missing:
        return [f"{where} is missing keys: {', '.join(missing)}"], None, None

    problems: list[str] = []
    text, category_raw = raw["text"], raw["category"]
    start, end = raw["span_start"], raw["span_end"]
    item_name, quantity = raw["item_name"], raw["item_quantity"]

    if not isinstance(text, str):
        problems.append(f"{where}: text must be a string")
    elif not text.strip():
        problems.append(f"{where}: text is empty")
    elif len(text) > MAX_GRIEVANCE_TEXT_CHARS:
        problems.append(
            f"{where}: text is {len(text)} characters, more than the"
            f" {MAX_GRIEVANCE_TEXT_CHARS} of one short statement"
        )
    else:
        try:
            readable_text(text)
        except ValueError as exc:
            problems.append(f"{where}: text {exc}")

    category: Category | None = None
    if not isinstance(category_raw, str):
        problems.append(f"{where}: category must be a string")
    else:
        try:
            category = Category(category_raw.strip())
        except ValueError:
            known = " | ".join(c.value for c in Category)
            problems.append(f"{where}: unknown category {category_raw!r} (expected {known})")

    if not _is_int(start) or not _is_int(end):
        problems.append(f"{where}: span_start and span_end must be integers")
    elif start < 0 or end > len(complaint):
        problems.append(
            f"{where}: span {start}..{end} is outside the complaint (length {len(complaint)})"
        )
    elif start > end:
        problems.append(f"{where}: span_start {start} is after span_end {end}")
    elif start == end or not complaint[start:end].strip():
        problems.append(f"{where}: span {start}..{end} is empty")

    item: LineItem | None = None
    about_item: list[str] = []  # the item's or quantity's problems: the claim stands otherwise
    if item_name is not None and not isinstance(item_name, str):
        about_item.append(f"{where}: item_name must be a string or null")
    elif isinstance(item_name, str):
        item, problem = resolve_item(item_name, line_items)
        if item is None:
            about_item.append(f"{where}: {problem}")
    elif category in NEEDS_ITEM:
        about_item.append(f"{where}: {category} needs the item_name of a line item")

    if quantity is None and item is not None and isinstance(item_name, str):
        counts = counts_named(item_name, item)
        if counts:
            # Left to the contract's "named without a number", it would claim all the units.
            about_item.append(
                f"{where}: item_name {item_name!r} says how many ({', '.join(counts)}) but"
                " item_quantity is null: give the item's name alone and the count as"
                " item_quantity"
            )
    if quantity is not None and not _is_int(quantity):
        about_item.append(f"{where}: item_quantity must be an integer or null")
    elif quantity is not None:
        if item_name is None:
            about_item.append(f"{where}: item_quantity is given but item_name is null")
        elif item is not None and not 1 <= quantity <= item.quantity:
            about_item.append(
                f"{where}: item_quantity {quantity} is out of range 1..{item.quantity} "
                f"for {item.name!r}"
            )

    if problems or about_item:
        fault = None
        if category is not None and isinstance(text, str) and text.strip():
            claimed = item_name if isinstance(item_name, str) else None
            placed = item is not None or (item_name is None and category not in NEEDS_ITEM)
            fault = _Fault(category, text, placed, None if item is None else item.name, claimed)
        return problems + about_item, None, fault
    if item is not None and quantity is None:
        # The contract's meaning of an item named without a number (the prompt asks for it,
        # the judges rule on it): all its units, not one.
        quantity = item.quantity
    return (
        [],
        {
            "category": category,
            "text": text.strip(),
            "span_start": start,
            "span_end": end,
            "item_name": None if item is None else item.name,
            "item_quantity": quantity,
        },
        None,
    )


def validate_extraction(
    answer: object,
    complaint_text: str,
    line_items: Sequence[LineItem],
    *,
    max_grievances: int = DEFAULT_MAX_GRIEVANCES,
    not_whole: str | None = None,
) -> tuple[ExtractedGrievance, ...]:
    """Validate the parsed answer ``{"grievances": [...]}``; ids g1..gN follow span order.

    Returns the grievances (possibly none: nothing checkable was said), or raises
    :class:`ExtractionInvalid` listing every problem found. Keys other than the six of the
    contract (e.g. a model-chosen ``grievance_id``) are ignored. ``not_whole``: why the answer
    is not the model's whole answer (cut short, withheld), if it is not; it is then invalid
    whatever it holds, with that as its first problem, and the grievances it holds are what a
    repair must keep, as for any invalid answer.
    """
    if not isinstance(answer, Mapping):
        raise ExtractionInvalid(
            [f"answer must be an object with a 'grievances' list, got {type(answer).__name__}"]
        )
    if "grievances" not in answer:
        raise ExtractionInvalid(["answer is missing the key 'grievances'"])
    items = answer["grievances"]
    if not isinstance(items, list):
        raise ExtractionInvalid([f"'grievances' is not a list (got {type(items).__name__})"])

    problems: list[str] = [] if not_whole is None else [not_whole]
    if len(items) > max_grievances:
        problems.append(f"{len(items)} grievances is more than the limit of {max_grievances}")

    cleaned: list[tuple[int, dict[str, Any]]] = []
    faults: list[_Fault] = []
    for index, raw in enumerate(items, start=1):
        found, fields, fault = _check_one(index, raw, complaint_text, line_items)
        problems.extend(found)
        if fields is not None:
            cleaned.append((index, fields))
        if fault is not None:
            faults.append(fault)

    by_claim: dict[tuple[Category, str | None], int] = {}
    by_text: dict[str, int] = {}
    # The claims each text is said as about one item (or none): a repair keeps one of them.
    said_as: dict[tuple[str, str | None], list[Claim]] = {}
    for index, fields in cleaned:
        claim: Claim = (fields["category"], fields["item_name"])
        said_as.setdefault((_norm_statement(fields["text"]), claim[1]), []).append(claim)
        if claim in by_claim:
            item = f" for {fields['item_name']!r}" if fields["item_name"] else " without an item"
            problems.append(
                f"grievance {index} duplicates grievance {by_claim[claim]}: "
                f"same category {fields['category']}{item}"
            )
        else:
            by_claim[claim] = index
        statement = _norm_statement(fields["text"])
        if statement in by_text:
            problems.append(
                f"grievance {index} duplicates grievance {by_text[statement]}: same text"
            )
        else:
            by_text[statement] = index

    if problems:
        unresolved: dict[tuple[Category, str], Unresolved] = {}
        for fault in faults:
            if fault.placed:  # its span or quantity is wrong: the claim is known
                said_as.setdefault((_norm_statement(fault.text), fault.item_name), []).append(
                    (fault.category, fault.item_name)
                )
            else:
                said = (
                    "naming no item of the order"
                    if fault.claimed is None
                    else f"for {fault.claimed!r}, which names no one item of the order"
                )
                unresolved.setdefault(
                    (fault.category, _norm_statement(fault.text)), (fault.category, said)
                )
        groups = list(said_as.values())
        if len(items) > max_grievances:  # the repair drops some: one of them all is kept
            groups = [[claim for group in groups for claim in group]]
            unresolved = {}
        # A claim made twice, whole or at fault, says no one quantity: a repair merges them.
        made = Counter((f["category"], f["item_name"]) for _, f in cleaned)
        made.update((fault.category, fault.item_name) for fault in faults if fault.placed)
        quantities = {
            (f["category"], f["item_name"]): f["item_quantity"]
            for _, f in cleaned
            if f["item_name"] is not None and made[(f["category"], f["item_name"])] == 1
        }
        raise ExtractionInvalid(problems, groups, list(unresolved.values()), quantities)

    ordered = sorted(
        cleaned, key=lambda pair: (pair[1]["span_start"], pair[1]["span_end"], pair[0])
    )
    return tuple(
        ExtractedGrievance(grievance_id=f"g{number}", **fields)
        for number, (_, fields) in enumerate(ordered, start=1)
    )
