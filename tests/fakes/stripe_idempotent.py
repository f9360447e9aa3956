"""A small Stripe stand-in that honours idempotency keys, for the payout retry path.

stripe-mock checks request shapes but does not replay idempotent requests. This fake does:
a key maps to the stored response; the same key with other parameters is rejected with an
``idempotency_error``. It can lose responses (create the refund, then answer 500), break an
answer's body off half-way, and throttle (answer 429 before doing anything), to drive the
client's retries. Like Stripe, it saves a server error met once the work began
(``fail_after_start``) under the key and replays it, and marks every replayed answer
``Idempotent-Replayed: true``.

It also answers ``GET /v1/refunds/{id}`` with the refund as it holds it now: one it created, or
one a test put there with :meth:`FakeStripe.hold` (404 for any other). A test can make those
reads fail (``read_failures``: 500s; ``refuse_key``: 401).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from tests.fakes.loopback import JsonAnswerHandler, LoopbackServer


@dataclass
class FakeStripe:
    lose_responses: int = 0
    throttle: int = 0
    cut_bodies: int = 0
    """Answers (after the work is done) whose body breaks off half-way: the connection closes
    before the length the headers announced."""
    decline_references: set[str] = field(default_factory=set)
    other_mode_references: set[str] = field(default_factory=set)
    """Payments Stripe holds under the other mode than the key's: a refund of one is answered
    400 ``resource_missing``, saying so, and nothing is saved under its key."""
    fail_after_start: int = 0
    """New requests that create their refund and then fail with a 500, which is saved under the
    key: every retry under it gets the same 500, as from Stripe."""
    refund_status: dict[str, str] = field(default_factory=dict)
    """A refund's status by payment reference (``succeeded`` for any other)."""
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_key: dict[str, tuple[str, int, dict[str, Any]]] = field(default_factory=dict)
    requests: int = 0
    replayed: int = 0
    read_failures: int = 0
    """Refund reads (GET) answered 500 before anything is read."""
    refuse_key: bool = False
    """Answer every refund read 401, as Stripe does for a revoked or wrong key."""
    reads: list[str] = field(default_factory=list)
    """The refund ids read (GET), in order."""
    read_gate: threading.Event | None = None
    """While set to an unset event, each refund read waits for it (up to 30 s) before answering:
    the reads in progress can be counted (``reading``, ``most_reading``)."""
    reading: int = 0
    most_reading: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(
        self,
        refund_id: str,
        status: str,
        *,
        failure_reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        """Hold refund ``refund_id`` with ``status`` from now on (made if unknown)."""
        with self._lock:
            refund = self.refunds.setdefault(
                refund_id,
                {
                    "id": refund_id,
                    "object": "refund",
                    "amount": 68900,
                    "currency": "inr",
                    "payment_intent": "pi_test",
                    "metadata": metadata or {},
                },
            )
            refund["status"] = status
            refund["failure_reason"] = failure_reason

    def read(self, refund_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, answer) of ``GET /v1/refunds/{refund_id}``, once ``read_gate`` opens."""
        gate = self.read_gate
        with self._lock:
            self.reading += 1
            self.most_reading = max(self.most_reading, self.reading)
        try:
            if gate is not None:
                gate.wait(30)
            return self._read(refund_id)
        finally:
            with self._lock:
                self.reading -= 1

    def _read(self, refund_id: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.reads.append(refund_id)
            if self.refuse_key:
                return 401, _error("invalid_request_error", "Invalid API Key provided", "")
            if self.throttle > 0:
                self.throttle -= 1
                return 429, _error("rate_limit_error", "Too many requests", "rate_limit")
            if self.read_failures > 0:
                self.read_failures -= 1
                return 500, _error("api_error", "internal error", "api_error")
            refund = self.refunds.get(refund_id)
            if refund is None:
                message = f"No such refund: '{refund_id}'"
                return 404, _error("invalid_request_error", message, "resource_missing")
            return 200, dict(refund)

    def handle(self, key: str | None, body: str) -> tuple[int, dict[str, Any], bool]:
        """(HTTP status, answer, whether it replays an answer saved under ``key``)."""
        params = dict(parse_qsl(body, keep_blank_values=True))
        fingerprint = json.dumps(params, sort_keys=True)
        with self._lock:
            self.requests += 1
            if self.throttle > 0:
                self.throttle -= 1
                return 429, _error("rate_limit_error", "Too many requests", "rate_limit"), False
            if key is not None and key in self.by_key:
                stored_fp, status, response = self.by_key[key]
                if stored_fp != fingerprint:
                    return (
                        400,
                        _error(
                            "idempotency_error",
                            "Keys for idempotent requests can only be used with the same"
                            " parameters.",
                            "idempotency_key_in_use",
                        ),
                        False,
                    )
                answer = self._maybe_lose(status, response)
                saved = answer == (status, response)  # a lost answer is not Stripe's own
                self.replayed += saved
                return (*answer, saved)
            reference = params.get("payment_intent", "")
            if reference in self.other_mode_references:
                message = (
                    f"No such payment_intent: '{reference}'; a similar object exists in live"
                    " mode, but a test mode key was used to make this request."
                )
                return 400, _error("invalid_request_error", message, "resource_missing"), False
            if params.get("payment_intent") in self.decline_references:
                status, response = (
                    402,
                    _error("card_error", "The card was declined.", "card_declined"),
                )
            else:
                refund_id = f"re_{uuid.uuid4().hex[:16]}"
                response = {
                    "id": refund_id,
                    "object": "refund",
                    "amount": int(params.get("amount", 0)),
                    "currency": params.get("currency", "inr"),
                    "status": self.refund_status.get(params.get("payment_intent", ""), "succeeded"),
                    "payment_intent": params.get("payment_intent"),
                    "metadata": {},
                }
                self.refunds[refund_id] = response
                status = 200
                if self.fail_after_start > 0:
                    self.fail_after_start -= 1
                    status, response = 500, _error("api_error", "internal error", "api_error")
            if key is not None:
                self.by_key[key] = (fingerprint, status, response)
            return (*self._maybe_lose(status, response), False)

    def take_cut_body(self) -> bool:
        """Whether this answer's body is to break off (counts ``cut_bodies`` down)."""
        with self._lock:
            if self.cut_bodies > 0:
                self.cut_bodies -= 1
                return True
            return False

    def _maybe_lose(self, status: int, response: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer 500 instead of a success while ``lose_responses`` lasts (the work is done)."""
        if self.lose_responses > 0 and status == 200:
            self.lose_responses -= 1
            return 500, _error("api_error", "response lost", "api_error")
        return status, response


def _error(kind: str, message: str, code: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "code": code}}


class _Handler(JsonAnswerHandler):
    fake: FakeStripe

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        prefix = "/v1/refunds/"
        if self.path.startswith(prefix) and "/" not in self.path[len(prefix) :]:
            status, payload = self.fake.read(self.path[len(prefix) :])
        else:
            status, payload = 404, _error("invalid_request_error", "unknown path", "not_found")
        self.answer_json(status, json.dumps(payload).encode())

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        if self.path != "/v1/refunds":
            status, payload = 404, _error("invalid_request_error", "unknown path", "not_found")
            replayed = False
        else:
            status, payload, replayed = self.fake.handle(self.headers.get("Idempotency-Key"), body)
        answer = json.dumps(payload).encode()
        if self.fake.take_cut_body():
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer[: len(answer) // 2])
            self.close_connection = True
            return
        self.answer_json(status, answer, {"Idempotent-Replayed": "true"} if replayed else {})


class FakeStripeServer(LoopbackServer):
    """Serves a :class:`FakeStripe` on a free loopback port in a background thread."""

    def __init__(self, fake: FakeStripe) -> None:
        super().__init__(type("Handler", (_Handler,), {"fake": fake}))
        self.fake = fake
        self.url = f"http://127.0.0.1:{self.server_port}"
