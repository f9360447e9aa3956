"""A judge panel's seats against two real endpoints and the real Redis: each seat sends its own
key to its own endpoint, and takes its rate-limit tokens from its host's bucket.

Both endpoints are loopback servers on different ports, so they are two hosts to the buckets.
"""

from __future__ import annotations

import asyncio
import uuid

from redis.asyncio import Redis

from refund_bench import llm_setup
from refund_bench.llm.roles import ChatMessage
from tests.fakes.chat_completion import FixedAnswerServer, completion

ANSWER = completion('{"ruling": "ESCALATE"}')
MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Rule on the grievance."}]


def test_each_seat_sends_its_key_to_its_endpoint_and_takes_from_its_hosts_bucket(
    redis_url: str,
) -> None:
    """Seats 0 and 2 on endpoint A (``LLM_BASE_URL``'s host) share the bucket named
    ``LLM_RATE_LIMIT_NAME``; seat 1 on endpoint B takes from B's bucket alone. The refill rate is
    so low that a bucket's balance counts the tokens taken from it: 10 - 2 and 10 - 1."""
    name = f"test-seats-{uuid.uuid4().hex}"

    async def scenario(a: FixedAnswerServer, b: FixedAnswerServer) -> dict[str, float]:
        url_a, url_b = (f"http://127.0.0.1:{server.port}/v1" for server in (a, b))
        settings = llm_setup.JudgePanelSettings.model_validate(
            {
                "llm_base_url": url_a,
                "llm_api_key": "shared-key",
                "redis_url": redis_url,
                "llm_rate_limit_name": name,
                "llm_rate_per_second": 0.001,
                "llm_burst": 10,
                "judge_count": 3,
                "judge_base_urls": f"{url_a},{url_b},{url_a}",
                "judge_api_keys": "key-0,key-1,key-2",
            }
        )
        redis = Redis.from_url(redis_url)
        try:
            for seat in range(3):
                async with llm_setup.client(
                    settings,
                    model=settings.seat_model(seat),
                    temperature=settings.judge_temperature,
                    redis=redis,
                    access=settings.seat_access(seat),
                ) as llm:
                    schema = {"type": "object"}
                    await llm.complete_json(MESSAGES, "ruling", schema, seat, f"d-seat-{seat}")
            keys = [key async for key in redis.scan_iter(match=f"refund-bench:ratelimit:{name}*")]
            tokens = {key.decode(): float(await redis.hget(key, "tokens") or "nan") for key in keys}
            if keys:
                await redis.delete(*keys)
            return tokens
        finally:
            await redis.aclose()

    with FixedAnswerServer(ANSWER) as a, FixedAnswerServer(ANSWER) as b:
        tokens = asyncio.run(scenario(a, b))
    assert a.credentials == ["Bearer key-0", "Bearer key-2"]
    assert b.credentials == ["Bearer key-1"], "endpoint B gets its own key, never another's"
    shared, of_b = (
        f"refund-bench:ratelimit:{name}",
        f"refund-bench:ratelimit:{name}:127.0.0.1:{b.port}",
    )
    assert set(tokens) == {shared, of_b}
    assert 8 <= tokens[shared] < 8.1
    assert 9 <= tokens[of_b] < 9.1
