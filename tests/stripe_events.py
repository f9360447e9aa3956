"""Stripe webhook events as Stripe sends them, signed with a test secret (Stripe's own helper)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import stripe
from pydantic import SecretStr

WEBHOOK_SECRET = "whsec_test_" + "c" * 32
READ_KEY = "rk_test_" + "r" * 24
"""The restricted key the API reads refunds back with (the fake Stripe takes any)."""


def webhook_settings(stripe_url: str) -> dict[str, Any]:
    """The API's settings for a webhook that verifies :data:`WEBHOOK_SECRET` and reads refunds
    back from the Stripe at ``stripe_url`` with :data:`READ_KEY`."""
    return {
        "stripe_webhook_secret": SecretStr(WEBHOOK_SECRET),
        "stripe_api_key": SecretStr(READ_KEY),
        "stripe_api_base": stripe_url,
    }


def refund_event(
    refund_id: str,
    *,
    status: str = "failed",
    dispute_id: str | None = None,
    round_: int | str | None = 1,
    event_type: str = "refund.failed",
    failure_reason: str | None = "expired_or_canceled_card",
    amount: int = 68900,
) -> dict[str, Any]:
    """A Stripe event whose object is refund ``refund_id``; its metadata names ``dispute_id``
    and ``round_`` as the payout stage writes them (none without a ``dispute_id``)."""
    metadata = {} if dispute_id is None else {"dispute_id": dispute_id, "round": str(round_)}
    return {
        "id": f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": int(time.time()),
        "livemode": False,
        "type": event_type,
        "data": {
            "object": {
                "id": refund_id,
                "object": "refund",
                "amount": amount,
                "currency": "inr",
                "status": status,
                "failure_reason": failure_reason if status != "succeeded" else None,
                "metadata": metadata,
                "payment_intent": "pi_test",
            }
        },
    }


def signed(
    event: dict[str, Any], *, secret: str = WEBHOOK_SECRET, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """The body of ``event`` and the headers Stripe sends with it."""
    body = json.dumps(event)
    header = stripe.WebhookSignature.generate_signature_header(body, secret, timestamp)
    return body.encode(), {"Stripe-Signature": header, "Content-Type": "application/json"}
