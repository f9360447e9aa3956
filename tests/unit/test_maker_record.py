"""The record of who drew a cached answer, kept beside it: written by the call that drew and
stored the answer, read back for the answer it names only, and never a reason to fail a
handler."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from refund_bench.llm.cache import Maker, RedisResponseCache, made_by
from tests.unit.test_redis_unreachable import FlakyRedis

MAKER = Maker("extractor-model", "extractor/v3", "extractor-model-2026-11-01", "fp_1")


def test_a_record_kept_reads_back_for_its_answer() -> None:
    cache = RedisResponseCache(FlakyRedis().client(), "p:", 60)

    async def go() -> tuple[Maker | None, Maker | None]:
        return await made_by(cache, "k", "answer", MAKER), await made_by(cache, "k", "answer")

    assert asyncio.run(go()) == (MAKER, MAKER)


def test_the_first_record_stays_and_names_its_own_answer_only() -> None:
    cache = RedisResponseCache(FlakyRedis().client(), "p:", 60)
    other = MAKER._replace(served_model="another")

    async def go() -> tuple[Maker | None, Maker | None]:
        await made_by(cache, "k", "answer", MAKER)
        return await made_by(cache, "k", "another answer", other), await made_by(
            cache, "k", "answer"
        )

    for_the_other, for_the_first = asyncio.run(go())
    assert for_the_other is None, "a record written for another answer names nothing"
    assert for_the_first == MAKER


def test_a_record_redis_cannot_take_or_give_is_none_not_a_failure() -> None:
    down = RedisConnectionError("Connection refused")
    cache = RedisResponseCache(FlakyRedis([down, down]).client(), "p:", 60)

    async def go() -> tuple[Maker | None, Maker | None]:
        return await made_by(cache, "k", "answer", MAKER), await made_by(cache, "k", "answer")

    assert asyncio.run(go()) == (None, None)


def test_no_record_is_none() -> None:
    cache = RedisResponseCache(FlakyRedis().client(), "p:", 60)
    assert asyncio.run(made_by(cache, "k", "answer")) is None
