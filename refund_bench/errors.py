"""Error types that carry policy. The runtime branches on the type, never on the message.

- :class:`InvalidInput`: this record can never be processed; it goes to the stage's DLQ with the
  reason and processing continues. Not retried.
- :class:`TransientError`: a dependency is briefly unavailable (rate limit, 5xx, timeout);
  retried with backoff and jitter, then treated as a crash.
- anything else: a bug or an outage; the open transaction is aborted and the process exits so
  that Kafka redelivers the batch to a fresh instance.
"""

from __future__ import annotations


class RefundBenchError(Exception):
    """Base of the project's errors."""


class InvalidInput(RefundBenchError):  # noqa: N818 - the policy name reads better than *Error
    """The record is malformed or refers to something that does not exist. Goes to the DLQ."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientError(RefundBenchError):
    """A retryable failure of a dependency (429, 5xx, timeout, connection reset).

    ``dependency`` names what failed (``stripe``, ``schema_registry``, ``llm_rate_limited``,
    ...): the retries are counted by it (``refund_bench_retries_total{kind}``), never by
    anything in the message. ``retry_after_seconds`` is how long the dependency asked to be
    left alone (its ``Retry-After``), if it said: :class:`refund_bench.retry.RetryPolicy`
    waits at least that long, up to its cap, before the next try."""

    def __init__(
        self,
        message: str = "",
        *,
        dependency: str = "other",
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.dependency = dependency
        self.retry_after_seconds = retry_after_seconds


class DlqLimitExceeded(RefundBenchError):  # noqa: N818
    """Too much of the recent input went to the DLQ: stop instead of draining the topic."""


class Fenced(RefundBenchError):  # noqa: N818
    """Another instance with the same transactional id took over; this one must stop."""


class UndeclaredOutput(RefundBenchError):  # noqa: N818
    """A stage emitted to a topic it did not declare: a bug in the stage; it must stop."""


REASON_LIMIT = 300
"""The most characters of a library's error message a reason quotes."""


def error_summary(exc: BaseException) -> str:
    """What went wrong, for a dead letter's reason or a log line: never the data itself.

    A text-coding error names the codec, the problem and the position (its repr would quote the
    whole text, a complaint's customer words among it); any other error gives its type and the
    start of its message (a schema error's message can be thousands of characters long).
    """
    if isinstance(exc, UnicodeError) and hasattr(exc, "reason") and hasattr(exc, "start"):
        encoding = getattr(exc, "encoding", "?")
        return f"{type(exc).__name__}: {encoding} {exc.reason} at position {exc.start}"
    message = str(exc)
    if len(message) > REASON_LIMIT:
        message = message[:REASON_LIMIT] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
