"""Amounts in minor units, as people read them: the one way the project writes money.

A currency's minor unit is the unit of its Stripe ``amount``, since the payout sends the ledger's
amount to Stripe as it is. Most currencies have two decimals; Stripe's zero-decimal currencies
(JPY, KRW, ...) none, so 50000 minor units of JPY are JPY 50000; BHD, JOD, KWD, OMR and TND
three. ISK and UGX have no decimals in use, but Stripe takes their amounts with two, and so are
they written here.
"""

from __future__ import annotations

ZERO_DECIMAL_CURRENCIES = frozenset(
    {
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "JPY",
        "KMF",
        "KRW",
        "MGA",
        "PYG",
        "RWF",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    }
)
"""The currencies whose Stripe amount is in whole units."""
THREE_DECIMAL_CURRENCIES = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})
"""The currencies whose Stripe amount is in thousandths."""


def decimals(currency: str) -> int:
    """How many decimals one major unit of ``currency`` (any case) has in minor units."""
    code = currency.upper()
    if code in ZERO_DECIMAL_CURRENCIES:
        return 0
    return 3 if code in THREE_DECIMAL_CURRENCIES else 2


PAYABLE_STEPS = {"ISK": 100, "UGX": 100, **dict.fromkeys(THREE_DECIMAL_CURRENCIES, 10)}
"""Currencies Stripe takes amounts of only in multiples of more than one minor unit: ISK and
UGX in whole units (written with two decimals), the three-decimal currencies in hundredths
(the last digit 0), for charges and refunds alike."""


def payable_step(currency: str) -> int:
    """The minor units Stripe takes amounts of ``currency`` (any case) in multiples of: 1 for
    most, 10 for BHD, JOD, KWD, OMR and TND, 100 for ISK and UGX (:data:`PAYABLE_STEPS`)."""
    return PAYABLE_STEPS.get(currency.upper(), 1)


def payable_part(amount: int, currency: str) -> int:
    """``amount`` (>= 0) rounded down to a multiple of :func:`payable_step`: the part of it
    Stripe refunds in ``currency``."""
    step = payable_step(currency)
    return amount // step * step


def format_minor(amount: int, currency: str) -> str:
    """``currency`` and ``amount`` in major units, decimals only when they are not all zero:
    ``68900, "INR"`` -> ``"INR 689"``, ``68950`` -> ``"INR 689.50"``, ``50000, "JPY"`` ->
    ``"JPY 50000"``, ``1250, "KWD"`` -> ``"KWD 1.250"``, ``-500, "INR"`` -> ``"INR -5"``.
    Integer arithmetic only."""
    sign = "-" if amount < 0 else ""
    places = decimals(currency)
    major, minor = divmod(abs(amount), 10**places)
    fraction = f".{minor:0{places}d}" if minor else ""
    return f"{currency} {sign}{major}{fraction}"
