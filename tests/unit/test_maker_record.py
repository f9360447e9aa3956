"""The record of who drew a cached answer, kept beside it: written best effort where the answer
is drawn, read back for the answer it names only, and never a reason to fail a handler."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from refund_bench.llm.cache import Maker, RedisResponseCache, keep_maker, maker_of
from tests.unit.test_redis_unreachable import FlakyRedis

MAKER = Maker("extractor-model", "extractor/v3", "extractor-model-2026-11-01", "fp_1")


def test_a_record_kept_reads_back_from_what_was_kept_and_from_the_cache() -> None:
    redis = FlakyRedis()
    cache = RedisResponseCache(redis.client(), "p:", 60)

    async def go() -> tuple[Maker | None, Maker | None, int]:
        recorded = await keep_maker(cache, "k", "answer", MAKER)
        trips = redis.round_trips
        mine = await maker_of(cache, "k", "answer", recorded)
        assert redis.round_trips == trips, "what this call kept is read without a lookup"
        return mine, await maker_of(cache, "k", "answer"), redis.round_trips - trips

    mine, looked_up, lookups = asyncio.run(go())
    assert mine == looked_up == MAKER
    assert lookups == 1


def test_the_first_record_stays_and_names_its_own_answer_only() -> None:
    cache = RedisResponseCache(FlakyRedis().client(), "p:", 60)
    other = MAKER._replace(served_model="another")

    async def go() -> tuple[Maker | None, Maker | None]:
        await keep_maker(cache, "k", "answer", MAKER)
        recorded = await keep_maker(cache, "k", "another answer", other)
        return await maker_of(cache, "k", "another answer", recorded), await maker_of(
            cache, "k", "answer"
        )

    for_the_other, for_the_first = asyncio.run(go())
    assert for_the_other is None, "a record written for another answer names nothing"
    assert for_the_first == MAKER


def test_a_record_redis_cannot_take_or_give_is_none_not_a_failure() -> None:
    down = RedisConnectionError("Connection refused")
    cache = RedisResponseCache(FlakyRedis([down, down]).client(), "p:", 60)

    async def go() -> tuple[str | None, Maker | None]:
        recorded = await keep_maker(cache, "k", "answer", MAKER)
        return recorded, await maker_of(cache, "k", "answer", recorded)

    assert asyncio.run(go()) == (None, None)


def test_no_record_is_none() -> None:
    cache = RedisResponseCache(FlakyRedis().client(), "p:", 60)
    assert asyncio.run(maker_of(cache, "k", "answer")) is None
