"""TickBatcher: one run_many per event-loop iteration, a result (or the error) per caller."""

from __future__ import annotations

import asyncio
import gc

import pytest

from refund_bench.coalesce import TickBatcher


class Doubler:
    """run_many that doubles each request and records the batches it was given."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def __call__(self, requests: list[int]) -> list[int]:
        self.batches.append(list(requests))
        await asyncio.sleep(0)
        return [2 * r for r in requests]


def test_submits_of_one_iteration_share_one_call() -> None:
    doubler = Doubler()

    async def scenario() -> list[int]:
        batcher = TickBatcher(doubler)
        return await asyncio.gather(*(batcher.submit(i) for i in range(50)))

    assert asyncio.run(scenario()) == [2 * i for i in range(50)]
    assert doubler.batches == [list(range(50))]


def test_the_batch_goes_out_in_the_iteration_after_its_submits() -> None:
    doubler = Doubler()

    async def scenario() -> list[list[int]]:
        batcher = TickBatcher(doubler)
        caller = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0)  # the caller submits
        await asyncio.sleep(0)  # the next iteration: the batch is sent
        sent = list(doubler.batches)
        assert await caller == 2
        return sent

    assert asyncio.run(scenario()) == [[1]]


def test_batches_are_cut_at_max_batch() -> None:
    doubler = Doubler()

    async def scenario() -> list[int]:
        batcher = TickBatcher(doubler, max_batch=16)
        return await asyncio.gather(*(batcher.submit(i) for i in range(40)))

    assert asyncio.run(scenario()) == [2 * i for i in range(40)]
    assert [len(b) for b in doubler.batches] == [16, 16, 8]


def test_later_iterations_get_their_own_call() -> None:
    doubler = Doubler()

    async def scenario() -> list[int]:
        batcher = TickBatcher(doubler)
        first = await batcher.submit(1)
        second = await batcher.submit(2)
        return [first, second]

    assert asyncio.run(scenario()) == [2, 4]
    assert doubler.batches == [[1], [2]]


def test_an_error_reaches_every_caller_of_its_batch_and_not_the_next() -> None:
    calls = 0

    async def flaky(requests: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("redis went away")
        return requests

    async def scenario() -> tuple[list[BaseException | int], int]:
        batcher = TickBatcher(flaky)
        failed = await asyncio.gather(
            *(batcher.submit(i) for i in range(3)), return_exceptions=True
        )
        return failed, await batcher.submit(7)

    failed, recovered = asyncio.run(scenario())
    assert all(isinstance(outcome, ConnectionError) for outcome in failed)
    assert recovered == 7


def test_a_result_count_mismatch_is_an_error_not_a_wrong_answer() -> None:
    async def short(requests: list[int]) -> list[int]:
        return requests[:-1]

    async def scenario() -> list[BaseException | int]:
        batcher = TickBatcher(short)
        return await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, RuntimeError) for o in outcomes)


def test_a_cancelled_caller_leaves_the_others_their_results() -> None:
    doubler = Doubler()

    async def scenario() -> tuple[list[int], bool]:
        batcher = TickBatcher(doubler)
        tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(4)]
        await asyncio.sleep(0)  # every task has submitted
        tasks[1].cancel()
        results = [await t for i, t in enumerate(tasks) if i != 1]
        return results, tasks[1].cancelled()

    results, cancelled = asyncio.run(scenario())
    assert results == [0, 4, 6]
    assert cancelled


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        TickBatcher(Doubler(), max_batch=0)


def test_a_new_event_loop_is_served_after_one_closed_with_requests_pending() -> None:
    doubler = Doubler()
    batcher = TickBatcher(doubler)
    dead = asyncio.new_event_loop()
    reported: list[str] = []
    dead.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    dead.run_until_complete(asyncio.sleep(0))
    abandoned = dead.create_task(batcher.submit(1))
    dead.call_soon(dead.stop)
    dead.run_forever()  # the task submitted; the loop stops before its batch runs
    dead.close()
    assert not abandoned.done()

    async def later() -> int:
        return await batcher.submit(5)

    assert asyncio.run(later()) == 10
    del abandoned  # what a closed loop's pending tasks report when they are collected
    gc.collect()
    assert reported == ["Task was destroyed but it is pending!"] * 2, "the caller's and the batch's"
