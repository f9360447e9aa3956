"""The desk's signed session cookie: what a replica accepts as a session."""

from __future__ import annotations

from services.api.sessions import CLOCK_SKEW_S, SessionSigner


def test_a_cookie_signed_by_a_replica_whose_clock_is_ahead_is_still_a_session() -> None:
    """Each answer re-signs the cookie with the answering replica's clock: the next request may
    reach a replica a little behind it, or one whose clock stepped back. Within
    ``CLOCK_SKEW_S`` that is the same session; far beyond it, a cookie stamped in the future
    is refused, as an expired one is."""
    signer = SessionSigner(b"s" * 48, max_age_s=3600)
    cookie = signer.dumps({"user": "alice"}, now=1_000_000.9)
    assert signer.loads(cookie, now=1_000_000.5) == {"user": "alice"}
    assert signer.loads(cookie, now=1_000_000 - CLOCK_SKEW_S) == {"user": "alice"}
    assert signer.loads(cookie, now=1_000_000 - CLOCK_SKEW_S - 1) is None
    assert signer.loads(cookie, now=1_000_000 + 3600) == {"user": "alice"}
    assert signer.loads(cookie, now=1_000_000 + 3601) is None
