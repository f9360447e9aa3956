"""``POST /webhooks/stripe``: Stripe's events about the payout stage's refunds.

Authenticated by Stripe's signature, not by a bearer token: the ``Stripe-Signature`` header must
sign the exact body with ``STRIPE_WEBHOOK_SECRET`` within ``STRIPE_WEBHOOK_TOLERANCE_S`` (the
``stripe`` library checks it). The answers follow Stripe's delivery rules: a 2xx ends the
delivery, anything else makes Stripe deliver the event again, for up to three days.

Stripe does not order its events and may deliver one late or several times, so the refund's
status in an event is not acted on: the refund is read back from Stripe (``GET
/v1/refunds/{id}`` with ``STRIPE_API_KEY``) and the status Stripe holds now decides
(:meth:`services.api.refund_failures.RefundFailures.settle`).

- 200: taken; ``outcome`` says what it changed (see :class:`services.api.refund_failures.Outcome`;
  ``ignored`` for events that are not about a payout round's refund). What a change publishes
  (``payout.failed``, or ``payout.completed`` for a round refunded after it failed with a
  refund that might still go through) goes out after the answer, through its outbox.
- 400: the signature is missing, stale or wrong, or the body is not a Stripe event.
- 503: not configured (no secret or no API key); the round's refund is not recorded yet; Stripe
  could not be read (unreachable, 429, 5xx: ``stripe_unavailable``) or refused our key (401,
  403, or the refund held under the key's other mode: ``stripe_key_refused``, logged as an
  error), or does not know the refund of a round the
  ledger paid or failed with it, is paying, or failed with a refund that may still go through
  (``own_refund_not_found``: our key is of another account, logged as an error); the
  database out of reach or too busy. Nothing was changed. Stripe delivers again; nothing is
  lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import stripe
from fastapi import APIRouter, BackgroundTasks, Header, Request
from pydantic import ValidationError

from refund_bench.errors import TransientError
from services.api import models as m
from services.api.context import ApiProblem, AppContext
from services.api.intake import problem_response
from services.api.outbox import Outbox
from services.api.refund_failures import (
    Outcome,
    RefundCompletionRecord,
    RefundFailureRecord,
    RefundFailures,
    StripeEvent,
    payout_refund_of,
)
from services.payout.payments import PaymentsRefusedUs, RefundReader

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "Stripe-Signature"


_EVENT_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "A Stripe event object, as Stripe sends it; read as raw bytes,"
                " since the signature covers them exactly.",
            }
        }
    },
}


def stripe_webhook_router(
    ctx: AppContext,
    failures: RefundFailures,
    outbox: Outbox[RefundFailureRecord],
    completions: Outbox[RefundCompletionRecord],
    refunds: RefundReader | None,
) -> APIRouter:
    """The webhook's route. ``outbox`` publishes the ``payout.failed`` of the rounds it turns
    FAILED, ``completions`` the ``payout.completed`` of those it turns SUCCEEDED again."""
    router = APIRouter(tags=["payments"])
    slots = asyncio.Semaphore(ctx.settings.stripe_webhook_concurrency)
    slot_wait_s = ctx.settings.stripe_webhook_wait_s or ctx.settings.stripe_timeout_s
    waiting = ctx.metrics.stripe_events_waiting
    secret = ctx.settings.stripe_webhook_secret.get_secret_value()
    tolerance_s = ctx.settings.stripe_webhook_tolerance_s
    counted = ctx.metrics.stripe_events

    def refuse(status: int, outcome: str, detail: str) -> ApiProblem:
        counted.labels(outcome).inc()
        return ApiProblem(status, detail)

    async def publish(queue: Outbox[Any], key: str, where: str) -> None:
        try:
            await queue.publish(key)
        except Exception:  # recorded all the same: the outbox publishes it on its next drain
            log.exception("%s of %s recorded; publishing it failed", queue.name, where)

    @router.post(
        "/webhooks/stripe",
        response_model=m.StripeEventReceived,
        responses={
            **problem_response(400, "Missing, stale or wrong signature, or not a Stripe event."),
            **problem_response(
                503,
                "Not configured, the refund is not recorded yet, or Stripe could not be read:"
                " deliver again.",
            ),
        },
        summary="Receive a Stripe event (signed by Stripe)",
        openapi_extra={"requestBody": _EVENT_BODY},
    )
    async def stripe_event(
        request: Request,
        background: BackgroundTasks,
        signature: Annotated[
            str | None,
            Header(
                alias=SIGNATURE_HEADER,
                description="Stripe's signature of the exact body (t=<time>,v1=<HMAC>).",
            ),
        ] = None,
    ) -> m.StripeEventReceived:
        if not secret or refunds is None:
            raise refuse(503, "not_configured", "Stripe webhooks are not configured here")
        body = await request.body()
        try:
            stripe.WebhookSignature.verify_header(body, signature, secret, tolerance=tolerance_s)
        except (stripe.SignatureVerificationError, UnicodeDecodeError, TypeError):
            # TypeError: a non-ASCII signature, which hmac.compare_digest refuses to compare.
            raise refuse(
                400, "invalid", f"the {SIGNATURE_HEADER} header is missing, stale or wrong"
            ) from None
        try:
            event = StripeEvent.model_validate_json(body)
            about = payout_refund_of(event)
        except (ValidationError, ValueError) as exc:
            raise refuse(400, "invalid", f"not a Stripe event this endpoint reads: {exc}") from None
        if isinstance(about, str):
            counted.labels(Outcome.IGNORED.value).inc()
            return m.StripeEventReceived(outcome=Outcome.IGNORED.value, detail=about)
        where = f"{about.dispute_id} round {about.round}"
        refund_id = about.stripe_refund_id
        try:
            waiting.inc()
            try:
                # The acquire runs in this task (wait_for would wrap it in one more), so a
                # timeout or a cancellation cancels it where it waits: no slot is taken then.
                async with asyncio.timeout(slot_wait_s):
                    await slots.acquire()
            except TimeoutError:
                raise refuse(
                    503, "busy", "too many Stripe events are being settled; deliver again"
                ) from None
            finally:
                waiting.dec()
            try:
                outcome, retrieved = await failures.settle(about, refunds, ctx.clock())
            finally:
                slots.release()
        except TransientError as exc:
            log.warning("reading refund %s of %s from Stripe failed: %s", refund_id, where, exc)
            raise refuse(
                503, "stripe_unavailable", f"Stripe could not be read for refund {refund_id}"
            ) from None
        except PaymentsRefusedUs as exc:
            log.error("reading refund %s of %s from Stripe: %s", refund_id, where, exc)
            raise refuse(
                503, "stripe_key_refused", "Stripe refused this service's STRIPE_API_KEY"
            ) from None
        status = retrieved.status if retrieved else None
        if outcome is Outcome.NOT_SETTLED:
            raise refuse(
                503,
                outcome.value,
                f"the payout of {where} has not recorded refund {refund_id} yet",
            )
        if outcome is Outcome.OWN_REFUND_NOT_FOUND:
            log.error(
                "Stripe has no refund %s, of %s in the ledger: STRIPE_API_KEY is not of the"
                " payout's Stripe account",
                refund_id,
                where,
            )
            raise refuse(
                503,
                outcome.value,
                f"Stripe has no refund {refund_id}, of {where} in the ledger: this service's"
                " STRIPE_API_KEY is not of the payout's Stripe account",
            )
        counted.labels(outcome.value).inc()
        if outcome is Outcome.NOW_FINAL:
            log.warning(
                "Stripe reported refund %s %s, which might still have refunded: %s may be paid"
                " again",
                refund_id,
                status,
                where,
            )
        if outcome is Outcome.NOW_WAITING:
            log.warning(
                "Stripe reported refund %s %s: %s, failed not knowing whether Stripe had made"
                " it, waits for the customer",
                refund_id,
                status,
                where,
            )
        if outcome is Outcome.FAILED_AFTER_SETTLED:
            log.warning(
                "Stripe reported refund %s %s, which might still have refunded, after %s was"
                " settled another way: sent to review as an item of its own",
                refund_id,
                status,
                where,
            )
        if outcome is Outcome.NOW_REFUNDED:
            log.info(
                "Stripe reported refund %s %s, which might still have refunded: %s is paid",
                refund_id,
                status,
                where,
            )
        if outcome is Outcome.FAILED_AGAIN:
            log.warning(
                "Stripe reported refund %s %s after it had refunded it following a failure that"
                " might still have refunded: %s is FAILED again, sent to review as an item of its"
                " own",
                refund_id,
                status,
                where,
            )
        if outcome is Outcome.RECORDED:
            log.warning(
                "Stripe reported refund %s %s: %s is FAILED, sent to review",
                refund_id,
                status,
                where,
            )
        # After the answer: the round is recorded, and Stripe's delivery must not wait for
        # Kafka. What this does not publish, the outbox's next drain does.
        if outcome in (Outcome.RECORDED, Outcome.FAILED_AGAIN, Outcome.FAILED_AFTER_SETTLED):
            background.add_task(publish, outbox, refund_id, where)
        if outcome in (Outcome.NOW_REFUNDED, Outcome.REFUNDED_AFTER_SETTLED):
            background.add_task(publish, completions, refund_id, where)
        detail = _DETAIL[outcome].format(where=where, refund=refund_id, status=status)
        return m.StripeEventReceived(outcome=outcome.value, detail=detail)

    return router


_DETAIL = {
    Outcome.RECORDED: "Stripe holds refund {refund} {status}: {where} is FAILED in the ledger;"
    " payout.failed sends it to review",
    Outcome.ALREADY_FAILED: "Stripe holds refund {refund} {status}: {where} was already FAILED"
    " in the ledger",
    Outcome.NOW_FINAL: "Stripe holds refund {refund} {status}: {where} was FAILED with a refund"
    " that might still go through; the ledger now records that no money went back, and the desk"
    " offers to pay it again",
    Outcome.NOW_WAITING: "Stripe holds refund {refund} {status}: {where} was FAILED not knowing"
    " whether Stripe had made it; the ledger now records it waiting for the customer, and the"
    " desk says not to pay it another way meanwhile",
    Outcome.FAILED_AFTER_SETTLED: "Stripe holds refund {refund} {status}: {where} was FAILED"
    " with a refund that might still go through, and settled another way meanwhile; the ledger"
    " now records that no money went back, and its payout.failed is published again and sends"
    " it to review as an item of its own",
    Outcome.NOW_REFUNDED: "Stripe holds refund {refund} {status}: {where} was FAILED with a"
    " refund that might still go through; the ledger now records it paid, payout.completed says"
    " so, and the desk closes its review item",
    Outcome.FAILED_AGAIN: "Stripe holds refund {refund} {status}: {where} was refunded after"
    " a failure that might still have refunded, and is FAILED again; its payout.failed is"
    " published again and sends it to review as an item of its own",
    Outcome.REFUNDED_AFTER_SETTLED: "Stripe holds refund {refund} {status}: {where} was FAILED"
    " with a refund that might still go through, and settled another way meanwhile; the ledger"
    " now records it paid, payout.completed says so, and an alert asks a payment operator to"
    " check for a double payment",
    Outcome.ALREADY_PAID: "Stripe holds refund {refund} {status}: nothing to change for {where}",
    Outcome.REFUND_NOT_FOUND: "Stripe has no refund {refund}: nothing to change for {where}",
    Outcome.IGNORED: "Stripe holds refund {refund} {status}, neither paid nor failed: nothing to"
    " change for {where}",
    Outcome.UNKNOWN_ROUND: "no payout of {where} in the ledger",
    Outcome.OTHER_REFUND: "{where} was paid with another refund; {refund} changes nothing",
}
