"""One round trip for many concurrent callers: requests made in the same event-loop iteration
are sent together.

A judge batch starts every seat of every grievance at once, so the cache lookups, token takes
and cache writes of hundreds of calls happen in the same iteration of the loop. A
:class:`TickBatcher` collects them and runs its ``run_many`` once for all of them (in chunks of
at most ``max_batch``), instead of once per caller. Each caller still gets its own result, or
the exception ``run_many`` raised.

Contract of ``run_many(requests)``: return exactly one result per request, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")


class TickBatcher(Generic[Req, Res]):
    """Coalesces :meth:`submit` calls of one event-loop iteration into ``run_many`` calls."""

    def __init__(
        self, run_many: Callable[[list[Req]], Awaitable[Sequence[Res]]], max_batch: int = 256
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._run_many = run_many
        self._max_batch = max_batch
        self._pending: list[tuple[Req, asyncio.Future[Res]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: Req) -> Res:
        """The result of ``request``, computed together with this iteration's other requests."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Res] = loop.create_future()
        if self._pending and self._pending[0][1].get_loop() is not loop:
            self._abandon()
        if not self._pending:
            # The batch's task takes its first step in the next iteration, when every caller of
            # this one has submitted: the requests go out then, with no hop in between.
            task = loop.create_task(self._flush())
            self._tasks.add(task)  # keep a reference until it is done
            task.add_done_callback(self._tasks.discard)
        self._pending.append((request, future))
        return await future

    def _abandon(self) -> None:
        """Forget the requests, and the batch task, left by a loop that closed before the task
        ran. The task never started: its coroutine is closed so that it is not reported as
        never awaited when collected."""
        self._pending = []
        for task in [t for t in self._tasks if t.get_loop().is_closed()]:
            self._tasks.discard(task)
            task.get_coro().close()

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if len(pending) <= self._max_batch:
            await self._run(pending)  # the usual case, without a task per chunk
            return
        chunks = [
            pending[start : start + self._max_batch]
            for start in range(0, len(pending), self._max_batch)
        ]
        await asyncio.gather(*(self._run(chunk) for chunk in chunks))

    async def _run(self, chunk: list[tuple[Req, asyncio.Future[Res]]]) -> None:
        live = [(request, future) for request, future in chunk if not future.done()]
        if not live:
            return
        try:
            results = await self._run_many([request for request, _ in live])
            if len(results) != len(live):
                raise RuntimeError(f"run_many returned {len(results)} results for {len(live)}")
        except asyncio.CancelledError:
            for _, future in live:
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
            for _, future in live:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(live, results, strict=True):
            if not future.done():
                future.set_result(result)
