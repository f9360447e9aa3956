"""Settings of the API service (read from the environment only by the entry point)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from refund_bench.config import StackSettings

MIN_SESSION_SECRET_CHARS = 32
MIN_API_TOKEN_CHARS = 32
"""A bearer token shorter than this is refused at start: a token is a password that no
sign-in limit protects (``secrets.token_urlsafe(32)`` gives 43 characters)."""

TokenScope = Literal["complaints", "disputes"]
"""What an API token opens: ``complaints``, submitting them (``POST /complaints``);
``disputes``, reading their stories (``GET /disputes/{id}``)."""
TOKEN_SCOPES: tuple[TokenScope, ...] = get_args(TokenScope)


@dataclass(frozen=True)
class ApiToken:
    """A bearer token and the scopes it opens (the token is never shown in its repr)."""

    secret: bytes = field(repr=False)
    scopes: frozenset[TokenScope]


def parse_api_token(entry: str) -> ApiToken:
    """One ``API_TOKENS`` entry: ``<scope>:<token>`` opens that scope only; any other entry is
    a bare token, which opens every scope (as every token did before scopes: one holding a
    ``:`` still works, and a misspelt scope makes a token no client sends)."""
    scope, sep, secret = entry.partition(":")
    if sep and scope in TOKEN_SCOPES:
        return ApiToken(secret.strip().encode(), frozenset({scope}))
    return ApiToken(entry.encode(), frozenset(TOKEN_SCOPES))


def unscoped_with_colon(tokens: tuple[ApiToken, ...]) -> int:
    """How many of ``tokens`` are bare but hold a ``:``: a misspelt scope, most likely (the API
    warns of them at start, without quoting them)."""
    return sum(1 for t in tokens if b":" in t.secret and t.scopes == frozenset(TOKEN_SCOPES))


SESSION_MAX_AGE_LIMIT_S = 7 * 24 * 3600
"""The longest a desk sign-in may be set to last. A sign-out is remembered this long after the
session began, whatever ``SESSION_MAX_AGE_S`` is now: raising the setting later cannot bring a
signed-out session back."""


class ApiSettings(StackSettings):
    """``API_HOST``, ``API_PORT``, ``METRICS_PORT``, ``API_TOKENS``, ``REVIEWERS``,
    ``SESSION_SECRET``, ``STRIPE_WEBHOOK_SECRET``, ``STRIPE_API_KEY``, ... .

    ``API_TOKENS`` is a comma-separated list of bearer tokens for API clients, each bare (it
    opens every scope) or as ``<scope>:<token>`` (:data:`TokenScope`). ``REVIEWERS`` is
    ``name:hash,name:hash`` with hashes from ``python -m services.api hash-password``.
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)
    """``hide_input_in_errors``: a validation error must not print the secrets it was given."""

    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"  # noqa: S104 - scraped from inside the cluster
    metrics_port: int = Field(default=9400, ge=0, le=65535)
    """``/metrics`` is served here, not on ``API_PORT``: the port the Ingress publishes to
    clients and reviewers does not show the service's counters (0: any free port)."""
    api_tokens: SecretStr = SecretStr("")
    reviewers: SecretStr = SecretStr("")
    session_secret: SecretStr = SecretStr("")
    session_max_age_s: int = Field(default=8 * 3600, ge=60, le=SESSION_MAX_AGE_LIMIT_S)
    session_cookie_secure: bool = False
    """Set in production (HTTPS): the session cookie is then only sent over TLS."""
    desk_login_attempts: int = Field(default=5, ge=1)
    """Sign-in attempts per user name and window; further ones get 429 until it closes."""
    desk_login_window_s: int = Field(default=900, ge=1)
    desk_password_threads: int = Field(default=1, ge=1, le=16)
    """Threads that check sign-in passwords (each check costs the hashes' key derivations)."""
    desk_password_queue: int = Field(default=8, ge=0, le=1000)
    """Sign-ins that may wait for a password thread; one more is answered 429 at once."""
    max_complaint_chars: int = Field(default=5000, ge=1, le=1_000_000)
    publish_timeout_s: float = Field(default=10.0, gt=0)
    outbox_interval_s: float = Field(default=5.0, gt=0)
    db_pool_max: int = Field(default=10, ge=1)
    """PostgreSQL connections for the desk, the status API and the intake's own queries."""
    db_pool_wait_s: float = Field(default=2.0, gt=0)
    """How long a request's queries (a complaint's key, order and claim, a desk page, a dispute's
    story, a Stripe event) wait for one of those connections before the request is answered 503
    with ``Retry-After``: PostgreSQL busy or out of reach."""
    db_publish_pool_max: int = Field(default=4, ge=1)
    """PostgreSQL connections held while an event is published (each until Kafka answers):
    a separate pool, so that waiting for Kafka never takes the connections of the rest."""
    publish_wait_s: float = Field(default=2.0, gt=0)
    """How long a publish waits for a publishing connection before it answers 503 (intake) or
    leaves the decision to the outbox (desk)."""
    stripe_webhook_secret: SecretStr = SecretStr("")
    """The signing secret (``whsec_...``) of the Stripe webhook endpoint ``POST
    /webhooks/stripe``; while it is empty the endpoint answers 503 and Stripe keeps the events."""
    stripe_webhook_tolerance_s: int = Field(default=300, ge=1)
    """How old a signed Stripe event may be (its signature's timestamp) to be accepted."""
    stripe_api_key: SecretStr = SecretStr("")
    """The key the webhook reads a reported refund back from Stripe with (``GET
    /v1/refunds/{id}``): a restricted key allowed to read refunds is enough. While it is empty
    ``POST /webhooks/stripe`` answers 503, as without ``STRIPE_WEBHOOK_SECRET``."""
    stripe_api_base: str = "http://127.0.0.1:12111"
    """Stripe's API, as the payout stage reads it (``https://api.stripe.com`` in production)."""
    stripe_timeout_s: float = Field(default=5.0, gt=0)
    """How long reading a refund back may take; beyond it the event is answered 503, and Stripe
    delivers it again."""
    stripe_webhook_wait_s: float | None = Field(default=None, gt=0)
    """How long an event waits for one of the ``STRIPE_WEBHOOK_CONCURRENCY`` slots before it is
    answered 503 ``busy`` (Stripe delivers it again); unset: ``STRIPE_TIMEOUT_S``."""
    api_docs: bool = True
    """Serve the OpenAPI document (``/openapi.json``) and its Swagger UI (``/docs``) without
    sign-in. Off in production (``deploy/k8s/api.yaml``): the document is then published from
    the repository (``python -m services.api openapi``, docs/api.md) rather than by every
    replica to anyone who can reach it."""
    stripe_webhook_concurrency: int = Field(default=2, ge=1)
    """Stripe events settled at once. Each holds a PostgreSQL connection of the API's pool (and
    its round's row lock) while it reads the refund back from Stripe, so a burst of events while
    Stripe is slow takes at most this many of each replica's ``DB_POOL_MAX`` from the intake and
    the desk; the others wait without a connection, for up to ``STRIPE_WEBHOOK_WAIT_S``, and
    are then answered 503 (``busy``: Stripe delivers them again)."""
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _session_secret_strong(self) -> ApiSettings:
        if len(self.session_secret.get_secret_value()) < MIN_SESSION_SECRET_CHARS:
            raise ValueError(
                f"SESSION_SECRET must be set to at least {MIN_SESSION_SECRET_CHARS} characters"
                " (e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
            )
        return self

    @model_validator(mode="after")
    def _api_tokens_strong(self) -> ApiSettings:
        short = [t for t in self.bearer_tokens() if len(t.secret) < MIN_API_TOKEN_CHARS]
        if short:
            raise ValueError(
                f"API_TOKENS: {len(short)} of the tokens are shorter than {MIN_API_TOKEN_CHARS}"
                " characters (e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        return self

    def bearer_tokens(self) -> tuple[ApiToken, ...]:
        """The accepted API tokens with their scopes (empty entries dropped)."""
        raw = self.api_tokens.get_secret_value()
        return tuple(parse_api_token(t.strip()) for t in raw.split(",") if t.strip())
