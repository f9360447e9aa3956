"""Amounts written for people: one writing for the desk, the demo and the customer's reply."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.money import decimals, format_minor


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (68900, "INR", "INR 689"),
        (68950, "INR", "INR 689.50"),
        (-68905, "INR", "INR -689.05"),
        (0, "USD", "USD 0"),
        (50000, "JPY", "JPY 50000"),
        (50000, "jpy", "jpy 50000"),
        (-7, "KRW", "KRW -7"),
        (1250, "KWD", "KWD 1.250"),
        (1001, "BHD", "BHD 1.001"),
        (50000, "ISK", "ISK 500"),
    ],
)
def test_an_amount_is_written_in_its_currencys_major_units(
    amount: int, currency: str, text: str
) -> None:
    assert format_minor(amount, currency) == text


@given(st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from(["INR", "JPY", "KWD"]))
def test_the_written_amount_reads_back_as_its_minor_units(amount: int, currency: str) -> None:
    code, _, number = format_minor(amount, currency).partition(" ")
    whole, _, fraction = number.lstrip("-").partition(".")
    places = decimals(currency)
    assert code == currency
    assert len(fraction) in (0, places)
    value = int(whole) * 10**places + int(fraction or "0")
    assert (-value if number.startswith("-") else value) == amount
