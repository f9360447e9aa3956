"""The HTTP layer under the openai client: each request it builds goes to one aiohttp session.

The openai client builds a complete request itself: the absolute URL, every header merged, the
body as bytes, the timeout. It then hands that request to its ``http_client``. httpx2's own
client would merge, re-parse and re-route the request again through its auth, redirect and
transport layers, and the aiohttp transport the openai package ships converts it once more.
:class:`AioHttpClient` is the ``http_client`` the LLM stages pass instead:

- ``build_request`` builds the request exactly as given, with its URL parsed once per distinct
  URL (a role calls one URL);
- ``send`` hands it to one ``aiohttp`` session (no cookie jar, nothing decompressed twice) and
  reads the whole answer.

Everything above it stays the openai client's: how the request is built, status errors, retries
(switched off, see :mod:`refund_bench.llm.client`) and timeouts. aiohttp's failures are mapped to
httpx2's exception types, which the openai client turns into ``APITimeoutError`` and
``APIConnectionError`` as usual. Together this costs about a fifth less CPU per call than the
shipped transport (``bench/llm_client.py``).

Not supported, because no stage uses them: streamed request bodies, proxies, redirects (an
LLM endpoint answers where it is asked) and client certificates.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import aiohttp
import httpx2
import yarl

from refund_bench.urls import without_credentials


@functools.lru_cache(maxsize=256)
def _urls(url: str) -> tuple[httpx2.URL, yarl.URL]:
    """The request URL for httpx2 and for aiohttp, parsed once per distinct URL string."""
    parsed = httpx2.URL(url)
    return parsed, yarl.URL(str(parsed), encoded=True)


@functools.lru_cache(maxsize=64)
def _aiohttp_timeout(
    connect: float | None, read: float | None, pool: float | None, total: float | None
) -> aiohttp.ClientTimeout:
    # The openai client's one timeout applies to each phase, as with httpx: connecting, waiting
    # for a pooled connection, and each read of the answer. ``total`` bounds the whole request,
    # so that an answer trickling in a byte per read timeout cannot hold a call for ever.
    return aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=read, connect=pool)


def _told(exc: BaseException) -> str:
    """What an aiohttp failure says, fit to log: its type and message, with every URL in the
    message without user name, password and query (aiohttp quotes the request URL, e.g.
    "Connection timeout to host <url>")."""
    message = without_credentials(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    """Raise aiohttp's failures as the httpx2 exceptions the openai client classifies. The
    aiohttp exception is not chained: its message may quote the URL with its credentials, and
    a traceback would print it; its type and cleaned message are in the new one's message."""
    try:
        yield
    except TimeoutError as exc:
        # aiohttp's ServerTimeoutError, SocketTimeoutError and ConnectionTimeoutError are all
        # TimeoutErrors; the openai client raises APITimeoutError for any httpx2 timeout.
        raise httpx2.ReadTimeout(_told(exc)) from None
    except aiohttp.ClientConnectorError as exc:
        raise httpx2.ConnectError(_told(exc)) from None
    except aiohttp.ClientPayloadError as exc:
        raise httpx2.ReadError(_told(exc)) from None
    except aiohttp.ClientError as exc:
        raise httpx2.NetworkError(_told(exc)) from None


class AioHttpClient(httpx2.AsyncClient):
    """An ``http_client`` for ``openai.AsyncOpenAI`` that sends through one aiohttp session.

    ``max_connections`` caps the pool; every connection is kept alive for
    ``keepalive_seconds``. ``total_seconds`` bounds each request from start to the answer's
    last byte (``None``: only the openai client's per-phase timeouts). The session is opened
    on first use, on the caller's event loop, and closed by :meth:`aclose` (the openai
    client's ``close`` calls it).
    """

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_seconds: float = 15.0,
        total_seconds: float | None = None,
    ) -> None:
        super().__init__(follow_redirects=False)
        self._max_connections = max_connections
        self._total_seconds = total_seconds
        self._keepalive_seconds = keepalive_seconds
        self._session: aiohttp.ClientSession | None = None

    def build_request(  # type: ignore[override]
        self,
        method: str,
        url: httpx2.URL | str,
        *,
        content: bytes | None = None,
        headers: Any = None,
        timeout: Any = None,
        params: Any = None,
        files: Any = None,
        extensions: Mapping[str, Any] | None = None,
        **unsupported: Any,
    ) -> httpx2.Request:
        """The request as the openai client built it: an absolute URL, final headers and the
        body as bytes. Query parameters and file uploads are refused (no role sends them)."""
        if params or files or any(value is not None for value in unsupported.values()):
            raise NotImplementedError("AioHttpClient sends JSON bodies only")
        target, target_for_aiohttp = _urls(str(url))
        limits = httpx2.Timeout(timeout) if timeout is not None else self.timeout
        return httpx2.Request(
            method,
            target,
            headers=headers,
            # As a stream, so that httpx2 adds no headers of its own: aiohttp writes Host and
            # Content-Length.
            stream=httpx2.ByteStream(content or b""),
            extensions={
                **(extensions or {}),
                "timeout": limits.as_dict(),
                "aiohttp_url": target_for_aiohttp,
            },
        )

    async def send(
        self, request: httpx2.Request, *, stream: bool = False, **_ignored: Any
    ) -> httpx2.Response:
        """Send ``request`` and read the whole answer (also when ``stream`` is asked for)."""
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        phases = request.extensions["timeout"]
        body = b"".join(request.stream)  # type: ignore[arg-type]
        started = time.perf_counter()
        with _as_httpx_errors():
            async with session.request(
                request.method,
                request.extensions["aiohttp_url"],
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,
                timeout=_aiohttp_timeout(
                    phases["connect"], phases["read"], phases["pool"], self._total_seconds
                ),
            ) as answer:
                raw = await answer.read()
        # The body as it came: httpx2 decodes a compressed answer itself, as it reads it here.
        response = httpx2.Response(
            answer.status, headers=answer.raw_headers, content=raw, request=request
        )
        response.elapsed = timedelta(seconds=time.perf_counter() - started)
        return response

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=self._keepalive_seconds
        )
        return aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().aclose()
