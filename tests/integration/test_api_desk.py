"""The review desk over HTTP on the real stack: sign-in, sessions, CSRF, who may decide what,
and what the queue and case pages show."""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row
from pydantic import SecretStr

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.db.payout_rounds import AMOUNT_NOT_PAYABLE
from refund_bench.runtime import Context, Message
from refund_bench.samples import ARTICLE_ORDER
from services.api.outbox import review_decided
from services.api.passwords import MIN_ITERATIONS, PasswordHash, hash_password
from services.api.sessions import SESSION_ID_KEY, SessionSigner
from services.api.store import DECISIONS
from services.recorder.handler import Recorder
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    PASSWORDS,
    ApiServer,
    csrf_of,
    delete_dispute,
    insert_article_complaint,
    running_api,
    seed_article_dispute,
    sign_in,
)
from tests.kafka_helpers import wait_for

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with running_api(stack) as server:
        yield server


@pytest.fixture
def dispute(api: ApiServer) -> Iterator[str]:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    yield dispute_id
    delete_dispute(api.database_url, dispute_id)


def decisions(api: ApiServer, dispute_id: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(api.database_url) as conn:
        rows = conn.execute(
            "SELECT item_key, decision, reviewer FROM review_decisions WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def test_pages_need_a_signed_in_reviewer(api: ApiServer) -> None:
    with api.client() as client:
        for path in ("/review", "/review/disputes/d-anything"):
            answer = client.get(path)
            assert answer.status_code == 303
            assert answer.headers["location"].startswith("/review/login?next=/review")
        login = client.get("/review/login")
        assert login.status_code == 200
        assert "Reviewer sign-in" in login.text
        cookie = login.headers["set-cookie"]
        assert "Path=/review" in cookie
        assert "HttpOnly" in cookie
        assert "SameSite=Lax" in cookie


def test_sign_in_rejects_wrong_passwords_forms_and_redirects(api: ApiServer) -> None:
    with api.client() as client:
        page = client.get("/review/login")
        token = csrf_of(page.text)
        wrong = client.post(
            "/review/login", data={"username": "alice", "password": "nope", "csrf_token": token}
        )
        assert wrong.status_code == 401
        assert "Unknown user or wrong password." in wrong.text
        nobody = client.post(
            "/review/login",
            data={"username": f"mallory-{uuid.uuid4().hex}", "password": "x", "csrf_token": token},
        )
        assert nobody.status_code == 401
        forged = client.post(
            "/review/login",
            data={"username": "alice", "password": "alice-password-1", "csrf_token": "forged"},
        )
        assert forged.status_code == 403
        away = client.post(
            "/review/login",
            data={
                "username": "alice",
                "password": "alice-password-1",
                "csrf_token": token,
                "next": "https://evil.example/",
            },
        )
        assert away.status_code == 303
        assert away.headers["location"] == "/review"


def test_a_tampered_cookie_is_no_session_and_sign_out_ends_it(api: ApiServer) -> None:
    with api.client() as client:
        token = sign_in(client, "alice")
        value = client.cookies["rb_review_session"]
        with api.client() as forger:
            forged = value[:-2] + ("AA" if not value.endswith("AA") else "BB")
            forger.cookies.set("rb_review_session", forged, path="/review")
            assert forger.get("/review").status_code == 303
        with api.client() as forger:
            # A MAC with characters beyond ASCII (sent as Latin-1 bytes) is no session either.
            cookie = 'rb_review_session="e30.1.\u00e9\u00e9"'.encode("latin-1")
            assert forger.get("/review", headers={b"Cookie": cookie}).status_code == 303
        out = client.post("/review/logout", data={"csrf_token": token})
        assert out.status_code == 303
        assert out.headers["location"] == "/review/login"
        assert client.get("/review").status_code == 303


FOREIGN_BEFORE = b'consent=accepted all; theme="dark\\"mode"'
FOREIGN_AFTER = "lang=café; note=a b".encode()
"""Other cookies of the host, as browsers send them: a space, a quote, a backslash, UTF-8."""


def _with_foreign_cookies(session_cookie: str) -> dict[bytes, bytes]:
    """A Cookie header with malformed cookies of the host before and after the desk's."""
    ours = f"rb_review_session={session_cookie}".encode()
    return {b"Cookie": b"; ".join((FOREIGN_BEFORE, ours, FOREIGN_AFTER))}


def test_malformed_foreign_cookies_do_not_lose_the_session(api: ApiServer) -> None:
    """Another cookie on the host that breaks the cookie grammar is skipped, not a reason to
    drop the whole header: the reviewer still signs in and stays signed in."""
    with api.client() as browser:
        page = browser.get("/review/login")
        form_session = browser.cookies["rb_review_session"]
    with api.client() as client:  # a fresh jar: the header below carries every cookie
        signed_in = client.post(
            "/review/login",
            data={
                "username": "alice",
                "password": PASSWORDS["alice"],
                "csrf_token": csrf_of(page.text),
                "next": "/review",
            },
            headers=_with_foreign_cookies(form_session),
        )
        assert signed_in.status_code == 303, re.findall(r"The sign-in form expired", signed_in.text)
        assert signed_in.headers["location"] == "/review"
        session = signed_in.cookies["rb_review_session"]
        client.cookies.clear()  # the header below is all the next request sends
        queue = client.get("/review", headers=_with_foreign_cookies(session))
        assert queue.status_code == 200, queue.text
        assert "Signed in as <strong>alice</strong>" in queue.text
        client.cookies.clear()
        assert client.get("/review").status_code == 303  # the session was the cookie's


def _attempt(client: httpx.Client, user: str, password: str) -> httpx.Response:
    token = csrf_of(client.get("/review/login").text)
    return client.post(
        "/review/login", data={"username": user, "password": password, "csrf_token": token}
    )


def _login_key(user: str) -> str:
    return hashlib.sha256(user.casefold().encode()).hexdigest()


def _forget_attempts(api: ApiServer, user: str) -> None:
    with psycopg.connect(api.database_url) as conn:
        conn.execute(
            "DELETE FROM desk_login_attempts WHERE username_sha256 = %s", (_login_key(user),)
        )


def test_the_desk_takes_url_encoded_forms_only(api: ApiServer) -> None:
    """A multipart part may name its own character set (UTF-7 decodes ``+2AA-`` to a lone
    surrogate, which nothing after can encode): the desk refuses such bodies with a 415 page,
    and its error pages carry the same protective headers as every other page."""
    with api.client() as client:
        token = csrf_of(client.get("/review/login").text)
        utf7 = client.post(
            "/review/login",
            files={
                "username": (None, "alice", "text/plain; charset=utf-7"),
                "password": (None, "+2AA-", "text/plain; charset=utf-7"),
                "csrf_token": (None, "+2AA-", "text/plain; charset=utf-7"),
            },
        )
        plain = client.post(
            "/review/login",
            files={"username": (None, "alice"), "csrf_token": (None, token)},
        )
        missing = client.get("/review/no-such-page")
    for refused in (utf7, plain):
        assert refused.status_code == 415, refused.text
        assert "Unsupported form" in refused.text
    assert missing.status_code == 404
    for page in (utf7, missing):
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"


def test_sign_in_attempts_are_limited_per_user_name_across_replicas(
    api: ApiServer, stack: Stack
) -> None:
    user = f"guess-{uuid.uuid4().hex}"
    limit = api.settings.desk_login_attempts
    with running_api(stack) as other_replica:
        replicas = (api, other_replica)
        for attempt in range(limit):  # alternating replicas share the count
            with replicas[attempt % 2].client() as client:
                assert _attempt(client, user, "wrong").status_code == 401
        for replica in replicas:
            with replica.client() as client:
                refused = _attempt(client, user.upper(), "wrong")
                assert refused.status_code == 429
                assert "Too many sign-in attempts" in refused.text
                retry_after = int(refused.headers["retry-after"])
                assert 0 < retry_after <= api.settings.desk_login_window_s
        with api.client() as client:  # another user name is not affected
            assert sign_in(client, "bob")
        with psycopg.connect(api.database_url) as conn:
            stored = [
                str(r[0]) for r in conn.execute("SELECT username_sha256 FROM desk_login_attempts")
            ]
            assert _login_key(user) in stored
            assert not any("guess" in key for key in stored), "user names are not kept"
            # The window closes (moved into the past here, instead of waiting 15 minutes).
            conn.execute(
                "UPDATE desk_login_attempts SET window_started_at = now() - interval '1 day'"
                " WHERE username_sha256 = %s",
                (_login_key(user),),
            )
        with api.client() as client:
            assert _attempt(client, user, "wrong").status_code == 401


def test_closed_sign_in_windows_are_dropped(api: ApiServer) -> None:
    """Guessing at many user names cannot grow the attempts table without end."""
    stale = [f"gone-{uuid.uuid4().hex}" for _ in range(3)]
    with psycopg.connect(api.database_url) as conn:
        for user in stale:
            conn.execute(
                "INSERT INTO desk_login_attempts (username_sha256, attempts, window_started_at)"
                " VALUES (%s, 1, now() - interval '1 day')",
                (_login_key(user),),
            )
    with api.client() as client:
        assert _attempt(client, f"new-{uuid.uuid4().hex}", "wrong").status_code == 401
    with psycopg.connect(api.database_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM desk_login_attempts WHERE username_sha256 = ANY(%s)",
            ([_login_key(user) for user in stale],),
        ).fetchone()
    assert left == (0,)


def test_the_right_password_is_refused_too_while_a_user_is_throttled(
    api: ApiServer,
) -> None:
    _forget_attempts(api, "carol")
    with api.client() as client:
        for _ in range(api.settings.desk_login_attempts):
            assert _attempt(client, "carol", "wrong").status_code == 401
        assert _attempt(client, "carol", PASSWORDS["carol"]).status_code == 429
        assert client.get("/review").status_code == 303
    _forget_attempts(api, "carol")
    with api.client() as client:
        assert sign_in(client, "carol")


def test_a_signed_out_session_is_refused_even_from_a_copy_of_its_cookie(
    api: ApiServer, stack: Stack
) -> None:
    with api.client() as client:
        token = sign_in(client, "alice")
        copied = client.cookies["rb_review_session"]
        assert client.post("/review/logout", data={"csrf_token": token}).status_code == 303
    with running_api(stack) as other_replica:
        for replica in (api, other_replica):
            with replica.client() as thief:
                thief.cookies.set("rb_review_session", copied, path="/review")
                answer = thief.get("/review")
                assert answer.status_code == 303
                assert answer.headers["location"].startswith("/review/login")
                assert "Max-Age=0" in answer.headers["set-cookie"]
    with api.client() as client:  # signing in again makes a new session, not the revoked one
        sign_in(client, "alice")
        assert client.cookies["rb_review_session"] != copied
        assert client.get("/review").status_code == 200


def test_a_changed_password_ends_the_sessions_signed_in_with_the_old_one(
    api: ApiServer, stack: Stack
) -> None:
    """alice's password leaked and was changed (a new hash in ``REVIEWERS``, the API restarted):
    a session signed in with the old password no longer opens the desk, while bob's, whose hash
    did not change, still does on the new replica."""
    with api.client() as alice, api.client() as bob:
        sign_in(alice, "alice")
        sign_in(bob, "bob")
        cookies = {
            "alice": alice.cookies["rb_review_session"],
            "bob": bob.cookies["rb_review_session"],
        }
    reviewers = api.settings.reviewers.get_secret_value().split(",")
    changed = [
        f"alice:{hash_password('alice-new-password', iterations=MIN_ITERATIONS)}"
        if entry.startswith("alice:")
        else entry
        for entry in reviewers
    ]
    with running_api(stack, reviewers=SecretStr(",".join(changed))) as restarted:
        for user, status in (("alice", 303), ("bob", 200)):
            with restarted.client() as client:
                client.cookies.set("rb_review_session", cookies[user], path="/review")
                answer = client.get("/review")
                assert answer.status_code == status, (user, answer.text)
        with restarted.client() as client:
            sign_in(client, "alice", "alice-new-password")
            assert client.get("/review").status_code == 200


def test_a_sign_out_outlives_a_later_raise_of_the_session_max_age(stack: Stack) -> None:
    with running_api(stack, session_max_age_s=60) as short_lived, short_lived.client() as client:
        token = sign_in(client, "alice")
        cookie = client.cookies["rb_review_session"]
        signer = SessionSigner(short_lived.settings.session_secret.get_secret_value().encode(), 60)
        session = signer.loads(cookie, time.time())
        assert session is not None
        assert client.post("/review/logout", data={"csrf_token": token}).status_code == 303
    with psycopg.connect(short_lived.database_url) as conn:
        row = conn.execute(
            "SELECT expires_at FROM desk_revoked_sessions WHERE session_id = %s",
            (session[SESSION_ID_KEY],),
        ).fetchone()
    # Kept for the longest a session may be set to last (7 days), not the 60 s in force then.
    assert row is not None
    signed_in_at = datetime.fromtimestamp(session["iat"], UTC)
    assert row[0] - signed_in_at == timedelta(days=7)


def test_api_clients_cannot_decide_reviews(api: ApiServer, dispute: str) -> None:
    form = {"item_key": "grievance:g3", "decision": "UPHOLD", "note": "bearer attempt"}
    with httpx.Client(base_url=api.url) as client:
        answer = client.post(f"/review/disputes/{dispute}/decisions", data=form, headers=api.auth())
    assert answer.status_code == 401
    assert "nothing was recorded" in answer.text
    assert decisions(api, dispute) == []


def test_decisions_need_the_csrf_token_a_note_and_a_fitting_choice(
    api: ApiServer, dispute: str
) -> None:
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "alice")
        base = {"item_key": "grievance:g3", "decision": "UPHOLD", "note": "ok", "csrf_token": token}
        assert client.post(url, data={**base, "csrf_token": "forged"}).status_code == 403
        assert (
            client.post(url, data={k: v for k, v in base.items() if k != "csrf_token"}).status_code
            == 403
        )
        no_note = client.post(url, data={**base, "note": "  "})
        assert no_note.status_code == 422
        assert "A note is required" in no_note.text
        misfit = client.post(url, data={**base, "decision": "APPROVE"})
        assert misfit.status_code == 422
        assert "APPROVE does not apply to a GRIEVANCE item: UPHOLD or REJECT." in misfit.text
        bogus = client.post(url, data={**base, "decision": "PAY_EVERYTHING"})
        assert bogus.status_code == 422
        unknown = client.post(url, data={**base, "item_key": "grievance:g99"})
        assert unknown.status_code == 404
        for malformed in ("grievance:g3\x00", "", "grievance: g3"):
            answer = client.post(url, data={**base, "item_key": malformed})
            assert answer.status_code == 422, malformed
    assert decisions(api, dispute) == []


def test_a_decision_cannot_be_applied_twice(api: ApiServer, dispute: str) -> None:
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "alice")
        form = {
            "item_key": "grievance:g3",
            "decision": "UPHOLD",
            "note": "leak is plausible",
            "csrf_token": token,
        }
        first = client.post(url, data=form)
        assert first.status_code == 303
        shown = client.get(first.headers["location"])
        assert "Recorded UPHOLD (grievance:g3) and published it" in shown.text
        second = client.post(url, data={**form, "decision": "REJECT", "note": "changed mind"})
    assert second.status_code == 409
    assert re.search(r"Already decided by alice at [0-9-]+ [0-9:]+ UTC \(UPHOLD\)", second.text)
    assert decisions(api, dispute) == [("grievance:g3", "UPHOLD", "alice")]


def test_queue_and_case_pages_show_what_a_reviewer_needs(api: ApiServer, dispute: str) -> None:
    with api.client() as client:
        sign_in(client, "bob")
        everything = client.get("/review").text
        queue = client.get("/review", params={"dispute": dispute}).text
        case = client.get(f"/review/disputes/{dispute}").text
    created = re.findall(r'data-created="([^"]+)"', everything)
    assert created == sorted(created), "the queue is oldest first"
    assert f'href="/review/disputes/{dispute}"' in queue
    assert "Grievances to decide" in queue
    assert "Disputes held by the cap" in queue
    assert "<strong>PACKAGING</strong>" in queue
    assert (
        '<mark title="g3 PACKAGING" data-grievances="g3" class="focus">The raita had leaked' in case
    )
    assert case.count('class="ruling"') == 3 + 12  # the held bench, then all four benches
    assert "INR 689" in case
    # Round 1's reply is the template's wording, as the settler writes it for these lines.
    assert "A colleague will review the packaging of the Raita" in case
    # Round 1's model answer, which the template replaced, is shown once, escaped.
    assert case.count("The model's answer, not sent: the template replaced it") == 1
    assert (
        "{&#34;reply&#34;: &#34;We are refunding &lt;b&gt;INR 10000&lt;/b&gt; &amp; more.&#34;}"
        in case
    )
    assert "INR 60" in case
    assert "INR 1340" in case
    assert 'value="UPHOLD"' in case
    assert 'value="REJECT"' in case
    assert "&#34;order_id&#34;: &#34;order-1840&#34;" in case  # pretty, escaped evidence
    assert "ESCALATE 2-1" in case
    # The raita's upheld seat cites the packaging record the order lacks: marked on the held
    # bench and on the full one.
    assert case.count("Cites evidence the order has no record of") == 2
    assert case.count("cannot make an upheld majority") == 2
    # Each ruling of the full benches names what drew it; a served model only where it is
    # not the one asked for.
    assert case.count("stand-in (served as stand-in-2026-11-01) · fingerprint fp_seeded") == 4
    assert case.count("stand-in · fingerprint fp_seeded") == 8
    assert case.count("temperature 0.7") == 12
    # The reply names the model configured, what served its model answer, and the prompt.
    served = "· stand-in (served as stand-in-settler-2026-11-01) · fingerprint fp_settler"
    assert case.count(f"{served} · settle.v1</div>") == 1
    # What the extractor made of the complaint: its answers as they came, escaped.
    assert "<strong>EXTRACTED</strong> · 4 grievances" in case
    assert "First answer: 1 problem · stand-in · fingerprint fp_extractor · extractor/v3" in case
    assert "Repair: valid · stand-in · extractor/v3" in case
    assert "<li>the answer is not JSON: Expecting &#39;,&#39; delimiter</li>" in case
    assert "{&#34;grievances&#34;: [{&#34;category&#34;: &#34;&lt;LATE&gt;&#34;" in case


def test_complaint_text_is_escaped_on_the_case_page(api: ApiServer) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    with psycopg.connect(api.database_url) as conn:
        conn.execute(
            "UPDATE disputes SET complaint_text = %s WHERE dispute_id = %s",
            ("<script>alert(1)</script> " * 20, dispute_id),
        )
    try:
        with api.client() as client:
            sign_in(client, "alice")
            case = client.get(f"/review/disputes/{dispute_id}").text
    finally:
        delete_dispute(api.database_url, dispute_id)
    assert "<script>alert(1)</script>" not in case
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in case


def test_the_queue_narrows_to_one_dispute_or_kind(api: ApiServer, dispute: str) -> None:
    with api.client() as client:
        sign_in(client, "alice")
        mine = client.get("/review", params={"dispute": dispute}).text
        grievances = client.get("/review", params={"kind": "GRIEVANCE"}).text
        payouts = client.get("/review", params={"dispute": dispute, "kind": "PAYOUT"}).text
        junk = client.get("/review", params={"dispute": "<x>", "kind": "DROP"})
    assert mine.count("<tr data-dispute=") == 1
    assert f'data-dispute="{dispute}" data-item="grievance:g3"' in mine
    assert 'data-item="dispute:' not in grievances
    assert "Nothing matches the filter." in payouts
    assert junk.status_code == 200


def fail_round_one(database_url: str, dispute_id: str, error_code: str) -> None:
    """Round 1 of a seeded dispute as after a payout failure: FAILED in the ledger, and its
    PAYOUT item open."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        conn.execute(
            "UPDATE payout_ledger SET status = 'FAILED', error_code = %s"
            " WHERE dispute_id = %s AND round = 1",
            (error_code, dispute_id),
        )
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, reason)"
            " VALUES (%s, 'payout:round1', 'PAYOUT', %s)",
            (dispute_id, f"payout failed ({error_code})"),
        )


def refuse_repay_then_settle_elsewhere(api: ApiServer, dispute: str, why: str) -> str:
    """On the desk: round 1's case offers no REPAY and says why; a REPAY posted anyway is
    refused (422, the reason, nothing recorded); PAID_ELSEWHERE is recorded. The page shown
    after it."""
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
        assert 'value="REPAY"' not in case
        assert "Paying again cannot mend this round: " in case
        form = {"item_key": "payout:round1", "note": "refunded", "csrf_token": token}
        refused = client.post(url, data={**form, "decision": "REPAY"})
        assert refused.status_code == 422
        assert why in refused.text
        assert decisions(api, dispute) == []
        settled = client.post(url, data={**form, "decision": "PAID_ELSEWHERE"})
        assert settled.status_code == 303
        shown = client.get(settled.headers["location"]).text
    assert decisions(api, dispute) == [("payout:round1", "PAID_ELSEWHERE", "carol")]
    return shown


def test_a_failed_refund_of_a_dispute_pricing_no_longer_keeps_is_only_settled_elsewhere(
    api: ApiServer, dispute: str
) -> None:
    """Pricing keeps a paid dispute 35 days after its last round: a REPAY after that would be
    dead-lettered there while the desk closed the item, so the desk neither offers nor records
    it, and says why."""
    fail_round_one(api.database_url, dispute, "refund_failed")
    with psycopg.connect(api.database_url) as conn:
        aged = conn.execute(
            "UPDATE priced_refunds SET priced_at = now() - interval '40 days'"
            " WHERE dispute_id = %s",
            (dispute,),
        ).rowcount
    assert aged >= 1
    refuse_repay_then_settle_elsewhere(
        api,
        dispute,
        "its dispute was last priced 40 days ago, and pricing keeps a paid dispute 35 days",
    )


def test_the_desk_offers_to_pay_again_the_part_stripe_takes_of_an_off_step_amount(
    api: ApiServer, dispute: str
) -> None:
    """A round the payout failed at KWD 0.625 (priced before pricing rounded to the currency's
    step): a REPAY pays KWD 0.620, the part Stripe takes, and the button says so."""
    fail_round_one(api.database_url, dispute, AMOUNT_NOT_PAYABLE)
    with psycopg.connect(api.database_url) as conn:
        conn.execute(
            "UPDATE payout_ledger SET currency = 'KWD', amount_minor = 625"
            " WHERE dispute_id = %s AND round = 1",
            (dispute,),
        )
    assert 'value="REPAY">Pay again (KWD 0.620)</button>' in _case_page(api, dispute)


def test_the_desk_says_what_an_approval_keeps_back_below_stripes_step(
    api: ApiServer, dispute: str
) -> None:
    """A KWD dispute held by the cap at KWD 1.375: approving pays KWD 1.370, and the page says
    the KWD 0.005 below Stripe's step is kept back."""
    with psycopg.connect(api.database_url) as conn, conn.transaction():
        conn.execute(
            "UPDATE priced_refunds SET currency = 'KWD', total_minor = 1375,"
            " already_paid_minor = 0, payable_minor = 0, cap_minor = 1000,"
            " decision = 'HELD_FOR_REVIEW' WHERE dispute_id = %s",
            (dispute,),
        )
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, reason)"
            " VALUES (%s, 'dispute:round1', 'DISPUTE', 'total above the cap')",
            (dispute,),
        )
    assert (
        "approving pays KWD 1.370 now (KWD 0.005 of it below the step Stripe refunds KWD in is"
        " kept back)" in _case_page(api, dispute)
    )


def _case_page(api: ApiServer, dispute: str) -> str:
    """The dispute's case page, as a signed-in reviewer sees it."""
    with api.client() as client:
        sign_in(client, "carol")
        return client.get(f"/review/disputes/{dispute}").text


def test_a_failed_refund_can_be_paid_again_from_the_desk(api: ApiServer, dispute: str) -> None:
    fail_round_one(api.database_url, dispute, "refund_failed")
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
        assert 'value="REPAY">Pay again (INR 689)</button>' in case
        assert 'value="PAID_ELSEWHERE"' in case
        form = {"item_key": "payout:round1", "note": "card re-issued", "csrf_token": token}
        misfit = client.post(url, data={**form, "decision": "APPROVE"})
        assert misfit.status_code == 422
        assert "APPROVE does not apply to a PAYOUT item: REPAY or PAID_ELSEWHERE." in misfit.text
        elsewhere = {**form, "item_key": "grievance:g3", "decision": "REPAY"}
        wrong_item = client.post(url, data=elsewhere)
        assert wrong_item.status_code == 422
        assert "REPAY does not apply to a GRIEVANCE item: UPHOLD or REJECT." in wrong_item.text
        repaid = client.post(url, data={**form, "decision": "REPAY"})
        assert repaid.status_code == 303
        shown = client.get(repaid.headers["location"]).text
    assert "a new round pays the failed amount again, whatever was decided" in shown
    assert decisions(api, dispute) == [("payout:round1", "REPAY", "carol")]


@pytest.mark.parametrize(
    ("status", "error_code", "why"),
    [
        (
            "SUCCEEDED",
            None,
            "Round 1 cannot be paid again: it is SUCCEEDED in the payout ledger, and only a"
            " FAILED refund can be paid again. Stripe refunded this round, so nothing is left to"
            " pay for it: close it here (PAID_ELSEWHERE).",
        ),
        ("FAILED", "ORDER_ALREADY_REFUNDED", "another dispute of the same order was refunded"),
        ("FAILED", "charge_disputed", "the customer disputed the payment with their bank"),
        ("FAILED", "charge_already_refunded", "Stripe has refunded the payment in full already"),
        ("FAILED", "STALE_PENDING", "an earlier call to Stripe may have created its refund"),
        (
            "FAILED",
            "refund_requires_action",
            "may still go through, so paying another way meanwhile could refund twice: let it"
            " complete (once Stripe reports it succeeded, the ledger records the round paid), or"
            " cancel it at Stripe (once Stripe reports it canceled, the round can be paid again"
            " here). Do not pay the customer another way while it waits; once Stripe reports the"
            " refund succeeded, the ledger records the round paid, and you close it here"
            " (PAID_ELSEWHERE).",
        ),
        ("FAILED", "IdempotencyError", "for another request, which may have created a refund"),
    ],
)
def test_a_refund_paying_again_cannot_mend_is_only_settled_elsewhere(
    api: ApiServer, dispute: str, status: str, error_code: str | None, why: str
) -> None:
    """A round Stripe paid (the item raised by a conflict, say), one held because another dispute
    of the order was refunded first, and one Stripe refused for good: REPAY is neither offered
    nor recorded."""
    fail_round_one(api.database_url, dispute, error_code or "LEDGER_CONFLICT")
    with psycopg.connect(api.database_url) as conn:
        conn.execute(
            "UPDATE payout_ledger SET status = %s, error_code = %s"
            " WHERE dispute_id = %s AND round = 1",
            (status, error_code, dispute),
        )
    shown = refuse_repay_then_settle_elsewhere(api, dispute, why)
    assert "the failed round is closed; nothing more is paid" in shown
    with psycopg.connect(api.database_url) as conn:
        marked = conn.execute(
            "SELECT paid_elsewhere FROM payout_ledger WHERE dispute_id = %s AND round = 1",
            (dispute,),
        ).fetchone()
    # Money went back by hand for a FAILED round; a round Stripe paid is left as it is.
    assert marked == (status == "FAILED",)


def test_a_refund_waiting_for_the_customer_is_not_to_be_paid_another_way(
    api: ApiServer, dispute: str
) -> None:
    """Stripe's refund waits for the customer and may still pay: the case page tells the
    operator not to pay another way meanwhile (which could refund twice), and to close the item
    once Stripe reports it succeeded, instead of "settle it with the customer another way"."""
    fail_round_one(api.database_url, dispute, "refund_requires_action")
    with api.client() as client:
        sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
    assert "Do not pay the customer another way while it waits" in case
    assert "Settle it with the customer another way" not in case


def fail_round_one_again(
    database_url: str, dispute_id: str, *, first: str, paid_elsewhere: bool = False
) -> None:
    """Round 1 of a seeded dispute as after a refund that waited for the customer, was refunded
    and then failed after all: FAILED (refund_failed) in the ledger, its own item
    ``payout:round1`` ``first`` (DECIDED: closed as refunded by alice; or OPEN), and the item
    the second failure opened, ``payout:round1:again``, open."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        conn.execute(
            "UPDATE payout_ledger SET status = 'FAILED', error_code = 'refund_failed',"
            " paid_elsewhere = %s WHERE dispute_id = %s AND round = 1",
            (paid_elsewhere, dispute_id),
        )
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, reason, status)"
            " VALUES (%s, 'payout:round1', 'PAYOUT', 'payout failed (refund_requires_action)',"
            " %s), (%s, 'payout:round1:again', 'PAYOUT', 'payout failed (refund_failed)',"
            " 'OPEN')",
            (dispute_id, first, dispute_id),
        )
        if first == "DECIDED":
            conn.execute(
                "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, decision,"
                " reviewer, note, decided_at, published) VALUES (%s, %s, 'payout:round1',"
                " 'PAYOUT', 'PAID_ELSEWHERE', 'alice', 'Stripe refunded it', now(), true)",
                (f"r-{uuid.uuid4().hex}", dispute_id),
            )


def test_a_refund_that_failed_again_after_it_was_refunded_is_paid_again_on_its_own_item(
    api: ApiServer, dispute: str
) -> None:
    """The round's own item was closed when Stripe refunded it; the failure after that has an
    item of its own, which offers and records REPAY like any failed round."""
    fail_round_one_again(api.database_url, dispute, first="DECIDED")
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
        item = case[case.index('id="item-payout:round1:again"') :]
        item = item[: item.index("</form>")]
        assert 'value="REPAY">Pay again (INR 689)</button>' in item
        form = {"item_key": "payout:round1:again", "note": "card re-issued", "csrf_token": token}
        repaid = client.post(url, data={**form, "decision": "REPAY"})
        assert repaid.status_code == 303, repaid.text
    assert sorted(decisions(api, dispute)) == [
        ("payout:round1", "PAID_ELSEWHERE", "alice"),
        ("payout:round1:again", "REPAY", "carol"),
    ]


def test_a_round_settled_another_way_is_not_paid_again_when_its_refund_fails_again(
    api: ApiServer, dispute: str
) -> None:
    """A payment operator settled the waiting round another way, Stripe refunded it all the same
    and then reported that refund failed: the customer has had the other payment, so the new
    item offers no REPAY, refuses one, and says to find out what is still owed."""
    fail_round_one_again(api.database_url, dispute, first="DECIDED", paid_elsewhere=True)
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
        assert 'value="REPAY"' not in case
        form = {"item_key": "payout:round1:again", "note": "again", "csrf_token": token}
        refused = client.post(url, data={**form, "decision": "REPAY"})
    assert refused.status_code == 422
    assert "settled it another way before (PAID_ELSEWHERE)" in refused.text
    assert decisions(api, dispute) == [("payout:round1", "PAID_ELSEWHERE", "alice")]


def test_a_round_with_two_open_items_is_paid_again_once(api: ApiServer, dispute: str) -> None:
    """Nobody closed the round's own item before its refund failed again: both items are open,
    and a REPAY on one leaves the other to be closed, never paid again."""
    fail_round_one_again(api.database_url, dispute, first="OPEN")
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        form = {"note": "card re-issued", "csrf_token": token, "decision": "REPAY"}
        first = client.post(url, data={**form, "item_key": "payout:round1:again"})
        assert first.status_code == 303, first.text
        case = client.get(f"/review/disputes/{dispute}").text
        item = case[case.index('id="item-payout:round1"') :]
        item = item[: item.index("</form>")]
        assert 'value="REPAY"' not in item
        second = client.post(url, data={**form, "item_key": "payout:round1"})
    assert second.status_code == 422
    assert "it was paid again already, in a new round (REPAY on payout:round1:again)" in (
        second.text
    )
    assert "It was paid again from payout:round1:again" in second.text
    assert "Settle it with the customer another way" not in second.text
    assert decisions(api, dispute) == [("payout:round1:again", "REPAY", "carol")]


def _item_html(case: str, item_key: str) -> str:
    item = case[case.index(f'id="item-{item_key}"') :]
    return item[: item.index("</form>")]


def test_the_other_item_of_a_round_paid_again_is_closed_without_paying_or_settling_it(
    api: ApiServer, dispute: str
) -> None:
    """Both items of a round whose refund failed again are open: each page says so. Once one is
    paid again, the other tells the operator that nothing is left to pay and offers only to
    close it; closing it does not mark the round settled another way."""
    fail_round_one_again(api.database_url, dispute, first="OPEN")
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        before = _item_html(client.get(f"/review/disputes/{dispute}").text, "payout:round1")
        assert "This round has another open item, payout:round1:again" in before
        form = {"note": "card re-issued", "csrf_token": token}
        repay = {**form, "decision": "REPAY", "item_key": "payout:round1:again"}
        assert client.post(url, data=repay).status_code == 303
        after = _item_html(client.get(f"/review/disputes/{dispute}").text, "payout:round1")
        assert "It was paid again from payout:round1:again" in after
        assert "do not pay the customer another way" in after
        assert 'value="PAID_ELSEWHERE">Close (paid again)</button>' in after
        assert '<input type="hidden" name="repaid_on" value="payout:round1:again">' in after
        close = {**form, "decision": "PAID_ELSEWHERE", "item_key": "payout:round1"}
        unseen = client.post(url, data=close)
        assert unseen.status_code == 422, "a page loaded before the REPAY"
        assert "was paid again from payout:round1:again by carol" in unseen.text
        assert "If you paid the customer by hand meanwhile, recover that payment" in unseen.text
        seen = client.post(url, data={**close, "repaid_on": "payout:round1:again"})
        assert seen.status_code == 303
    assert sorted(decisions(api, dispute)) == [
        ("payout:round1", "PAID_ELSEWHERE", "carol"),
        ("payout:round1:again", "REPAY", "carol"),
    ]
    assert not ledger_paid_elsewhere(api.database_url, dispute), "the round was paid again"


def test_the_other_item_of_a_round_settled_by_hand_is_closed_without_paying_again(
    api: ApiServer, dispute: str
) -> None:
    """Both items of a round whose refund failed again are open, and an operator settles the
    round by hand on one: the other says nothing is left to pay and offers only to close it,
    and paying it again is refused."""
    fail_round_one_again(api.database_url, dispute, first="OPEN")
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        form = {"note": "paid by bank transfer", "csrf_token": token}
        settle = {**form, "decision": "PAID_ELSEWHERE", "item_key": "payout:round1"}
        assert client.post(url, data=settle).status_code == 303
        other = _item_html(client.get(f"/review/disputes/{dispute}").text, "payout:round1:again")
        assert "It was settled another way from payout:round1" in other
        assert 'value="PAID_ELSEWHERE">Close (settled)</button>' in other
        assert 'value="REPAY"' not in other
        repay = {**form, "decision": "REPAY", "item_key": "payout:round1:again"}
        refused = client.post(url, data=repay)
    assert refused.status_code == 422
    assert "settled another way already (PAID_ELSEWHERE on payout:round1)" in refused.text
    assert decisions(api, dispute) == [("payout:round1", "PAID_ELSEWHERE", "carol")]


def open_conflict(database_url: str, dispute_id: str) -> None:
    """A request for round 1 of a seeded dispute with another amount, refused by the payout
    (LEDGER_CONFLICT): its own item open."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, reason)"
            " VALUES (%s, 'payout:round1:conflict', 'PAYOUT', %s)",
            (dispute_id, "payout request refused (LEDGER_CONFLICT): round already recorded"),
        )


def ledger_paid_elsewhere(database_url: str, dispute_id: str) -> bool:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT paid_elsewhere FROM payout_ledger WHERE dispute_id = %s AND round = 1",
            (dispute_id,),
        ).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize("round_failed", [False, True], ids=["round paid", "round failed too"])
def test_a_conflicting_request_is_closed_apart_from_its_round(
    api: ApiServer, dispute: str, round_failed: bool
) -> None:
    """A LEDGER_CONFLICT has its own item: the desk offers only to close it (REPAY could pay the
    round twice, and is refused), closing it leaves the round's ledger row as it is, and a
    failure of the round itself stays open, REPAY offered there."""
    if round_failed:
        fail_round_one(api.database_url, dispute, "refund_failed")
    open_conflict(api.database_url, dispute)
    url = f"/review/disputes/{dispute}/decisions"
    with api.client() as client:
        token = sign_in(client, "carol")
        case = client.get(f"/review/disputes/{dispute}").text
        item = case[case.index('id="item-payout:round1:conflict"') :]
        item = item[: item.index("</form>")]
        assert 'value="REPAY"' not in item
        assert 'value="PAID_ELSEWHERE">Close (investigated)</button>' in item
        assert "Nothing is to be paid for this request" in item
        form = {"item_key": "payout:round1:conflict", "note": "amount fixed", "csrf_token": token}
        refused = client.post(url, data={**form, "decision": "REPAY"})
        assert refused.status_code == 422
        assert (
            "REPAY does not apply to payout:round1:conflict, a conflicting payout request:"
            " PAID_ELSEWHERE." in refused.text
        )
        closed = client.post(url, data={**form, "decision": "PAID_ELSEWHERE"})
        assert closed.status_code == 303, closed.text
        shown = client.get(closed.headers["location"]).text
    assert "the conflicting request is closed; nothing is paid for it" in shown
    assert decisions(api, dispute) == [("payout:round1:conflict", "PAID_ELSEWHERE", "carol")]
    assert not ledger_paid_elsewhere(api.database_url, dispute)
    if round_failed:
        own = shown[shown.index('id="item-payout:round1"') :]
        own = own[: own.index("</form>")]
        assert 'value="REPAY">Pay again (INR 689)</button>' in own


def _record(database_url: str, topic: str, key: str, value: Any) -> None:
    """Project one event as the recorder does."""
    with psycopg.connect(database_url) as conn:
        recorder = Recorder(conn)
        recorder.handle(Message(topic, 0, 0, key, value, {}, 0), Context(None))
        recorder.flush()


@pytest.fixture
def unextracted(api: ApiServer) -> Iterator[str]:
    """A dispute whose complaint could not be extracted: the extractor's held round 1 (no
    lines) projected, which opens its EXTRACTION item."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    with psycopg.connect(api.database_url) as conn, conn.transaction():
        sha256 = insert_article_complaint(conn, dispute_id, datetime.now(UTC))
    held = ev.RefundPriced(
        dispute_id=dispute_id,
        order_id="order-1840",
        round=1,
        pricing_version="v1",
        currency="INR",
        order_total_minor=ARTICLE_ORDER.charged_total_minor,
        lines=[],
        total_minor=0,
        payable_minor=0,
        cap_minor=100000,
        decision="HELD_FOR_REVIEW",
        reason="EXTRACTION: the model endpoint refused the complaint",
        snapshot_sha256=sha256,
        priced_at=datetime.now(UTC),
    )
    _record(api.database_url, t.REFUND_PRICED.name, dispute_id, held.to_avro())
    yield dispute_id
    delete_dispute(api.database_url, dispute_id)


def test_a_complaint_that_could_not_be_extracted_is_closed_from_the_desk(
    api: ApiServer, unextracted: str
) -> None:
    """Its EXTRACTION item offers only to close it, as handled outside the pipeline; the decision
    is recorded and published, and once the recorder has it the item leaves the open queue."""
    url = f"/review/disputes/{unextracted}/decisions"
    with api.client() as client:
        token = sign_in(client, "alice")
        mine = client.get("/review", params={"dispute": unextracted}).text
        assert f'data-dispute="{unextracted}" data-item="extraction"' in mine
        case = client.get(f"/review/disputes/{unextracted}").text
        item = _item_html(case, "extraction")
        assert 'value="RESOLVED_ELSEWHERE">Close (handled elsewhere)</button>' in item
        assert item.count('name="decision"') == 1
        form = {"item_key": "extraction", "note": "resubmitted as d-2", "csrf_token": token}
        misfit = client.post(url, data={**form, "decision": "UPHOLD"})
        assert misfit.status_code == 422
        assert "UPHOLD does not apply to an EXTRACTION item: RESOLVED_ELSEWHERE." in misfit.text
        closed = client.post(url, data={**form, "decision": "RESOLVED_ELSEWHERE"})
        assert closed.status_code == 303, closed.text
        shown = client.get(closed.headers["location"]).text
        assert "Recorded RESOLVED_ELSEWHERE (extraction) and published it" in shown
        assert "nothing is priced or paid for this dispute" in shown
        with psycopg.connect(api.database_url, row_factory=dict_row) as conn:
            row = conn.execute(
                f"SELECT {DECISIONS.columns} FROM review_decisions WHERE dispute_id = %s",
                (unextracted,),
            ).fetchone()
        assert row is not None
        stored = DECISIONS.make(row)
        assert (stored.kind, stored.published) == ("EXTRACTION", True)
        key, value = review_decided(stored)
        _record(api.database_url, t.REVIEW_DECIDED.name, key, value)
        queue = client.get("/review", params={"dispute": unextracted}).text
        case = client.get(f"/review/disputes/{unextracted}").text
    assert "Nothing matches the filter." in queue
    assert 'id="nothing-open"' in case
    assert decisions(api, unextracted) == [("extraction", "RESOLVED_ELSEWHERE", "alice")]


def _password_threads() -> set[threading.Thread]:
    """The API's password-check threads in this process (the API is served by a thread here)."""
    return {t for t in threading.enumerate() if t.name.startswith("password-check")}


def test_a_flood_of_sign_ins_under_new_names_is_refused_beyond_the_password_threads(
    stack: Stack,
) -> None:
    """New names each time pass the per-name limit, and each check costs a slow hash: with one
    password thread and no queue, sign-ins arriving while a check runs get 429 at once.

    The others are sent once the first one's check is seen running (its password thread,
    started when the check took the only slot), and that check costs 8 million derivations
    (seconds, where the two refusals take milliseconds), so they arrive while it runs."""
    # Made up, not computed (nobody signs in as alice): every check costs its iterations, an
    # unknown name's (a decoy of the directory's strongest hash) too.
    slow = str(PasswordHash(8_000_000, b"flood-test-salt!", bytes(32)))
    with running_api(
        stack,
        reviewers=SecretStr(f"alice:{slow}"),
        desk_password_threads=1,
        desk_password_queue=0,
    ) as api:
        clients = [api.client() for _ in range(3)]
        tokens = [csrf_of(c.get("/review/login").text) for c in clients]

        reviewer = f"reviewer-{uuid.uuid4().hex}"  # signs in while the flood holds the slot

        def attempt(index: int) -> httpx.Response:
            return clients[index].post(
                "/review/login",
                data={
                    "username": f"flood-{uuid.uuid4().hex}" if index == 0 else reviewer,
                    "password": "x",
                    "csrf_token": tokens[index],
                },
            )

        try:
            before = _password_threads()
            with ThreadPoolExecutor(1) as pool:
                checked = pool.submit(attempt, 0)
                wait_for(
                    lambda: checked.done() or bool(_password_threads() - before),
                    30,
                    "the first sign-in's check to start",
                )
                assert not checked.done(), checked.result().text
                refused = [attempt(1), attempt(2)]
                answers = [checked.result(timeout=120), *refused]
        finally:
            for client in clients:
                client.close()
        statuses = [a.status_code for a in answers]
        assert statuses == [401, 429, 429], "one checked, the others refused unchecked at once"
        for busy in refused:
            assert "busy signing people in" in busy.text
            assert busy.headers["retry-after"] == "5"
        metrics = httpx.get(api.metrics_url, timeout=10).text
        assert 'api_desk_logins_total{outcome="busy"} 2.0' in metrics
        with psycopg.connect(api.database_url) as conn:
            counted = conn.execute(
                "SELECT attempts FROM desk_login_attempts WHERE username_sha256 = %s",
                (_login_key(reviewer),),
            ).fetchall()
        assert counted == [], "a sign-in refused as busy uses up none of the reviewer's attempts"


def test_a_dispute_whose_id_holds_a_slash_is_linked_opened_and_decided(api: ApiServer) -> None:
    dispute_id = f"acme/d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    try:
        escaped = dispute_id.replace("/", "%2F")
        with api.client() as client:
            sign_in(client, "alice")
            queue = client.get("/review", params={"dispute": dispute_id}).text
            assert f'href="/review/disputes/{escaped}"' in queue
            case = client.get(f"/review/disputes/{escaped}")
            assert case.status_code == 200
            assert f'action="/review/disputes/{escaped}/decisions"' in case.text
            form = {
                "item_key": "grievance:g3",
                "decision": "UPHOLD",
                "note": "leak shown in the photo",
                "csrf_token": csrf_of(case.text),
            }
            decided = client.post(f"/review/disputes/{escaped}/decisions", data=form)
            assert decided.status_code == 303
            assert decided.headers["location"] == f"/review/disputes/{escaped}"
        assert decisions(api, dispute_id) == [("grievance:g3", "UPHOLD", "alice")]
        with httpx.Client(base_url=api.url) as bearer:
            for path in (escaped, dispute_id):
                story = bearer.get(f"/disputes/{path}", headers=api.auth())
                assert story.status_code == 200, path
                assert story.json()["dispute_id"] == dispute_id
    finally:
        delete_dispute(api.database_url, dispute_id)


def test_a_refused_decision_shows_the_note_again_and_a_line_break_counts_once(
    api: ApiServer, dispute: str
) -> None:
    url = f"/review/disputes/{dispute}/decisions"
    typed = "The photo shows the lid\r\nsplit; the bag is soaked."
    with api.client() as client:
        token = sign_in(client, "alice")
        base = {"item_key": "grievance:g3", "csrf_token": token}
        misfit = client.post(url, data={**base, "decision": "APPROVE", "note": typed})
        assert misfit.status_code == 422
        shown = "The photo shows the lid\nsplit; the bag is soaked."
        assert f">{shown}</textarea>" in misfit.text
        # 2000 characters as a reviewer counts them, sent with CRLF line breaks.
        at_the_limit = "\r\n".join(["x" * 398] * 5) + "x" * 6
        assert len(at_the_limit.replace("\r\n", "\n")) == 2000
        taken = client.post(url, data={**base, "decision": "UPHOLD", "note": at_the_limit})
        assert taken.status_code == 303
    assert decisions(api, dispute) == [("grievance:g3", "UPHOLD", "alice")]
