"""CPU per Stripe refund: the client's ``requests`` transport in worker threads against its
aiohttp transport on the event loop, side by side.

The payout stage used to run the blocking client in a thread pool; it now awaits the aiohttp
transport. This measures, in one process and one run, alternating A, B, A, B, A, B, the CPU
time per refund against stripe-mock (``getrusage``: stripe-mock's own work is not counted),
with the same concurrency for both.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import stripe
import uvloop

from bench import cli, side_by_side
from services.payout.payments import StripePayments

CONCURRENCY = 8


def _threads(api_base: str, refunds: int) -> float:
    """CPU ms per refund: the default (``requests``) transport, CONCURRENCY worker threads."""
    client = stripe.StripeClient(
        "sk_test_123", base_addresses={"api": api_base}, max_network_retries=0
    )

    def one(_: int) -> None:
        client.v1.refunds.create(
            params={
                "payment_intent": "pi_order1840",
                "amount": 68900,
                "metadata": {"dispute_id": "bench"},
                "reason": "requested_by_customer",
            },
            options={"idempotency_key": uuid.uuid4().hex},
        )

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, range(50)))  # warm-up: connections and imports
        before = side_by_side.cpu_seconds()
        list(pool.map(one, range(refunds)))
    return 1000 * (side_by_side.cpu_seconds() - before) / refunds


async def _event_loop(api_base: str, refunds: int) -> float:
    """CPU ms per refund: the payout's adapter (aiohttp transport), CONCURRENCY in flight."""
    payments = StripePayments("sk_test_123", api_base)
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(_: int) -> None:
        async with limit:
            await payments.refund(
                payment_reference="pi_order1840",
                amount_minor=68900,
                currency="inr",
                idempotency_key=uuid.uuid4().hex,
                metadata={"dispute_id": "bench"},
            )

    try:
        await asyncio.gather(*(one(i) for i in range(50)))
        before = side_by_side.cpu_seconds()
        await asyncio.gather(*(one(i) for i in range(refunds)))
        return 1000 * (side_by_side.cpu_seconds() - before) / refunds
    finally:
        await payments.aclose()


def main(refunds: int = 600, rounds: int = 3) -> list[tuple[str, str]]:
    """Alternating rounds of ``refunds`` refunds each; the medians and their ratio."""
    api_base = os.environ.get("STRIPE_API_BASE", "http://127.0.0.1:12111")
    results: dict[str, list[float]] = {"requests in threads": [], "aiohttp on the loop": []}
    for _ in range(rounds):
        results["requests in threads"].append(_threads(api_base, refunds))
        results["aiohttp on the loop"].append(uvloop.run(_event_loop(api_base, refunds)))
    return side_by_side.report(
        results,
        unit="refund",
        label="Stripe refund CPU ms",
        ratio_label="Stripe refund CPU, requests in threads / aiohttp",
        width=22,
    )


if __name__ == "__main__":
    cli.run(main)
