"""Signed-cookie sessions for the review desk, and CSRF tokens for its forms (stdlib HMAC).

The session is a small JSON object in a cookie, signed with HMAC-SHA256 under
``SESSION_SECRET`` and stamped with the time it was signed; a cookie with a bad signature,
older than ``max_age_s`` or stamped more than :data:`CLOCK_SKEW_S` ahead is ignored. The cookie
is scoped to ``/review`` (``Path``, HttpOnly, SameSite=Lax, Secure when configured), so the JSON
API never receives it and cannot be driven by a reviewer's browser session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DESK_PREFIX = "/review"
CSRF_KEY = "csrf"
SESSION_ID_KEY = "sid"
"""The session's random id: what signing out revokes (see ``SessionMiddleware``)."""
CREDENTIAL_KEY = "cred"
"""The reviewer's :meth:`~services.api.passwords.ReviewerDirectory.credential_mark` at sign-in:
a session ends when its reviewer's password hash changes."""
CLOCK_SKEW_S = 120
"""How far ahead of this replica's clock a cookie's stamp may be: another replica whose clock is
ahead signed it, or this one's clock stepped back. Beyond it the cookie is ignored."""

RevocationCheck = Callable[[str], Awaitable[bool]]
"""True when the session with this id was signed out."""


def new_session_id() -> str:
    return secrets.token_urlsafe(18)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    """``payload.timestamp.mac``: signs and verifies session payloads."""

    def __init__(self, secret: bytes, max_age_s: int) -> None:
        self._key = hashlib.sha256(b"refund-bench session v1\x00" + secret).digest()
        self.max_age_s = max_age_s

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def dumps(self, data: MutableMapping[str, Any], now: float) -> str:
        payload = _b64(json.dumps(dict(data), separators=(",", ":")).encode())
        body = f"{payload}.{int(now)}"
        return f"{body}.{self._mac(body)}"

    def loads(self, token: str, now: float) -> dict[str, Any] | None:
        """The session in ``token``, or ``None`` if it is forged, malformed or expired."""
        try:
            payload, stamp, mac = token.split(".")
            # As bytes: compare_digest refuses str with characters beyond ASCII (a cookie may
            # carry any), and a refusal must mean "no session", not an error.
            if not hmac.compare_digest(mac.encode(), self._mac(f"{payload}.{stamp}").encode()):
                return None
            if not -CLOCK_SKEW_S <= now - int(stamp) <= self.max_age_s:
                return None
            data = json.loads(_unb64(payload))
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def _cookie(header: str, name: str) -> str | None:
    """The value of the cookie ``name`` in a ``Cookie`` header, or ``None``.

    Parsed pair by pair, as browsers send it (Starlette's ``cookie_parser``: split on ``;``,
    then on the first ``=``): another cookie of the host whose value holds a space, a quote, a
    backslash or a character beyond ASCII is read as it comes and never makes this one lost
    (``http.cookies.SimpleCookie`` drops the whole header for it).
    """
    return cookie_parser(header).get(name)


UnavailableAnswer = Callable[[Scope, Receive, Send, BaseException], Awaitable[None]]
"""Answers a request whose session could not be checked, given what the check raised."""


class SessionMiddleware:
    """Loads ``scope["session"]`` for desk paths and writes it back on the response.

    Like Starlette's own session middleware (which needs ``itsdangerous``), but stdlib-only
    and restricted to :data:`DESK_PREFIX`. A session whose :data:`SESSION_ID_KEY` the
    ``revoked`` check names (signed out) loads as empty, and its cookie is cleared. When that
    check fails with one of ``unavailable`` (its database out of reach), the request is
    neither served signed in nor signed out: ``when_unavailable`` answers it (a 503 page).
    """

    def __init__(
        self,
        app: ASGIApp,
        signer: SessionSigner,
        *,
        cookie_name: str = "rb_review_session",
        secure: bool = False,
        revoked: RevocationCheck | None = None,
        unavailable: tuple[type[BaseException], ...] = (),
        when_unavailable: UnavailableAnswer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self._signer = signer
        self._cookie = cookie_name
        self._secure = secure
        self._revoked = revoked
        self._unavailable = unavailable
        self._when_unavailable = when_unavailable
        self._clock = clock

    async def _is_revoked(self, session: dict[str, Any]) -> bool:
        session_id = session.get(SESSION_ID_KEY)
        if self._revoked is None or not isinstance(session_id, str):
            return False
        return await self._revoked(session_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (
            path == DESK_PREFIX or path.startswith(DESK_PREFIX + "/")
        ):
            await self.app(scope, receive, send)
            return
        had_session = False
        scope["session"] = {}
        for name, value in scope.get("headers", []):
            if name == b"cookie":
                token = _cookie(value.decode("latin-1"), self._cookie)
                if token is not None:
                    loaded = self._signer.loads(token, self._clock())
                    if loaded is not None:
                        had_session = True
                        try:
                            revoked = await self._is_revoked(loaded)
                        except self._unavailable as exc:
                            if self._when_unavailable is None:
                                raise
                            await self._when_unavailable(scope, receive, send, exc)
                            return
                        if not revoked:
                            scope["session"] = loaded

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                flags = f"Path={DESK_PREFIX}; HttpOnly; SameSite=Lax"
                if self._secure:
                    flags += "; Secure"
                session = scope["session"]
                if session:
                    token = self._signer.dumps(session, self._clock())
                    headers.append(
                        "Set-Cookie",
                        f"{self._cookie}={token}; Max-Age={self._signer.max_age_s}; {flags}",
                    )
                elif had_session:
                    headers.append(
                        "Set-Cookie",
                        f"{self._cookie}=null; Expires=Thu, 01 Jan 1970 00:00:00 GMT; "
                        f"Max-Age=0; {flags}",
                    )
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, created on first use."""
    token = session.get(CSRF_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[CSRF_KEY] = token
    return token


def csrf_ok(session: MutableMapping[str, Any], submitted: str) -> bool:
    """True when ``submitted`` is this session's CSRF token (constant-time)."""
    expected = session.get(CSRF_KEY)
    if not isinstance(expected, str) or not expected or not submitted:
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode())
