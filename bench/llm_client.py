"""CPU per LLM call: the project's adapter against the plain ``openai`` calls, side by side.

A judge replica is limited by the CPU its client spends per call, not by the LLM's latency.
This measures, in one process and one run, alternating A, B, C, A, B, C, the CPU time per
judge-sized structured-output call against the LLM stand-in:

- ``chat.completions.create`` on the client's default HTTP transport (what the openai
  documentation shows first);
- the client's generic POST, with the body already encoded as JSON and the answer read from the
  raw body, on the aiohttp transport the openai package ships (what ``LlmClient`` did before
  it had its own ``http_client``);
- :class:`refund_bench.llm.client.LlmClient`: the same request through
  :class:`refund_bench.llm.http.AioHttpClient`, by the client's generic ``request`` method with
  prebuilt options, and with the request parts that never change kept.

CPU time is the process's own (``getrusage``), so the stand-in's work is not counted.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import httpx2
import openai
import orjson
import uvloop
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import SecretStr

from bench import cli, side_by_side
from refund_bench.domain import Category
from refund_bench.llm import roles
from refund_bench.llm.client import _OMIT, DISPUTE_HEADER, LlmClient, LlmEndpoint, _answer
from refund_bench.llm.roles import LlmRequest
from refund_bench.samples import ARTICLE_ORDER
from services.extractor.evidence import freeze, judges_view

CONNECTIONS = 128


def _judge_request() -> LlmRequest:
    """The article's raita grievance as one judge seat sees it."""
    grievance = roles.GrievanceForJudge(
        grievance_id="g3",
        category=Category.PACKAGING,
        text="The raita container leaked inside the delivery bag.",
        item_name="Raita",
        item_quantity=1,
    )
    prompt = roles.load_prompt(roles.JUDGE_PROMPT_VERSION)
    evidence = judges_view(freeze(ARTICLE_ORDER).data)
    return roles.build_judge_request(grievance, evidence, prompt=prompt)


async def _measure(call: Callable[[int], Awaitable[str]], calls: int) -> float:
    """CPU milliseconds per call, ``calls`` calls with CONNECTIONS in flight (after a warm-up)."""
    limit = asyncio.Semaphore(CONNECTIONS)

    async def one(seed: int) -> None:
        async with limit:
            await call(seed)

    await asyncio.gather(*(one(i) for i in range(200)))
    before = side_by_side.cpu_seconds()
    await asyncio.gather(*(one(i) for i in range(calls)))
    return 1000 * (side_by_side.cpu_seconds() - before) / calls


def _openai(base_url: str, transport: type[httpx2.AsyncClient]) -> openai.AsyncOpenAI:
    """A plain openai client on one of the package's own HTTP transports, CONNECTIONS pooled."""
    limits = httpx2.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    return openai.AsyncOpenAI(
        base_url=base_url, api_key="bench", max_retries=0, http_client=transport(limits=limits)
    )


def _plain_create(
    base_url: str, request: LlmRequest
) -> tuple[openai.AsyncOpenAI, Callable[[int], Awaitable[str]]]:
    client = _openai(base_url, openai.DefaultAsyncHttpxClient)

    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    response_format: ResponseFormatJSONSchema = {
        "type": "json_schema",
        "json_schema": {
            "name": request.schema_name,
            "strict": True,
            "schema": dict(request.schema),
        },
    }

    async def call(seed: int) -> str:
        completion = await client.chat.completions.create(
            model="standin-judge",
            messages=messages,
            temperature=0.7,
            seed=seed,
            response_format=response_format,
        )
        return completion.choices[0].message.content or ""

    return client, call


def _adapter(
    base_url: str, request: LlmRequest
) -> tuple[LlmClient, Callable[[int], Awaitable[str]]]:
    client = LlmClient(
        LlmEndpoint(
            base_url=base_url,
            api_key=SecretStr("bench"),
            model="standin-judge",
            temperature=0.7,
            timeout_seconds=30,
        ),
        max_connections=CONNECTIONS,
    )

    async def call(seed: int) -> str:
        answer = await client.complete_json(
            request.messages, request.schema_name, request.schema, seed, "bench-dispute"
        )
        return answer.text

    return client, call


def _shipped_transport(
    base_url: str, request: LlmRequest
) -> tuple[openai.AsyncOpenAI, Callable[[int], Awaitable[str]]]:
    client = _openai(base_url, openai.DefaultAioHttpClient)

    async def call(seed: int) -> str:
        body = {
            "model": "standin-judge",
            "messages": list(request.messages),
            "temperature": 0.7,
            "seed": seed,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "strict": True,
                    "schema": dict(request.schema),
                },
            },
        }
        raw = await client.post(
            "/chat/completions",
            content=orjson.dumps(body),
            cast_to=bytes,
            options={"headers": {**_OMIT, DISPUTE_HEADER: "bench-dispute"}},
        )
        return _answer(raw).text

    return client, call


async def _compare(base_url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    request = _judge_request()
    plain_client, plain = _plain_create(base_url, request)
    shipped_client, shipped = _shipped_transport(base_url, request)
    adapter_client, adapter = _adapter(base_url, request)
    variants: dict[str, Callable[[int], Awaitable[str]]] = {
        "openai create, default transport": plain,
        "generic post, shipped aiohttp transport": shipped,
        "LlmClient": adapter,
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(rounds):
            for name, call in variants.items():
                results[name].append(await _measure(call, calls))
    finally:
        await plain_client.close()
        await shipped_client.close()
        await adapter_client.aclose()
    return results


def main(calls: int = 2000, rounds: int = 3) -> list[tuple[str, str]]:
    """Alternating rounds of ``calls`` calls each; the medians and their ratio."""
    base_url = os.environ.get("LLM_BASE_URL", "http://127.0.0.1:18090/v1")
    results = uvloop.run(_compare(base_url, calls, rounds))
    return side_by_side.report(
        results,
        unit="call",
        label="LLM call CPU ms",
        ratio_label="LLM call CPU, openai create / LlmClient",
        width=40,
    )


if __name__ == "__main__":
    cli.run(main)
