"""The reply guard: a customer reply may state the approved amount and no other.

The settlement model writes the reply; :func:`check_reply` checks it, reading its amounts with
:mod:`services.settler.amounts`. A reply that fails any check is replaced by
:func:`~services.settler.template.template_reply`, which passes the checks by construction. The
checks are deliberately conservative: a false alarm costs a plainer reply, a miss could promise
money.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from services.settler.amounts import (
    LETTER,
    MONEY_BEFORE_WINDOW,
    NOT_MONEY_UNIT,
    SUM_WORDS,
    MoneyMention,
    currency_tag,
    currency_word_re,
    format_amount,
    hidden_characters,
    located_amounts,
    masked_names,
    normalised,
    unread_letters,
    unread_numerals,
)

MAX_REPLY_CHARS = 2000
"""The longest reply the guard reads (after normalising): a customer reply is a few sentences,
and a longer one is refused whole, before any other check (the checks' cost grows with it)."""
_TIMES_AFTER = re.compile(
    r"\s*(?:/-\s*)?(?:each\b|every\b|apiece\b|a\s+piece\b|per\b|(?:for|on|to|towards)\s+(?:each|every)\b"
    r"|x\s*[0-9]|\u00d7|times\b"
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
each item", "INR 689 on every biryani", "half of INR 689", "another 689", "INR 689 again",
"INR 689 a day", "INR 689 every week"; after the rupees' "/-" too: "INR 689/- each")."""
_SPREAD = re.compile(
    r"\b(?:(?:for|on)\s+(?:each|every)|(?:each|every)\s+(?:single\s+)?(?:day|week|month|time)"
    r"|daily|weekly|monthly|(?<!as\s)per\s+(?!cent\b)\w+)\b",
    re.IGNORECASE,
)
"""Anywhere in an amount's clause, what spreads it over items or time ("For every biryani we
have refunded INR 689", "Every week we will credit INR 689", "INR 689 to your card weekly",
"INR 689 to your card per week"; not "as per our policy"). Capitalised after the clause's
first word, it is part of a name ("the missing Daily Special Thali"), not counted."""
OFF_SCRIPT = (
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
            r"|%\s*off\b|\boff\s+(?:your|the)\s+next\b"
            r"|\bwaiv(?:e|es|ed|ing|ers?)\b|\btop(?:s|ped|ping)?[-\s]?ups?\b"
            r"|\breplacements?\b|\bre-?(?:deliver|send|ship|dispatch)\w*|\bre-?sent\b",
            re.IGNORECASE,
        ),
    ),
    (
        "names money in slang",
        re.compile(r"\b(?:tenners?|fivers?|quids?|bucks?)\b", re.IGNORECASE),
    ),
    (
        "repeats or multiplies something",
        re.compile(
            r"\b(?:[0-9]+|two|three|four|five|six|seven|eight|nine|several|many|multiple)"
            r"\s+times\b|\btwice\b|\bthrice\b|\b(?:doubled|tripled)\b"
            r"|\b(?:double|triple)\s+(?:that|this|it|(?:the|your)\s+(?:\w+\s+)?(?:amount"
            r"|refund\w*|sum|money|payment|compensation|credit|price|cost|value))\b"
            r"|\b(?:we|i)(?:\s+(?:will|shall|would|can)|['\u2019]ll)?\s+(?:also\s+)?match\b"
            r"|\bmatch\s+(?:that|this)\s+(?:amount|sum|refund)\b",
            re.IGNORECASE,
        ),
    ),
)
"""What a reply written from a complaint must not carry, whatever the complaint asked for: a
link, an address or a domain; a request for a password, a code or card details; a promise of
free food or orders, a voucher, a coupon, a discount or points, a waived charge, a wallet top-up
or a replacement, redelivered or resent item (only the approved amount is promised, to the
original payment method; negated or not, such wording is left out); money in slang ("a tenner",
"a fiver", "ten quid", "five bucks"), which states no amount the guard can check; a repetition
or a multiple of anything ("three times", "twice", "double that", "double your compensation",
"we will match it": of an amount stated once, it reads as more money)."""

APOLOGY = re.compile(
    r"sorry|apolog|regret|forgiv|pardon|\bexcuse\s+(?:us|me)\b|\bour\s+bad\b", re.IGNORECASE
)
"""An apology: "sorry", "apologise", "regret", "forgive us", "beg your pardon", "excuse us",
"our bad". A reply makes at most one."""
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
"""A mention of the refund an earlier reply told of ("our earlier refund", "our previous reply")."""
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
_NOT_MONEY = (
    r"(?:news|word|updates?|answers?|decisions?|confirmation|information|details|replies|reply)"
)
"""What a customer may expect that is not money ("expect news of any refund")."""
_ARRIVING = rf"{_MONEY_NOUN}|money|funds?|cash|deposits?|transfers?|payments?"
"""What a reply may say is coming to the customer's card ("expect your money", "your card will
see the payment")."""
STRONG_PROMISES = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(?:refunded|refunding|credited|crediting|reimbursed|reimbursing|compensated"
        r"|compensating|repaid|repaying)\b",
        rf"(?:\b(?:will|shall|would|to|can|could|may|might|must|we|i)|['\u2019]ll)\s+"
        rf"(?:(?:{_ADVERBS})\s+)*(?:be\s+(?:(?:{_ADVERBS})\s+)*paid|refund|credit|reimburse"
        r"|compensate|pay|repay)\b",
        rf"\bsettl\w*\s+{_SOME_WORDS}(?:with|for|by|at)\s+{_SOME_WORDS}(?:{_MONEY_NOUN}|money"
        r"|amount|value|sum|cash)\b",
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
        rf"\bexpect\w*\s+(?:(?!{_NOT_MONEY}\b)[\w'\u2019-]+\s+){{0,3}}?(?:{_ARRIVING})\b",
        r"\b(?:transfers?|payments?|deposits?)\s+(?:to|into)\s+your\s+(?:card|account|wallet"
        r"|bank|upi)\b|\b(?:transfers?|deposits?)\s+(?:on|in)\s+your\s+(?:card|account|wallet"
        r"|bank|upi)\b",
        rf"\byour\s+(?:card|account|wallet|bank|upi)\s+(?:will|should|shall|would|is\s+going"
        rf"\s+to)\s+(?:(?:{_ADVERBS})\s+)*(?:see|show|receive|get|reflect)\s+"
        rf"(?:[\w'\u2019-]+\s+){{0,2}}?(?:{_ARRIVING}|it|them)\b",
        rf"\b(?:add|adds|added|adding|load|loads|loaded|loading|put|puts|putting)\s+{_SOME_WORDS}"
        r"(?:to|into|in|on)\s+your\s+(?:wallet|account|balance)\b",
        rf"(?:\b(?:not|never)|n['\u2019]t)\s+(?:(?:{_ADVERBS})\s+)*be\s+(?:(?:{_ADVERBS})\s+)*"
        r"(?:charged|billed)\b|(?:\bnot|n['\u2019]t)\s+(?:have|need)\s+to\s+pay\b"
        r"|\bno\s+need\s+to\s+pay\b",
        rf"\bcover(?:s|ed|ing)?\s+{_SOME_WORDS}(?:costs?|price|charges?|fees?|bill|expenses?)\b",
        rf"\b(?:cancel(?:s|led|ling|ed|ing)?|void(?:s|ed|ing)?|remov(?:e|es|ed|ing)|wip(?:e|es|ed"
        rf"|ing)\s+off|writ(?:e|es|ten|ing)\s+off)\s+{_SOME_WORDS}(?:charges?|fees?|costs?"
        r"|payments?|bill)\b",
        r"\b(?:charges?|fees?|costs?|bill|payments?)\s+(?:[\w'\u2019-]+\s+){0,6}?(?:cancel(?:l?ed)"
        r"|voided|removed|wiped\s+off|written\s+off)\b",
    )
)
"""Wording that promises money: a refund, credit, reimbursement or compensation given or to
come ("refunded", "we'll refund", "issued a full refund", "approved your refund request", "a
refund ... is on the way"), money back or returned ("pay you back", "return the money"), or
money to expect ("expect your money within a week", "a transfer to your card", "your card will
see the payment"; not "expect news of any refund", "your card will show one charge"), money put
in a wallet ("we'll add it to your wallet"), or a charge lifted ("you won't be charged for the
biryanis", "we'll cover the cost", "we have cancelled the charge", "the charge for the biryanis
will be cancelled"). Only a negation right before it excuses it (:data:`_NEGATED_BEFORE`)."""
MONEY_TALK = re.compile(
    r"\b(?:refunds?|credits?(?!\s+cards?\b)|reimburs\w*|compensat\w*|cashback|chargebacks?)\b",
    re.IGNORECASE,
)
"""Any other mention of a refund or credit ("a refund for the Raita", not "credit card"). When
nothing is approved it is excused by a negation (:data:`_NEGATED_BEFORE`,
:data:`_NEGATED_AFTER`), by a review in its clause ("will review whether a refund is due"), or
when it names the earlier refund ("our earlier refund")."""
_REVIEW_WORD = re.compile(r"\breview\w*", re.IGNORECASE)


SOLE_SIGNS = {"INR": "₹", "EUR": "€"}
"""Currency signs that name one currency only, with which a reply may state its amount. Not
"$" or "£" (Australian and Canadian dollars, Egyptian pounds), nor "Rs." or "rupees" (Pakistani,
Nepalese and Sri Lankan rupees are written so too)."""


_NON_SPACE = re.compile(r"\S")


def _spreads(text: str, start: int, end: int) -> bool:
    """Whether the clause (:data:`_CLAUSE_BREAK`) holding the amount ``text[start:end]`` spreads
    it over items or time (:data:`_SPREAD`)."""
    begins = max((found.end() for found in _CLAUSE_BREAK.finditer(text, 0, start)), default=0)
    after = _CLAUSE_BREAK.search(text, end)
    ends = len(text) if after is None else after.start()
    first = _NON_SPACE.search(text, begins, ends)
    return any(
        (first is not None and found.start() == first.start()) or not found.group(0)[0].isupper()
        for found in _SPREAD.finditer(text, begins, ends)
    )


def _states(text: str, stated: str, currency: str) -> bool:
    """Whether ``text`` states ``stated`` (``"INR 689"``) as written, or with its currency's
    sole sign ("₹689", "₹ 689"), its digits exactly those: no other grouping or decimals, and
    nothing written onto them ("INR 689e2")."""
    return _stated_at(text, stated, currency) is not None


def _stated_at(text: str, stated: str, currency: str) -> tuple[int, int] | None:
    """Where ``text`` first states ``stated`` (:func:`_states`), or None."""
    found = _stated_re(stated, currency).search(text)
    return None if found is None else found.span()


@functools.lru_cache(maxsize=64)
def _stated_re(stated: str, currency: str) -> re.Pattern[str]:
    """How a reply may state ``stated`` (:func:`_states`); a reply asks for it per sentence."""
    forms = [re.escape(stated)]
    sign = SOLE_SIGNS.get(currency)
    if sign is not None:
        number = stated.removeprefix(f"{currency} ")
        forms.append(rf"{re.escape(sign)} ?{re.escape(number)}")
    return re.compile(rf"(?<![0-9A-Za-z])(?:{'|'.join(forms)})(?!\w|[.,][0-9])", re.IGNORECASE)


def check_reply(
    text: str,
    approved_minor: int,
    currency: str,
    held_items: Sequence[str],
    *,
    earlier_refund: bool = False,
    held_names: Sequence[str] = (),
    whole_order: bool = False,
    item_names: Sequence[str] = (),
) -> tuple[str, ...]:
    """The guard's failures for one reply; empty means it may be sent. ``whole_order``: the
    approved amount with what earlier rounds refunded is the order's whole price, which the
    reply may then say is refunded. ``item_names``: the items the round's lines name; where the
    reply quotes one whose name holds a digit ("Chicken 65", "Momos (10 pcs)"), those digits
    are the item's name, not an amount (:func:`~services.settler.amounts.masked_names`).

    - at most :data:`MAX_REPLY_CHARS` characters (else that is the only failure);
    - no numeral that is not a decimal digit ("❶", "⓵", "½", "Ⅻ", "五":
      :func:`~services.settler.amounts.unread_numerals`), and no character that does not show
      or changes a digit or a letter (a zero-width space, a soft hyphen, a direction override, a
      variation selector but an emoji's, a keycap, a strike-through:
      :func:`~services.settler.amounts.hidden_characters`), which would let the customer read
      what the guard does not;
    - no letter but an ASCII one, accents on it aside, outside the ``item_names`` it quotes
      (:func:`~services.settler.amounts.unread_letters`): the guard reads English, and a reply
      in another script, or a word spelt with one of its letters ("refunded" with a
      Cyrillic "e", U+0435), could promise what it does not see;
    - when anything is held, no sentence that refunds, credits or covers (not negated, not
      about a review) names any of ``held_names`` (the items only held lines name: "This covers
      the biryanis and the Raita", "We will refund the Raita as well"), other than in a later
      clause that sends it to review ("... for the biryanis and the Raita is under review"),
      or says it covers everything ("everything", "all your items", "every item", "in full",
      "the whole order");
    - approved > 0: the approved amount must be stated as written by
      :func:`~services.settler.amounts.format_amount` ("INR 689"), or with a sign that names
      the reply's currency alone (:data:`SOLE_SIGNS`: "₹689"); not "INR 689.50", "₹6,89",
      "Rs. 689" or "689 rupees" (rupees of other countries read so too), nor a bare "689";
      and no clause may promise money besides it (:func:`_more_money`: "we will refund the
      delivery fee as well", "a separate refund follows", "your whole order will be refunded"
      unless ``whole_order``; not "it should reach your card within a week", nor "the same
      will be credited to your card", where "the same" is the refund stated);
      approved == 0: the reply must not promise money (:func:`_promise`): no "refunded", "we'll
      refund", "you will be paid", "we'll settle this with the full amount", "issued a full
      refund", "approved your refund request", "return the money", "a
      refund ... is on the way", "expect your money within a week", nor any other refund or
      credit wording, unless a negation
      governs it ("nothing is refunded", "not able to offer a refund", "a refund is not
      possible", "does not qualify for a refund"), its clause refuses it ("your refund request
      has been rejected", "a refund can't be issued in this case"), it is about a review ("will
      review whether a refund is due", "will review the Raita and decide on any refund") or it
      names the earlier refund; a clause giving the zero amount ("the amount approved is INR
      0") is none;
    - no other amount (:func:`~services.settler.amounts.find_amounts`: "seven back",
      "credited #500 to your wallet" included), and no amount in another currency, may appear;
    - the approved amount is stated at most once ("INR 689 ... and INR 689" is twice the money);
    - no amount may be multiplied, divided or repeated ("INR 689 each", "INR 689 on every
      biryani", "3 x INR 689", "half of INR 689", "another 689", "INR 689 again", "INR 689 a
      day"), or spread over items or time anywhere in its clause ("For every biryani we have
      refunded INR 689", "Every week we will credit INR 689", "INR 689 to your card weekly"),
      nor said again without a
      number ("the same again tomorrow", "that amount once more": :func:`_repeats_money`);
    - no currency word or symbol outside such an amount ("six hundred rupees");
    - no number in words of ten or more, unless a time or a count ("fifty", "five hundred");
    - with held items, the reply must say they go to review ("will review", "under review"),
      not cancelled by a negation right before it or a close after it ("nothing is left to
      review", "not sent for review", "now closed": :data:`_REVIEW_NEGATED`; "will review the
      Raita in no more than two days" is a review to come);
    - after an earlier reply told of a refund (``earlier_refund``), the reply must mention it ("our
      earlier refund", "our previous reply"), so that it reads neither as all there is nor as
      no refund at all;
    - at most one apology (:data:`APOLOGY`: "sorry", "apolog...", "regret", "forgive",
      "pardon", "excuse us");
    - no link, e-mail address or domain, no request for credentials (password, OTP, card
      details), no promise of anything free, waived, topped up or replaced, no money in slang
      ("a tenner") (:data:`OFF_SCRIPT`);
    - no zero written with more than one digit ("2 000" is a count of 2 and 000, "0.00"): it
      is another amount than the approved one, even when that is nothing.

    The reply is read after :func:`~services.settler.amounts.normalised` (full-width and other
    scripts' digits, other currency signs, accents on letters). It returns failures for any
    text and never raises.
    """
    normal = normalised(text)
    read = masked_names(normal, item_names)
    if len(read) > MAX_REPLY_CHARS:
        return (f"is {len(read)} characters long, more than the {MAX_REPLY_CHARS} a reply may be",)
    # What the customer sees, whichever way the lines are read.
    failures: list[str] = []
    numerals = unread_numerals(text + read)
    if numerals:
        failures.append(f"writes a number in characters it cannot read: {''.join(numerals)!r}")
    hidden = hidden_characters(text)
    if hidden:
        named = ", ".join(f"U+{ord(c):04X}" for c in hidden)
        failures.append(
            f"holds characters that do not show, or change a digit or a letter: {named}"
        )
    letters = unread_letters(normal, item_names)  # names quoted with their digits unmasked
    if letters:
        failures.append(f"writes letters the guard does not read: {''.join(letters)!r}")
    args = (
        approved_minor,
        currency,
        held_items,
        earlier_refund,
        held_names,
        whole_order,
        item_names,
    )
    # A line break may end a sentence ("INR 0\nWe will refund your fee") or wrap one ("we are
    # not able to\nrefund it"; "for:\n1. the Biryani\n2. the Raita"): a reply with one is read
    # three ways, and fails if any reading fails, so that no reading excuses what another sees.
    readings = (
        (
            _LINE_BREAK.sub(" ", read),  # every line goes on with the one before
            _LINE_BREAK.sub("; ", read),  # every line is a sentence of its own
            _LINE_BREAK.sub(_goes_on, read),  # a list's items, and lines that wrap, go on
        )
        if _LINE_BREAK.search(read)
        else (read,)
    )
    for reading in readings:
        # A kind of failure another reading found already is not said again in its words.
        kinds = {failure.split(":")[0] for failure in failures}
        failures += [f for f in _failures(reading, *args) if f.split(":")[0] not in kinds]
    return tuple(dict.fromkeys(failures))


_LINE_BREAK = re.compile(r"[ \t]*+(?:\r\n|[\n\r\u2028\u2029])\s*+")
"""A line break, with the spaces around it: :func:`check_reply` reads it as a space, as the
end of a sentence ("; "), and as the one or the other (:func:`_goes_on`)."""
_GOES_ON = re.compile(r"[a-z]|[-*\u2022\u2013\u2014]\s|[0-9]{1,2}[.)]\s")
"""The start of a line that goes on with the sentence before: a small letter (the line wraps)
or a list's marker ("- ", "• ", "1. ", "2) ")."""


def _goes_on(line_break: re.Match[str]) -> str:
    """A line break as a space where the next line goes on with the sentence, else as the
    end of the sentence."""
    return " " if _GOES_ON.match(line_break.string, line_break.end()) else "; "


def _failures(
    text: str,
    approved_minor: int,
    currency: str,
    held_items: Sequence[str],
    earlier_refund: bool,
    held_names: Sequence[str],
    whole_order: bool,
    item_names: Sequence[str],
) -> tuple[str, ...]:
    """:func:`check_reply`'s failures for ``text``, a reply as the guard reads it (normalised,
    the digits of item names masked, line breaks read one way), but those of the characters
    it is written in."""
    failures: list[str] = []
    stated = format_amount(approved_minor, currency)
    located = located_amounts(text, currency)
    own = currency_tag(currency)
    if approved_minor > 0:
        if not _states(text, stated, currency):
            failures.append(f"does not state the approved amount {stated}")
        elif (more := _more_money(text, stated, currency, whole_order)) is not None:
            failures.append(f"promises money besides the approved {stated}: {more!r}")
    else:
        promise = _promise(text, stated)
        if promise is not None:
            failures.append(f"promises money although nothing is approved: {promise!r}")
    statements = _statements(text, located, approved_minor, own)
    if approved_minor > 0 and statements > 1:
        # "INR 689 for the biryanis and INR 689 for the delay" reads as twice the money.
        failures.append(f"states the approved amount {statements} times (at most once)")
    if held_items:
        failures.extend(_covers_held(text, held_names, item_names))
    repeat = _repeats_money(text, currency) if approved_minor > 0 else None
    if repeat is not None:
        failures.append(f"repeats the amount without a number: {repeat!r}")
    for start, end, mention in located:
        if mention.currency is not None and mention.currency != own:
            failures.append(f"names an amount in another currency: {mention.text!r}")
        elif mention.minor != approved_minor or _zero_in_digits(mention):
            failures.append(f"names an amount other than the approved {stated}: {mention.text!r}")
        before = _TIMES_BEFORE.search(text, max(0, start - MONEY_BEFORE_WINDOW), start)
        if before or _spreads(text, start, end) or _TIMES_AFTER.match(text, end):
            failures.append(f"multiplies, divides or repeats an amount: {mention.text!r}")
    for word in SUM_WORDS.finditer(text):
        inside = any(start <= word.start() < end for start, end, _ in located)
        if not inside and not NOT_MONEY_UNIT.match(text, word.end()):
            failures.append(f"names a number in words: {word.group(0)!r}")
    for word in currency_word_re(currency).finditer(text):
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
    masked = text
    for start, end, mention in located:
        if mention.currency == own:
            masked = masked[:start] + " " * (end - start) + masked[end:]
    for problem, pattern in OFF_SCRIPT:
        found = pattern.search(masked)
        if found:
            failures.append(f"{problem}: {found.group(0)!r}")
    apologies = len(APOLOGY.findall(text))
    if apologies > 1:
        failures.append(f"apologises {apologies} times (at most once)")
    return tuple(dict.fromkeys(failures))


def _zero_in_digits(mention: MoneyMention) -> bool:
    """Whether ``mention`` is zero written with more than one digit ("000", "00", "0.00", "000
    INR"): not the amount "INR 0" as :func:`~services.settler.amounts.format_amount` states it,
    but the tail of a number written in groups ("2 000", read as a count of 2 and 000), or
    digits the customer may read so. It is another amount, even when nothing is approved."""
    return mention.minor == 0 and sum(c.isdigit() for c in mention.text) > 1


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
        money = _REPEATED_MONEY.search(clause) or currency_word_re(currency).search(clause)
        if repetition and money:
            return clause.strip()
    return None


_MORE = re.compile(
    r"\b(?:the\s+rest|the\s+remainder|the\s+balance|the\s+difference|remaining|additional\w*"
    r"|extra|separate\w*|further|second|in\s+addition|another|on\s+top|besides"
    r"|more\s+(?:money|refunds?|credits?|compensation)"
    r"|the\s+same(?:\s+(?:amount|sum|refund))?(?=\s+(?:again\s+)?(?:(?:will|shall)\s+)?"
    r"(?:follows?|to\s+follow)\b))\b",
    re.IGNORECASE,
)
"""Words that add to what was said ("the rest", "a separate refund", "a further refund", "the
same will follow"; not "the same will be credited to your card", where "the same" is the
refund stated, as replies in Indian English often say)."""
_WE_ALSO = re.compile(
    r"\b(?:we|i)(?:['\u2019](?:ll|ve|d)|\s+(?:have|has|had|will|shall|would|can|could|are|am"
    r"|is|do|did))*\s+also\b|^\W*also\b",
    re.IGNORECASE,
)
"""The writer giving one more thing ("we have also credited your wallet", "we'll also add it to
your wallet", "... and also credited your wallet"); not "the refund will also reach your card",
which tells more of the refund stated."""
_ALSO_BEFORE = re.compile(r"\balso\W*$", re.IGNORECASE)
"""Right before a clause: "also" as a clause of its own ("Also, we have credited your wallet")."""
_WHOLE_ORDER = re.compile(
    r"\b(?:whole|entire)\s+(?:order|bill|purchase|meal|payment)\b", re.IGNORECASE
)
"""What claims the order's whole price ("your whole order will be refunded"): more money,
unless the approved amount is the rest of the order's whole price, and even then when the
clause adds it to the amount (:data:`_ADDED`: "we will also refund your entire order")."""
_ADDED = re.compile(r"\b(?:also|again|too|as\s+well)\b", re.IGNORECASE)
_MORE_AFTER = re.compile(r"\s*(?:as\s+well|too)\b", re.IGNORECASE)
"""What adds right after a clause: "as" ends a clause, so "as well" follows the one it adds to
("we will refund the fee as well")."""
_OTHER_MONEY = re.compile(r"\b(?:fees?|charges?|tips?|tax(?:es)?|surcharges?)\b", re.IGNORECASE)
"""What an order is charged besides its items: a promise to refund it is money besides the
stated amount ("We will refund the delivery fee")."""
_COMING_BESIDES = re.compile(
    rf"\b(?:{_MONEY_NOUN})\s+(?:[\w'\u2019-]+\s+){{0,6}}?(?:follows?|to\s+follow)\b"
    r"|\bthe\s+same(?:\s+(?:amount|sum|refund))?\s+(?:again\s+)?(?:(?:will|shall)\s+)?"
    r"(?:follows?|to\s+follow)\b"
    rf"|\b(?:fees?|charges?|tips?|tax(?:es)?)\s+{_SOME_WORDS}(?:returned|refunded|credited"
    r"|reversed|back)\b",
    re.IGNORECASE,
)
"""Money promised without a refund verb of :data:`STRONG_PROMISES`, read when an amount is
approved only ("a separate refund follows", "your delivery fee will be returned")."""
_NEGATED = re.compile(_NEGATION, re.IGNORECASE)


def _more_money(text: str, stated: str, currency: str, whole_order: bool = False) -> str | None:
    """Where ``text``, which states the approved amount ``stated``, promises money besides it,
    or None. A clause that does not state the amount, holds no negation ("the delivery fee
    cannot be refunded") and promises money (:func:`_strong_promise`, or
    :data:`_COMING_BESIDES`) does so when a word that adds is in it or
    right after it (:data:`_MORE`, :data:`_WE_ALSO`, :data:`_ALSO_BEFORE`, :data:`_MORE_AFTER`:
    "we will refund the delivery fee as well", "a separate refund follows", "we will refund the
    rest later", "we have also credited your wallet"), when it claims the
    whole order and the amount is not its whole price (:data:`_WHOLE_ORDER`, unless
    ``whole_order``), or when it names a
    charge besides the items (:data:`_OTHER_MONEY`: "We will refund the delivery fee."). In a
    sentence that states the amount, only a clause after the amount is read so ("We have
    refunded the overcharge on your delivery fee: INR 49" is the amount's own clause); a line
    break ends the amount's sentence in one of the readings :func:`check_reply` makes. A
    promise with neither is taken as about the stated refund ("It should reach your card
    within a week", "Refunds are usually credited within 5-7 working days", "The refund will be
    credited to your wallet balance")."""
    for sentence in _SENTENCE_END.split(text):
        amount_at = _stated_at(sentence, stated, currency)
        at = 0
        for clause in _clauses(sentence):
            start = sentence.find(clause, at)
            at = start + len(clause)
            if amount_at is not None and start < amount_at[1]:
                continue  # the amount's clause, or one before it that it answers for
            adds = (
                _MORE.search(clause)
                or _WE_ALSO.search(clause)
                or _ALSO_BEFORE.search(sentence, 0, start)
                or (
                    _WHOLE_ORDER.search(clause)
                    if not whole_order or _ADDED.search(clause)
                    else None
                )
                or _MORE_AFTER.match(sentence, at)
                or _OTHER_MONEY.search(clause)
            )
            if adds is None or _NEGATED.search(clause):
                continue  # the cheap tests first: most clauses add nothing
            if _strong_promise(clause) is not None or _COMING_BESIDES.search(clause):
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
    :data:`STRONG_PROMISES` match is a promise unless a negation comes right before it
    (:data:`_NEGATED_BEFORE`); every other :data:`MONEY_TALK` is one unless negated (before, or
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
            claim = _claim(clause, MONEY_TALK, after_review=after_review)
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


def _strong_promise(clause: str) -> re.Match[str] | None:
    """The first :data:`STRONG_PROMISES` match in ``clause`` that no negation governs
    (:data:`_NEGATED_BEFORE`) and the clause does not refuse (:func:`_refused`), or None."""
    for pattern in STRONG_PROMISES:
        for match in pattern.finditer(clause):
            if not _NEGATED_BEFORE.search(clause, 0, match.start()) and not _refused(clause, match):
                return match
    return None


def _claim(
    clause: str, talk: re.Pattern[str], *, after_review: bool = False
) -> re.Match[str] | None:
    """The first wording in ``clause`` that gives money or claims something as paid, or None:
    a :data:`STRONG_PROMISES` match no negation governs (:data:`_NEGATED_BEFORE`) and the
    clause does not refuse (:func:`_refused`), else a ``talk`` match that is not negated
    (before it, or refused after it), not in a clause that mentions a review, not left to a
    review earlier in its sentence (``after_review`` and :data:`_UNSETTLED` before it: "will
    review the Raita and decide on any refund"), and not part of a mention of the earlier
    refund."""
    strong = _strong_promise(clause)
    if strong is not None:
        return strong
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
_SENTENCE_END = re.compile(r"(?<=[.!?;])(?<!\b[0-9]\.)(?<!\b[0-9]{2}\.)\s+")
"""Where a sentence ends: a full stop, a question or exclamation mark or a semicolon before a
space, but not the point of a list's number ("for:\n1. the Biryani\n2. the Raita" is one
sentence). Line breaks are read by :func:`check_reply`."""
_COVERS_ALL = re.compile(
    r"\b(?:every\s?thing|all\s+of\s+(?:it|them|your|the)|all\s+(?:your|the)\b|in\s+full"
    r"|full\s+refund|whole|entire|all\s+(?:items|issues|grievances|claims|problems|complaints?"
    r"|dishes)|(?:every|each)\s+(?:single\s+)?(?:item|issue|dish|part|problem|grievance|claim"
    r"|line|thing))\b",
    re.IGNORECASE,
)
"""What claims everything: "everything", "all your items", "every item", "each dish", "in
full", "the whole order"."""
_COVERS_TALK = re.compile(rf"{MONEY_TALK.pattern}|\b(?:cover\w*|includ\w*)\b", re.IGNORECASE)
"""Wording that says something is paid for: a refund, a credit, "covers", "including"."""


def _covers_held(text: str, held_names: Sequence[str], item_names: Sequence[str] = ()) -> list[str]:
    """Failures for a sentence, anywhere in ``text``, that claims a held item, or everything,
    as refunded or covered ("INR 689 for everything, including the raita", "This covers the
    biryanis and the Raita", "We will refund the Raita as well"): one holding refund, credit or
    covers wording (:data:`_COVERS_TALK`) that :func:`_claim` does not excuse (negated, in a
    clause about a review, or left to a review earlier in the sentence) and a held name or
    :data:`_COVERS_ALL`. A held name only in clauses that send it to review, after every
    claim, is not claimed ("We have refunded INR 689 for the biryanis and the Raita is under
    review"; not "A colleague will review the Raita and we will refund it"). ``text`` is read
    as :func:`check_reply` reads it, and so is each held name (normalised, the digits of an
    item name in ``item_names`` masked), so that "Chicken 65" and a name with a joiner are found.
    """
    failures = []
    names = [
        (name, re.compile(rf"(?<!{LETTER}){re.escape(read)}(?!{LETTER})", re.IGNORECASE))
        for name in held_names
        if (read := masked_names(normalised(name), item_names).strip())
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
