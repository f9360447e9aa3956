"""The LLM answer cache and rate limiter through a Redis failover, on two Redis servers of the
test's own: a primary and its replica.

During a failover the client's pooled connections still lead to the old primary, now a replica,
which answers every write ``READONLY``. That is Redis out of reach for writes, not a fault of
the stage: it is raised as ``TransientError(dependency="redis")`` (the runtime retries the
handler, as for Redis gone), and redis-py drops each connection that answered so; once the
address leads to the new primary, the next write reaches it, with no restart of the stage.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from pydantic import SecretStr
from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from refund_bench import llm_setup
from refund_bench.errors import TransientError
from refund_bench.llm.cache import RedisResponseCache
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.llm_setup import LlmStageSettings
from tests.fakes.tcp_proxy import TcpProxy
from tests.kafka_helpers import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.stack

WAIT_SECONDS = 30.0
"""The longest any condition of these tests is waited for."""


class RedisPair(NamedTuple):
    primary: int
    replica: int
    """The ports of a primary and of its replica, which answers writes ``READONLY``."""


def _answers(port: int, server: subprocess.Popen[bytes]) -> bool:
    if server.poll() is not None:  # it exited (its port taken, say): no use waiting
        raise RuntimeError(f"redis-server on port {port} exited with {server.returncode}")
    try:
        with SyncRedis(port=port, socket_timeout=1) as client:
            return bool(client.ping())
    except (OSError, RedisError):  # not listening yet, or still loading
        return False


def _in_sync(replica: int) -> bool:
    with SyncRedis(port=replica, socket_timeout=1) as client:
        return bool(client.info("replication").get("master_link_status") == "up")


@pytest.fixture
def redis_pair(tmp_path: Path) -> Iterator[RedisPair]:
    """A primary and a replica of it, each a ``redis-server`` of the test's own, stopped after
    the test (the replica keeps the copy it syncs in ``tmp_path``)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (the stack's Redis comes from it)")
    pair = RedisPair(free_port(), free_port())
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"]
    common += ["--dir", str(tmp_path), "--repl-diskless-sync-delay", "0"]
    replica_of = ["--replicaof", "127.0.0.1", str(pair.primary)]
    servers: list[subprocess.Popen[bytes]] = []
    try:
        servers.append(subprocess.Popen([binary, "--port", str(pair.primary), *common]))
        servers.append(
            subprocess.Popen([binary, "--port", str(pair.replica), *replica_of, *common])
        )
        primary, replica = servers
        wait_for(lambda: _answers(pair.primary, primary), WAIT_SECONDS, "the primary to answer")
        wait_for(lambda: _answers(pair.replica, replica), WAIT_SECONDS, "the replica to answer")
        wait_for(lambda: _in_sync(pair.replica), WAIT_SECONDS, "the replica to sync")
        yield pair
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            try:
                server.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def test_writes_a_replica_refuses_in_a_failover_are_transient_until_the_new_primary_takes_them(
    redis_pair: RedisPair,
) -> None:
    async def go() -> None:
        async with TcpProxy("127.0.0.1", redis_pair.replica) as proxy:
            settings = LlmStageSettings(redis_url=SecretStr(f"redis://127.0.0.1:{proxy.port}/0"))
            redis = llm_setup.redis_client(settings)
            cache = RedisResponseCache(redis, "failover:", 600)
            bucket = RedisTokenBucket(redis, "failover-bucket", 100.0, 10)
            try:
                assert await cache.get("answer") is None, "a replica answers reads"
                with pytest.raises(TransientError) as refused:
                    await cache.put_if_absent("answer", "UPHELD")
                assert refused.value.dependency == "redis"
                assert "ReadOnlyError" in str(refused.value)
                with pytest.raises(TransientError):
                    await bucket.acquire()
                # A read on a fresh connection: the pool holds one that leads to the replica.
                assert await cache.get("another answer") is None

                # The failover moves the address to the new primary; the connection made before
                # still leads to the replica, which refuses the write, and is made again.
                proxy.retarget("127.0.0.1", redis_pair.primary)
                assert await cache.put_if_absent("answer", "UPHELD") == "UPHELD"
                await bucket.acquire()
            finally:
                await redis.aclose()

    asyncio.run(go())
    with SyncRedis(port=redis_pair.primary) as client:
        assert client.get("failover:answer") == b"UPHELD"
