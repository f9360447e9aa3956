"""The API's secrets are refused at start when they are too weak to guard what they guard."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.settings import (
    MIN_API_TOKEN_CHARS,
    MIN_SESSION_SECRET_CHARS,
    TOKEN_SCOPES,
    ApiSettings,
    ApiToken,
    unscoped_with_colon,
)

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
    assert [t.secret for t in tokens] == [STRONG.encode(), other.encode()]
    assert all(t.scopes == frozenset(TOKEN_SCOPES) for t in tokens)
    assert ApiSettings(session_secret=SECRET).bearer_tokens() == ()


def test_a_token_given_a_scope_opens_that_scope_only() -> None:
    """An upstream service that only submits complaints gets a ``complaints:`` token, which
    cannot read the disputes' stories (their customers' words among them); an analyst's
    ``disputes:`` token cannot submit."""
    other = "u" * MIN_API_TOKEN_CHARS
    tokens = ApiSettings(
        session_secret=SECRET, api_tokens=f"complaints:{STRONG}, disputes:{other}"
    ).bearer_tokens()
    assert [(t.secret, t.scopes) for t in tokens] == [
        (STRONG.encode(), frozenset({"complaints"})),
        (other.encode(), frozenset({"disputes"})),
    ]
    assert STRONG not in repr(tokens)


@pytest.mark.parametrize("entry", [f"complaint:{STRONG}", f"ab:{STRONG}", f":{STRONG}"])
def test_a_token_with_a_colon_naming_no_scope_stays_a_bare_token(entry: str) -> None:
    """As every token was before scopes: one holding a ``:`` keeps working after an upgrade.
    A misspelt scope makes a token no client sends; the API warns of such entries at start."""
    (token,) = ApiSettings(session_secret=SECRET, api_tokens=entry).bearer_tokens()
    assert token == ApiToken(entry.encode(), frozenset(TOKEN_SCOPES))
    assert unscoped_with_colon((token,)) == 1


def test_a_space_after_the_scope_is_not_part_of_the_token() -> None:
    (token,) = ApiSettings(session_secret=SECRET, api_tokens=f"disputes: {STRONG}").bearer_tokens()
    assert token == ApiToken(STRONG.encode(), frozenset({"disputes"}))
    assert unscoped_with_colon((token,)) == 0


def test_a_scoped_token_too_short_is_refused() -> None:
    with pytest.raises(ValidationError, match="1 of the tokens are shorter"):
        ApiSettings(session_secret=SECRET, api_tokens=f"disputes:{STRONG[:-1]}")


def test_a_short_session_secret_is_refused() -> None:
    with pytest.raises(ValidationError, match="SESSION_SECRET must be set"):
        ApiSettings(session_secret="s" * (MIN_SESSION_SECRET_CHARS - 1))
