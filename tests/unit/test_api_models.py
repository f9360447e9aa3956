"""The intake's complaint body: what text it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.models import ComplaintRequest


def _request(text: str) -> ComplaintRequest:
    return ComplaintRequest(order_id="order-1840", customer_id="cust-77", text=text)


@pytest.mark.parametrize(
    "text",
    [
        "Two biryanis were missing.",
        "Line one\nline two,\tand a tab.\r\n",
        "Family order \U0001f468\u200d\U0001f469\u200d\U0001f467 arrived cold",  # ZWJ emoji
        "हैदराबादी बिरयानी missing",  # Devanagari
    ],
)
def test_ordinary_text_is_accepted(text: str) -> None:
    assert _request(text).text == text


@pytest.mark.parametrize(
    "text",
    [
        "nul \x00",
        "escape \x1b[31m",
        "delete \x7f",
        "c1 \x85 control",
        "refund \u202e0001",
        "isolate \u2066x\u2069",
        "   ",
        "\u200b\u200d\ufeff",
    ],
)
def test_control_characters_overrides_and_invisible_text_are_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        _request(text)
