"""The stand-in's HTTP surface: an OpenAI-compatible ``/v1/chat/completions`` and its admin.

``POST /v1/chat/completions`` is answered on a direct ASGI path (:class:`StandinApp`): the body
is parsed with ``orjson``, with no framework routing, middleware, pydantic model or dependency
injection in between, so that the stand-in stays cheap at 0 ms latency (it shares the machine
with the pipeline it serves). Everything else (health, models, stats, admin) is a FastAPI app.
Faults are drawn from one seeded RNG, one draw per completion request, so a run with the same
seed and the same request order injects the same faults. A queue of scripted faults
(``next_faults``) takes precedence, for tests that need "429 on the next two calls". Above both,
``fail_disputes`` answers every request of one role for one dispute (by its dispute header)
with a 500, for tests of a request the endpoint fails alone while it answers the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import random
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from services.llm_standin.answers import ROLE_BY_SCHEMA, answer
from services.llm_standin.errors import RuleError
from services.llm_standin.schema_check import schema_errors, unsupported

FaultKind = Literal["429", "5xx", "timeout", "malformed", "400", "400_setting", "401"]
"""The random faults are the first four; the 400s and ``401`` only come scripted."""
Role = Literal["extractor", "judge", "settler"]
"""The roles a request is for (by its schema's name), as ``fail_disputes`` names them."""
log = logging.getLogger(__name__)
MODEL_ID = "refund-bench-standin"
COMPLETIONS_PATH = "/v1/chat/completions"
_DISPUTE_HEADER = b"x-refund-bench-dispute"
MAX_WAIT_S = 600
"""The longest latency or hang a fault setting may ask for: a request waits it out even when
its client has gone, so an unbounded setting would pile up waiting requests for good."""


class FaultSettings(BaseModel):
    """Fault injection: per-request probabilities (summing to at most 1) and latency."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    latency_ms: int = Field(default=0, ge=0, le=MAX_WAIT_S * 1000)
    rate_429: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_5xx: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_timeout: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_malformed: float = Field(default=0.0, ge=0.0, le=1.0)
    timeout_seconds: float = Field(default=30.0, ge=0.0, le=MAX_WAIT_S)

    @model_validator(mode="after")
    def _rates_sum(self) -> FaultSettings:
        if self.rate_429 + self.rate_5xx + self.rate_timeout + self.rate_malformed > 1.0:
            raise ValueError("the fault rates must sum to at most 1")
        return self


class FaultUpdate(BaseModel):
    """Body of ``POST /admin/faults``: any subset of the settings, a new seed, scripted faults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    latency_ms: int | None = Field(default=None, ge=0, le=MAX_WAIT_S * 1000)
    rate_429: float | None = Field(default=None, ge=0.0, le=1.0)
    rate_5xx: float | None = Field(default=None, ge=0.0, le=1.0)
    rate_timeout: float | None = Field(default=None, ge=0.0, le=1.0)
    rate_malformed: float | None = Field(default=None, ge=0.0, le=1.0)
    timeout_seconds: float | None = Field(default=None, ge=0.0, le=MAX_WAIT_S)
    seed: int | None = None
    next_faults: list[FaultKind] | None = None
    fail_disputes: dict[str, Role] | None = None
    """Dispute id -> the role whose every request for it is answered 500; replaces the
    mapping held (``{}`` clears it)."""


MAX_DISPUTES_COUNTED = 100_000
"""``by_dispute`` counts the calls of this many disputes, those called most recently; the one
called longest ago is forgotten (and counted in ``disputes_forgotten``), so a long run stays
bounded."""


@dataclass
class Stats:
    """Counters reported by ``GET /stats``; zeroed by ``POST /admin/reset``."""

    total_calls: int = 0
    by_role: Counter[str] = field(default_factory=Counter)
    by_dispute: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """Calls per dispute, the one called longest ago first."""
    faults_injected: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    disputes_forgotten: int = 0
    dispute_limit: int = MAX_DISPUTES_COUNTED

    def count_dispute(self, dispute: str) -> None:
        """One more call for ``dispute``; beyond :attr:`dispute_limit` disputes, those called
        longest ago are forgotten."""
        self.by_dispute[dispute] = self.by_dispute.get(dispute, 0) + 1
        self.by_dispute.move_to_end(dispute)
        while len(self.by_dispute) > self.dispute_limit:
            self.by_dispute.popitem(last=False)
            self.disputes_forgotten += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "total_calls": self.total_calls,
            "by_role": dict(self.by_role),
            "by_dispute": dict(self.by_dispute),
            "disputes_forgotten": self.disputes_forgotten,
            "faults_injected": dict(self.faults_injected),
            "rejected_requests": self.rejected,
        }


class StandinState:
    """Everything the server keeps: fault settings, the seeded RNG, scripted faults, stats."""

    def __init__(self, faults: FaultSettings, seed: int) -> None:
        self.faults = faults
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - reproducible faults, not security
        self.next_faults: deque[FaultKind] = deque()
        self.fail_disputes: dict[str, Role] = {}
        self.stats = Stats()
        self.ids = itertools.count(1)

    def reset(self) -> None:
        """Zero the stats, re-seed the RNG and drop scripted faults and failing disputes
        (settings are kept)."""
        self.stats = Stats()
        self.rng = random.Random(self.seed)  # noqa: S311
        self.next_faults.clear()
        self.fail_disputes = {}
        self.ids = itertools.count(1)

    def fails(self, dispute: str | None, role: str) -> bool:
        """Whether every request of ``role`` for ``dispute`` is to fail."""
        return dispute is not None and self.fail_disputes.get(dispute) == role

    def draw_fault(self) -> FaultKind | None:
        """The fault for this request: the next scripted one, else one seeded draw."""
        roll = self.rng.random()  # always draw, so the sequence depends on the count alone
        if self.next_faults:
            return self.next_faults.popleft()
        f = self.faults
        options: tuple[tuple[FaultKind, float], ...] = (
            ("429", f.rate_429),
            ("5xx", f.rate_5xx),
            ("timeout", f.rate_timeout),
            ("malformed", f.rate_malformed),
        )
        for kind, rate in options:
            if roll < rate:
                return kind
            roll -= rate
        return None


@dataclass(frozen=True)
class Answer:
    """One HTTP answer of the completions endpoint: status, JSON body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def _error(
    status: int,
    message: str,
    kind: str,
    retry_after: str | None = None,
    *,
    code: str | None = None,
    param: str | None = None,
) -> Answer:
    """An error in OpenAI's shape: ``type`` (``kind``), ``code`` and ``param`` (the request
    setting at fault, if one is)."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    headers = ((b"retry-after", retry_after.encode()),) if retry_after is not None else ()
    return Answer(status, orjson.dumps(body), headers)


def _rules_fingerprint() -> str:
    """The ``system_fingerprint`` of every answer: ``fp_`` and a hash of the stand-in's source,
    so a recorded ruling names the version of the rules that answered (as a provider's names
    its backend configuration)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"fp_{digest.hexdigest()[:12]}"


SYSTEM_FINGERPRINT = _rules_fingerprint()


def _completion(state: StandinState, model: str, content: str, prompt_chars: int) -> Answer:
    prompt_tokens = max(1, prompt_chars // 4)
    completion_tokens = max(1, len(content) // 4)
    body = {
        "id": f"chatcmpl-standin-{next(state.ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Answer(200, orjson.dumps(body))


def _schema_of(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    response_format = payload.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        raise RuleError(
            "response_format must be {'type': 'json_schema', 'json_schema': {...}}",
            "response_format",
        )
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise RuleError("response_format.json_schema.name is required", "response_format")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise RuleError("response_format.json_schema.schema must be an object", "response_format")
    problems = unsupported(schema)
    if problems:
        detail = "; ".join(problems[:5])
        raise RuleError(
            f"the stand-in cannot check an answer against this schema: {detail}",
            "response_format",
        )
    return spec["name"], schema


def _number_or_none(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RuleError(f"{name} must be a number", name)
    return float(value)


async def complete(state: StandinState, dispute: str | None, body: bytes) -> Answer:
    """The answer to one chat-completions request (``dispute``: its dispute header, if any).

    Counts the call, answers by the rules, and injects this request's fault, if one is drawn.
    """
    stats = state.stats
    stats.total_calls += 1
    if dispute:
        stats.count_dispute(dispute)
    try:
        payload = orjson.loads(body)
    except ValueError as exc:
        stats.rejected += 1
        return _error(400, f"the request body is not JSON: {exc}", "invalid_request_error")
    try:
        if not isinstance(payload, dict):
            raise RuleError("the request body must be a JSON object")
        schema_name, schema = _schema_of(payload)
        role = ROLE_BY_SCHEMA.get(schema_name, "unknown")
        stats.by_role[role] += 1
        seed_value = payload.get("seed")
        if seed_value is not None and (
            isinstance(seed_value, bool) or not isinstance(seed_value, int)
        ):
            raise RuleError("seed must be an integer", "seed")
        temperature = _number_or_none(payload.get("temperature"), "temperature")
        model = payload.get("model")
        model = model if isinstance(model, str) else MODEL_ID
        messages = payload.get("messages")
        result = answer(schema_name, messages, seed=seed_value, temperature=temperature)
    except RuleError as exc:
        stats.rejected += 1
        return _error(400, exc.message, "invalid_request_error", param=exc.param)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # The rules read the request's documents as the product writes them; a document of
        # another shape (a list of numbers where objects belong, ...) is the request's fault.
        # Logged with its trace: a fault of the rules' own on a good document shows there.
        log.warning("refused a completion request the rules could not read", exc_info=True)
        stats.rejected += 1
        message = f"the stand-in cannot read the request's messages: {type(exc).__name__}: {exc}"
        return _error(400, message, "invalid_request_error")

    fault: FaultKind | None
    if state.fail_disputes and state.fails(dispute, role):
        state.rng.random()  # drawn as for any request; the scripted faults are left queued
        fault = "5xx"
    else:
        fault = state.draw_fault()
    if state.faults.latency_ms:
        await asyncio.sleep(state.faults.latency_ms / 1000)
    if fault is not None:
        stats.faults_injected[fault] += 1
        if fault == "429":
            return _error(
                429, "stand-in: rate limit (injected)", "requests", "1", code="rate_limit_exceeded"
            )
        if fault == "5xx":
            return _error(500, "stand-in: server error (injected)", "server_error")
        if fault == "timeout":
            await asyncio.sleep(state.faults.timeout_seconds)
            return _error(504, "stand-in: gateway timeout (injected)", "timeout")
        if fault == "400":
            message = "stand-in: the request is too long for the model's context (injected)"
            return _error(
                400,
                message,
                "invalid_request_error",
                code="context_length_exceeded",
                param="messages",
            )
        if fault == "400_setting":
            message = "stand-in: unsupported value: 'temperature' with this model (injected)"
            return _error(
                400, message, "invalid_request_error", code="unsupported_value", param="temperature"
            )
        if fault == "401":
            return _error(
                401,
                "stand-in: invalid API key (injected)",
                "invalid_request_error",
                code="invalid_api_key",
            )

    content = orjson.dumps(result).decode()
    problems = schema_errors(result, schema)
    if problems:
        stats.rejected += 1
        detail = "; ".join(problems[:5])
        return _error(
            400,
            f"stand-in cannot honour the {schema_name!r} schema sent: {detail}",
            "invalid_request_error",
            param="response_format",
        )
    if fault == "malformed":
        content = content[: max(1, len(content) // 2)]  # truncated JSON, as if cut off
    return _completion(state, model, content, len(body))


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the client went away before its request was read")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _dispute(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == _DISPUTE_HEADER:
            return bytes(value).decode("latin-1")
    return None


class StandinApp:
    """The stand-in's ASGI application: completions on a direct path, the rest on ``admin``."""

    def __init__(self, state: StandinState, admin: FastAPI) -> None:
        self.state = state
        self.admin = admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != COMPLETIONS_PATH
            or scope["method"] != "POST"
        ):
            await self.admin(scope, receive, send)
            return
        try:
            body = await _body(receive)
        except ConnectionAbortedError:
            return
        answer = await complete(self.state, _dispute(scope), body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(answer.body)).encode()),
            *answer.headers,
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})


def create_app(faults: FaultSettings | None = None, seed: int = 0) -> StandinApp:
    """A fresh stand-in application with its own state (no globals)."""
    state = StandinState(faults or FaultSettings(), seed)
    app = FastAPI(
        title="Refund Bench LLM stand-in",
        description="Deterministic OpenAI-compatible stand-in; not the product's judgement.",
        docs_url=None,
        redoc_url=None,
    )

    @app.exception_handler(RequestValidationError)
    async def refused(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each setting refused and why, without the value sent: FastAPI's own
        answer echoes it, and a non-finite number (which Python's JSON reader takes) cannot be
        written back as JSON."""
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "refund-bench"}],
        }

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {
            **state.stats.as_json(),
            "faults": state.faults.model_dump(),
            "seed": state.seed,
            "next_faults": list(state.next_faults),
            "fail_disputes": dict(state.fail_disputes),
        }

    @app.post("/admin/reset")
    async def reset() -> dict[str, str]:
        state.reset()
        return {"status": "reset"}

    @app.post("/admin/faults")
    async def set_faults(update: FaultUpdate) -> JSONResponse:
        changes = update.model_dump(
            exclude_none=True, exclude={"seed", "next_faults", "fail_disputes"}
        )
        try:
            state.faults = FaultSettings.model_validate({**state.faults.model_dump(), **changes})
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc)}}, status_code=422)
        if update.seed is not None:
            state.seed = update.seed
            state.rng = random.Random(update.seed)  # noqa: S311
        if update.next_faults is not None:
            state.next_faults = deque(update.next_faults)
        if update.fail_disputes is not None:
            state.fail_disputes = dict(update.fail_disputes)
        return JSONResponse({"faults": state.faults.model_dump(), "seed": state.seed})

    return StandinApp(state, app)
