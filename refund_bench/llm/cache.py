"""The LLM response cache: what makes a replayed call free and its answer stable.

A Kafka transaction cannot include an LLM call, so a stage that crashes after calling the model
but before committing will call again on redelivery. The cache stores the first answer under a
key of everything the answer depends on (for a judge: dispute, grievance, seat, model, snapshot
hash, prompt version), so the replay reuses it instead of drawing a new ruling and paying twice.

``put_if_absent`` is first-writer-wins: when two replicas race on one key (a rebalance can hand
a batch to a second instance while the first is still working), both end up using the single
stored answer.

Redis out of reach (a restart, a failover, a closed connection) is a
:class:`~refund_bench.errors.TransientError` with ``dependency="redis"``: the handler is retried
and its batch is not committed meanwhile. An answer drawn but not yet stored when that happened
is kept in the process (:class:`InFlight`) and stored by the retry, not drawn and paid for again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol
from urllib.parse import quote

from redis.asyncio import Redis

from refund_bench.coalesce import TickBatcher
from refund_bench.errors import TransientError
from refund_bench.llm.client import LlmFailedAlone, LlmRejected, failed_alone
from refund_bench.llm.redis_errors import redis_unreachable_is_transient
from refund_bench.storable import storable

CallOutcome = Literal["made", "cached", "refused", "failed_alone", "unreadable"]
"""What one model call of a handler came to: answered by the model, served from the cache,
refused by the endpoint for what the request carried, or failed by the endpoint on every call
while it answered others (:class:`~refund_bench.llm.client.LlmFailedAlone`); counted in
``llm_calls`` by ``kind``. ``made`` counts every answer the model wrote, stored or thrown away
(the handlers count the latter: a judge's draw it draws again for, a settler's reply cut short);
``unreadable`` counts those among them the handlers could not read (cut short, withheld, empty,
not the document asked for): a judge's seat drawing three such counts three of each."""
OnCall = Callable[[CallOutcome], None]


def uncounted(_outcome: CallOutcome) -> None:
    """The ``on_call`` of a handler given none: counts nothing."""


log = logging.getLogger(__name__)


class ResponseCache(Protocol):
    """A first-writer-wins string store."""

    async def get(self, key: str) -> str | None:
        """The stored value, or ``None`` when there is none (never stored, or expired).
        :class:`~refund_bench.errors.TransientError` when the store is out of reach."""
        ...

    async def put_if_absent(self, key: str, value: str) -> str:
        """Store ``value`` unless ``key`` holds one already; return the value that is stored.

        The return value is the one every caller must use: it differs from ``value`` when
        another writer got there first. :class:`~refund_bench.errors.TransientError` when the
        store is out of reach: ``value`` may or may not be stored then, and storing it again is
        safe (the answer is the stored value either way).
        """
        ...


_PUT_SCRIPT = """
-- KEYS: cache keys; ARGV: their values, then the TTL in seconds. Per key, SET NX EX; the answer
-- per key is 1 when our value is now stored, else the value an earlier writer stored (read in the
-- same script, so it cannot expire in between).
local ttl = ARGV[#ARGV]
local answers = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[i], 'NX', 'EX', ttl) then
    answers[i] = 1
  else
    answers[i] = redis.call('GET', key)
  end
end
return answers
"""


class RedisResponseCache:
    """:class:`ResponseCache` on Redis: ``SET key value NX EX ttl``, else ``GET`` (one script).

    ``prefix`` namespaces the keys (e.g. ``"refund-bench:llm:"``). The TTL should outlive the
    longest possible redelivery (consumer lag plus retention of the input topic).

    Concurrent calls are coalesced (:class:`refund_bench.coalesce.TickBatcher`): the lookups of
    one event-loop iteration are one ``MGET``, its writes one script call. Either one failing
    for Redis out of reach is ``TransientError(dependency="redis")`` to each of its callers.
    """

    def __init__(self, redis: Redis, prefix: str, ttl_seconds: int) -> None:
        if ttl_seconds < 1:
            raise ValueError("ttl_seconds must be >= 1")
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl_seconds
        self._gets: TickBatcher[str, str | None] = TickBatcher(self._get_many)
        self._puts: TickBatcher[tuple[str, str], str | None] = TickBatcher(self._put_many)
        self._put_script = redis.register_script(_PUT_SCRIPT)

    @staticmethod
    def _text(value: bytes | str | None) -> str | None:
        return value.decode("utf-8") if isinstance(value, bytes) else value

    async def get(self, key: str) -> str | None:
        return await self._gets.submit(self._prefix + key)

    async def put_if_absent(self, key: str, value: str) -> str:
        # A stored value is read in the script that failed to set ours, so it cannot have
        # expired in between: ``None`` here means a store that does not run the script as asked.
        stored = await self._puts.submit((self._prefix + key, value))
        if stored is None:
            raise RuntimeError(f"cache key {key!r}: the store answered no value")
        return stored

    async def _get_many(self, keys: list[str]) -> list[str | None]:
        with redis_unreachable_is_transient(f"LLM cache lookup of {len(keys)} keys"):
            values: list[bytes | str | None] = await self._redis.mget(keys)
        return [self._text(value) for value in values]

    async def _put_many(self, entries: list[tuple[str, str]]) -> list[str | None]:
        """Per entry: its own value if its SET NX won, else the stored one."""
        with redis_unreachable_is_transient(f"LLM cache write of {len(entries)} answers"):
            answers: list[int | bytes | None] = await self._put_script(
                keys=[key for key, _ in entries],
                args=[*(value.encode("utf-8") for _, value in entries), self._ttl],
            )
        return [
            value if isinstance(answer, int) else self._text(answer)
            for (_, value), answer in zip(entries, answers, strict=True)
        ]


_REFUSAL_FIELD = "refused_by_endpoint"
"""The one field of the record cached in an answer's place when the endpoint refused the
request for its content."""
_ANSWER_PREFIX = "answer:\n"
"""Before a cached answer that would otherwise read as a refusal record (or that begins with
this prefix itself): an endpoint that does not hold the model to the schema may answer with
anything, that record too, and its answer must stay an answer on every delivery."""
REFUSAL_REASON_CHARS = 1_000
"""How much of the endpoint's reason a refusal keeps (it reaches events and the review desk)."""
_READ_REASON_CHARS = REFUSAL_REASON_CHARS + 100
"""A reason read back is cut only beyond what :func:`refusal_value` writes (the limit and its
note): so it reads the same on every delivery; longer ones were cached before reasons were cut."""


class RefusedBefore(Exception):  # noqa: N818 - an outcome, not a fault
    """The endpoint refused this request for its content, or failed it alone, now or on an
    earlier delivery (the refusal is cached in the answer's place); ``str()`` is the reason,
    made :func:`~refund_bench.storable.storable` (at most :data:`REFUSAL_REASON_CHARS`)."""


def _refusal(value: str) -> str | None:
    """The endpoint's reason if ``value`` is a cached refusal record, else ``None``."""
    if _REFUSAL_FIELD not in value:
        return None
    try:
        document = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if isinstance(document, dict) and list(document) == [_REFUSAL_FIELD]:
        reason = document[_REFUSAL_FIELD]
        return storable(reason, _READ_REASON_CHARS) if isinstance(reason, str) else None
    return None


def cache_value(answer: str) -> str:
    """What the cache holds for ``answer``: the answer itself, unless :func:`cached_answer`
    could take it for a refusal or strip a prefix from it."""
    if answer.startswith(_ANSWER_PREFIX) or _refusal(answer) is not None:
        return _ANSWER_PREFIX + answer
    return answer


def refusal_value(reason: str) -> str:
    """What the cache holds in an answer's place for a request the endpoint refused."""
    return json.dumps({_REFUSAL_FIELD: storable(reason, REFUSAL_REASON_CHARS)})


def cached_answer(value: str) -> str:
    """The answer a cached value holds (``cached_answer(cache_value(a)) == a``); raises
    :class:`RefusedBefore` for a cached refusal."""
    if value.startswith(_ANSWER_PREFIX):
        return value[len(_ANSWER_PREFIX) :]
    reason = _refusal(value)
    if reason is not None:
        raise RefusedBefore(reason)
    return value


MAKER_SUFFIX = ":made-by"
"""Appended to a cache key: the key of the model and prompt version that wrote its answer
(:func:`maker_value`). Kept apart from the answer, so that the answer's value is the same for
every version of the code reading it (a rolling update, a rollback)."""


class Maker(NamedTuple):
    """Who wrote a cached answer: the model and prompt version asked for, and what the
    endpoint's response said served it (``None`` when it named nothing; see
    :class:`~refund_bench.llm.client.LlmAnswer`)."""

    model: str
    prompt_version: str
    served_model: str | None = None
    system_fingerprint: str | None = None


@dataclass(frozen=True)
class MadeAnswer:
    """An answer, and who wrote it; ``maker`` is ``None`` when that is not known (an answer
    cached by an earlier release, or read before its writer recorded it)."""

    answer: str
    maker: Maker | None = None


def maker_value(maker: Maker, answer: str) -> str:
    """What the cache holds under an answer's key plus :data:`MAKER_SUFFIX`:
    ``read_maker(maker_value(m, a), a) == m``. It names the answer it was written for
    (by its sha256), so that a record that outlived its answer, which was then drawn again by
    another model or prompt, is not read as the new answer's maker."""
    value: dict[str, str] = {
        "model": maker.model,
        "prompt_version": maker.prompt_version,
        "answer_sha256": sha256_hex(answer),
    }
    if maker.served_model is not None:
        value["served_model"] = maker.served_model
    if maker.system_fingerprint is not None:
        value["system_fingerprint"] = maker.system_fingerprint
    return json.dumps(value, ensure_ascii=True)


def read_maker(value: str | None, answer: str) -> Maker | None:
    """The :class:`Maker` a :func:`maker_value` holds for ``answer``; ``None`` for no value,
    any other value, or one written for another answer. A record of an earlier release, which
    names no answer, is read as ``answer``'s; one that names no served model (an earlier
    release's, or the endpoint named none) reads as ``None`` there, as does one of another type."""
    if value is None:
        return None
    try:
        maker = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(maker, dict):
        return None
    model, version = maker.get("model"), maker.get("prompt_version")
    if not isinstance(model, str) or not isinstance(version, str):
        return None
    written_for = maker.get("answer_sha256")
    if written_for is not None and written_for != sha256_hex(answer):
        return None
    served, fingerprint = maker.get("served_model"), maker.get("system_fingerprint")
    return Maker(
        model,
        version,
        served if isinstance(served, str) else None,
        fingerprint if isinstance(fingerprint, str) else None,
    )


async def made_by(
    cache: ResponseCache, key: str, answer: str, mine: Maker | None = None
) -> Maker | None:
    """Who wrote ``answer``, the answer :func:`cached_call` returned for ``key``: ``mine``,
    recorded beside it under ``key`` plus :data:`MAKER_SUFFIX`, when this call drew and stored
    it (first writer winning), else the record there. ``None`` when there is none for this
    answer (one cached by an earlier release, or read before its drawer recorded it) or the
    cache is out of reach: the record only accounts for the answer, which is stored, so it is
    no reason to fail the handler (logged)."""
    maker_key = key + MAKER_SUFFIX
    try:
        if mine is None:
            stored = await cache.get(maker_key)
        else:
            stored = await cache.put_if_absent(maker_key, maker_value(mine, answer))
    except TransientError as exc:
        log.warning("the record of who drew a cached answer was not kept or read: %s", exc)
        return None
    return read_maker(stored, answer)


UNWRITTEN_LIMIT = 1_000
"""The most drawn answers an :class:`InFlight` keeps whose write to the cache failed, unless
it is given more room (a judge of many seats or records in flight)."""


class InFlight:
    """The cached calls under way in one process, by cache key.

    A caller of a key whose call is already under way waits for that call's answer instead of
    drawing, and paying, again: a handler retried while its earlier attempt's calls still run
    (one seat failed, the others had not finished), or one record delivered twice in a batch.
    A call keeps running when its caller is cancelled, so its answer is cached and a later
    caller of the key can still join it.

    An answer drawn whose write to the cache failed (Redis out of reach) is kept too, until a
    later call of its key stores it instead of drawing again: the handler's retry pays nothing
    more. Nothing was published with it (the failed write failed its handler, and so its
    batch), so a record that comes back in another process and is drawn anew stays consistent.
    At most ``unwritten_limit`` are kept; beyond that the oldest are forgotten (and drawn,
    and paid, again): a process keeps room for every call its handlers in flight can make.
    """

    def __init__(self, unwritten_limit: int = UNWRITTEN_LIMIT) -> None:
        if unwritten_limit < 1:
            raise ValueError("unwritten_limit must be >= 1")
        self._calls: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        self._unwritten: dict[str, str] = {}
        self._unwritten_limit = unwritten_limit

    def __len__(self) -> int:
        return len(self._calls)

    def unwritten(self, key: str) -> str | None:
        """The value drawn for ``key`` whose write failed, if one is kept."""
        return self._unwritten.get(key)

    def keep_unwritten(self, key: str, value: str) -> None:
        """Keep ``value``, drawn for ``key``, until :meth:`written` (oldest dropped at the
        limit)."""
        self._unwritten.pop(key, None)
        self._unwritten[key] = value
        while len(self._unwritten) > self._unwritten_limit:
            del self._unwritten[next(iter(self._unwritten))]

    def written(self, key: str) -> None:
        """``key``'s answer is in the cache: forget a value kept for it."""
        self._unwritten.pop(key, None)

    async def run(
        self, key: str, call: Callable[[], Awaitable[tuple[str, bool]]]
    ) -> tuple[tuple[str, bool], bool]:
        """``(call's result, joined)``: ``joined`` when another caller's call for ``key`` was
        under way and its result (or its error) is the one returned."""
        running = self._calls.get(key)
        if running is not None:
            return await asyncio.shield(running), True
        task = asyncio.ensure_future(call())
        self._calls[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(task), False

    def _finished(self, key: str, task: asyncio.Task[tuple[str, bool]]) -> None:
        if self._calls.get(key) is task:
            del self._calls[key]
        if not task.cancelled():
            task.exception()  # retrieved: a call no caller waited for any more fails quietly


async def cached_call(
    cache: ResponseCache,
    key: str,
    compute: Callable[[], Awaitable[str]],
    on_call: OnCall | None = None,
    *,
    keep_refusals: bool = False,
    in_flight: InFlight | None = None,
) -> tuple[str, bool]:
    """``(answer, from_cache)``: the cached answer, or ``compute()``'s, stored first-writer-wins.

    ``from_cache`` is True when the answer returned was stored by an earlier or a concurrent
    call (then a freshly computed answer, if any, was discarded), or computed by a call for
    ``key`` already under way in ``in_flight``. Raise inside ``compute`` (e.g. parse the answer
    there) to keep a bad answer out of the cache. ``on_call`` is told how the call ended: made
    (an answer drawn, stored or not), cached (none drawn), refused (an :class:`LlmRejected` for
    the input) or failed alone (an :class:`LlmFailedAlone`).

    A refusal for the input, or a request failed alone, is raised on like every other error,
    unless ``keep_refusals``: then it is cached in the answer's place, so that every delivery
    of the request ends the same way, and raised as :class:`RefusedBefore` (now and on every
    later call for ``key``; :func:`~refund_bench.llm.client.failed_alone` tells the two apart
    by the reason).

    The cache out of reach is the cache's :class:`~refund_bench.errors.TransientError`, raised
    on: the caller must not use an answer that is not stored. With ``in_flight``, an answer
    computed whose write failed is kept there, and the next call for ``key`` stores it instead
    of computing again; so is a kept refusal (``keep_refusals``).
    """
    if in_flight is None:
        return await _cached_call(cache, key, compute, on_call, keep_refusals, None)
    (answer, from_cache), joined = await in_flight.run(
        key, lambda: _cached_call(cache, key, compute, on_call, keep_refusals, in_flight)
    )
    if joined:
        if on_call is not None:
            on_call("cached")
        return answer, True
    return answer, from_cache


async def _cached_call(
    cache: ResponseCache,
    key: str,
    compute: Callable[[], Awaitable[str]],
    on_call: OnCall | None,
    keep_refusals: bool,
    in_flight: InFlight | None,
) -> tuple[str, bool]:
    hit = await cache.get(key)
    outcome: CallOutcome = "made"
    if hit is None:
        # An answer an earlier attempt drew but could not store: stored now, not drawn again.
        value = in_flight.unwritten(key) if in_flight is not None else None
        if value is not None:
            outcome = _outcome_of(value) if keep_refusals else "made"
        else:
            try:
                fresh = await compute()
            except (LlmRejected, LlmFailedAlone) as exc:
                if isinstance(exc, LlmRejected) and not exc.refused_input:
                    raise
                outcome = "refused" if isinstance(exc, LlmRejected) else "failed_alone"
                if not keep_refusals:
                    if on_call is not None:
                        on_call(outcome)
                    raise
                # Stored in the answer's place, and read back below as every later delivery
                # reads it: RefusedBefore, with the same reason (or the answer a concurrent
                # call stored first). Kept like an answer if the write fails: a request failed
                # alone is not asked again, its counts are gone.
                value = refusal_value(str(exc))
            else:
                value = cache_value(fresh) if keep_refusals else fresh
        try:
            hit = await cache.put_if_absent(key, value)
        except TransientError:
            if in_flight is not None:
                in_flight.keep_unwritten(key, value)
            raise
        from_cache = hit != value
    else:
        from_cache = True
        outcome = "cached"
    if in_flight is not None:
        in_flight.written(key)
    if on_call is not None:
        # What this call drew is counted, even when a concurrent call's answer was stored
        # first and is the one returned: the model was paid for it.
        on_call(outcome)
    return (cached_answer(hit) if keep_refusals else hit), from_cache


def _outcome_of(value: str) -> CallOutcome:
    """What the call that drew ``value`` (a value to cache with refusals kept) came to."""
    reason = _refusal(value)
    if reason is None:
        return "made"
    return "failed_alone" if failed_alone(reason) else "refused"


def sha256_hex(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of ``text`` (e.g. for ``complaint_sha256``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")
"""Characters percent-encoding leaves as they are: a part made of them only is its own encoding."""


def _key(kind: str, *parts: str | int) -> str:
    # Percent-encode every part so that a ':' inside an id cannot make two keys collide. Ids,
    # hashes and seat numbers are usually unreserved characters only: those skip the encoder.
    encoded = [kind]
    for part in parts:
        text = str(part)
        encoded.append(text if _UNRESERVED.fullmatch(text) else quote(text, safe=""))
    return ":".join(encoded)


def judge_cache_key(
    dispute_id: str,
    grievance_id: str,
    seat: int,
    model: str,
    snapshot_sha256: str,
    prompt_version: str,
    inputs_sha256: str,
) -> str:
    """Key of one judge seat's ruling on one grievance by one model against one snapshot and
    prompt. The model is part of it because the ruling names its model: after a seat's model
    changes, a redelivered grievance is judged by the new model, not labelled with it.
    ``inputs_sha256`` (:meth:`~refund_bench.llm.roles.LlmRequest.inputs_sha256`) is what the
    judges read, the grievance's claim included: a grievance id is a position in its complaint,
    and a complaint extracted again (its extraction gone from the cache) may put another claim
    there, which must be judged, not given the rulings of the claim the id named before."""
    return _key(
        "judge",
        dispute_id,
        grievance_id,
        seat,
        model,
        snapshot_sha256,
        prompt_version,
        inputs_sha256,
    )


def extractor_cache_key(dispute_id: str, complaint_sha256: str, snapshot_sha256: str) -> str:
    """Key of the extraction of one complaint text against one snapshot.

    No model and no prompt version in it, unlike a judge's: a complaint delivered again must get
    the outcome already published for it (its grievances, or its hold for review), whichever
    model and prompt are configured now. Extracted again after a prompt change, a complaint
    held for review could come out with grievances, and a round 1 that pays."""
    return _key("extractor", dispute_id, complaint_sha256, snapshot_sha256)


def settler_cache_key(dispute_id: str, round: int, inputs_sha256: str, prompt_version: str) -> str:
    """Key of the reply of one settlement round (a review decision starts a new round).

    No model in it: a round delivered again gets the reply already written for it."""
    return _key("settler", dispute_id, round, inputs_sha256, prompt_version)
