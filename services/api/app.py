"""The app factory: ``create_app(settings, deps)`` wires routes, middleware and lifecycle.

``build_deps(settings)`` makes the real connections (a PostgreSQL pool, a Kafka producer with an
Avro codec); tests and the entry point both use it. Nothing is created at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, RedirectResponse, Response
from prometheus_client import CollectorRegistry, start_http_server
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from refund_bench import topics as t
from refund_bench.codec import Codec, FingerprintFraming, framing_from_registry_url
from refund_bench.money import format_minor, payable_part
from services.api import models as m
from services.api.context import ApiProblem, AppContext, Deps
from services.api.desk import PAGE_HEADERS, desk_router
from services.api.formatting import path_segment, when
from services.api.intake import intake_router, ops_router
from services.api.metrics import ApiMetrics, HttpMetricsMiddleware
from services.api.outbox import Outbox, review_decided
from services.api.passwords import PasswordChecks, ReviewerDirectory, parse_reviewers
from services.api.publisher import KafkaPublisher
from services.api.refund_failures import (
    REFUND_COMPLETIONS,
    REFUND_FAILURES,
    RefundFailures,
    payout_completed,
    payout_failed,
)
from services.api.sessions import DESK_PREFIX, SessionMiddleware, SessionSigner
from services.api.settings import TOKEN_SCOPES, ApiSettings, unscoped_with_colon
from services.api.store import DATABASE_UNAVAILABLE, DECISIONS, Store
from services.api.stripe_webhook import stripe_webhook_router
from services.payout.payments import StripePayments

log = logging.getLogger(__name__)

DATABASE_RETRY_AFTER_S = 5
"""The ``Retry-After`` of a 503 answered while PostgreSQL is out of reach or too busy."""

TEMPLATES = Path(__file__).resolve().parent / "templates"


def build_deps(settings: ApiSettings, registry: CollectorRegistry | None = None) -> Deps:
    """Real connections for ``settings`` (the pool opens later, on the server's loop; Stripe's
    client only with a ``STRIPE_API_KEY``)."""
    codec = Codec(
        framing_from_registry_url(settings.schema_registry_url),
        {
            t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema,
            t.REVIEW_DECIDED.name: t.REVIEW_DECIDED.schema,
            t.PAYOUT_FAILED.name: t.PAYOUT_FAILED.schema,
            t.PAYOUT_COMPLETED.name: t.PAYOUT_COMPLETED.schema,
        },
    )

    def pool(name: str, max_size: int, wait_s: float) -> AsyncConnectionPool[Any]:
        return AsyncConnectionPool(
            settings.database_conninfo(),
            min_size=1,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True},
            name=name,
            timeout=wait_s,
        )

    publisher = KafkaPublisher(
        settings.kafka_bootstrap_servers,
        codec,
        timeout_s=settings.publish_timeout_s,
        security=settings.kafka_security_config(),
    )
    key = settings.stripe_api_key.get_secret_value()
    return Deps(
        pool=pool("api", settings.db_pool_max, settings.db_pool_wait_s),
        publish_pool=pool("api-publish", settings.db_publish_pool_max, settings.publish_wait_s),
        publisher=publisher,
        registry=registry or CollectorRegistry(),
        refunds=StripePayments(key, settings.stripe_api_base, settings.stripe_timeout_s)
        if key
        else None,
    )


def openapi_document(settings: ApiSettings) -> dict[str, Any]:
    """The OpenAPI document the app serves for ``settings``, built without connecting to
    anything (contract tests, publishing the document)."""
    codec = Codec(
        FingerprintFraming(),
        {
            t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema,
            t.REVIEW_DECIDED.name: t.REVIEW_DECIDED.schema,
            t.PAYOUT_FAILED.name: t.PAYOUT_FAILED.schema,
            t.PAYOUT_COMPLETED.name: t.PAYOUT_COMPLETED.schema,
        },
    )
    deps = Deps(
        pool=AsyncConnectionPool("", open=False),
        publish_pool=AsyncConnectionPool("", open=False),
        publisher=KafkaPublisher(settings.kafka_bootstrap_servers, codec),
    )
    return create_app(settings, deps).openapi()


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["money"] = format_minor
    env.filters["payable"] = payable_part
    env.filters["when"] = when
    env.filters["segment"] = path_segment
    return Jinja2Templates(env=env)


JSON_BYTES_PER_CHAR = 12
"""The most bytes one character of a JSON string can take: a character beyond the BMP (an
emoji) sent as an escaped surrogate pair, ``\\ud83d\\ude00``, as encoders that escape non-ASCII
(Python's ``json`` by default) send it; a BMP character takes at most 6 (``\\u00e9``)."""
BODY_ROOM_BYTES = 65536
"""Room in a request body for what is not the complaint's text (the ids, keys, whitespace)."""


def body_limit(max_complaint_chars: int) -> int:
    """The largest request body accepted: a complaint text of ``max_complaint_chars``
    characters however a JSON encoder escapes them, plus :data:`BODY_ROOM_BYTES`. Only a guard
    against huge bodies: the text's length in characters (422) stays the real bound."""
    return max_complaint_chars * JSON_BYTES_PER_CHAR + BODY_ROOM_BYTES


class BodyLimitMiddleware:
    """413, as a problem document, for a request body above ``limit`` bytes.

    A declared Content-Length above the limit is refused before anything else runs. A body
    without one (chunked) is counted as the app reads it: the read that passes the limit
    raises a 413 ``HTTPException`` instead of returning, so no handler sees the body.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"request body above {self._limit} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self._limit:
                response = JSONResponse(m.Problem(detail=detail).model_dump(), status_code=413)
                await response(scope, receive, send)
                return
        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._limit:
                    raise StarletteHTTPException(413, detail)
            return message

        await self.app(scope, receive_within_limit, send)


def _is_json(media: str) -> bool:
    """Whether FastAPI reads a body of ``media`` (a lower-case media type) as JSON: an
    ``application`` type whose subtype is ``json`` or ends in ``+json``."""
    main, _, subtype = media.partition("/")
    return main == "application" and (subtype == "json" or subtype.endswith("+json"))


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]


def create_app(settings: ApiSettings, deps: Deps) -> FastAPI:
    """The API and desk app. It owns ``deps``: opens them on startup, closes them on shutdown.

    From its start it publishes, in the background, what was recorded and left unpublished
    (review decisions, refunds Stripe reported failed or refunded after a wait: the outboxes),
    then keeps doing so every ``OUTBOX_INTERVAL_S``. While it runs, ``/metrics`` is served on
    ``METRICS_HOST:METRICS_PORT`` from a thread (the port bound is ``app.state.metrics_port``),
    apart from the routes clients and reviewers use.
    """
    tokens = settings.bearer_tokens()
    if not tokens:
        log.warning("API_TOKENS is empty: every intake/status request will get 401")
    if colons := unscoped_with_colon(tokens):
        log.warning(
            "API_TOKENS: %d entries hold a ':' but name no scope (%s): each is read as a bare"
            " token that opens every scope; check for a misspelt scope",
            colons,
            ", ".join(f"{scope}:" for scope in TOKEN_SCOPES),
        )
    reviewers = ReviewerDirectory(parse_reviewers(settings.reviewers.get_secret_value()))
    if not len(reviewers):
        log.warning("REVIEWERS is empty: nobody can sign in to the review desk")
    metrics = ApiMetrics(deps.registry)
    store = Store(
        deps.pool, deps.publish_pool, settings.publish_wait_s, pool_wait_s=settings.db_pool_wait_s
    )
    ctx = AppContext(
        settings=settings,
        store=store,
        publisher=deps.publisher,
        metrics=metrics,
        tokens=tokens,
        reviewers=reviewers,
        password_checks=PasswordChecks(
            reviewers,
            threads=settings.desk_password_threads,
            waiting=settings.desk_password_queue,
        ),
        templates=_templates(),
        clock=deps.clock,
        new_id=deps.new_id,
    )
    if not settings.stripe_webhook_secret.get_secret_value():
        log.warning("STRIPE_WEBHOOK_SECRET is empty: POST /webhooks/stripe answers 503")
    if deps.refunds is None:
        log.warning("STRIPE_API_KEY is empty: POST /webhooks/stripe answers 503")
    decisions = Outbox(store, DECISIONS, t.REVIEW_DECIDED, review_decided, deps.publisher, metrics)
    failures_outbox = Outbox(
        store, REFUND_FAILURES, t.PAYOUT_FAILED, payout_failed, deps.publisher, metrics
    )
    completions_outbox = Outbox(
        store, REFUND_COMPLETIONS, t.PAYOUT_COMPLETED, payout_completed, deps.publisher, metrics
    )
    outboxes: tuple[Outbox[Any], ...] = (decisions, failures_outbox, completions_outbox)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scrape, _ = start_http_server(
            settings.metrics_port, settings.metrics_host, registry=deps.registry
        )
        app.state.metrics_port = scrape.server_port
        try:
            async with serving(app):
                yield
        finally:
            await asyncio.to_thread(scrape.shutdown)
            scrape.server_close()

    @contextlib.asynccontextmanager
    async def serving(_app: FastAPI) -> AsyncIterator[None]:
        await deps.pool.open(wait=True, timeout=30.0)
        await deps.publish_pool.open(wait=True, timeout=30.0)
        deps.publisher.start()
        # Each outbox drains at once, in the background: with Kafka away, a drain waits out
        # PUBLISH_TIMEOUT_S, and the desk, the status API and Stripe's webhook must not.
        interval_s = settings.outbox_interval_s
        tasks = [
            asyncio.create_task(outbox.run(interval_s), name=f"outbox {outbox.name}")
            for outbox in outboxes
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            ctx.password_checks.close()
            if deps.refunds is not None:
                await deps.refunds.aclose()
            await asyncio.to_thread(deps.publisher.close)
            await deps.publish_pool.close()
            await deps.pool.close()

    app = FastAPI(
        title="Refund Bench API",
        version="1.0.0",
        summary="Complaint intake, the dispute audit record, and the human-review desk.",
        lifespan=lifespan,
        docs_url="/docs" if settings.api_docs else None,
        openapi_url="/openapi.json" if settings.api_docs else None,
        redoc_url=None,
        # A path with a trailing slash is a 404, never a redirect: behind a TLS-terminating
        # Ingress the app sees http, so its redirect would send the client (and the
        # complaint it re-sends) to plain http.
        redirect_slashes=False,
    )
    app.state.ctx = ctx
    app.include_router(ops_router(ctx))
    app.include_router(intake_router(ctx))
    app.include_router(desk_router(ctx, decisions))
    app.include_router(
        stripe_webhook_router(
            ctx, RefundFailures(deps.pool), failures_outbox, completions_outbox, deps.refunds
        )
    )

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse(DESK_PREFIX, status_code=307)

    def is_desk(request: Request) -> bool:
        path = request.url.path
        return path == DESK_PREFIX or path.startswith(DESK_PREFIX + "/")

    def desk_message(request: Request, status: int, title: str, message: str) -> Response:
        return ctx.templates.TemplateResponse(
            request,
            "message.html",
            {"title": title, "message": message, "user": None, "flashes": [], "csrf": ""},
            status_code=status,
            headers=PAGE_HEADERS,
        )

    @app.exception_handler(ApiProblem)
    async def on_problem(_request: Request, exc: ApiProblem) -> Response:
        body = m.Problem(detail=exc.detail, errors=[m.FieldError(**e) for e in exc.errors])
        return JSONResponse(body.model_dump(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = _field_errors(exc)
        if is_desk(request):
            return desk_message(request, 422, "Invalid request", "The address is not valid.")
        missing_key = any(
            e["type"] == "missing" and e["loc"][:2] == ["header", "Idempotency-Key"] for e in errors
        )
        if missing_key:
            body = m.Problem(detail="the Idempotency-Key header is required")
            return JSONResponse(body.model_dump(), status_code=400)
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if not _is_json(media) and any(e["loc"] == ["body"] for e in errors):
            # FastAPI reads a body of another media type, or of none, as bytes, and says only
            # that they are no object: name what to send instead.
            sent = media or "no Content-Type"
            body = m.Problem(
                detail=f"send the body as JSON (Content-Type: application/json), not {sent}"
            )
            return JSONResponse(body.model_dump(), status_code=415)
        summary = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:5])
        body = m.Problem(detail=f"invalid request: {summary}", errors=errors)
        return JSONResponse(jsonable_encoder(body), status_code=422)

    async def on_database_unavailable(request: Request, exc: BaseException) -> Response:
        """PostgreSQL out of reach, too busy or too slow: 503 with ``Retry-After`` (the desk's
        page, or the API's problem), not a bare 500."""
        log.warning(
            "%s %s: the database is out of reach or too busy (%s: %s); answered 503",
            request.method,
            request.url.path,
            type(exc).__name__,
            exc,
        )
        if is_desk(request):
            response = desk_message(
                request,
                503,
                "Try again shortly",
                "The desk cannot reach its database just now. Try again in a minute.",
            )
        else:
            body = m.Problem(detail="the database is out of reach or too busy; retry later")
            response = JSONResponse(body.model_dump(), status_code=503)
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response

    for unavailable in DATABASE_UNAVAILABLE:
        app.add_exception_handler(unavailable, on_database_unavailable)

    async def desk_unavailable(
        scope: Scope, receive: Receive, send: Send, failure: BaseException
    ) -> None:
        """The answer to a desk request whose session's sign-out could not be checked."""
        response = await on_database_unavailable(Request(scope, receive), failure)
        await response(scope, receive, send)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        if is_desk(request) and exc.status_code == 404:
            return desk_message(request, 404, "Not found", "There is no such page.")
        if is_desk(request) and exc.status_code == 415:
            message = "Send the form from the desk's own page."
            return desk_message(request, 415, "Unsupported form", message)
        body = m.Problem(detail=str(exc.detail))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    def openapi() -> dict[str, Any]:
        """The generated document, plus the runtime limit on complaint text."""
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            text = schema["components"]["schemas"]["ComplaintRequest"]["properties"]["text"]
            text["maxLength"] = settings.max_complaint_chars
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    signer = SessionSigner(
        settings.session_secret.get_secret_value().encode(), settings.session_max_age_s
    )
    app.add_middleware(
        SessionMiddleware,
        signer=signer,
        secure=settings.session_cookie_secure,
        revoked=ctx.store.session_revoked,
        unavailable=DATABASE_UNAVAILABLE,
        when_unavailable=desk_unavailable,
    )
    app.add_middleware(BodyLimitMiddleware, limit=body_limit(settings.max_complaint_chars))
    app.add_middleware(HttpMetricsMiddleware, metrics=metrics)
    return app
