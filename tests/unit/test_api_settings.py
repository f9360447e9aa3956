"""The API's secrets are refused at start when they are too weak to guard what they guard."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.settings import MIN_API_TOKEN_CHARS, MIN_SESSION_SECRET_CHARS, ApiSettings

SECRET = "s" * MIN_SESSION_SECRET_CHARS
STRONG = "t" * MIN_API_TOKEN_CHARS


def test_a_short_bearer_token_is_refused_without_quoting_it() -> None:
    weak = "hunter2"
    with pytest.raises(ValidationError, match="1 of the tokens are shorter") as refused:
        ApiSettings(session_secret=SECRET, api_tokens=f"{STRONG}, {weak}")
    assert weak not in str(refused.value)


def test_strong_tokens_and_none_at_all_are_accepted() -> None:
    """No token: every API call is answered 401; the desk still works."""
    other = "u" * (MIN_API_TOKEN_CHARS + 11)
    tokens = ApiSettings(session_secret=SECRET, api_tokens=f" {STRONG},{other},").bearer_tokens()
    assert tokens == (STRONG.encode(), other.encode())
    assert ApiSettings(session_secret=SECRET).bearer_tokens() == ()


def test_a_short_session_secret_is_refused() -> None:
    with pytest.raises(ValidationError, match="SESSION_SECRET must be set"):
        ApiSettings(session_secret="s" * (MIN_SESSION_SECRET_CHARS - 1))
