"""Telling a request the endpoint keeps failing from an endpoint that is failing.

When the endpoint is down, every request fails: the stage should pause (its transient error
goes up, the runtime retries the record and in the end exits, so the record comes back) and go
on when the endpoint is back. But some requests fail on their own. The model server may answer
500 for one prompt, or its answer may never finish in time. The same pause would then stop that
record's partition for good.

:class:`LoneFailures` tells the two apart. It holds only counts and needs no I/O. Each failing
call is watched from its first failed attempt on (its *window*): what the endpoint did before
that says nothing about this failure. Only other disputes' calls are evidence, either way:
what fails one of a complaint's grievances often fails all, and an answer to one says little
about the others. A request is failing alone when all of these hold:

- it failed on :attr:`LoneFailures.calls` calls in a row (each call is the client's whole
  retry schedule), and in the window of the first of them the endpoint answered another
  dispute's call (a failed call before any such answer does not count);
- at least :attr:`LoneFailures.answered_share` of the other disputes' calls that ended since
  then were answered.

A call in whose window other disputes' calls failed and none was answered is an outage's: it
sets the request's count back to 0. A call in whose window no other call ended (a stage that
has stopped fetching while its oldest batch waits) counts: the endpoint said nothing either
way. So an outage, which answers nothing and fails the other calls too, does not make a
request fail alone, nor does an endpoint that fails more than a tenth of the other calls: the
request's failure goes up as before. (One case slips through: a call whose first attempt
failed just as an outage began, while another dispute's call was still answered, in a stage
with nothing else to ask since. Then that one dispute's requests go to a person.) A stage with
nothing else to ask at all waits for other work before it gives up on a request.
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
    """The endpoint's counts, and its group's, when a call's first attempt failed
    (:meth:`LoneFailures.mark`)."""

    answered: int
    failed: int
    group_answered: int
    group_failed: int


@dataclass
class _Group:
    """The calls of one group (dispute) answered and failed, since its first failed attempt."""

    answered: int = 0
    failed: int = 0


@dataclass
class _Failing:
    calls: int
    since: CallMark


class LoneFailures:
    """One endpoint's answered and failed calls, and the requests it keeps failing.

    A request is named by ``request``: any bytes that are the same for every call of the
    request, and differ between requests (the request's body), with ``group``, the input it
    belongs to (its dispute); only their digest is kept. Use it from one event loop.
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
        self._groups: dict[str, _Group] = {}  # groups with a failed attempt, oldest first

    def __len__(self) -> int:
        """How many failing requests are remembered."""
        return len(self._failing)

    def mark(self, group: str) -> CallMark:
        """The counts as a call of ``group`` fails its first attempt; hand them to
        :meth:`failed` if the call fails for good. From now on the group's own calls are told
        apart from the others'."""
        counts = self._group(group)
        return CallMark(self._answered, self._failed, counts.answered, counts.failed)

    def answered(self, request: bytes, group: str) -> None:
        """The endpoint answered a call of ``request`` (of ``group``; any answer, even one
        that cannot be read): it is not failing any more."""
        self._answered += 1
        if self._groups:  # (nothing to look up while nothing failed)
            counts = self._groups.get(group)
            if counts is not None:
                counts.answered += 1
        if self._failing:  # (no digest to take while nothing fails)
            self._failing.pop(_digest(request, group), None)

    def failed(self, request: bytes, group: str, mark: CallMark) -> str | None:
        """A call of ``request`` (of ``group``) whose first attempt failed at ``mark`` failed
        for good (its retries spent). Returns why the request is failing alone, if it now is
        (the request is then forgotten); ``None`` when its failure is to be raised as the
        endpoint's."""
        counts = self._group(group)
        answered_meanwhile, failed_meanwhile = self._others_since(mark, counts)
        outage = answered_meanwhile == 0 and failed_meanwhile > 0
        self._failed += 1
        counts.failed += 1
        name = _digest(request, group)
        entry = self._failing.pop(name, None)
        if outage:
            return None  # other disputes' calls failed meanwhile, and none was answered
        if entry is None:
            entry = _Failing(0, mark)
        answered, failed = self._others_since(entry.since, counts)
        if answered == 0:
            return None  # nothing else answered yet: no sign that the endpoint is up
        entry.calls += 1
        if entry.calls < self.calls or answered < self.answered_share * (answered + failed):
            self._failing[name] = entry  # now the newest
            _forget_oldest(self._failing, self._max)
            return None
        return (
            f"it failed on {entry.calls} calls in a row, each retried, while the endpoint"
            f" answered {answered} calls of other disputes and failed {failed}"
        )

    def _group(self, group: str) -> _Group:
        """``group``'s counts (new ones if it has none), now the newest."""
        counts = self._groups.pop(group, None) or _Group()
        self._groups[group] = counts
        _forget_oldest(self._groups, self._max)
        return counts

    def _others_since(self, since: CallMark, counts: _Group) -> tuple[int, int]:
        """Other groups' calls answered and failed since ``since``: all calls, less the
        group's own (``counts``). A group forgotten meanwhile counts its own as others'."""
        answered = (self._answered - since.answered) - max(
            0, counts.answered - since.group_answered
        )
        failed = (self._failed - since.failed) - max(0, counts.failed - since.group_failed)
        return answered, failed


def _forget_oldest(remembered: dict[K, V], most: int) -> None:
    while len(remembered) > most:
        del remembered[next(iter(remembered))]


def _digest(request: bytes, group: str) -> bytes:
    """The request's name: two disputes asking the same (one complaint sent twice) are two."""
    digest = hashlib.blake2b(request, digest_size=16)
    digest.update(group.encode("utf-8", "surrogatepass"))
    return digest.digest()
