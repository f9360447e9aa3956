"""Amounts in a reply's text: :func:`find_amounts` finds every money-looking mention in it, and
:func:`format_amount` writes the one amount a reply may state.

Amounts are written in major units, with the currency's decimals when they are not all zero
(``INR 689``, ``INR 689.50``, ``JPY 50000``: :func:`refund_bench.money.format_minor`), and a
number in the reply is read in the reply's currency's minor units. Text is read as
:func:`normalised` makes it. The reading is conservative: a number that may be money counts as
an amount. Numbers it cannot read (:func:`unread_numerals`, :data:`SUM_WORDS`) are left to the
caller to refuse.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from refund_bench.money import decimals, format_minor

_MAX_AMOUNT_DIGITS = 15
"""A written number with more whole digits than any order's total is no amount the reply may
state: it is read as inexact, never converted."""

LETTER = r"[^\W\d_]"
"""A letter, as the patterns read one. Numerals that are not decimal digits ("❶", "½", "Ⅻ", "五")
are word characters and so count as letters here; a reply holding one fails on its own
(:func:`unread_numerals`), and every digit test below is for the ASCII digits only."""
_DIGITS = frozenset("0123456789")
_NUMBER = r"[0-9](?:[0-9]|,(?=[0-9]))*(?:\.[0-9]+)?"
_KNOWN_CODES = {
    "INR": "INR",
    "RS": "INR",
    "RS.": "INR",
    "RE": "INR",
    "USD": "USD",
    "EUR": "EUR",
    "GBP": "GBP",
}
"""Codes and abbreviations before or after a number. "Re" (one rupee, "Re 1") counts only
written so and before a number."""
_OTHER_SIGN = "¤"
SYMBOLS = {"₹": "INR", "$": "USD", "€": "EUR", "£": "GBP", _OTHER_SIGN: "XXX"}
"""Currency signs; every other one (Unicode category Sc: ¥, ₨, ₩, ...) is read as ``¤``, a
currency that is never the reply's."""
_UNIT_WORDS = {"RUPEE": "INR", "RUPEES": "INR", "DOLLAR": "USD", "DOLLARS": "USD"}
"""Currency names, written before a number ("Rupees 500") or after it ("500 rupees")."""
_MINOR_UNITS = ("PAISE", "PAISA")
_MULTIPLIERS = r"lakhs?|lacs?|crores?|crs?|thousand|hundred|millions?|billions?|mn|bn|k"
"""Words that scale the number before them ("1 lakh", "689k"): such an amount is never exact."""
SUM_WORDS = re.compile(
    rf"(?<!{LETTER})(?:ten|eleven|twelve|(?:thir|four|fif|six|seven|eigh|nine)teen"
    r"|(?:twen|thir|for|fif|six|seven|eigh|nine)ty|hundreds?|thousands?|lakhs?|lacs?|crores?"
    rf"|millions?|billions?)(?!{LETTER})",
    re.IGNORECASE,
)
"""A number in words of ten or more ("fifty", "five hundred"): the guard cannot read it as an
amount, so it is allowed only as a time or a count ("twenty minutes")."""
_INEXACT_AFTER = re.compile(
    rf"\s*(?:(?:{_MULTIPLIERS})(?!{LETTER})|[-\u2013]\s*[0-9])", re.IGNORECASE
)
"""After a currency amount: a scale ("INR 689 thousand") or a range ("INR 689-700")."""
NOT_MONEY_UNIT = re.compile(
    r"(?:\s*(?:-|\u2013|to)\s*[0-9]+)?\s*(?:(?:working|business|calendar)\s+)?"
    r"(?:minutes?|mins?|hours?|hrs?|days?|weeks?|months?|seconds?|secs?|items?|pieces?"
    r"|portions?|plates?|grams?|g|kg|ml|km)(?!" + LETTER + r")",
    re.IGNORECASE,
)
"""After a number (or a range, "24-48"): a unit that makes it a time, a count or a weight. Not
a percentage: "50% of your order" is an amount the guard cannot check."""
_DAY = r"(?:[12][0-9]|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_MONTHS = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_YEAR = r"(?:19|20)[0-9]{2}(?![0-9])"
_DATE = re.compile(
    rf"(?<![0-9]){_DAY}\s+(?:of\s+)?(?:(?:{_MONTHS})\.?(?!{LETTER})(?:,?\s+{_YEAR})?"
    rf"|may,?\s+{_YEAR})"
    rf"|(?<!{LETTER})(?:{_MONTHS}|may)\.?\s+(?:{_DAY},?\s+)?{_YEAR}",
    re.IGNORECASE,
)
"""A date written with its month's name: a day before it ("4 December", "12th of Dec"; for May,
with the year), or a year after it ("Dec 3rd, 2026", "May 2026"). Its numbers are not
amounts."""

_TOKEN = re.compile(rf"{LETTER}+|{_NUMBER}")


def format_amount(minor: int, currency: str) -> str:
    """``"INR 689"`` for whole units, ``"INR 689.50"`` otherwise, ``"JPY 50000"`` for a currency
    without decimals (:func:`refund_bench.money.format_minor`). Raises for negative amounts."""
    if minor < 0:
        raise ValueError(f"amount must be >= 0, got {minor}")
    return format_minor(minor, currency)


def unread_numerals(text: str) -> tuple[str, ...]:
    """The numeric characters of ``text`` that are not decimal digits ("❶", "⓵", "①", "½", "²",
    "Ⅻ", "五"), each once: numbers the guard does not read (NFKC turns some into digits or
    letters, others it keeps), so a reply holding one is refused."""
    if text.isascii():  # the usual reply: every ASCII numeric character is a decimal digit
        return ()
    return tuple(dict.fromkeys(c for c in text if c.isnumeric() and not c.isdecimal()))


JOINERS = "\u200c\u200d"
"""Zero-width non-joiner and joiner: Indic and Persian text needs them to render some words, so
a reply may hold them; the guard reads the reply without them ("689\u200d0" is 6890)."""


def _hidden(char: str, previous: str) -> bool:
    code = ord(char)
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        # A variation selector: the emoji form of a symbol ("❤️", "🌶️"), or nothing the
        # customer sees, inside a word or a number.
        return not previous or unicodedata.category(previous) != "So"
    category = unicodedata.category(char)
    return (
        (category == "Cf" and char not in JOINERS)
        or code in (0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0)  # grapheme joiner, fillers
        or 0x180B <= code <= 0x180F  # Mongolian variation selectors and vowel separator
        or (category[0] == "M" and previous.isdigit())  # "6⃣", "9́"
        # A mark that strikes a letter through or encloses it ("n̶o̶t̶", "n⃝"): the word the
        # guard reads is not the one the customer sees, crossed out or boxed.
        or unicodedata.combining(char) == 1
        or category == "Me"
    )


def hidden_characters(text: str) -> tuple[str, ...]:
    """The characters of ``text`` that do not show, or change a digit or a letter, each once:
    format characters (zero-width space, word joiner, soft hyphen, byte order mark, direction
    overrides), variation selectors but after a symbol (the emoji form of "❤"), fillers, marks
    on a digit, and marks that strike a letter through or enclose it (a crossed-out "not" the
    guard would read as a "not"). A reply holding one is refused: "INR 689\u200b0" shows INR
    6890 where the guard would read INR 689 and a 0, and "refu\u00adnded" hides a promise from
    every word it looks for. :data:`JOINERS` are not."""
    if text.isascii():
        return ()
    return tuple(
        dict.fromkeys(c for at, c in enumerate(text) if _hidden(c, text[at - 1] if at else ""))
    )


@functools.lru_cache(maxsize=256)  # a round's item names, read for each reply and held name
def _quote_pattern(name: str) -> re.Pattern[str] | None:
    """Where a reply quotes an item's name, as the guard reads both; ``None`` for a name with
    no letter."""
    read = normalised(name)
    if not any(c.isalpha() for c in read):
        return None
    words = r"\s+".join(re.escape(word) for word in read.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def _name_pattern(name: str) -> re.Pattern[str] | None:
    """:func:`_quote_pattern` for a name holding a digit ("Chicken 65"), else ``None``."""
    return _quote_pattern(name) if any(c.isdigit() for c in normalised(name)) else None


def quoted_spans(text: str, names: Sequence[str]) -> list[tuple[int, int]]:
    """Where ``text`` (as the guard reads it) quotes one of the items ``names``."""
    return _spans(text, names, _quote_pattern)


def name_spans(text: str, names: Sequence[str]) -> list[tuple[int, int]]:
    """Where ``text`` (as the guard reads it) quotes one of the items ``names`` whose name holds
    a digit and a letter ("Chicken 65", "Momos (10 pcs)"): the digits there are the item's name,
    not an amount. A name of digits alone would hide an amount: it is never read so."""
    return _spans(text, names, _name_pattern)


def _spans(
    text: str, names: Sequence[str], pattern_of: Callable[[str], re.Pattern[str] | None]
) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for name in names:
        pattern = pattern_of(name)
        if pattern is not None:
            spans += [found.span() for found in pattern.finditer(text)]
    return spans


def masked_names(text: str, names: Sequence[str]) -> str:
    """``text`` (as the guard reads it) with each digit of a quoted item name (:func:`name_spans`)
    replaced by ``x``, keeping every offset: "the missing Chicken 65" is not an amount of 65."""
    spans = name_spans(text, names)
    if not spans:
        return text
    chars = list(text)
    for start, end in spans:
        for at in range(start, end):
            if chars[at].isdigit():
                chars[at] = "x"
    return "".join(chars)


def normalised(text: str) -> str:
    """``text`` as the guard reads it: NFKC (full-width digits and signs become plain ones),
    the accents of Latin letters dropped ("refúnded" is "refunded"), without :data:`JOINERS`,
    every other decimal digit as its ASCII one ("५००" is 500), every currency sign not in
    :data:`SYMBOLS` as ``¤``."""
    normal = unicodedata.normalize("NFKC", text)
    if normal.isascii():  # the usual reply: no other digit, and "$" is one of SYMBOLS
        return normal
    normal = _unaccented(normal)
    return "".join(
        str(unicodedata.decimal(c))
        if c.isdecimal() and not c.isascii()
        else _OTHER_SIGN
        if c not in SYMBOLS and unicodedata.category(c) == "Sc"
        else ""
        if c in JOINERS
        else c
        for c in normal
    )


def _unaccented(text: str) -> str:
    """``text`` (NFC) without the marks set on an ASCII letter ("refúnded", "café"): the word
    the customer reads, as the guard looks for it. Marks on other letters are kept."""
    kept: list[str] = []
    base = ""
    for char in unicodedata.normalize("NFD", text):
        if unicodedata.category(char) != "Mn":
            base = char
        elif base.isascii() and base.isalpha():
            continue
        kept.append(char)
    return unicodedata.normalize("NFC", "".join(kept))


def unread_letters(read: str, names: Sequence[str]) -> tuple[str, ...]:
    """The letters of ``read`` (as :func:`normalised` gives it) that are not ASCII, each once,
    but in the item names it quotes (``names``, the round's items: "the missing पनीर टिक्का").
    The guard reads English: a reply in another script ("आपको पूरा पैसा वापस मिलेगा") or
    spelling a word with letters of one ("refunded" with a Cyrillic "e", U+0435; "paid" with
    a dotless "i", U+0131) could promise what no check sees, so a reply holding one is
    refused."""
    if read.isascii():
        return ()
    quoted = {at for start, end in quoted_spans(read, names) for at in range(start, end)}
    return tuple(
        dict.fromkeys(
            c for at, c in enumerate(read) if c.isalpha() and not c.isascii() and at not in quoted
        )
    )


_ANY_CODE = "(?-i:[A-Z]{3})"
"""Any three capitals next to a number ("AED 500", "500 JPY"): read as a currency code."""


def _codes_pattern(currency: str) -> str:
    """Known codes and currency names in any case; the reply's own currency code only as written
    (upper case), so that an ordinary word can never be read as a currency."""
    known = sorted((set(_KNOWN_CODES) - {"RS.", "RE"}) | set(_UNIT_WORDS), key=len, reverse=True)
    return "|".join([*(re.escape(code) for code in known), f"(?-i:{re.escape(currency)})"])


def currency_tag(code: str) -> str:
    upper = code.upper()
    return _KNOWN_CODES.get(upper) or _UNIT_WORDS.get(upper) or code


@functools.cache  # one pattern per currency, built once
def _prefix_re(currency: str) -> re.Pattern[str]:
    symbols = "".join(re.escape(s) for s in SYMBOLS)
    return re.compile(
        rf"(?:(?<!{LETTER})(?P<code>{_codes_pattern(currency)}|{_ANY_CODE}|(?-i:Re))"
        rf"(?!{LETTER})\.?"
        rf"|(?P<sym>[{symbols}]))\s*(?P<num>{_NUMBER})",
        re.IGNORECASE,
    )


@functools.cache  # one pattern per currency, built once
def _suffix_re(currency: str) -> re.Pattern[str]:
    units = "|".join(_MINOR_UNITS)
    return re.compile(
        rf"(?P<num>{_NUMBER})\s*(?:(?P<unit>{units}|{_codes_pattern(currency)}|{_ANY_CODE})"
        rf"(?!{LETTER})"
        rf"|(?P<dash>/-))",
        re.IGNORECASE,
    )


_SCALED = re.compile(rf"(?P<num>{_NUMBER})\s*(?:{_MULTIPLIERS})(?!{LETTER})", re.IGNORECASE)
_MONEY_BEFORE = re.compile(
    r"\b(?:plus|add(?:ed|ing)?|extra|another|additional|further|bonus|refund(?:ed|ing)?"
    r"|credit(?:ed|ing)?|give|giving|pay(?:ing)?|paid|worth|get(?:ting)?|receive)\s+$",
    re.IGNORECASE,
)
_MONEY_AFTER_WORDS = (
    r"%|per\s*cent\b|percent\b|back\b|off\b"
    r"|(?:to|in|into)\s+(?:your\s+)?(?:wallet|account|credit)\b"
    r"|as\s+(?:a\s+)?(?:credit|cashback|goodwill|compensation|refund|bonus)\b"
)
_MONEY_AFTER = re.compile(rf"\s*(?:{_MONEY_AFTER_WORDS}|more\b|extra\b)", re.IGNORECASE)
"""Around a one-digit number, what makes it money ("plus 9", "add 5 to your wallet", "get 9
back", "5% off", "9 more"); without it a one-digit number is a count ("2 of the 4
biryanis")."""
_WORD_MONEY_AFTER = re.compile(rf"\s*(?:{_MONEY_AFTER_WORDS})", re.IGNORECASE)
"""After a number word, what makes it money: as :data:`_MONEY_AFTER`, but not "more" or "extra"
alone ("one more chance", "one more question")."""
_DIGIT_WORDS = {
    word: value
    for value, word in enumerate(
        ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine"), start=1
    )
}
_DIGIT_WORD = re.compile(
    rf"(?<!{LETTER})(?:{'|'.join(_DIGIT_WORDS)}|grand)(?!{LETTER})", re.IGNORECASE
)
"""A one-digit number in words, or "grand" (a thousand): money only in money context, like a
one-digit number (:func:`_word_money_context`); "a grand" is never an exact amount."""
_NOT_COUNTED = (
    r"back|more|extra|off|to|in|into|on|onto|as|at|for|from|and|or|but|now|today|tomorrow|too"
    r"|also|plus|again|each|per|apiece|is|are|was|were|will|would|has|have|had|be|been|with|by"
    r"|via|the|a|an|your|our|this|that|these|those|it|us|you|we|them|so|then|thus|yes|already"
    r"|soon|later|less|instead|directly|straight|right|refund\w*|credit\w*|cash\w*|bonus\w*"
    r"|goodwill|compensat\w*|money|rupees?|bucks?|dollars?|quid|paise|paisa|grand|k|lakhs?"
    r"|lacs?|crores?|thousands?|hundreds?|percent|voucher\w*|coupon\w*|points?|wallets?"
)
_COUNTED_AFTER = re.compile(
    rf"\s+(?:(?:more|extra|additional|other|single)\s+)?(?:of(?!{LETTER})"
    rf"|(?!(?:{_NOT_COUNTED})(?!{LETTER})){LETTER}+(?!{LETTER}))",
    re.IGNORECASE,
)
"""After a number word: "of" or a noun, perhaps after "more" ("one of the biryanis", "two
biryanis", "one email", "one visit", "one more chance"): a count. Not a function word, a
money word or "more" alone ("get one back", "add five to your wallet", "get one more as
goodwill", "five bucks")."""
_PERCENT = re.compile(r"\s*(?:%|per\s*cent\b|percent\b)", re.IGNORECASE)
MONEY_BEFORE_WINDOW = 24
"""How far before a number :data:`_MONEY_BEFORE` and the guard's ``_TIMES_BEFORE``
(:func:`~services.settler.guard.check_reply`) look."""


FOREIGN_NAMES = (
    r"euros?|yen|yuan|renminbi|dirhams?|dinars?|riyals?|rials?|ringgits?|pesos?|francs?|rubles?"
    r"|roubles?|baht|shekels?|kron[aeo]r?|sterling"
)
"""Names of other currencies, which no reply may name ("INR 689 in euros"). Not "pound" (a pound
cake), "won" or "rand" (words of their own): their signs and codes are caught all the same."""


@functools.cache  # one pattern per currency, built once
def currency_word_re(currency: str) -> re.Pattern[str]:
    """Any currency code, name or symbol, with or without a number."""
    symbols = "".join(re.escape(s) for s in SYMBOLS)
    units = "|".join([_codes_pattern(currency), *_MINOR_UNITS, r"RS\.", FOREIGN_NAMES])
    return re.compile(
        rf"(?<!{LETTER})(?:{units})(?!{LETTER})|[{symbols}]|(?<=[0-9])\s*/-", re.IGNORECASE
    )


def _to_minor(number: str, *, places: int) -> int | None:
    """Exact minor units of a written number of major units with ``places`` decimals (0: the
    number is in minor units already), or ``None`` when it has sub-minor digits."""
    whole, _, fraction = number.replace(",", "").partition(".")
    if len(whole) > _MAX_AMOUNT_DIGITS:
        return None
    if fraction[places:].strip("0"):
        return None
    return int(whole + fraction[:places].ljust(places, "0"))


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
    GBP, £, ``currency``, any other currency sign, any three capitals) before a number; a number
    before rupees, paise (paisa), dollars, a code or "/-"; a number scaled by a word (lakh,
    crore, thousand, hundred, k, ...) or followed by a range, never exact; any other number of
    two or more digits, unless a unit makes it a time or a count ("85 minutes", "24-48 hours")
    or it is part of a clock time, a date or an identifier ("20:15", "4 December 2026",
    "#1840", "order-1840"); a number written like an identifier is an amount after all with
    money words or a currency near it in its sentence, unless a label names it ("credited #500
    to your wallet", "credit-500", "bonus:500", "added x500"; not "order #1840").
    A number in words from one to nine, or "grand", counts next to money words, as a one-digit
    number does ("get seven back", "added nine to your wallet", "a grand to your wallet", "get
    one more"), not as a count ("one of the biryanis", "two biryanis", "get one email", "one
    more chance").
    Full-width and other scripts' digits count as digits; other numerals ("❶", "½") are left to
    :func:`~services.settler.guard.check_reply`.
    """
    return tuple(mention for _, _, mention in located_amounts(normalised(text), currency))


def located_amounts(text: str, currency: str) -> list[tuple[int, int, MoneyMention]]:
    """:func:`find_amounts` of normalised ``text``, with where each mention starts and ends."""
    found: list[tuple[int, int, MoneyMention]] = []
    covered: list[tuple[int, int]] = []
    places = decimals(currency)  # a number is read in the reply's currency

    def add(span: tuple[int, int], number: tuple[int, int], mention: MoneyMention) -> None:
        found.append((*span, mention))
        covered.append(number)

    before: dict[tuple[int, int], str] = {}  # a number's currency, named before it
    for match in _prefix_re(currency).finditer(text):
        code: str | None = match.group("code")
        tag = SYMBOLS[match.group("sym")] if code is None else currency_tag(code)
        foreign_capitals = code is not None and tag == code and code != currency
        if foreign_capitals and NOT_MONEY_UNIT.match(text, match.end()):
            continue  # three capitals before a time or a count ("ETA 30 minutes")
        exact = not _INEXACT_AFTER.match(text, match.end())
        minor = _to_minor(match.group("num"), places=places) if exact else None
        add(match.span(), match.span("num"), MoneyMention(match.group(0), minor, tag))
        before[match.span("num")] = tag
    for match in _suffix_re(currency).finditer(text):
        unit = match.group("unit") or "INR"  # "/-" marks rupees
        paise = unit.upper() in _MINOR_UNITS
        tag = "INR" if paise else currency_tag(unit)
        if match.span("num") in covered:
            named = before.get(match.span("num"))
            if named is None or named == tag:
                continue  # "INR 689/-", "₹689 rupees": one amount, said twice
            # "INR 689 AED": the same number in another currency too, an amount of its own
        minor = _to_minor(match.group("num"), places=0 if paise else places)
        add(match.span(), match.span("num"), MoneyMention(match.group(0), minor, tag))
    for match in _SCALED.finditer(text):
        if match.span("num") not in covered:
            add(match.span(), match.span("num"), MoneyMention(match.group(0), None, None))
    dates = [match.span() for match in _DATE.finditer(text)]
    for token in _TOKEN.finditer(text):
        word = token.group(0)
        if word[0] not in _DIGITS:
            continue
        if any(start <= token.start() < end for start, end in (*covered, *dates)):
            continue
        if sum(c in _DIGITS for c in word) < 2 and not _money_context(text, *token.span()):
            continue
        if _not_money(text, *token.span(), currency):
            continue
        exact = not _PERCENT.match(text, token.end())
        minor = _to_minor(word, places=places) if exact else None
        add(token.span(), token.span(), MoneyMention(word, minor, None))
    for match in _DIGIT_WORD.finditer(text):
        if _word_money_context(text, *match.span()):
            word = match.group(0)
            units = _DIGIT_WORDS.get(word.lower())
            add(
                match.span(),
                match.span(),
                MoneyMention(word, None if units is None else units * 10**places, None),
            )
    return sorted(found, key=lambda located: located[0])


def _word_money_context(text: str, start: int, end: int) -> bool:
    """Whether the number word at ``text[start:end]`` is money: money words after it ("seven
    back", "nine to your wallet"; :data:`_WORD_MONEY_AFTER`), or before it ("plus nine", "get
    one more") unless what follows makes it a count ("get two biryanis", "give one of them",
    "get one email", "paid one visit", "five minutes")."""
    if _WORD_MONEY_AFTER.match(text, end):
        return True
    if not _MONEY_BEFORE.search(text, max(0, start - MONEY_BEFORE_WINDOW), start):
        return False
    return not (_COUNTED_AFTER.match(text, end) or NOT_MONEY_UNIT.match(text, end))


def _money_context(text: str, start: int, end: int) -> bool:
    """Whether the words right around the number at ``text[start:end]`` make it money."""
    before = _MONEY_BEFORE.search(text, max(0, start - MONEY_BEFORE_WINDOW), start)
    return before is not None or _MONEY_AFTER.match(text, end) is not None


_ID_LABEL = re.compile(
    rf"(?<!{LETTER})(?:orders?|ord|ref|reference|ticket|case|complaint|id|no|number|invoice"
    r"|transaction|txn|receipt|booking|utr)\.?[\s#:/_-]*$",
    re.IGNORECASE,
)
"""Right before an identifier, a word that names it ("order #1840", "order-1840", "Ref: 1840",
"pi_order1840"): an identifier so labelled is never money."""
_ID_MONEY = re.compile(
    r"\b(?:refund\w*|credit\w*|wallet|money|amount|worth|voucher\w*|coupon\w*|cashback"
    r"|compensat\w*|reimburs\w*|discount\w*|add|adds|added|adding|back|bonus\w*|top[-\s]?ups?"
    r"|paid|pay|pays|paying|plus|extra|balance)\b",
    re.IGNORECASE,
)
"""Money context around a number written like an identifier ("credited #500 to your wallet",
"credit-500", "bonus:500", "top-up/500", "added x500"): such a number is an amount."""
_ID_WINDOW = 32
"""How far, within its sentence, :data:`_ID_MONEY` is looked for on either side."""
_SENTENCE_STOP = re.compile(r"[.!?;](?=\s|$)")


def _money_near_identifier(text: str, start: int, end: int, currency: str) -> bool:
    """Whether money words or a currency word are within :data:`_ID_WINDOW` characters of the
    number at ``text[start:end]``, in its sentence, and no label names it an identifier."""
    lo = max(0, start - _ID_WINDOW)
    stops = [m.end() for m in _SENTENCE_STOP.finditer(text, lo, start)]
    before = text[stops[-1] if stops else lo : start]
    if _ID_LABEL.search(before):
        return False
    stop = _SENTENCE_STOP.search(text, end, end + _ID_WINDOW)
    after = text[end : stop.start() if stop else end + _ID_WINDOW]
    return any(
        pattern.search(side)
        for pattern in (_ID_MONEY, currency_word_re(currency))
        for side in (before, after)
    )


def _not_money(text: str, start: int, end: int, currency: str) -> bool:
    """Whether the number at ``text[start:end]`` is a time, a count, a clock time, a date or
    part of an identifier, not an amount. One written like an identifier ("#500", "x500",
    "credit-500", "bonus:500") is an amount after all with money near it
    (:func:`_money_near_identifier`)."""
    before = text[start - 1] if start > 0 else ""
    after = text[end : end + 2]
    if len(after) == 2 and after[0] in (":", "/") and after[1] in _DIGITS:
        return True  # "20:15", "04/12"
    if before in (":", "/") and start > 1 and text[start - 2] in _DIGITS:
        return True  # the second number of "20:15", "04/12"
    attached = before in ("#", ":", "/") or before.isalpha()
    if before == "-" and start > 1 and text[start - 2].isalpha():
        attached = True  # "order-1840"
    if attached:
        return not _money_near_identifier(text, start, end, currency)
    return NOT_MONEY_UNIT.match(text, end) is not None
