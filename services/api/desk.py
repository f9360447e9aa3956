"""The review desk: sign-in, the queue, the case page and the decision forms (HTML).

Every page needs a reviewer session (signed cookie, ``/review`` only); every POST needs the
session's CSRF token. Bearer tokens mean nothing here, so API clients cannot decide reviews.
A decision is recorded once per review item (the database's UNIQUE constraint decides races:
the loser gets 409 "already decided by ..."), then published as ``review.decided``.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from hmac import compare_digest
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from refund_bench import events as ev
from refund_bench.db.payout_rounds import (
    CONFLICT_HOW_TO_CLOSE,
    CONFLICT_NOT_REPAYABLE,
    how_to_close,
    is_payout_failure_item,
    payout_item_round,
    settled_on_other_item,
    why_not_repayable,
)
from refund_bench.domain import (
    DECISIONS_BY_KIND,
    ReviewDecision,
    a_kind,
    decisions_for,
    payout_item_is_conflict,
)
from services.api import models as m
from services.api.context import AppContext
from services.api.formatting import Span, highlight, path_segment, pretty_json, when
from services.api.outbox import Outbox
from services.api.sessions import (
    CREDENTIAL_KEY,
    SESSION_ID_KEY,
    csrf_ok,
    csrf_token,
    new_session_id,
)
from services.api.settings import SESSION_MAX_AGE_LIMIT_S
from services.api.store import AlreadyDecided, DecisionRecord, ItemNotFound, NotDecidable

log = logging.getLogger(__name__)

ITEM_KEY = re.compile(m.ID_PATTERN)
"""A review item's key (grievance:g3, dispute:round2) is an id like the others."""
KIND_LABELS = {
    "GRIEVANCE": "Grievances to decide",
    "DISPUTE": "Disputes held by the cap",
    "PAYOUT": "Payout failures",
    "EXTRACTION": "Extraction failures",
}


PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
}
"""No script runs on desk pages at all; forms post only to the desk."""


@dataclass(frozen=True)
class KeptNote:
    """A decision the desk refused: the note the reviewer typed goes back into the form of the
    item it was written for, so that a refusal costs no retyping."""

    item_key: str
    note: str


BUSY_RETRY_AFTER_S = 5
"""What a sign-in refused because every password check slot is taken is told to wait."""


def _safe_next(target: str) -> str:
    """Only desk-relative redirect targets (no open redirect)."""
    if target.startswith("/review") and not target.startswith("//") and "\\" not in target:
        return target
    return "/review"


REPRICED = "pricing re-prices the dispute."
AFTER_DECISION = {
    ReviewDecision.REPAY.value: "pricing re-prices the dispute, and a new round pays the failed"
    " amount again, whatever was decided on the dispute since.",
    ReviewDecision.PAID_ELSEWHERE.value: "the failed round is closed; nothing more is paid, and"
    " the order's other disputes now go to a payment operator as after a paid round.",
    ReviewDecision.RESOLVED_ELSEWHERE.value: "the item is closed; nothing is priced or paid"
    " for this dispute.",
}
"""What follows a published decision, where it is not a re-pricing alone (the flash message)."""
AFTER_CONFLICT = (
    "the conflicting request is closed; nothing is paid for it, and its round is left as it is."
)
"""What follows closing a conflicting payout request's item (the flash message)."""
AFTER_PAID_AGAIN = "the item is closed; its round is paid again from its other item, once."
"""What follows closing the other item of a round paid again (the flash message)."""


def failed_round(
    item: m.ReviewItemRecord,
    ledger: Mapping[int, m.LedgerRecord],
    last_priced_age_s: float | None = None,
    repaid: Mapping[int, str] | None = None,
    open_items: frozenset[str] = frozenset(),
    settled: Mapping[int, m.ReviewDecisionRecord] | None = None,
) -> dict[str, Any] | None:
    """For a PAYOUT item: its round's ledger row, and why paying again cannot mend it (``None``:
    it can; the desk offers REPAY only then, and the store checks again when it records one).
    ``last_priced_age_s``: seconds since the dispute's last priced round; ``repaid``: the rounds
    a REPAY was recorded for, and the item it was recorded on; ``settled``: likewise for a
    PAID_ELSEWHERE on a round's failure item (``settled_on``: a settlement by hand on another
    item than this one, since this one opened: it settled this failure too);
    ``open_items``: the keys of the
    dispute's open items (``also_open``: the round's other open failure item, which a payment
    operator must not decide as well)."""
    round_ = payout_item_round(item.item_key) if item.kind == "PAYOUT" else None
    row = None if round_ is None else ledger.get(round_)
    if row is None or round_ is None:
        return None
    if payout_item_is_conflict(item.item_key):
        return {
            "ledger": row,
            "why_not": CONFLICT_NOT_REPAYABLE,
            "how_to_close": CONFLICT_HOW_TO_CLOSE,
            "conflict": True,
            "repaid_on": None,
            "settled_on": None,
            "also_open": [],
        }
    repaid_on = (repaid or {}).get(round_)
    by_hand = (settled or {}).get(round_)
    settled_on = settled_on_other_item(
        item.item_key,
        item.created_at,
        None if by_hand is None else (by_hand.item_key, by_hand.decided_at),
        paid_elsewhere=row.paid_elsewhere,
    )
    why_not = why_not_repayable(
        row.status,
        row.error_code,
        last_priced_age_s,
        paid_elsewhere=row.paid_elsewhere,
        repaid_on=repaid_on,
        settled_on=settled_on,
    )
    return {
        "ledger": row,
        "why_not": why_not,
        "how_to_close": how_to_close(
            row.error_code, row.status, repaid_on, settled_on, paid_elsewhere=row.paid_elsewhere
        ),
        "conflict": False,
        "repaid_on": repaid_on,
        "settled_on": settled_on,
        "also_open": sorted(
            key
            for key in open_items
            if key != item.item_key
            and is_payout_failure_item(key)
            and payout_item_round(key) == round_
        ),
    }


def case_view(story: m.DisputeStory, now: datetime) -> dict[str, Any]:
    """The case page's context at ``now``: the story regrouped per grievance, spans cut for
    <mark>."""
    last_round = story.priced_rounds[-1] if story.priced_rounds else None
    priced_age_s = None if last_round is None else (now - last_round.priced_at).total_seconds()
    lines = {line.grievance_id: line for line in last_round.lines} if last_round else {}
    decisions = {d.item_key: d for d in story.review_decisions}
    items_by_grievance = {
        i.grievance_id: i for i in story.review_items if i.kind == "GRIEVANCE" and i.grievance_id
    }
    verdicts = {v.grievance_id: v for v in story.verdicts}
    grievances = []
    for g in story.grievances:
        item = items_by_grievance.get(g.grievance_id)
        grievances.append(
            {
                "g": g,
                "verdict": verdicts.get(g.grievance_id),
                "rulings": sorted(
                    (r for r in story.rulings if r.grievance_id == g.grievance_id),
                    key=lambda r: r.judge_seat,
                ),
                "line": lines.get(g.grievance_id),
                "item": item,
                "decision": decisions.get(item.item_key) if item else None,
                "quote": story.complaint.text[g.span_start : g.span_end],
            }
        )
    ledger = {row.round: row for row in story.payouts.ledger}
    repaid = {
        round_: d.item_key
        for d in story.review_decisions
        if d.decision == ReviewDecision.REPAY.value
        and (round_ := payout_item_round(d.item_key)) is not None
    }
    settled = {
        round_: d
        for d in story.review_decisions
        if d.decision == ReviewDecision.PAID_ELSEWHERE.value
        and is_payout_failure_item(d.item_key)
        and (round_ := payout_item_round(d.item_key)) is not None
    }
    open_keys = frozenset(i.item_key for i in story.review_items if i.status == "OPEN")
    other_items = [
        {
            "item": i,
            "decision": decisions.get(i.item_key),
            "failed": failed_round(i, ledger, priced_age_s, repaid, open_keys, settled),
        }
        for i in story.review_items
        if i.kind != "GRIEVANCE"
    ]
    held = {
        i.grievance_id for i in story.review_items if i.kind == "GRIEVANCE" and i.status == "OPEN"
    }
    segments = highlight(
        story.complaint.text,
        (Span(g.grievance_id, g.span_start, g.span_end, g.category) for g in story.grievances),
    )
    return {
        "story": story,
        "currency": story.summary.currency or "INR",
        "marks": [{"seg": s, "focus": bool(held & set(s.grievance_ids))} for s in segments],
        "decisions": decisions,
        "grievances": grievances,
        "other_items": other_items,
        "last_round": last_round,
        "evidence_pretty": pretty_json(story.evidence.snapshot_json) if story.evidence else "",
        "decisions_by_kind": {k: [d.value for d in v] for k, v in DECISIONS_BY_KIND.items()},
    }


URL_ENCODED = "application/x-www-form-urlencoded"


async def url_encoded_posts(request: Request) -> None:
    """The desk's pages post URL-encoded forms only; any other body is refused (415). A
    multipart part may name its own character set, and decoded by it, a field can hold
    what no later step can encode (a lone surrogate), which would end in a 500."""
    if request.method == "POST":
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != URL_ENCODED:
            raise HTTPException(415, f"the desk's forms are sent as {URL_ENCODED}")


def desk_router(ctx: AppContext, outbox: Outbox[DecisionRecord]) -> APIRouter:
    router = APIRouter(
        prefix="/review", include_in_schema=False, dependencies=[Depends(url_encoded_posts)]
    )
    max_age = ctx.settings.session_max_age_s

    def reviewer(request: Request) -> str | None:
        session = request.session
        user, signed_in_at = session.get("user"), session.get("iat")
        if not isinstance(user, str) or user not in ctx.reviewers:
            return None
        mark, carried = ctx.reviewers.credential_mark(user), session.get(CREDENTIAL_KEY)
        if mark is None or not isinstance(carried, str) or not compare_digest(carried, mark):
            return None  # signed in with a password since changed (or by an older version)
        if not isinstance(session.get(SESSION_ID_KEY), str):
            return None  # every sign-in names its session, so that signing out can revoke it
        if not isinstance(signed_in_at, int | float) or time.time() - signed_in_at > max_age:
            return None
        return user

    def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        session = request.session
        flashes = session.pop("flash", [])
        context.update(
            user=reviewer(request),
            csrf=csrf_token(session),
            flashes=flashes if isinstance(flashes, list) else [],
            kind_labels=KIND_LABELS,
        )
        return ctx.templates.TemplateResponse(
            request,
            template,
            context,
            status_code=status,
            headers=PAGE_HEADERS,
        )

    def flash(request: Request, level: str, text: str) -> None:
        request.session.setdefault("flash", []).append({"level": level, "text": text})

    def to_login(request: Request) -> RedirectResponse:
        target = quote(request.url.path, safe="/")
        return RedirectResponse(f"/review/login?next={target}", status_code=303)

    def sign_in_busy(request: Request, target: str) -> HTMLResponse:
        """429 for a sign-in that found every password-check slot taken (nothing checked)."""
        ctx.metrics.logins.labels("busy").inc()
        page = render(
            request,
            "login.html",
            429,
            next=target,
            error="The desk is busy signing people in. Try again in a few seconds.",
        )
        page.headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
        return page

    @router.get("/login")
    async def login_page(request: Request, next: str = "/review") -> Response:
        if reviewer(request):
            return RedirectResponse(_safe_next(next), status_code=303)
        return render(request, "login.html", next=_safe_next(next), error=None)

    @router.post("/login")
    async def login(
        request: Request,
        username: Annotated[str, Form()] = "",
        password: Annotated[str, Form()] = "",
        csrf_token_field: Annotated[str, Form(alias="csrf_token")] = "",
        next: Annotated[str, Form()] = "/review",
    ) -> Response:
        target = _safe_next(next)
        if not csrf_ok(request.session, csrf_token_field):
            ctx.metrics.logins.labels("csrf").inc()
            return render(
                request,
                "login.html",
                403,
                next=target,
                error="The sign-in form expired. Please try again.",
            )
        # The check's slot is taken first: an attempt counts only when its password will be
        # checked, so a flood that keeps every slot busy cannot use up a reviewer's attempts.
        with ctx.password_checks.slot() as check:
            if check is None:
                return sign_in_busy(request, target)
            window = await ctx.store.count_login_attempt(username, ctx.settings.desk_login_window_s)
            if window.attempts > ctx.settings.desk_login_attempts:
                # Refused before the password is checked: guessing gets nothing but this.
                ctx.metrics.logins.labels("throttled").inc()
                minutes = math.ceil(window.seconds_left / 60)
                page = render(
                    request,
                    "login.html",
                    429,
                    next=target,
                    error=f"Too many sign-in attempts for this user. Try again in {minutes} min.",
                )
                page.headers["Retry-After"] = str(window.seconds_left)
                return page
            ok = await check(username, password)
        if not ok:
            ctx.metrics.logins.labels("failed").inc()
            return render(
                request, "login.html", 401, next=target, error="Unknown user or wrong password."
            )
        ctx.metrics.logins.labels("ok").inc()
        await ctx.store.clear_login_attempts(username)
        request.session.clear()  # a fresh session (and CSRF token) on every sign-in
        request.session.update(
            {
                "user": username,
                "iat": int(time.time()),
                SESSION_ID_KEY: new_session_id(),
                CREDENTIAL_KEY: ctx.reviewers.credential_mark(username),
            }
        )
        csrf_token(request.session)
        return RedirectResponse(target, status_code=303)

    @router.post("/logout")
    async def logout(
        request: Request, csrf_token_field: Annotated[str, Form(alias="csrf_token")] = ""
    ) -> Response:
        if not csrf_ok(request.session, csrf_token_field):
            return render(
                request,
                "message.html",
                403,
                title="Sign-out failed",
                message="The form expired; reload the page and try again.",
            )
        session_id, signed_in_at = request.session.get(SESSION_ID_KEY), request.session.get("iat")
        if isinstance(session_id, str) and isinstance(signed_in_at, int | float):
            expires = datetime.fromtimestamp(signed_in_at + SESSION_MAX_AGE_LIMIT_S, UTC)
            await ctx.store.revoke_session(session_id, expires)
        request.session.clear()
        return RedirectResponse("/review/login", status_code=303)

    @router.get("")
    async def queue(request: Request, dispute: str = "", kind: str = "") -> Response:
        """Open items, oldest first; ``dispute`` and ``kind`` narrow the list."""
        if not reviewer(request):
            return to_login(request)
        dispute = dispute.strip()
        if dispute and not re.fullmatch(m.ID_PATTERN, dispute):
            dispute = ""
        kind = kind if kind in KIND_LABELS else ""
        counts, items = await ctx.store.queue(dispute_id=dispute or None, kind=kind or None)
        return render(
            request,
            "queue.html",
            counts=counts,
            items=items,
            total=sum(counts.values()),
            dispute=dispute,
            kind=kind,
        )

    async def render_case(
        request: Request,
        dispute_id: str,
        status: int = 200,
        error: str | None = None,
        kept: KeptNote | None = None,
    ) -> Response:
        """The case page; ``kept``: a refused decision's note, shown again in its item's form."""
        story = await ctx.store.dispute_story(dispute_id)
        if story is None:
            return render(
                request,
                "message.html",
                404,
                title="No such dispute",
                message=f"There is no dispute {dispute_id!r}.",
            )
        return render(
            request, "case.html", status, error=error, kept=kept, **case_view(story, ctx.clock())
        )

    @router.get("/disputes/{dispute_id:path}")
    async def case(
        request: Request, dispute_id: Annotated[str, Path(pattern=m.ID_PATTERN)]
    ) -> Response:
        if not reviewer(request):
            return to_login(request)
        return await render_case(request, dispute_id)

    @router.post("/disputes/{dispute_id:path}/decisions")
    async def decide(
        request: Request,
        dispute_id: Annotated[str, Path(pattern=m.ID_PATTERN)],
        item_key: Annotated[str, Form()] = "",
        decision: Annotated[str, Form()] = "",
        note: Annotated[str, Form()] = "",
        csrf_token_field: Annotated[str, Form(alias="csrf_token")] = "",
        repaid_on: Annotated[str, Form()] = "",
    ) -> Response:
        user = reviewer(request)
        if user is None:
            return render(
                request,
                "login.html",
                401,
                next=f"/review/disputes/{path_segment(dispute_id)}",
                error="Sign in as a reviewer to decide; nothing was recorded.",
            )
        if not csrf_ok(request.session, csrf_token_field):
            return render(
                request,
                "message.html",
                403,
                title="Form expired",
                message="The form expired or did not come from this desk; nothing was"
                " recorded. Reload the case page and decide again.",
            )
        # Browsers send a line break as CRLF but count it as one character against maxlength.
        note = note.replace("\r\n", "\n").strip()
        kept = KeptNote(item_key, note)
        problem = None
        if decision not in ReviewDecision.__members__ or not ITEM_KEY.fullmatch(item_key):
            problem = "Choose one of the decision buttons."
        elif not note:
            problem = "A note is required: say why, for the audit record."
        elif len(note) > ev.MAX_NOTE_CHARS or "\x00" in note:
            problem = f"The note must be at most {ev.MAX_NOTE_CHARS} characters of text."
        if problem:
            return await render_case(request, dispute_id, 422, problem, kept)
        chosen = ReviewDecision(decision)

        def fits(kind: str) -> None:
            allowed = decisions_for(kind, item_key)
            if allowed is None:
                raise NotDecidable(f"{kind} items are resolved outside the desk.")
            if chosen not in allowed:
                names = " or ".join(d.value for d in allowed)
                what = (
                    f"{item_key}, a conflicting payout request"
                    if payout_item_is_conflict(item_key)
                    else f"{a_kind(kind)} item"
                )
                raise NotDecidable(f"{chosen.value} does not apply to {what}: {names}.")

        record = DecisionRecord(
            review_id=f"r-{ctx.new_id()}",
            dispute_id=dispute_id,
            item_key=item_key,
            kind="",
            grievance_id=None,
            decision=chosen.value,
            reviewer=user,
            note=note,
            decided_at=ctx.clock(),
        )
        try:
            stored = await ctx.store.record_decision(record, fits, repaid_on or None)
        except ItemNotFound:
            return await render_case(request, dispute_id, 404, "No such review item.", kept)
        except NotDecidable as exc:
            return await render_case(request, dispute_id, 422, exc.reason, kept)
        except AlreadyDecided as exc:
            won = exc.existing
            ctx.metrics.decisions.labels(won.kind if won else "unknown", "conflict").inc()
            message = (
                f"Already decided by {won.reviewer} at {when(won.decided_at)}"
                f" ({won.decision}); your decision was not recorded."
                if won
                else "This item is already decided; your decision was not recorded."
            )
            return await render_case(request, dispute_id, 409, message, kept)
        ctx.metrics.decisions.labels(stored.kind, "recorded").inc()
        log.info("review %s: %s %s by %s", stored.review_id, stored.kind, stored.decision, user)
        try:
            published = await outbox.publish(stored.review_id)
        except Exception:  # recorded all the same: the outbox publishes it on its next drain
            log.exception("review %s recorded; publishing it failed", stored.review_id)
            published = False
        if published:
            if payout_item_is_conflict(stored.item_key):
                after = AFTER_CONFLICT
            elif repaid_on and stored.decision == ReviewDecision.PAID_ELSEWHERE.value:
                after = AFTER_PAID_AGAIN
            else:
                after = AFTER_DECISION.get(stored.decision, REPRICED)
            flash(
                request,
                "ok",
                f"Recorded {stored.decision} ({stored.item_key}) and published it"
                f" to review.decided; {after}",
            )
        else:
            flash(
                request,
                "warn",
                f"Recorded {stored.decision} ({stored.item_key}); publishing"
                " is delayed (Kafka unreachable) and will be retried automatically.",
            )
        return RedirectResponse(f"/review/disputes/{path_segment(dispute_id)}", status_code=303)

    return router
