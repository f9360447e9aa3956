"""The payments port and its Stripe adapter.

Every refund request carries an idempotency key derived from (dispute, settlement round), so a
retry after a timeout or a crash can never create a second refund at Stripe. The same adapter
reads a refund back (:class:`RefundReader`): the API's Stripe webhook acts on the refund's
status as Stripe holds it now, not on the status an event carried.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import stripe

from refund_bench.db.payout_rounds import (
    IDEMPOTENCY_REFUSED,
    NOT_REFUNDED_STATUSES,
    SAVED_SERVER_ERROR,
    not_refunded_code,
)
from refund_bench.errors import RefundBenchError, TransientError


class PaymentRejected(RefundBenchError):  # noqa: N818
    """The provider refused the refund for good (card, request or idempotency error), or made
    it and answered it as not refunded: then ``refund_id`` names it."""

    def __init__(self, code: str, message: str, refund_id: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.refund_id = refund_id


class PaymentsRefusedUs(RefundBenchError):  # noqa: N818 - named for what happened
    """The provider refused our credentials (401) or their permissions (403), or holds the
    payment under the other mode than our key's (a test key for a live payment): the settings,
    not the refund. Not a payout failure: it stops the stage (and alerts), and the round stays
    PENDING in the ledger, to be paid under the same key once the key is fixed."""


class RefundNotFound(RefundBenchError):  # noqa: N818 - named for what happened
    """The provider has no refund of that id (404)."""


@dataclass(frozen=True)
class RetrievedRefund:
    """A refund as the provider holds it when read."""

    id: str
    status: str
    failure_reason: str | None


class RefundReader(Protocol):
    async def retrieve_refund(self, refund_id: str) -> RetrievedRefund:
        """The refund ``refund_id`` as the provider holds it now.

        Raises :class:`TransientError` for 429/5xx/connection failures and timeouts,
        :class:`PaymentsRefusedUs` when the provider refuses our key (401/403), and
        :class:`RefundNotFound` when it has no such refund (404). Reads only: a key limited to
        reading refunds is enough.
        """
        ...

    async def aclose(self) -> None:
        """Release connections (call on the event loop that made the requests)."""
        ...


class Payments(Protocol):
    async def refund(
        self,
        *,
        payment_reference: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> str:
        """Create (or replay) the refund; returns the provider's refund id.

        Raises :class:`TransientError` for 429/5xx/connection failures (safe to retry with the
        same key), :class:`PaymentsRefusedUs` when the provider refuses our key (401/403), and
        :class:`PaymentRejected` for failures of this refund a retry cannot fix, a refund the
        provider answered as failed, canceled or needing action among them, and a server error
        the provider saved under the key and replays (``SAVED_SERVER_ERROR``).
        """
        ...

    async def aclose(self) -> None:
        """Release connections (call on the event loop that made the requests)."""
        ...


class StripePayments:
    """Refunds through the Stripe API (or stripe-mock) with an explicit client object.

    Requests go out on the client's aiohttp transport, on the caller's event loop: a refund
    costs a quarter of the CPU it costs on the default ``requests`` transport in a worker
    thread, and needs no thread. The connection pool is made on the first request; close it
    with :meth:`aclose` on the same loop.
    """

    def __init__(self, api_key: str, api_base: str | None = None, timeout_s: float = 30.0) -> None:
        self._http = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=timeout_s))
        self._client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base} if api_base else None,
            max_network_retries=0,  # the stage retries, with its own backoff policy
            http_client=self._http,
        )

    async def aclose(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]  # stripe: untyped

    async def retrieve_refund(self, refund_id: str) -> RetrievedRefund:
        try:
            with _unreachable_is_transient():
                refund = await self._client.v1.refunds.retrieve_async(refund_id)
        except stripe.StripeError as exc:
            _raise_if_unavailable_or_refused(exc, "refunds: read")
            if exc.http_status == 404:
                raise RefundNotFound(f"stripe has no refund {refund_id}") from exc
            raise
        reason = getattr(refund, "failure_reason", None)
        return RetrievedRefund(
            id=str(refund.id),
            status=str(refund.status),
            failure_reason=None if reason is None else str(reason),
        )

    async def refund(
        self,
        *,
        payment_reference: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> str:
        try:
            with _unreachable_is_transient():
                refund = await self._client.v1.refunds.create_async(
                    params={
                        "payment_intent": payment_reference,
                        "amount": amount_minor,
                        "metadata": metadata,
                        "reason": "requested_by_customer",
                    },
                    options={"idempotency_key": idempotency_key},
                )
        except stripe.StripeError as exc:
            status = exc.http_status or 0
            if status >= 500 and _replayed(exc):
                raise PaymentRejected(
                    SAVED_SERVER_ERROR,
                    f"Stripe answered the round's key with the HTTP {status} it saved when the"
                    " refund failed part-way; the refund may exist",
                ) from exc
            _raise_if_unavailable_or_refused(exc, "refunds: write")
            # A refused key is named by its type, whatever its code: the ledger reads it as a
            # round that may have refunded (MAY_HAVE_REFUNDED).
            if isinstance(exc, stripe.IdempotencyError):
                code = IDEMPOTENCY_REFUSED
            else:
                code = exc.code or type(exc).__name__
            raise PaymentRejected(str(code), exc.user_message or str(exc)) from exc
        return _accepted(refund)


def _raise_if_unavailable_or_refused(exc: stripe.StripeError, permission: str) -> None:
    """Raise for an answer any call to Stripe reads alike: an API error, 429 or 5xx is a
    :class:`TransientError`; 401 or 403 (the key refused, or lacking ``permission``), or an
    object Stripe holds under the key's other mode (:data:`_OTHER_MODE`), is
    :class:`PaymentsRefusedUs`. Return for any other, which the caller reads."""
    status = exc.http_status or 0
    if isinstance(exc, stripe.APIError) or status == 429 or status >= 500:
        raise TransientError(
            f"stripe: HTTP {status} {type(exc).__name__}", dependency="stripe"
        ) from exc
    if status in (401, 403):
        raise PaymentsRefusedUs(
            f"stripe: HTTP {status} {type(exc).__name__}: check STRIPE_API_KEY and its"
            f" permissions ({permission})"
        ) from exc
    if status in (400, 404) and _OTHER_MODE.search(exc.user_message or ""):
        raise PaymentsRefusedUs(
            f"stripe: HTTP {status} {type(exc).__name__}: STRIPE_API_KEY is of the other mode"
            " than the payments it refunds (a test key for live payments, or a live key for"
            " test ones): check STRIPE_API_KEY"
        ) from exc


_OTHER_MODE = re.compile(
    r"a similar object exists in (?:live|test) mode, but an? (?:test|live) mode key was used"
)
"""Stripe's word for an object it holds under the other mode than the key's ("No such
payment_intent: 'pi_...'; a similar object exists in live mode, but a test mode key was used to
make this request"): the settings, not the refund, like a 401."""


@contextlib.contextmanager
def _unreachable_is_transient() -> Iterator[None]:
    """Stripe pacing us (429) or out of reach: :class:`TransientError`, to retry (a refund under
    the same key). The client wraps a failed request, not a body that breaks off or stalls
    after the headers, so those aiohttp errors are mapped here too: Stripe may have taken the
    refund on."""
    try:
        yield
    except (stripe.RateLimitError, stripe.APIConnectionError) as exc:
        raise TransientError(f"stripe: {type(exc).__name__}", dependency="stripe") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(
            f"stripe: the answer broke off ({type(exc).__name__})", dependency="stripe"
        ) from exc


def _replayed(exc: stripe.StripeError) -> bool:
    """Whether Stripe marked the answer as the one saved under the idempotency key
    (``Idempotent-Replayed: true``): a retry under that key would get it again."""
    return any(
        name.lower() == "idempotent-replayed" and str(value).lower() == "true"
        for name, value in (exc.headers or {}).items()
    )


def _accepted(refund: stripe.Refund) -> str:
    """The id of a refund Stripe took on; :class:`PaymentRejected` (``refund_<status>``, naming
    the refund, for a person to follow up) for one it answered as not refunded."""
    status = str(refund.status)
    if status in NOT_REFUNDED_STATUSES:
        why = f": {refund.failure_reason}" if getattr(refund, "failure_reason", None) else ""
        raise PaymentRejected(
            not_refunded_code(status),
            f"Stripe answered refund {refund.id} with status {status}{why}",
            refund_id=str(refund.id),
        )
    return str(refund.id)
