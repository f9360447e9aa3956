"""Retry policy shared by every stage: exponential backoff (1, 2, 4, 8 s) plus jitter.

Only :class:`TransientError` (and what a caller maps onto it) is retried. A failure that says
how long to wait (:attr:`TransientError.retry_after_seconds`, an HTTP ``Retry-After``) is
waited for at least that long, up to a cap, and the jitter still comes on top. The sleep function is
injectable so tests never wait on a real clock. The first try is a plain call: tenacity's retry
state is built only once it has failed, since nearly every call succeeds at once and the judge
makes hundreds per second.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import tenacity

from refund_bench.errors import TransientError

T = TypeVar("T")

SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[BaseException], None]
"""Told of each failure that is retried, before the wait (e.g. to count it)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff schedule: ``base * 2**n`` seconds for attempt n (capped), plus up to ``jitter`` s.

    ``attempts`` counts the first try: 5 attempts wait 1, 2, 4 and 8 seconds between them. A
    failure that asks for a longer wait (``retry_after_seconds``) gets it instead, up to
    ``max_retry_after_seconds``, plus the jitter: replicas told the same wait do not all come
    back at once.
    """

    attempts: int = 5
    base_seconds: float = 1.0
    max_seconds: float = 8.0
    jitter_seconds: float = 0.5
    max_retry_after_seconds: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, retry_number: int, failed: BaseException | None = None) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based), after ``failed``."""
        backoff = min(self.max_seconds, self.base_seconds * 2.0 ** (retry_number - 1))
        asked = failed.retry_after_seconds if isinstance(failed, TransientError) else None
        if asked is not None:
            backoff = max(backoff, min(asked, self.max_retry_after_seconds))
        return float(backoff + self.rng.uniform(0, self.jitter_seconds))

    def _after_first_try(
        self, retry_on: tuple[type[BaseException], ...], on_retry: OnRetry | None
    ) -> dict[str, Any]:
        """tenacity's arguments once the first try has failed: its attempt n is our n + 1."""
        options: dict[str, Any] = {
            "stop": tenacity.stop_after_attempt(self.attempts - 1),
            "wait": lambda state: self.delay(state.attempt_number + 1, _failure(state)),
            "retry": tenacity.retry_if_exception_type(retry_on),
            "reraise": True,
        }
        if on_retry is not None:
            options["before_sleep"] = lambda state: _tell(on_retry, state)
        return options

    def run(
        self,
        fn: Callable[[], T],
        *,
        sleep: SyncSleep = time.sleep,
        retry_on: tuple[type[BaseException], ...] = (TransientError,),
        on_retry: OnRetry | None = None,
    ) -> T:
        """Call ``fn`` until it returns, retrying ``retry_on`` errors; re-raise the last one.
        ``on_retry`` is told of each failure that is retried."""
        try:
            return fn()  # the common case, without building a retry state machine
        except retry_on as exc:
            if self.attempts < 2:
                raise
            if on_retry is not None:
                on_retry(exc)
            failed = exc
        sleep(self.delay(1, failed))
        return tenacity.Retrying(sleep=sleep, **self._after_first_try(retry_on, on_retry))(fn)

    async def run_async(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        sleep: AsyncSleep = asyncio.sleep,
        retry_on: tuple[type[BaseException], ...] = (TransientError,),
        on_retry: OnRetry | None = None,
    ) -> T:
        """Async twin of :meth:`run`."""
        try:
            return await fn()
        except retry_on as exc:
            if self.attempts < 2:
                raise
            if on_retry is not None:
                on_retry(exc)
            failed = exc
        await sleep(self.delay(1, failed))
        retrying = tenacity.AsyncRetrying(sleep=sleep, **self._after_first_try(retry_on, on_retry))

        async def attempt() -> T:
            # tenacity awaits only coroutine *functions*; a lambda returning an awaitable
            # would come back un-awaited.
            return await fn()

        return await retrying(attempt)


def _failure(state: tenacity.RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


def _tell(on_retry: OnRetry, state: tenacity.RetryCallState) -> None:
    failed = _failure(state)
    if failed is not None:
        on_retry(failed)


_DELAY_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """The wait an HTTP ``Retry-After`` header's ``value`` asks for, in seconds from ``now``
    (a Unix time): a number of seconds, or an HTTP-date (0 when it has passed). ``None`` when
    there is no header or it reads as neither."""
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        seconds = float(text)
        return seconds if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def retry_kind(exc: BaseException) -> str:
    """The ``kind`` label under which a retry of ``exc`` is counted."""
    return exc.dependency if isinstance(exc, TransientError) else type(exc).__name__
