"""Telling a request the endpoint keeps failing from an endpoint that is failing.

When the endpoint is down, every request fails: the stage should pause (its transient error
goes up, the runtime retries the record and in the end exits, so the record comes back) and go
on when the endpoint is back. But some requests fail on their own. A prompt may crash the
model server, or its answer may never finish in time. The same pause would then stop that
record's partition for good.

:class:`LoneFailures` tells the two apart. It holds only counts and needs no I/O. A request is
failing alone when both of these hold:

- it failed on :attr:`LoneFailures.calls` calls in a row (each call is the client's whole
  retry schedule), and during each of those calls the endpoint answered some other request;
- at least :attr:`LoneFailures.answered_share` of the other calls that ended since its first
  failing call began were answered. Calls of the request's own group (its dispute: a
  complaint's grievances, a grievance's judge seats) are left out of that share, since what
  fails one of them often fails all.

An outage answers nothing, and an endpoint that fails a tenth of the other calls fails the
share, so in both cases the request's failure goes up as before. A call during which no other
request was answered (an outage, or a stage with nothing else to do) sets the request's count
back to 0.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_CALLS = 3
"""Calls in a row a request must fail, while others are answered, to be failing alone."""
DEFAULT_ANSWERED_SHARE = 0.9
"""The least share of the other groups' calls, ended meanwhile, that must have been answered."""
DEFAULT_MAX_REQUESTS = 1024
"""The most failing requests (and groups) remembered at once; beyond that the oldest are
forgotten."""


class CallMark(NamedTuple):
    """The endpoint's counts when one call began (:meth:`LoneFailures.mark`)."""

    answered: int
    failed: int
    failed_in_group: int


@dataclass
class _Failing:
    calls: int
    since: CallMark


class LoneFailures:
    """One endpoint's answered and failed calls, and the requests it keeps failing.

    A request is named by ``request``: any bytes that are the same for every call of the
    request, and differ between requests (the request's body); only their digest is kept.
    ``group`` names the input it belongs to (its dispute). Use it from one event loop.
    """

    def __init__(
        self,
        calls: int = DEFAULT_CALLS,
        answered_share: float = DEFAULT_ANSWERED_SHARE,
        max_requests: int = DEFAULT_MAX_REQUESTS,
    ) -> None:
        if calls < 1:
            raise ValueError("calls must be at least 1")
        if not 0.0 < answered_share <= 1.0:
            raise ValueError("answered_share must be in (0, 1]")
        if max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        self.calls = calls
        self.answered_share = answered_share
        self._max = max_requests
        self._answered = 0
        self._failed = 0
        self._failing: dict[bytes, _Failing] = {}  # by the request's digest, oldest first
        self._failed_by_group: dict[str, int] = {}  # groups with a failure, oldest first

    def __len__(self) -> int:
        """How many failing requests are remembered."""
        return len(self._failing)

    def mark(self, group: str) -> CallMark:
        """The counts as a call of ``group`` begins; hand them to :meth:`failed` if the call
        fails."""
        return CallMark(self._answered, self._failed, self._failed_by_group.get(group, 0))

    def answered(self, request: bytes) -> None:
        """The endpoint answered a call of ``request`` (any answer, even one that cannot be
        read): it is not failing any more."""
        self._answered += 1
        if self._failing:  # (no digest to take while nothing fails)
            self._failing.pop(_digest(request), None)

    def failed(self, request: bytes, group: str, mark: CallMark) -> str | None:
        """A call of ``request`` (of ``group``) that began at ``mark`` failed for good (its
        retries spent). Returns why the request is failing alone, if it now is (the request
        is then forgotten); ``None`` when its failure is to be raised as the endpoint's."""
        others_meanwhile = self._answered - mark.answered
        self._failed += 1
        in_group = self._failed_by_group.pop(group, 0) + 1
        self._failed_by_group[group] = in_group  # now the newest
        _forget_oldest(self._failed_by_group, self._max)
        name = _digest(request)
        entry = self._failing.pop(name, None)
        if others_meanwhile == 0:
            return None  # nothing else was answered: an outage, or nothing else to ask
        if entry is None:
            entry = _Failing(0, mark)
        entry.calls += 1
        answered = self._answered - entry.since.answered
        # Every failure since the first failing call, less those of the request's own group
        # (its own among them). A group forgotten meanwhile counts its failures as others'.
        failed = (self._failed - entry.since.failed) - max(
            0, in_group - entry.since.failed_in_group
        )
        if entry.calls < self.calls or answered < self.answered_share * (answered + failed):
            self._failing[name] = entry  # now the newest
            _forget_oldest(self._failing, self._max)
            return None
        return (
            f"it failed on {entry.calls} calls in a row, each retried, while the endpoint"
            f" answered {answered} other calls and failed {failed} of other disputes"
        )


def _forget_oldest(remembered: dict[K, V], most: int) -> None:
    while len(remembered) > most:
        del remembered[next(iter(remembered))]


def _digest(request: bytes) -> bytes:
    return hashlib.blake2b(request, digest_size=16).digest()
