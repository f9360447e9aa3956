"""The JSON API: ``POST /complaints``, ``GET /disputes/{id}``, health, readiness, metrics.

The complaint and dispute routes accept only bearer tokens (``API_TOKENS``), each for its
scope (``complaints``, ``disputes``); the check runs before the request body is read, so an
unauthenticated request gets 401, and a token of another scope 403, whatever it carries, and
nothing is published. Review-desk session cookies are scoped to ``/review`` and never
accepted here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Path, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from refund_bench import events as ev
from refund_bench import topics as t
from services.api import models as m
from services.api.context import ApiProblem, AppContext
from services.api.publisher import PublishError
from services.api.settings import ApiToken, TokenScope
from services.api.store import INTAKE, DatabaseBusy, IntakeRecord, PublishersBusy

log = logging.getLogger(__name__)
T = TypeVar("T")

READINESS_WAIT_S = 2.5
"""How long ``/readyz`` waits for PostgreSQL's ``SELECT 1`` (and for Kafka's metadata, itself
asked for 2 s): inside the readiness probe's 3 s timeout in deploy/k8s/api.yaml."""

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API client token from API_TOKENS, for its scope: `complaints:` tokens"
    " submit complaints, `disputes:` tokens read disputes, bare tokens do both (403 outside"
    " the scope). Review-desk sessions are not accepted.",
)


Responses = dict[int | str, dict[str, Any]]


def problem_response(status: int, description: str) -> Responses:
    """An OpenAPI ``responses`` entry: ``status`` answers a Problem document."""
    return {status: {"model": m.Problem, "description": description}}


UNAUTHORIZED = problem_response(401, "Missing or wrong bearer token.")
FORBIDDEN = problem_response(403, "The bearer token does not open this route's scope.")
INVALID = problem_response(422, "The request does not match the schema or the rules.")
RETRY_LATER = problem_response(
    503, "The database is out of reach or too busy: retry later (Retry-After)."
)

SAME_KEY = (
    "retry with the same Idempotency-Key, never a new one: a new key files the complaint again"
    " as a second dispute"
)
UNCONFIRMED = (
    "the complaint is recorded and may already be published, but its publication is not"
    f" confirmed; {SAME_KEY}"
)
"""The 503 detail of a recorded complaint whose publication was not confirmed: Kafka did not
acknowledge it in time (the record may still arrive), or no publishing connection came free
(another request with the same key may be publishing it)."""
NOT_PUBLISHED = (
    "the complaint is recorded but was not published: Kafka refused the record, or the API"
    f" could not queue it; {SAME_KEY}"
)
"""The 503 detail of a recorded complaint whose record Kafka refused outright (an access rule,
a missing topic, a size limit) or the producer could not queue: it was not written, and a
retry publishes it once the cause is gone."""


def bearer_scopes(header: str | None, tokens: tuple[ApiToken, ...]) -> frozenset[TokenScope]:
    """The scopes ``header`` opens: those of the token in ``Bearer <token>``, if it is one of
    ``tokens``, else none. Every token is compared, in constant time each."""
    if not header or not tokens:
        return frozenset()
    scheme, _, credentials = header.partition(" ")
    presented = credentials.strip().encode("utf-8", "surrogateescape")
    if scheme.lower() != "bearer" or not presented:
        return frozenset()
    scopes: frozenset[TokenScope] = frozenset()
    for token in tokens:
        if hmac.compare_digest(presented, token.secret):
            scopes |= token.scopes
    return scopes


SCOPE_REFUSED: dict[TokenScope, str] = {
    "complaints": "this token may not submit complaints",
    "disputes": "this token may not read disputes",
}


def bearer_route_class(tokens: tuple[ApiToken, ...], scope: TokenScope) -> type[APIRoute]:
    """A route class that answers before the body is read: 401 unless the bearer token is one
    of ``tokens``, 403 unless it opens ``scope``."""

    class BearerRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                scopes = bearer_scopes(request.headers.get("authorization"), tokens)
                if not scopes:
                    return JSONResponse(
                        m.Problem(detail="missing or wrong bearer token").model_dump(),
                        status_code=401,
                        headers={"WWW-Authenticate": 'Bearer realm="refund-bench"'},
                    )
                if scope not in scopes:
                    return JSONResponse(
                        m.Problem(detail=SCOPE_REFUSED[scope]).model_dump(), status_code=403
                    )
                return await handler(request)

            return guarded

    return BearerRoute


def body_sha256(body: m.ComplaintRequest) -> str:
    """Hash of the canonical JSON of the body: what "the same body" means for idempotency."""
    canonical = json.dumps(body.model_dump(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def intake_router(ctx: AppContext) -> APIRouter:
    """``POST /complaints`` (tokens of scope ``complaints``) and ``GET /disputes/{dispute_id}``
    (scope ``disputes``), bearer auth."""
    router = APIRouter(route_class=bearer_route_class(ctx.tokens, "complaints"), tags=["intake"])
    reads = APIRouter(route_class=bearer_route_class(ctx.tokens, "disputes"))
    max_chars = ctx.settings.max_complaint_chars

    @router.post(
        "/complaints",
        status_code=202,
        response_model=m.ComplaintAccepted,
        dependencies=[Security(bearer_scheme)],
        responses={
            200: {
                "model": m.ComplaintAccepted,
                "description": "A retry of an accepted request: the same dispute, nothing new"
                " published.",
            },
            202: {"description": "Accepted: complaint.received is published (acknowledged)."},
            **problem_response(400, "The Idempotency-Key header is missing."),
            **UNAUTHORIZED,
            **FORBIDDEN,
            **problem_response(404, "No such order in the order store."),
            **problem_response(409, "The Idempotency-Key was used with a different body."),
            **problem_response(413, "The request body is too large."),
            **problem_response(415, "The body is sent as another media type than JSON."),
            **INVALID,
            **problem_response(
                503,
                "Recorded but not confirmed published (it may already be), or the database was"
                " busy: retry with the same key, never a new one (Retry-After).",
            ),
        },
        summary="Submit a complaint",
    )
    async def post_complaint(
        body: m.ComplaintRequest,
        response: Response,
        idempotency_key: Annotated[
            str,
            Header(
                alias="Idempotency-Key",
                pattern=m.KEY_PATTERN,
                description="Client-chosen key (e.g. a UUID); a retry with the same key and"
                " body returns the same dispute and publishes nothing new.",
            ),
        ],
    ) -> m.ComplaintAccepted:
        """Validate, record the idempotency key, publish ``complaint.received`` (key =
        dispute_id) and answer once Kafka has acknowledged it. A retry of a recorded request
        (same key, same body) is answered from its record, whatever its order looks like now."""
        digest = body_sha256(body)
        seen = await _unless_busy(ctx, ctx.store.intake_seen(idempotency_key))
        if seen is not None and seen.body_sha256 != digest:
            raise _reused_key(ctx)
        if seen is not None and seen.published:
            # Answered from the record, without a publishing connection: nothing to publish.
            ctx.metrics.complaints.labels("replayed").inc()
            response.status_code = 200
            return m.ComplaintAccepted(
                dispute_id=seen.dispute_id,
                status_url=f"/disputes/{seen.dispute_id}",
                replayed=True,
            )
        if seen is None:
            await _unless_busy(ctx, _validate(ctx, body, max_chars))
        fresh = IntakeRecord(
            idempotency_key=idempotency_key,
            body_sha256=digest,
            dispute_id=f"d-{ctx.new_id()}",
            order_id=body.order_id,
            customer_id=body.customer_id,
            complaint_text=body.text,
            channel="api",
            received_at=ctx.clock(),
        )
        await _unless_busy(ctx, ctx.store.claim_intake(fresh))
        try:
            async with ctx.store.lock_row(INTAKE, idempotency_key) as locked:
                row = locked.row
                if row.body_sha256 != digest:  # another body claimed the key meanwhile
                    raise _reused_key(ctx)
                status_url = f"/disputes/{row.dispute_id}"
                if row.published:
                    ctx.metrics.complaints.labels("replayed").inc()
                    response.status_code = 200
                    return m.ComplaintAccepted(
                        dispute_id=row.dispute_id, status_url=status_url, replayed=True
                    )
                await ctx.publisher.publish(
                    t.COMPLAINT_RECEIVED, row.dispute_id, _received(row).to_avro()
                )
                await locked.mark_published()
        except (PublishError, PublishersBusy) as exc:
            ctx.metrics.complaints.labels("unpublished").inc()
            if isinstance(exc, PublishError):
                ctx.metrics.publish_failures.labels(t.COMPLAINT_RECEIVED.name).inc()
            refused = isinstance(exc, PublishError) and exc.refused
            log.warning(
                "complaint with key %s: %s: %s",
                idempotency_key,
                "not published" if refused else "publication not confirmed",
                exc,
            )
            detail = NOT_PUBLISHED if refused else UNCONFIRMED
            raise ApiProblem(503, detail, headers={"Retry-After": "5"}) from exc
        replayed = row.dispute_id != fresh.dispute_id
        ctx.metrics.published.labels(t.COMPLAINT_RECEIVED.name).inc()
        ctx.metrics.complaints.labels("replayed" if replayed else "accepted").inc()
        response.headers["Location"] = status_url
        return m.ComplaintAccepted(
            dispute_id=row.dispute_id, status_url=status_url, replayed=replayed
        )

    @reads.get(
        "/disputes/{dispute_id:path}",
        response_model=m.DisputeStory,
        dependencies=[Security(bearer_scheme)],
        responses={
            **UNAUTHORIZED,
            **FORBIDDEN,
            **problem_response(404, "No such dispute."),
            **INVALID,
            **RETRY_LATER,
        },
        summary="The whole story of one dispute (the audit record)",
    )
    async def get_dispute(
        dispute_id: Annotated[str, Path(pattern=m.ID_PATTERN)],
    ) -> m.DisputeStory:
        """Complaint, grievances with spans, evidence and its hash, every raw ruling, verdicts,
        priced rounds, replies, payouts and review decisions, each with its timestamps."""
        story = await ctx.store.dispute_story(dispute_id)
        if story is None:
            raise ApiProblem(404, f"no dispute {dispute_id!r}")
        return story

    router.include_router(reads)
    return router


async def _unless_busy(ctx: AppContext, query: Awaitable[T]) -> T:
    """``query``'s result; a 503 with ``Retry-After`` (:class:`ApiProblem`, counted as
    ``busy``) when it got no database connection in time (:class:`DatabaseBusy`)."""
    try:
        return await query
    except DatabaseBusy as exc:
        ctx.metrics.complaints.labels("busy").inc()
        log.warning("complaint not taken: %s", exc)
        raise ApiProblem(
            503,
            "the database is busy; retry with the same Idempotency-Key",
            headers={"Retry-After": "5"},
        ) from exc


def _reused_key(ctx: AppContext) -> ApiProblem:
    """The 409 for an idempotency key recorded with another body (counted as a conflict)."""
    ctx.metrics.complaints.labels("conflict").inc()
    return ApiProblem(
        409,
        "this Idempotency-Key was already used with a different body;"
        " use a new key for a new complaint",
    )


async def _validate(ctx: AppContext, body: m.ComplaintRequest, max_chars: int) -> None:
    """What a new complaint must pass beyond its model: its length, a known order, and the
    order's customer (422 / 404 as :class:`ApiProblem`)."""
    if len(body.text) > max_chars:
        ctx.metrics.complaints.labels("rejected").inc()
        raise ApiProblem(
            422,
            f"text is {len(body.text)} characters long; at most {max_chars} are accepted",
            errors=[{"loc": ["body", "text"], "msg": "too long", "type": "string_too_long"}],
        )
    customer = await ctx.store.order_customer(body.order_id)
    if customer is None:
        ctx.metrics.complaints.labels("rejected").inc()
        raise ApiProblem(404, f"unknown order_id {body.order_id!r}: no such order")
    if not hmac.compare_digest(customer.encode(), body.customer_id.encode()):
        ctx.metrics.complaints.labels("rejected").inc()
        raise ApiProblem(
            422,
            "customer_id does not match the order's customer",
            errors=[
                {
                    "loc": ["body", "customer_id"],
                    "msg": "not the order's customer",
                    "type": "value_error",
                }
            ],
        )


def _received(row: IntakeRecord) -> ev.ComplaintReceived:
    return ev.ComplaintReceived(
        dispute_id=row.dispute_id,
        order_id=row.order_id,
        customer_id=row.customer_id,
        text=row.complaint_text,
        received_at=row.received_at,
        channel=row.channel,
    )


def ops_router(ctx: AppContext) -> APIRouter:
    """``/healthz`` and ``/readyz`` (no auth: the probes; ``/metrics`` has its own port)."""
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", response_model=m.Health, summary="Liveness")
    async def healthz() -> m.Health:
        """200 while the process serves requests."""
        return m.Health(status="ok")

    @router.get(
        "/readyz",
        response_model=m.Readiness,
        responses={503: {"model": m.Readiness, "description": "A dependency is unreachable."}},
        summary="Readiness: PostgreSQL reachable (Kafka reported)",
    )
    async def readyz(response: Response) -> m.Readiness:
        """200 when PostgreSQL answers ``SELECT 1`` (within 2.5 s); Kafka's metadata is checked and
        reported, but does not make the replica unready: without Kafka the desk, the status
        API and Stripe's webhook still work (their events wait in the outboxes) and intake
        answers 503 with ``Retry-After`` itself. Were Kafka required, an outage would take every
        replica out of the Service at once, and all of those with it."""
        checks: dict[str, str] = {}

        async def probe(name: str, check: Awaitable[None]) -> None:
            try:
                await asyncio.wait_for(check, READINESS_WAIT_S)
                checks[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - any failure means not ready
                checks[name] = f"unavailable: {type(exc).__name__}"

        await asyncio.gather(
            probe("postgres", ctx.store.ping()), probe("kafka", ctx.publisher.check(2.0))
        )
        ready = checks["postgres"] == "ok"
        if not ready:
            response.status_code = 503
        return m.Readiness(status="ready" if ready else "not ready", checks=checks)

    return router
