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
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

MAX_REPLY_CHARS = 2000
"""The longest reply the guard reads (after normalising): a customer reply is a few sentences,
and a longer one is refused whole, before any other check (the checks' cost grows with it)."""
_MAX_AMOUNT_DIGITS = 15
"""A written number with more whole digits than any order's total is no amount the reply may
state: it is read as inexact, never converted."""

_LETTER = r"[^\W\d_]"
"""A letter, as the patterns read one. Numerals that are not decimal digits ("❶", "½", "Ⅻ", "五")
are word characters and so count as letters here; a reply holding one fails on its own
(:func:`_numerals`), and every digit test below is for the ASCII digits only."""
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
_SYMBOLS = {"₹": "INR", "$": "USD", "€": "EUR", "£": "GBP", _OTHER_SIGN: "XXX"}
"""Currency signs; every other one (Unicode category Sc: ¥, ₨, ₩, ...) is read as ``¤``, a
currency that is never the reply's."""
_UNIT_WORDS = {"RUPEE": "INR", "RUPEES": "INR", "DOLLAR": "USD", "DOLLARS": "USD"}
"""Currency names, written before a number ("Rupees 500") or after it ("500 rupees")."""
_MINOR_UNITS = ("PAISE", "PAISA")
_MULTIPLIERS = r"lakhs?|lacs?|crores?|thousand|hundred|millions?|billions?|mn|bn|k"
"""Words that scale the number before them ("1 lakh", "689k"): such an amount is never exact."""
_SUM_WORDS = re.compile(
    rf"(?<!{_LETTER})(?:ten|eleven|twelve|(?:thir|four|fif|six|seven|eigh|nine)teen"
    r"|(?:twen|thir|for|fif|six|seven|eigh|nine)ty|hundreds?|thousands?|lakhs?|lacs?|crores?"
    rf"|millions?|billions?)(?!{_LETTER})",
    re.IGNORECASE,
)
"""A number in words of ten or more ("fifty", "five hundred"): the guard cannot read it as an
amount, so it is allowed only as a time or a count ("twenty minutes")."""
_INEXACT_AFTER = re.compile(
    rf"\s*(?:(?:{_MULTIPLIERS})(?!{_LETTER})|[-\u2013]\s*[0-9])", re.IGNORECASE
)
"""After a currency amount: a scale ("INR 689 thousand") or a range ("INR 689-700")."""
_TIMES_AFTER = re.compile(
    r"\s*(?:each\b|apiece\b|a\s+piece\b|per\b|for\s+(?:each|every)\b|x\s*[0-9]|\u00d7|times\b"
    r"|twice\b|thrice\b|again\b|more\b|extra\b|a\s+(?:day|week|month)\b"
    r"|(?:daily|weekly|monthly)\b)",
    re.IGNORECASE,
)
_TIMES_BEFORE = re.compile(
    r"(?:[0-9]\s*x|\b(?:times|twice|thrice|double|triple|each|per|x|half(?:\s+of)?"
    r"|quarter(?:\s+of)?|another|additional|extra|further)|\u00d7)\s*$",
    re.IGNORECASE,
)
"""Around an amount: a multiple, a part or a repetition of it ("3 x INR 689", "INR 689 for
each item", "half of INR 689", "another 689", "INR 689 again", "INR 689 a day")."""
_NOT_MONEY_UNIT = re.compile(
    r"(?:\s*(?:-|\u2013|to)\s*[0-9]+)?\s*(?:(?:working|business|calendar)\s+)?"
    r"(?:minutes?|mins?|hours?|hrs?|days?|weeks?|months?|seconds?|secs?|items?|pieces?"
    r"|portions?|plates?|grams?|g|kg|ml|km)(?!" + _LETTER + r")",
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
    rf"(?<![0-9]){_DAY}\s+(?:of\s+)?(?:(?:{_MONTHS})\.?(?!{_LETTER})(?:,?\s+{_YEAR})?"
    rf"|may,?\s+{_YEAR})"
    rf"|(?<!{_LETTER})(?:{_MONTHS}|may)\.?\s+(?:{_DAY},?\s+)?{_YEAR}",
    re.IGNORECASE,
)
"""A date written with its month's name: a day before it ("4 December", "12th of Dec"; for May,
with the year), or a year after it ("Dec 3rd, 2026", "May 2026"). Its numbers are not
amounts."""

_OFF_SCRIPT = (
    (
        "points the customer somewhere else",
        re.compile(
            r"https?://|\bwww\.|[\w.+-]+@[\w-]+\.[a-z]{2,}"
            r"|\b[\w-]+\.(?:com|in|net|org|io|co|app|link|ly|me|info|biz)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "asks for credentials",
        re.compile(
            r"\b(?:otp|one[-\s]time\s+(?:password|code)|passwords?|pin|cvv|cvc"
            r"|card\s+(?:number|details)|bank\s+(?:details|account))\b",
            re.IGNORECASE,
        ),
    ),
    (
        "promises something besides the amount",
        re.compile(
            r"\bfor\s+free\b|\bfree\s+of\s+(?:charge|cost)\b|\bon\s+(?:us|the\s+house)\b"
            r"|\bfree\s+(?:meals?|orders?|deliver(?:y|ies)|items?|food|desserts?|drinks?)\b"
            r"|\bno\s+(?:extra\s+)?charge\b|\bcomplimentary\b"
            r"|\b(?:is|are|be|been|get|gets|getting)\s+(?:\w+\s+)?free\b"
            r"|\b(?:vouchers?|coupons?|promo(?:tional)?\s+codes?|gift\s+cards?|discounts?"
            r"|cashback|(?:loyalty|reward|bonus)\s+points)\b"
            r"|%\s*off\b|\boff\s+(?:your|the)\s+next\b",
            re.IGNORECASE,
        ),
    ),
    (
        "repeats or multiplies something",
        re.compile(
            r"\b(?:[0-9]+|two|three|four|five|six|seven|eight|nine|several|many|multiple)"
            r"\s+times\b|\btwice\b|\bthrice\b|\b(?:doubled|tripled)\b",
            re.IGNORECASE,
        ),
    ),
)
"""What a reply written from a complaint must not carry, whatever the complaint asked for: a
link, an address or a domain; a request for a password, a code or card details; a promise of
free food or orders, a voucher, a coupon, a discount or points (only the approved amount is
promised, to the original payment method); a repetition or a multiple of anything ("three
times", "twice": of an amount stated once, it reads as more money)."""

_MONEY_WORDS = r"refund|voucher|coupon|credit|cashback|compensat|discount|worth|amount|wallet|money"
_APOLOGY = re.compile(r"sorry|apolog", re.IGNORECASE)
_REVIEW = re.compile(
    r"\b(?:will|to|shall|going\s+to)\s+(?:be\s+)?review|\bunder\s+review\b"
    r"|\bfor\s+(?:a\s+|human\s+|manual\s+|further\s+)?review\b|\bbeing\s+reviewed\b"
    r"|\bsent\s+(?:\w+\s+){0,3}(?:to|for)\s+(?:a\s+)?review|\b(?:pending|in)\s+review\b"
    r"|\b(?:is|are|be)\s+reviewing\b",
    re.IGNORECASE,
)
"""A review still to come ("will review", "under review", "pending review", "is reviewing"),
not one done ("we reviewed"). It counts only when no negation cancels it
(:data:`_REVIEW_NEGATED`, :data:`_REVIEW_CLOSED`)."""
_EARLIER = re.compile(
    r"\b(?:earlier|previous|prior|first)\s+(?:refunds?|repl(?:y|ies)|payments?)\b", re.IGNORECASE
)
"""A mention of the refund an earlier round paid ("our earlier refund", "our previous reply")."""
_TOKEN = re.compile(rf"{_LETTER}+|{_NUMBER}")
_CLAUSE_BREAK = re.compile(
    r"[()\[\]]|[.!?;:,\u2014]+(?=\s|$)|\s[-\u2013\u2014]+\s"
    r"|\b(?:and|but|so|yet|because|since|as|although|though|while|whereas|however|then|unless"
    r"|until|once(?!\s+(?:more|again)\b)|after|before|which|who|that|what|where|when)\b",
    re.IGNORECASE,
)
"""Where a clause ends: a bracket, a punctuation mark before a space (not the point of
"689.50"), a dash between spaces, or a conjunction or relative word ("and", "but", "which",
"that", ...). Negation and review are read per clause."""
_NEGATION = r"(?:\b(?:not|no|nothing|never|none|neither|nor|without|cannot|unable)\b|n['\u2019]t\b)"
_LIGHT = (
    r"a|an|the|any|your|our|its|this|that|such|some|further|more|additional|extra|full|partial"
    r"|automatic|immediate|refunds?|credits?|or|nor|be|been|being|is|are|was|were|am|will|would"
    r"|shall|should|can|could|may|might|must|have|has|had|do|does|did|we|you|i|it|to|for|of|in"
    r"|by|at|on|able|going|yet|currently|now|possible|due|eligible|entitled|applicable"
    r"|available|offer(?:ed|ing)?|issu(?:e|ed|ing)|giv(?:e|en|ing)|mak(?:e|ing)|provid(?:e|ed|ing)"
    r"|process(?:ed|ing)?|send(?:ing)?|approv(?:e|ed|ing)|get(?:ting)?|receiv(?:e|ed|ing)"
    r"|pay(?:ing)?|part|included|covered|stage|moment|time|longer|find|found|reasons?|grounds|basis"
    r"|position|qualif(?:y|ies|ied)|justif(?:y|ies|ied)|warrant(?:s|ed)?"
)
_NEGATED_BEFORE = re.compile(rf"{_NEGATION}(?:\s+(?:{_LIGHT})\b){{0,6}}\s*$", re.IGNORECASE)
"""Before money talk in its clause: a negation with at most six auxiliary or light words
between ("not able to offer a refund", "nothing is refunded", "no refund", "won't credit", "did
not find a reason for a refund", "does not qualify for a refund", "not in a position to
refund")."""
_REVIEW_NEGATED = re.compile(
    rf"(?:{_NEGATION}|\bnobody\b)(?:\s+(?:{_LIGHT}|left|need(?:s|ed)?|one|else|required"
    rf"|necessary)\b){{0,4}}\s*$",
    re.IGNORECASE,
)
"""Before a review mention in its clause: a negation with at most four light words between,
which cancels it ("nothing is left to review", "we decided not to review", "not sent for
review", "no need for a review", "no one will review"). A negation elsewhere in the clause does
not ("will review the Raita in no more than two days", "will be reviewed without delay")."""
_REVIEW_CLOSED = re.compile(r"\b(?:closed|concluded|finished|ended)\b", re.IGNORECASE)
"""After a review mention in its clause: the review is over ("under review earlier is now
closed")."""
_NOUN_START = re.compile(r"(?:^|\b(?:a|an|any|the|your|our|this|that|such)\s+)$", re.IGNORECASE)
_NEGATED_AFTER = re.compile(
    r"(?:\s+(?:for|of|on|to|from)(?:\s+[\w'\u2019-]+){1,3}?)?\s+(?:(?:is|are|was|were|will|would"
    r"|can|could|shall|should|does|do|did|has|have)(?:\s+not\b|n['\u2019]t\b)|cannot\b)",
    re.IGNORECASE,
)
"""After a refund noun that starts its clause or follows a determiner: a negated verb ("a refund
is not possible", "refunds for the Raita cannot be made")."""
_REFUSED_AFTER = re.compile(
    r"(?:(?:(?:could|can|will|would|shall|should|may|might|must|is|are|was|were|has|have|had"
    r"|does|do|did)\s+not|(?:could|ca|wo|would|should|is|are|was|were|has|have|had|does|do|did)"
    r"n['\u2019]t|cannot)(?:\s+(?:be|been|currently|yet|now|possibly|presently))*"
    r"\s+(?:approved|issued|processed|made|given|offered|granted|possible|applicable|due"
    r"|available|paid|provided|allowed|accepted|justified|warranted)"
    r"|(?:(?:has|have|had)\s+been|is|are|was|were)\s+(?:(?:unfortunately|sadly|regrettably)\s+)?"
    r"(?:rejected|declined|denied|refused|turned\s+down)"
    r"|(?:is|are)\s+only\s+(?:possible|available|applicable|offered|given|issued|made|due"
    r"|allowed))"
    r"(?=\s*$|\s+(?:for|in|at|on|as|this|to|by|under|with|from|yet|now|currently|here)\b)",
    re.IGNORECASE,
)
"""After a refund noun that starts its clause or follows a determiner, later in the clause: the
clause's verb refuses it ("the refund you asked for could not be approved", "your refund request
has been rejected", "a refund can't be issued in this case", "refunds are only possible for
missing items"), with nothing after but a phrase ("for ...", "in this case"): not "a refund for
what you could not be given is on the way"."""
_UNSETTLED = re.compile(r"\b(?:any|whether|if|possible)\b", re.IGNORECASE)
"""Before refund wording in a clause after a review in its sentence: the refund is left to the
review ("a colleague will review the Raita and decide on any refund", "... and decide whether a
refund is due")."""
_MONEY_NOUN = r"(?:refunds?|credits?|reimbursements?|compensation)"
_NOUN_CLAIM = re.compile(
    rf"(?:{_MONEY_NOUN}|money|amount|funds?|cash|payment|charge)\b", re.IGNORECASE
)
"""A money noun at the start of a promise ("refund ... has been", "money ... returned")."""
_ADVERBS = (
    r"also|then|now|soon|fully|promptly|gladly|immediately|happily|be|definitely|certainly"
    r"|surely|quickly|duly|still|just"
)
_SOME_WORDS = r"(?:[\w'\u2019-]+\s+){0,3}?"
_STRONG_PROMISES = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(?:refunded|refunding|credited|crediting|reimbursed|reimbursing|compensated"
        r"|compensating|repaid|repaying)\b",
        rf"(?:\b(?:will|shall|would|to|can|could|may|might|must|we|i)|['\u2019]ll)\s+"
        rf"(?:(?:{_ADVERBS})\s+)*(?:refund|credit|reimburse|compensate|pay|repay)\b",
        rf"\b(?:issu|process|approv|grant|initiat|arrang|send|sent|giv|gave|mak|made|offer"
        rf"|provid|authori[sz]|confirm|complet|releas)\w*\s+{_SOME_WORDS}{_MONEY_NOUN}\b",
        rf"\b(?:receiv\w*|get|gets|getting|got|gotten)\s+{_SOME_WORDS}(?:{_MONEY_NOUN}|money)\b",
        r"\b(?:full|complete|partial|total)\s+refunds?\b|\brefund(?:s|ed)?\s+in\s+full\b",
        rf"\b(?:{_MONEY_NOUN}|money|amount)\s+(?:[\w'\u2019-]+\s+){{0,4}}?(?:(?:is|are)\s+coming"
        r"|on\s+(?:its|the|their)\s+way|(?:has|have)\s+been|(?:being\s+)?(?:processed|initiated"
        r"|approved|issued|granted|sent|released|confirmed|completed)|will|shall|['\u2019]ll"
        r"|should\s+(?:reach|arrive|reflect|show))\b",
        r"\bmoney\s+back\b|\bpa(?:y|ys|id|ying)\s+(?:[\w'\u2019-]+\s+){0,2}?back\b"
        r"|\bback\s+(?:to|into|in|on)\s+your\s+(?:card|account|wallet|bank|upi)\b",
        rf"\b(?:return\w*|transfer\w*|send|sends|sending|sent|put|putting|deposit\w*|give|gives"
        rf"|giving|gave|add|adds|added|adding)\s+{_SOME_WORDS}(?:money|amount|funds?|cash"
        r"|payment|charge)\b",
        rf"\b(?:money|amount|funds?|cash|payment|charge)\s+{_SOME_WORDS}(?:returned|transferred"
        r"|sent|credited|reversed|back)\b",
        r"\brevers\w*\s+(?:[\w'\u2019-]+\s+){0,2}?(?:charge|payment|transaction)s?\b",
    )
)
"""Wording that promises money: a refund, credit, reimbursement or compensation given or to
come ("refunded", "we'll refund", "issued a full refund", "approved your refund request", "a
refund ... is on the way"), money back or returned ("pay you back", "return the money"). Only a
negation right before it excuses it (:data:`_NEGATED_BEFORE`)."""
_MONEY_TALK = re.compile(
    r"\b(?:refunds?|credits?(?!\s+cards?\b)|reimburs\w*|compensat\w*|cashback|chargebacks?)\b",
    re.IGNORECASE,
)
"""Any other mention of a refund or credit ("a refund for the Raita", not "credit card"). When
nothing is approved it is excused by a negation (:data:`_NEGATED_BEFORE`,
:data:`_NEGATED_AFTER`), by a review in its clause ("will review whether a refund is due"), or
when it names the earlier refund ("our earlier refund")."""
_REVIEW_WORD = re.compile(r"\breview\w*", re.IGNORECASE)
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


def _numerals(text: str) -> tuple[str, ...]:
    """The numeric characters of ``text`` that are not decimal digits ("❶", "⓵", "①", "½", "²",
    "Ⅻ", "五"), each once: numbers the guard does not read (NFKC turns some into digits or
    letters, others it keeps), so a reply holding one is refused."""
    if text.isascii():  # the usual reply: every ASCII numeric character is a decimal digit
        return ()
    return tuple(dict.fromkeys(c for c in text if c.isnumeric() and not c.isdecimal()))


def _normalised(text: str) -> str:
    """``text`` as the guard reads it: NFKC (full-width digits and signs become plain ones),
    every other decimal digit as its ASCII one ("५००" is 500), every currency sign not in
    :data:`_SYMBOLS` as ``¤``."""
    normal = unicodedata.normalize("NFKC", text)
    if normal.isascii():  # the usual reply: no other digit, and "$" is one of _SYMBOLS
        return normal
    return "".join(
        str(unicodedata.decimal(c))
        if c.isdecimal() and not c.isascii()
        else _OTHER_SIGN
        if c not in _SYMBOLS and unicodedata.category(c) == "Sc"
        else c
        for c in normal
    )


_ANY_CODE = "(?-i:[A-Z]{3})"
"""Any three capitals next to a number ("AED 500", "500 JPY"): read as a currency code."""


def _codes_pattern(currency: str) -> str:
    """Known codes and currency names in any case; the reply's own currency code only as written
    (upper case), so that an ordinary word can never be read as a currency."""
    known = sorted((set(_KNOWN_CODES) - {"RS.", "RE"}) | set(_UNIT_WORDS), key=len, reverse=True)
    return "|".join([*(re.escape(code) for code in known), f"(?-i:{re.escape(currency)})"])


def _tag(code: str) -> str:
    upper = code.upper()
    return _KNOWN_CODES.get(upper) or _UNIT_WORDS.get(upper) or code


@functools.cache  # one pattern per currency, built once
def _prefix_re(currency: str) -> re.Pattern[str]:
    symbols = "".join(re.escape(s) for s in _SYMBOLS)
    return re.compile(
        rf"(?:(?<!{_LETTER})(?P<code>{_codes_pattern(currency)}|{_ANY_CODE}|(?-i:Re))"
        rf"(?!{_LETTER})\.?"
        rf"|(?P<sym>[{symbols}]))\s*(?P<num>{_NUMBER})",
        re.IGNORECASE,
    )


@functools.cache  # one pattern per currency, built once
def _suffix_re(currency: str) -> re.Pattern[str]:
    units = "|".join(_MINOR_UNITS)
    return re.compile(
        rf"(?P<num>{_NUMBER})\s*(?:(?P<unit>{units}|{_codes_pattern(currency)}|{_ANY_CODE})"
        rf"(?!{_LETTER})"
        rf"|(?P<dash>/-))",
        re.IGNORECASE,
    )


_SCALED = re.compile(rf"(?P<num>{_NUMBER})\s*(?:{_MULTIPLIERS})(?!{_LETTER})", re.IGNORECASE)
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
    rf"(?<!{_LETTER})(?:{'|'.join(_DIGIT_WORDS)}|grand)(?!{_LETTER})", re.IGNORECASE
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
    rf"\s+(?:(?:more|extra|additional|other|single)\s+)?(?:of(?!{_LETTER})"
    rf"|(?!(?:{_NOT_COUNTED})(?!{_LETTER})){_LETTER}+(?!{_LETTER}))",
    re.IGNORECASE,
)
"""After a number word: "of" or a noun, perhaps after "more" ("one of the biryanis", "two
biryanis", "one email", "one visit", "one more chance"): a count. Not a function word, a
money word or "more" alone ("get one back", "add five to your wallet", "get one more as
goodwill", "five bucks")."""
_PERCENT = re.compile(r"\s*(?:%|per\s*cent\b|percent\b)", re.IGNORECASE)
_MONEY_BEFORE_WINDOW = 24
"""How far before a number :data:`_MONEY_BEFORE` and :data:`_TIMES_BEFORE` look."""


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
    if len(whole) > _MAX_AMOUNT_DIGITS:
        return None
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
    :func:`check_reply`.
    """
    return tuple(mention for _, _, mention in _located_amounts(_normalised(text), currency))


def _located_amounts(text: str, currency: str) -> list[tuple[int, int, MoneyMention]]:
    """:func:`find_amounts` of normalised ``text``, with where each mention starts and ends."""
    found: list[tuple[int, int, MoneyMention]] = []
    covered: list[tuple[int, int]] = []

    def add(span: tuple[int, int], number: tuple[int, int], mention: MoneyMention) -> None:
        found.append((*span, mention))
        covered.append(number)

    for match in _prefix_re(currency).finditer(text):
        code: str | None = match.group("code")
        tag = _SYMBOLS[match.group("sym")] if code is None else _tag(code)
        foreign_capitals = code is not None and tag == code and code != currency
        if foreign_capitals and _NOT_MONEY_UNIT.match(text, match.end()):
            continue  # three capitals before a time or a count ("ETA 30 minutes")
        exact = not _INEXACT_AFTER.match(text, match.end())
        minor = _to_minor(match.group("num"), already_minor=False) if exact else None
        add(match.span(), match.span("num"), MoneyMention(match.group(0), minor, tag))
    for match in _suffix_re(currency).finditer(text):
        if match.span("num") in covered:
            continue
        unit = match.group("unit") or "INR"  # "/-" marks rupees
        paise = unit.upper() in _MINOR_UNITS
        tag = "INR" if paise else _tag(unit)
        minor = _to_minor(match.group("num"), already_minor=paise)
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
        minor = _to_minor(word, already_minor=False) if exact else None
        add(token.span(), token.span(), MoneyMention(word, minor, None))
    for match in _DIGIT_WORD.finditer(text):
        if _word_money_context(text, *match.span()):
            word = match.group(0)
            units = _DIGIT_WORDS.get(word.lower())
            add(
                match.span(),
                match.span(),
                MoneyMention(word, None if units is None else units * 100, None),
            )
    return sorted(found, key=lambda located: located[0])


def _word_money_context(text: str, start: int, end: int) -> bool:
    """Whether the number word at ``text[start:end]`` is money: money words after it ("seven
    back", "nine to your wallet"; :data:`_WORD_MONEY_AFTER`), or before it ("plus nine", "get
    one more") unless what follows makes it a count ("get two biryanis", "give one of them",
    "get one email", "paid one visit", "five minutes")."""
    if _WORD_MONEY_AFTER.match(text, end):
        return True
    if not _MONEY_BEFORE.search(text, max(0, start - _MONEY_BEFORE_WINDOW), start):
        return False
    return not (_COUNTED_AFTER.match(text, end) or _NOT_MONEY_UNIT.match(text, end))


def _money_context(text: str, start: int, end: int) -> bool:
    """Whether the words right around the number at ``text[start:end]`` make it money."""
    before = _MONEY_BEFORE.search(text, max(0, start - _MONEY_BEFORE_WINDOW), start)
    return before is not None or _MONEY_AFTER.match(text, end) is not None


_ID_LABEL = re.compile(
    rf"(?<!{_LETTER})(?:orders?|ord|ref|reference|ticket|case|complaint|id|no|number|invoice"
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
        for pattern in (_ID_MONEY, _currency_word_re(currency))
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
    return _NOT_MONEY_UNIT.match(text, end) is not None


def check_reply(
    text: str,
    approved_minor: int,
    currency: str,
    held_items: Sequence[str],
    *,
    earlier_refund: bool = False,
    held_names: Sequence[str] = (),
) -> tuple[str, ...]:
    """The guard's failures for one reply; empty means it may be sent.

    - at most :data:`MAX_REPLY_CHARS` characters (else that is the only failure);
    - no numeral that is not a decimal digit ("❶", "⓵", "½", "Ⅻ", "五": :func:`_numerals`);
    - when anything is held, no sentence that refunds, credits or covers (not negated, not
      about a review) names any of ``held_names`` (the items only held lines name: "This covers
      the biryanis and the Raita", "We will refund the Raita as well"), other than in a later
      clause that sends it to review ("... for the biryanis and the Raita is under review"),
      or says it covers everything ("everything", "all your items", "every item", "in full",
      "the whole order");
    - approved > 0: ``format_amount(approved_minor, currency)`` must appear as written;
      approved == 0: the reply must not promise money (:func:`_promise`): no "refunded", "we'll
      refund", "issued a full refund", "approved your refund request", "return the money", "a
      refund ... is on the way", nor any other refund or credit wording, unless a negation
      governs it ("nothing is refunded", "not able to offer a refund", "a refund is not
      possible", "does not qualify for a refund"), its clause refuses it ("your refund request
      has been rejected", "a refund can't be issued in this case"), it is about a review ("will
      review whether a refund is due", "will review the Raita and decide on any refund") or it
      names the earlier refund; a clause giving the zero amount ("the amount approved is INR
      0") is none;
    - no other amount (:func:`find_amounts`: "seven back", "credited #500 to your wallet"
      included), and no amount in another currency, may appear;
    - the approved amount is stated at most once ("INR 689 ... and INR 689" is twice the money);
    - no amount may be multiplied, divided or repeated ("INR 689 each", "3 x INR 689", "half of
      INR 689", "another 689", "INR 689 again", "INR 689 a day"), nor said again without a
      number ("the same again tomorrow", "that amount once more": :func:`_repeats_money`);
    - no currency word or symbol outside such an amount ("six hundred rupees");
    - no number in words of ten or more, unless a time or a count ("fifty", "five hundred");
    - with held items, the reply must say they go to review ("will review", "under review"),
      not cancelled by a negation right before it or a close after it ("nothing is left to
      review", "not sent for review", "now closed": :data:`_REVIEW_NEGATED`; "will review the
      Raita in no more than two days" is a review to come);
    - after an earlier round paid money (``earlier_refund``), the reply must mention it ("our
      earlier refund", "our previous reply"), so that it reads neither as all there is nor as
      no refund at all;
    - at most one apology ("sorry"/"apolog...");
    - no link, e-mail address or domain, no request for credentials (password, OTP, card
      details), no promise of anything free (:data:`_OFF_SCRIPT`).

    The reply is read after :func:`_normalised` (full-width and other scripts' digits, other
    currency signs). It returns failures for any text and never raises.
    """
    written = text
    text = _normalised(text)
    if len(text) > MAX_REPLY_CHARS:
        return (f"is {len(text)} characters long, more than the {MAX_REPLY_CHARS} a reply may be",)
    failures: list[str] = []
    numerals = _numerals(written + text)
    if numerals:
        failures.append(f"writes a number in characters it cannot read: {''.join(numerals)!r}")
    stated = format_amount(approved_minor, currency)
    if approved_minor > 0:
        exact = re.compile(
            rf"(?<![0-9A-Za-z]){re.escape(stated)}(?![0-9]|[.,][0-9])", re.IGNORECASE
        )
        if not exact.search(text):
            failures.append(f"does not state the approved amount {stated}")
    else:
        promise = _promise(text, stated)
        if promise is not None:
            failures.append(f"promises money although nothing is approved: {promise!r}")
    located = _located_amounts(text, currency)
    statements = _statements(text, located, approved_minor, _tag(currency))
    if approved_minor > 0 and statements > 1:
        # "INR 689 for the biryanis and INR 689 for the delay" reads as twice the money.
        failures.append(f"states the approved amount {statements} times (at most once)")
    if held_items:
        failures.extend(_covers_held(text, held_names))
    repeat = _repeats_money(text, currency) if approved_minor > 0 else None
    if repeat is not None:
        failures.append(f"repeats the amount without a number: {repeat!r}")
    for start, end, mention in located:
        if mention.currency is not None and mention.currency != _tag(currency):
            failures.append(f"names an amount in another currency: {mention.text!r}")
        elif mention.minor != approved_minor:
            failures.append(f"names an amount other than the approved {stated}: {mention.text!r}")
        before = _TIMES_BEFORE.search(text, max(0, start - _MONEY_BEFORE_WINDOW), start)
        if before or _TIMES_AFTER.match(text, end):
            failures.append(f"multiplies, divides or repeats an amount: {mention.text!r}")
    for word in _SUM_WORDS.finditer(text):
        inside = any(start <= word.start() < end for start, end, _ in located)
        if not inside and not _NOT_MONEY_UNIT.match(text, word.end()):
            failures.append(f"names a number in words: {word.group(0)!r}")
    for word in _currency_word_re(currency).finditer(text):
        # "/-" marks the number before it ("INR 689/-"): it is covered when that number is.
        at = word.start() - 1 if word.group(0).lstrip().startswith("/-") else word.start()
        if not any(start <= at < end for start, end, _ in located):
            failures.append(f"names money without an amount it may state: {word.group(0)!r}")
    if held_items and not _review_mentioned(text):
        failures.append("does not say that the held items go to review")
    if earlier_refund and not _EARLIER.search(text):
        failures.append("does not mention the refund an earlier round paid")
    # The reply's own currency code next to its amount is no credential ("CVC 689"): the
    # amounts in that currency are read as blanks here (any other amount fails above).
    own = _tag(currency)
    masked = text
    for start, end, mention in located:
        if mention.currency == own:
            masked = masked[:start] + " " * (end - start) + masked[end:]
    for problem, pattern in _OFF_SCRIPT:
        found = pattern.search(masked)
        if found:
            failures.append(f"{problem}: {found.group(0)!r}")
    apologies = len(_APOLOGY.findall(text))
    if apologies > 1:
        failures.append(f"apologises {apologies} times (at most once)")
    return tuple(dict.fromkeys(failures))


@functools.lru_cache(maxsize=64)  # one reply's text and sentences are split by several checks
def _clauses(text: str) -> tuple[str, ...]:
    """``text`` split at every :data:`_CLAUSE_BREAK`, empty pieces left out."""
    return tuple(clause for clause in _CLAUSE_BREAK.split(text) if clause.strip())


_SAME_AGAIN = re.compile(
    r"\bthe\s+same\b(?=\s*(?:amount|sum|money|value|figure|again|once|to|into|in\s+(?:your|the)"
    r"|for|as\s+well|too|later|tomorrow|next|on\s+top|every|each|back|more|extra)\b)",
    re.IGNORECASE,
)
""""The same" as money again: "the same again tomorrow", "the same to your wallet", "the same
amount for the delay" (not "the same as", nor "the same thing", "the same card", "the same
payment method", "in the same way")."""
_REPETITION = re.compile(
    r"\b(?:again|once\s+more|one\s+more\s+time|another\s+time|a\s+second\s+time|repeat\w*)\b"
    r"|\bthe\s+same\W*$",
    re.IGNORECASE,
)
"""A repetition in a clause: "again", "once more", ..., or "the same" ending its clause, where it
stands for a thing ("we will refund the same"), not before a noun ("the same card")."""
_REPEATED_MONEY = re.compile(
    r"\b(?:refund\w*|credit\w*|amount|sum|money|pa(?:y|ys|id|ying|yment)s?|wallet|reimburs\w*"
    r"|compensat\w*)\b",
    re.IGNORECASE,
)


def _repeats_money(text: str, currency: str) -> str | None:
    """Where ``text``, which states the approved amount, says it again without a number, or
    None: "the same" before money or a repetition (:data:`_SAME_AGAIN`), or a clause
    (:func:`_clauses`) holding both a repetition (:data:`_REPETITION`: "again", "once more",
    "the same" ending the clause) and money (:data:`_REPEATED_MONEY`, a currency word): "that
    amount once more", "we will refund it again", "we will credit the same". A repetition with
    no money in its clause ("we are sorry this happened again", "again, thank you") is none,
    and so is "the same" before a noun ("refunded INR 689 to the same card", "in the same
    way you paid")."""
    same = _SAME_AGAIN.search(text)
    if same:
        return same.group(0)
    for clause in _clauses(text):
        repetition = _REPETITION.search(clause)
        money = _REPEATED_MONEY.search(clause) or _currency_word_re(currency).search(clause)
        if repetition and money:
            return clause.strip()
    return None


def _review_mentioned(text: str) -> bool:
    """Whether a clause of ``text`` (:func:`_clauses`) says a review is to come
    (:func:`_pending_review`)."""
    return any(_pending_review(clause) for clause in _clauses(text))


def _pending_review(clause: str) -> bool:
    """Whether ``clause`` says a review is to come (:data:`_REVIEW`) that no negation right
    before it cancels (:data:`_REVIEW_NEGATED`) and that is not over (:data:`_REVIEW_CLOSED`)."""
    for review in _REVIEW.finditer(clause):
        if _REVIEW_NEGATED.search(clause, 0, review.start()):
            continue
        if not _REVIEW_CLOSED.search(clause, review.end()):
            return True
    return False


def _promise(text: str, stated: str) -> str | None:
    """The first wording in ``text`` that promises money, when nothing is approved, or None.

    Read clause by clause (:func:`_clauses`). A clause that gives the zero amount as what it is
    ("the amount approved for refund is INR 0") promises nothing. Otherwise every
    :data:`_STRONG_PROMISES` match is a promise unless a negation comes right before it
    (:data:`_NEGATED_BEFORE`); every other :data:`_MONEY_TALK` is one unless negated (before, or
    after a refund noun: :data:`_NEGATED_AFTER`), in a clause that mentions a review, or part of
    a mention of the earlier refund.
    """
    amount = re.escape(stated)
    zero = re.compile(
        rf"\b(?:is|are|was|were|be|of|at|to)\s+{amount}(?![0-9]|[.,][0-9])"
        rf"|(?<![0-9A-Za-z]){amount}(?![0-9]|[.,][0-9])\s+(?:is|are|was|has|have)\b",
        re.IGNORECASE,
    )
    for sentence in _SENTENCE_END.split(text):
        for clause, after_review in _reviewed_clauses(sentence):
            if zero.search(clause):
                continue
            claim = _claim(clause, _MONEY_TALK, after_review=after_review)
            if claim is not None:
                return claim.group(0)
    return None


def _reviewed_clauses(sentence: str) -> list[tuple[str, bool]]:
    """The clauses of ``sentence`` (:func:`_clauses`), each with whether an earlier clause of
    the sentence says a review is to come (:func:`_pending_review`)."""
    clauses, seen = [], False
    for clause in _clauses(sentence):
        clauses.append((clause, seen))
        seen = seen or _pending_review(clause)
    return clauses


def _refused(clause: str, match: re.Match[str]) -> bool:
    """Whether ``match`` in ``clause`` is a refund noun that starts its clause or follows a
    determiner, and the clause's verb refuses it (:data:`_NEGATED_AFTER`,
    :data:`_REFUSED_AFTER`)."""
    noun = _NOUN_CLAIM.match(clause, match.start(), match.end())
    if noun is None or _NOUN_START.search(clause, 0, match.start()) is None:
        return False
    noun_end = noun.end()
    return bool(_NEGATED_AFTER.match(clause, noun_end) or _REFUSED_AFTER.search(clause, noun_end))


def _claim(
    clause: str, talk: re.Pattern[str], *, after_review: bool = False
) -> re.Match[str] | None:
    """The first wording in ``clause`` that gives money or claims something as paid, or None:
    a :data:`_STRONG_PROMISES` match no negation governs (:data:`_NEGATED_BEFORE`) and the
    clause does not refuse (:func:`_refused`), else a ``talk`` match that is not negated
    (before it, or refused after it), not in a clause that mentions a review, not left to a
    review earlier in its sentence (``after_review`` and :data:`_UNSETTLED` before it: "will
    review the Raita and decide on any refund"), and not part of a mention of the earlier
    refund."""
    for pattern in _STRONG_PROMISES:
        for match in pattern.finditer(clause):
            if not _NEGATED_BEFORE.search(clause, 0, match.start()) and not _refused(clause, match):
                return match
    reviewed = _REVIEW_WORD.search(clause) is not None
    earlier = [m.span() for m in _EARLIER.finditer(clause)]
    for match in talk.finditer(clause):
        if reviewed or any(start <= match.start() < end for start, end in earlier):
            continue
        if after_review and _UNSETTLED.search(clause, 0, match.start()):
            continue
        if _NEGATED_BEFORE.search(clause, 0, match.start()) or _refused(clause, match):
            continue
        return match
    return None


_RESTATED = re.compile(
    r"\s*\(\s*(?![^()0-9.;!?]*\b(?:plus|and|besides|also|another|additional|extra|more|again"
    r"|further|with|on\s+top|each|per|for)\b)[^()0-9.;!?]{0,20}",
    re.IGNORECASE,
)
"""Between a statement of the amount and the next: an opening bracket and a few words ("INR 689
(₹689)", "INR 689 (refund of 689)"): the same amount spelled again, not a second one. Words
that add or assign ("(plus INR 689 for the delay)", "(and ₹689 ...)") make it a second one."""
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_COVERS_ALL = re.compile(
    r"\b(?:every\s?thing|all\s+of\s+(?:it|them|your|the)|all\s+(?:your|the)\b|in\s+full"
    r"|full\s+refund|whole|entire|all\s+(?:items|issues|grievances|claims|problems|complaints?"
    r"|dishes)|(?:every|each)\s+(?:single\s+)?(?:item|issue|dish|part|problem|grievance|claim"
    r"|line|thing))\b",
    re.IGNORECASE,
)
"""What claims everything: "everything", "all your items", "every item", "each dish", "in
full", "the whole order"."""
_COVERS_TALK = re.compile(rf"{_MONEY_TALK.pattern}|\b(?:cover\w*|includ\w*)\b", re.IGNORECASE)
"""Wording that says something is paid for: a refund, a credit, "covers", "including"."""


def _covers_held(text: str, held_names: Sequence[str]) -> list[str]:
    """Failures for a sentence, anywhere in ``text``, that claims a held item, or everything,
    as refunded or covered ("INR 689 for everything, including the raita", "This covers the
    biryanis and the Raita", "We will refund the Raita as well"): one holding refund, credit or
    covers wording (:data:`_COVERS_TALK`) that :func:`_claim` does not excuse (negated, in a
    clause about a review, or left to a review earlier in the sentence) and a held name or
    :data:`_COVERS_ALL`. A held name only in clauses that send it to review, after every
    claim, is not claimed ("We have refunded INR 689 for the biryanis and the Raita is under
    review"; not "A colleague will review the Raita and we will refund it")."""
    failures = []
    names = [
        (name, re.compile(rf"(?<!{_LETTER}){re.escape(name)}(?!{_LETTER})", re.IGNORECASE))
        for name in held_names
    ]
    for sentence in _SENTENCE_END.split(text):
        named = [(name, pattern) for name, pattern in names if pattern.search(sentence)]
        covers = _COVERS_ALL.search(sentence)
        if not named and covers is None:
            continue  # the cheaper test first: most sentences name nothing held
        clauses = _reviewed_clauses(sentence)
        claims = [
            i
            for i, (clause, after_review) in enumerate(clauses)
            if _claim(clause, _COVERS_TALK, after_review=after_review)
        ]
        if not claims:
            continue
        for name, pattern in named:
            if not _sent_to_review(clauses, pattern, after=claims[-1]):
                failures.append(f"says the refund covers {name!r}, which is held for review")
        if covers:
            failures.append(f"says the refund covers all although items are held: {covers[0]!r}")
    return failures


def _sent_to_review(
    clauses: Sequence[tuple[str, bool]], name: re.Pattern[str], *, after: int
) -> bool:
    """Whether every clause that names ``name`` comes after clause ``after`` and says a review
    is to come (:func:`_pending_review`), and some clause names it."""
    naming = [i for i, (clause, _) in enumerate(clauses) if name.search(clause)]
    return bool(naming) and all(i > after and _pending_review(clauses[i][0]) for i in naming)


def _statements(
    text: str, located: Sequence[tuple[int, int, MoneyMention]], approved_minor: int, tag: str
) -> int:
    """How many times ``located`` states the approved amount, a bracketed restatement right
    after a statement not counted."""
    count, last_end = 0, None
    for start, end, mention in located:
        if mention.minor != approved_minor or mention.currency not in (None, tag):
            continue
        if last_end is None or not _RESTATED.fullmatch(text, last_end, start):
            count += 1
        last_end = end
    return count


def safe_phrase(phrase: str, currency: str) -> str:
    """``phrase`` with everything the guard reacts to removed: digits and other numerals,
    currency signs, codes and names, wording that promises money ("pay back", "reimburse",
    :data:`_STRONG_PROMISES`), money words ("refund", "credit", "voucher", ...), numbers in
    words ("fifty", "lakh"), "/-", apology stems and what :data:`_OFF_SCRIPT` forbids (links,
    credentials, free things). Read as the guard reads it (:func:`_normalised`); whitespace
    collapsed. What it leaves may still trip a check in the template's sentence (a negation
    next to "review", say): :func:`template_reply` checks itself for that."""
    codes = _currency_word_re(currency)
    cleaned = "".join(c for c in _normalised(phrase) if c not in _SYMBOLS and not c.isnumeric())
    while True:
        stripped = cleaned
        for promise in _STRONG_PROMISES:
            stripped = promise.sub(" ", stripped)
        stripped = _MONEY_TALK.sub(" ", stripped)
        stripped = codes.sub(" ", _SUM_WORDS.sub(" ", _BANNED_STEMS.sub("", stripped)))
        for _, pattern in _OFF_SCRIPT:
            stripped = pattern.sub(" ", stripped)
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
    approved_minor: int,
    currency: str,
    resolved: Sequence[str],
    held: Sequence[str],
    *,
    earlier_refund: bool = False,
    held_names: Sequence[str] = (),
) -> str:
    """A plain, deterministic reply that passes :func:`check_reply`, with the same ``held_names``
    (the items only held lines name) as the reply's own check.

    ``resolved`` and ``held`` are short descriptions ("the late delivery", "the Raita"); they are
    passed through :func:`safe_phrase` and kept away from the amount sentence. A reply that
    still fails the guard (an item named "No Onion Pizza" next to "will review", say) names
    the resolved items, then the held ones, then both only generically ("the rest of your
    complaint"); that last wording passes by construction.
    ``earlier_refund``: an earlier round of the dispute paid money (a later round's reply must
    not read as if nothing had been refunded, nor as if this amount covered everything).
    ``held_names``: a resolved item whose name holds one ("the missing Boondi Raita" with
    "Raita" held) would read as covering the held item: the resolved items are then not named.
    """
    done = _listing(resolved, currency)
    waiting = _listing(held, currency)
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
