"""One call per key under way at a time (:class:`refund_bench.llm.cache.InFlight`)."""

from __future__ import annotations

import asyncio

import pytest

from refund_bench.llm.cache import InFlight


def test_a_caller_whose_call_is_cancelled_leaves_it_running_for_the_next() -> None:
    """The first caller is cancelled (its handler gave up); the call goes on, and a caller of
    the same key after that joins it instead of calling again."""
    calls: list[str] = []

    async def go() -> tuple[tuple[str, bool], bool]:
        flights = InFlight()
        release = asyncio.Event()

        async def call() -> tuple[str, bool]:
            calls.append("called")
            await release.wait()
            return "answer", False

        first = asyncio.ensure_future(flights.run("k", call))
        await asyncio.sleep(0)  # the first caller's call is under way
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.ensure_future(flights.run("k", call))
        await asyncio.sleep(0)
        release.set()
        result = await second
        assert len(flights) == 0, "a finished call is forgotten"
        return result

    assert asyncio.run(go()) == (("answer", False), True)
    assert calls == ["called"]


def test_a_failed_call_fails_its_joiners_and_the_next_caller_calls_again() -> None:
    calls: list[int] = []

    async def go() -> list[object]:
        flights = InFlight()

        async def call() -> tuple[str, bool]:
            calls.append(len(calls))
            await asyncio.sleep(0)
            if len(calls) == 1:
                raise TimeoutError("the endpoint is away")
            return "answer", False

        outcomes = await asyncio.gather(
            flights.run("k", call), flights.run("k", call), return_exceptions=True
        )
        return [*outcomes, await flights.run("k", call)]

    first, joined, later = asyncio.run(go())
    assert isinstance(first, TimeoutError)
    assert isinstance(joined, TimeoutError)
    assert later == (("answer", False), False)
    assert calls == [0, 1]
