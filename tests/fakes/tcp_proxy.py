"""A TCP pass-through on loopback, in the test's event loop, that can cut its clients off.

Put in front of Redis, it is Redis going away for a while (a restart, a failover) and coming
back: :meth:`TcpProxy.cut` closes every connection through it and closes each new one at once,
until :meth:`TcpProxy.restore`. :class:`ThreadedTcpProxy` is the same for a synchronous test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self


class TcpProxy:
    """Forwards connections to ``host:port``; use as ``async with`` (then :attr:`port`)."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._serving: set[asyncio.Task[None]] = set()
        self._cut = False
        self.refused = 0
        """Connections closed at once while cut off."""

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        self._close_all()
        await asyncio.gather(*self._serving, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> None:
        """Close every connection through the proxy, and each new one, until :meth:`restore`."""
        self._cut = True
        self._close_all()

    def restore(self) -> None:
        """Forward new connections again."""
        self._cut = False

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to ``host:port``; the open ones keep theirs, as a client's
        connections to a Redis primary do when a failover moves its address to another."""
        self._upstream = (host, port)

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        if self._cut:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy until either side closes, then close the other: a cut breaks both."""
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class ThreadedTcpProxy:
    """A :class:`TcpProxy` on an event loop of its own, in a thread: for a server under test
    that runs in another thread (the API), from a synchronous test. Use as ``with``."""

    def __init__(self, host: str, port: int) -> None:
        self._proxy = TcpProxy(host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._proxy.port

    def __enter__(self) -> Self:
        self._thread.start()
        self._call(self._proxy.__aenter__())
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._call(self._proxy.__aexit__(kind, exc, tb))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def cut(self) -> None:
        """:meth:`TcpProxy.cut`, done when this returns."""
        self._call(self._run(self._proxy.cut))

    def restore(self) -> None:
        """:meth:`TcpProxy.restore`, done when this returns."""
        self._call(self._run(self._proxy.restore))

    @staticmethod
    async def _run(action: Callable[[], None]) -> None:
        action()

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)
