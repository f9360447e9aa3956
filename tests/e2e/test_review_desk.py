"""In a real headless Chromium: a reviewer upholds the article's raita claim and the dispute
ends with a second payout of INR 60 (6000 paise; 74900 in all), shown on the dispute page.

The complaint enters through the intake API (``POST /complaints``), the whole pipeline runs as
processes (the ``pipeline`` fixture), the desk is the same API app served on a free port.
Screenshots of the queue and the case page go to ``test-artifacts/review-desk/``.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from refund_bench.samples import ARTICLE_COMPLAINT
from tests.conftest import unavailable
from tests.e2e.conftest_api import PASSWORDS, ApiServer
from tests.e2e.pipeline import Pipeline

pytestmark = pytest.mark.stack
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "review-desk"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # The `chromium` on PATH, as `make browser` finds it (it installs Debian's when there is none).
    chromium = shutil.which("chromium")
    if chromium is None:
        unavailable("Chromium (`chromium` on PATH: apt-get install chromium, as `make test` does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page: Page, base_url: str, user: str) -> None:
    page.goto(f"{base_url}/review")
    expect(page.get_by_role("heading", name="Reviewer sign-in")).to_be_visible()
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(PASSWORDS[user])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Needs a human")).to_be_visible()


def test_a_reviewer_upholds_the_raita_claim_and_the_second_payout_follows(
    pipeline: Pipeline, api_server: ApiServer, browser: Browser
) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    accepted = httpx.post(
        f"{api_server.url}/complaints",
        json={
            "order_id": pipeline.own_order("order-1840"),
            "customer_id": "cust-77",
            "text": ARTICLE_COMPLAINT,
        },
        headers=api_server.auth(**{"Idempotency-Key": str(uuid.uuid4())}),
        timeout=30,
    )
    assert accepted.status_code == 202, accepted.text
    dispute_id = accepted.json()["dispute_id"]

    first = pipeline.wait_final(dispute_id, timeout_s=120)
    assert [(p["round"], p["amount_minor"], p["outcome"]) for p in first.payouts] == [
        (1, 68900, "COMPLETED")
    ]
    raita = next(g for g in first.grievances if g["category"] == "PACKAGING")
    item_key = f"grievance:{raita['grievance_id']}"
    assert any(i["item_key"] == item_key and i["status"] == "OPEN" for i in first.review_items), (
        first.review_items
    )

    page = browser.new_page(viewport={"width": 1360, "height": 900})
    try:
        sign_in(page, api_server.url, "alice")
        expect(page.locator('[data-kind="GRIEVANCE"] .n')).not_to_have_text("0")
        page.screenshot(path=str(SHOTS / "queue.png"))  # the top: counts, oldest items
        # The shared dev database may hold more open items than one page shows: narrow down.
        page.get_by_label("Dispute id").fill(dispute_id)
        page.get_by_role("button", name="Filter").click()
        row = page.locator(f'tr[data-dispute="{dispute_id}"][data-item="{item_key}"]')
        expect(row).to_be_visible()
        expect(row).to_contain_text("PACKAGING")
        page.screenshot(path=str(SHOTS / "queue-filtered.png"), full_page=True)

        row.get_by_role("link", name=dispute_id).click()
        expect(page.get_by_role("heading", name=f"Dispute {dispute_id}")).to_be_visible()
        expect(page.locator("#complaint-text mark.focus")).to_contain_text("The raita had leaked")
        held = page.locator(f'div.card.attention[data-item="{item_key}"]')
        expect(held.locator(".ruling")).to_have_count(3)
        expect(held).to_contain_text("ESCALATE")
        expect(held).to_contain_text("INR 60")
        expect(page.locator("#paid-total")).to_have_text("INR 689")
        page.screenshot(path=str(SHOTS / "case.png"), full_page=True)

        held.get_by_label("Note for the audit record (required)").fill(
            "No packaging record either way; a leaked raita is plausible. Uphold."
        )
        held.get_by_role("button", name="Uphold").click()
        expect(page.get_by_role("status")).to_contain_text(
            f"Recorded UPHOLD ({item_key}) and published it"
        )

        second = pipeline.wait_for_payout(dispute_id, 2, timeout_s=120)
        assert [(p["round"], p["amount_minor"], p["outcome"]) for p in second.payouts] == [
            (1, 68900, "COMPLETED"),
            (2, 6000, "COMPLETED"),
        ]
        assert [(row["round"], row["amount_minor"], row["status"]) for row in second.ledger] == [
            (1, 68900, "SUCCEEDED"),
            (2, 6000, "SUCCEEDED"),
        ]
        assert second.paid_minor == 74900

        page.reload()
        expect(page.locator("#paid-total")).to_have_text("INR 749")
        ledger_round_2 = page.locator('#ledger tr[data-round="2"]')
        expect(ledger_round_2).to_contain_text("INR 60")
        expect(ledger_round_2).to_contain_text("SUCCEEDED")
        expect(page.locator("#nothing-open")).to_be_visible()
        page.screenshot(path=str(SHOTS / "case-after-uphold.png"), full_page=True)
    finally:
        page.close()

    story = httpx.get(
        f"{api_server.url}/disputes/{dispute_id}", headers=api_server.auth(), timeout=30
    ).json()
    assert story["summary"]["paid_minor"] == 74900
    assert [(d["item_key"], d["decision"], d["reviewer"]) for d in story["review_decisions"]] == [
        (item_key, "UPHOLD", "alice")
    ]
    assert [r["total_minor"] for r in story["priced_rounds"]] == [68900, 74900]
    for name in ("queue.png", "queue-filtered.png", "case.png", "case-after-uphold.png"):
        assert (SHOTS / name).stat().st_size > 10_000
