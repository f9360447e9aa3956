"""What every route of one app instance shares (built by ``create_app``; no globals)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry
from psycopg_pool import AsyncConnectionPool
from starlette.templating import Jinja2Templates

from refund_bench import events as ev
from services.api.metrics import ApiMetrics
from services.api.passwords import PasswordChecks, ReviewerDirectory
from services.api.publisher import Publisher
from services.api.settings import ApiSettings, ApiToken
from services.api.store import Store
from services.payout.payments import RefundReader


def new_hex_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Deps:
    """The app's connections. ``create_app`` opens them at startup and closes them at shutdown.

    ``pool`` (queries) and ``publish_pool`` (rows locked while their event is published) must be
    created with ``open=False``: they are opened on the server's event loop. ``refunds`` reads
    refunds back from Stripe for its webhook (``None``: no ``STRIPE_API_KEY``, the webhook
    answers 503); it is closed at shutdown.
    """

    pool: AsyncConnectionPool[Any]
    publish_pool: AsyncConnectionPool[Any]
    publisher: Publisher
    refunds: RefundReader | None = None
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    clock: Callable[[], datetime] = ev.now
    new_id: Callable[[], str] = new_hex_id


@dataclass(frozen=True)
class AppContext:
    settings: ApiSettings
    store: Store
    publisher: Publisher
    metrics: ApiMetrics
    tokens: tuple[ApiToken, ...] = field(repr=False)
    reviewers: ReviewerDirectory
    password_checks: PasswordChecks
    templates: Jinja2Templates
    clock: Callable[[], datetime]
    new_id: Callable[[], str]


class ApiProblem(Exception):  # noqa: N818 - an HTTP answer, not a failure of the server
    """Answer with a :class:`~services.api.models.Problem` body and ``status``."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}
