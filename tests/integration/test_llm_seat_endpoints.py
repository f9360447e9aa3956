"""A judge panel's seats against two real endpoints and the real Redis: each seat sends its own
key to its own endpoint, and takes its rate-limit tokens from its account's bucket (one host,
one key), which refills at that endpoint's rate.

Both endpoints are loopback servers on different ports, so they are two hosts to the buckets.
"""

from __future__ import annotations

import asyncio
import uuid

from pydantic import SecretStr
from redis.asyncio import Redis

from refund_bench import llm_setup
from refund_bench.llm.roles import ChatMessage
from tests.fakes.chat_completion import FixedAnswerServer, completion

ANSWER = completion('{"ruling": "ESCALATE"}')
MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Rule on the grievance."}]


def test_each_seat_sends_its_key_to_its_endpoint_and_takes_from_its_accounts_bucket(
    redis_url: str,
) -> None:
    """Seats 0 and 2 send ``LLM_API_KEY`` to endpoint A (``LLM_BASE_URL``) and share the bucket
    named ``LLM_RATE_LIMIT_NAME``; seat 3 is a second account on A, seat 1 an account on B:
    each takes from a bucket of its own. The refill rates are so low that a bucket's balance
    counts the tokens taken from it: 10 - 2, 10 - 1 and 10 - 1. Redis forgets an idle bucket
    once it would be full again, (burst + one second of credit) / rate, so its expiry shows the
    rate it refills at: seat 1's own, and ``LLM_RATE_PER_SECOND`` for the others."""
    name = f"test-seats-{uuid.uuid4().hex}"

    async def scenario(a: FixedAnswerServer, b: FixedAnswerServer) -> dict[str, tuple[float, int]]:
        url_a, url_b = (f"http://127.0.0.1:{server.port}/v1" for server in (a, b))
        settings = llm_setup.JudgePanelSettings.model_validate(
            {
                "llm_base_url": url_a,
                "llm_api_key": "shared-key",
                "redis_url": redis_url,
                "llm_rate_limit_name": name,
                "llm_rate_per_second": 0.001,
                "llm_burst": 10,
                "judge_count": 4,
                "judge_base_urls": f",{url_b},,{url_a}",
                "judge_api_keys": ",key-1,,key-3",
                "judge_rates_per_second": ",0.002,,",
            }
        )
        redis = Redis.from_url(redis_url)
        try:
            for seat in range(4):
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
            buckets = {
                key.decode(): (
                    float(await redis.hget(key, "tokens") or "nan"),
                    await redis.pttl(key),
                )
                for key in keys
            }
            if keys:
                await redis.delete(*keys)
            return buckets
        finally:
            await redis.aclose()

    with FixedAnswerServer(ANSWER) as a, FixedAnswerServer(ANSWER) as b:
        buckets = asyncio.run(scenario(a, b))
    assert a.credentials == ["Bearer shared-key", "Bearer shared-key", "Bearer key-3"]
    assert b.credentials == ["Bearer key-1"], "endpoint B gets its own key, never another's"
    shared = f"refund-bench:ratelimit:{name}"
    of_b = f"{shared}:127.0.0.1:{b.port}:{llm_setup.account_id(SecretStr('key-1'))}"
    second_on_a = f"{shared}:127.0.0.1:{a.port}:{llm_setup.account_id(SecretStr('key-3'))}"
    assert set(buckets) == {shared, of_b, second_on_a}
    tokens = {bucket: balance for bucket, (balance, _) in buckets.items()}
    assert 8 <= tokens[shared] < 8.1
    assert 9 <= tokens[of_b] < 9.1
    assert 9 <= tokens[second_on_a] < 9.1
    forgotten_after = {bucket: ttl for bucket, (_, ttl) in buckets.items()}
    at_shared_rate = (10 + 0.001) / 0.001 * 1000 + 1000  # ms, as RedisTokenBucket sets it
    at_own_rate = (10 + 0.002) / 0.002 * 1000 + 1000
    assert at_shared_rate - 60_000 < forgotten_after[shared] <= at_shared_rate + 1
    assert at_shared_rate - 60_000 < forgotten_after[second_on_a] <= at_shared_rate + 1
    assert at_own_rate - 60_000 < forgotten_after[of_b] <= at_own_rate + 1
