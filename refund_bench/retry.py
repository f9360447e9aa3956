"""Retry policy shared by every stage: exponential backoff (1, 2, 4, 8 s) plus jitter.

Only :class:`TransientError` (and what a caller maps onto it) is retried. The sleep function is
injectable so tests never wait on a real clock. The first try is a plain call: tenacity's retry
state is built only once it has failed, since nearly every call succeeds at once and the judge
makes hundreds per second.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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

    ``attempts`` counts the first try: 5 attempts wait 1, 2, 4 and 8 seconds between them.
    """

    attempts: int = 5
    base_seconds: float = 1.0
    max_seconds: float = 8.0
    jitter_seconds: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based)."""
        backoff = min(self.max_seconds, self.base_seconds * 2.0 ** (retry_number - 1))
        return float(backoff + self.rng.uniform(0, self.jitter_seconds))

    def _after_first_try(
        self, retry_on: tuple[type[BaseException], ...], on_retry: OnRetry | None
    ) -> dict[str, Any]:
        """tenacity's arguments once the first try has failed: its attempt n is our n + 1."""
        options: dict[str, Any] = {
            "stop": tenacity.stop_after_attempt(self.attempts - 1),
            "wait": lambda state: self.delay(state.attempt_number + 1),
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
        sleep(self.delay(1))
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
        await sleep(self.delay(1))
        retrying = tenacity.AsyncRetrying(sleep=sleep, **self._after_first_try(retry_on, on_retry))

        async def attempt() -> T:
            # tenacity awaits only coroutine *functions*; a lambda returning an awaitable
            # would come back un-awaited.
            return await fn()

        return await retrying(attempt)


def _tell(on_retry: OnRetry, state: tenacity.RetryCallState) -> None:
    failed = state.outcome.exception() if state.outcome is not None else None
    if failed is not None:
        on_retry(failed)


def retry_kind(exc: BaseException) -> str:
    """The ``kind`` label under which a retry of ``exc`` is counted."""
    return exc.dependency if isinstance(exc, TransientError) else type(exc).__name__
