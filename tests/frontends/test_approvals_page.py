"""The approvals page in a real headless Chromium (driven by Playwright) against the real API on loopback."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway.approvals.model import ApprovalState, Requirement
from gateway.core.clock import now_rfc3339
from gateway.pipeline.results import REFUSED_AT_RELEASE, refusal

try:
    from playwright.async_api import Page, async_playwright, expect
except ImportError:  # CI installs it with the `test` extra
    async_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
# The flags this machine needs: no sandbox as root, and no background traffic to a closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}
SCREENSHOT = Path("/tmp/approvals_page.png")
WAIT_MS = 10_000  # the page refreshes every 2 s; anything it should show appears well within this

needs_browser = pytest.mark.skipif(
    async_playwright is None or not CHROMIUM.exists(),
    reason="needs playwright (pip install -e '.[test]') and Debian's chromium at /usr/bin/chromium"
           " (bash .ci/install-system)")


@pytest.fixture
async def phone() -> AsyncIterator[Page]:
    """A phone-sized page in headless Chromium; fails the test on any script or CSP error."""
    assert async_playwright is not None
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        page = await context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error"
                and "the server responded with a status of" not in msg.text else None)
        try:
            yield page
        finally:
            await browser.close()
    assert not errors


async def sign_in(page: Page, base: str, key: str, path: str = "/approvals") -> None:
    await page.goto(f"{base}{path}")
    await page.get_by_test_id("key-input").fill(key)
    await page.get_by_test_id("key-submit").click()


@needs_browser
async def test_an_approver_approves_from_a_phone(serve: Any, approval_desk: Any, phone: Page) -> None:
    approval = approval_desk.add(args={"order": "A-1001", "amount": 900, "note": "<img src=x onerror=alert(1)>"},
                                 final_args={"order": "A-1001", "amount": 100, "note": "<img src=x onerror=alert(1)>"})
    other = approval_desk.add(tool="shell_exec", args={"cmd": "ls"}, principal="agent-7")
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "bob-key", f"/approvals/{approval.id}")

    card = phone.locator(f'[data-approval-id="{approval.id}"]')
    await expect(card).to_be_visible()
    await expect(phone.get_by_test_id("approval")).to_have_count(2)
    await expect(phone.get_by_test_id("approval").first).to_have_attribute("data-approval-id", approval.id)
    await expect(phone.locator(f'[data-approval-id="{other.id}"]').get_by_test_id("tool")).to_have_text("shell_exec")
    await expect(card.get_by_test_id("tool")).to_have_text("payments_refund")
    await expect(card.get_by_test_id("principal")).to_contain_text("alice")
    await expect(card.get_by_test_id("message")).to_have_text("Refunds over 100 need a manager")
    await expect(card.get_by_test_id("requirement")).to_contain_text("group:managers")
    await expect(card.get_by_test_id("countdown")).to_have_text(re.compile(r"^9m \d\ds left$"))
    await expect(card.get_by_test_id("execution")).to_have_text("waiting for a decision")
    changed = card.get_by_test_id("arg-changed")
    await expect(changed).to_have_count(1)
    await expect(changed).to_have_attribute("data-key", "amount")
    await expect(changed.get_by_test_id("arg-original")).to_have_text("900")
    await expect(changed.get_by_test_id("arg-final")).to_have_text("100")
    # Untrusted text is shown as text, never parsed as HTML.
    await expect(card.locator('[data-key="note"]')).to_contain_text('"<img src=x onerror=alert(1)>"')
    await expect(card.locator("img")).to_have_count(0)
    # Nothing on a phone is wider than the screen.
    assert await phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await phone.evaluate("window.scrollTo(0, 0)")
    await phone.screenshot(path=str(SCREENSHOT))

    await card.get_by_test_id("comment").fill("ok for this customer")
    await card.get_by_test_id("approve").click()
    await expect(phone.get_by_test_id("notice")).to_have_text("Approved: payments_refund requested by alice")

    stored = approval_desk.service.store.get(approval.id)
    assert stored.state is ApprovalState.APPROVED
    assert [(v.approver, v.approve, v.comment) for v in stored.votes] == [("bob", True, "ok for this customer")]
    assert stored.requirements[0].satisfied_by == "bob"
    # The decided request stays in view (it is the one the link pointed at), without its buttons.
    await expect(card.get_by_test_id("state")).to_have_text("approved")
    await expect(card.get_by_test_id("approve")).to_be_hidden()
    # An approval runs nothing by itself: the page says the call waits for the agent to call again.
    until = approval_desk.service.store.get(approval.id).to_dict()["valid_until"]
    await expect(card.get_by_test_id("execution")).to_have_text(
        f"approved, waiting for the agent to call again (until {until})")


@needs_browser
async def test_the_page_shows_whose_tool_it_is_and_who_must_approve(serve: Any, approval_desk: Any,
                                                                  phone: Page) -> None:
    """An approval is for one upstream's tool under its requirements (issue 18, item 3): the page says which."""
    gateway_tool = approval_desk.add(tool="send_email", requirements=[
        Requirement("mail/admins", "Mail needs an admin", ["group:managers"])], upstream="mail")
    agent_tool = approval_desk.add(tool="send_email", requirements=[
        Requirement("model/mail", "Confirm the mail", ["self", "group:managers"], via="elicitation")],
        upstream="client")
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "bob-key")

    mine = phone.locator(f'[data-approval-id="{gateway_tool.id}"]')
    await expect(mine.get_by_test_id("upstream")).to_have_text("upstream mail")
    await expect(mine.get_by_test_id("requirement")).to_contain_text("mail/admins")
    await expect(mine.get_by_test_id("approvers")).to_have_text("group:managers")
    agent = phone.locator(f'[data-approval-id="{agent_tool.id}"]')
    await expect(agent.get_by_test_id("upstream")).to_have_text(
        "the agent itself (a tool it runs, through the model proxy)")
    await expect(agent.get_by_test_id("approvers")).to_have_text(
        "the requester, through their own client, group:managers")


@needs_browser
async def test_an_approved_call_refused_at_its_release_shows_as_refused_with_the_reason(
        serve: Any, approval_desk: Any, phone: Page) -> None:
    """Approved, then refused when released (a cap filled while it waited: gateway/pipeline/flow_step.py
    ``readmitted``): the approval's one execution ran nothing, and the page says so, not "ran"."""
    approval = approval_desk.add(tool="payments_transfer", args={"amount": 600})
    refused = refusal(approval.call_id, "reject", "This run may move at most 1000 USD.")
    refused.meta[REFUSED_AT_RELEASE] = "flows/spend-cap"  # as the release's admission marks it
    done = dataclasses.replace(approval, state=ApprovalState.EXECUTED, decided_at=now_rfc3339(),
                               decided_ts=time.time(), executed_at=now_rfc3339(), result=refused.to_rest())
    assert approval_desk.service.store.transition(done, ApprovalState.PENDING)
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "bob-key", f"/approvals/{approval.id}")

    card = phone.locator(f'[data-approval-id="{approval.id}"]')
    await expect(card.get_by_test_id("state")).to_have_text("refused at release")
    await expect(card.get_by_test_id("execution")).to_have_text(
        f"refused when released at {done.executed_at}: This run may move at most 1000 USD. (rule flows/spend-cap)")
    await expect(card.get_by_test_id("approve")).to_be_hidden()
    shown = approval_desk.service.store.get(approval.id).to_dict()["execution"]  # the API's view
    assert (shown["state"], shown["reason"], shown["rule"]) == (
        "refused_at_release", "This run may move at most 1000 USD.", "flows/spend-cap")


@needs_browser
async def test_the_requester_cannot_approve_their_own_call(serve: Any, approval_desk: Any, phone: Page) -> None:
    approval = approval_desk.add(principal="alice")
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "alice-key")

    card = phone.locator(f'[data-approval-id="{approval.id}"]')
    await card.get_by_test_id("approve").click()
    await expect(card.get_by_test_id("card-error")).to_have_text(
        "Not allowed: you cannot approve your own call")
    assert approval_desk.service.store.get(approval.id).state is ApprovalState.PENDING

    await card.get_by_test_id("deny").click()  # denying needs a reason, asked for before any request
    await expect(card.get_by_test_id("card-error")).to_contain_text("Say why you deny it")


@needs_browser
async def test_wrong_keys_and_signing_out(serve: Any, approval_desk: Any, phone: Page) -> None:
    approval_desk.add()
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "no-such-key")
    await expect(phone.get_by_test_id("sign-in-error")).to_contain_text("That key was not accepted")
    await expect(phone.get_by_test_id("sso-sign-in")).to_be_hidden()  # no approvals.sso: keys only

    await phone.get_by_test_id("key-input").fill("carol-key")
    await phone.get_by_test_id("key-submit").click()
    await expect(phone.get_by_test_id("sign-in-error")).to_contain_text("may not see approval requests")

    await phone.get_by_test_id("key-input").fill("bob-key")
    await phone.get_by_test_id("key-submit").click()
    await expect(phone.get_by_test_id("approval")).to_have_count(1)
    await phone.reload()  # the key is kept for this tab
    await expect(phone.get_by_test_id("approval")).to_have_count(1)

    await phone.get_by_test_id("sign-out").click()
    await expect(phone.get_by_test_id("sign-in")).to_be_visible()
    assert await phone.evaluate("sessionStorage.length") == 0
    await phone.reload()
    await expect(phone.get_by_test_id("sign-in")).to_be_visible()


@needs_browser
async def test_an_empty_queue_says_so_and_new_requests_appear(serve: Any, approval_desk: Any, phone: Page) -> None:
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "bob-key")
    await expect(phone.get_by_test_id("empty")).to_be_visible()
    approval = approval_desk.add()
    await expect(phone.locator(f'[data-approval-id="{approval.id}"]')).to_be_visible()
    await expect(phone.get_by_test_id("empty")).to_be_hidden()


async def test_the_page_needs_no_key_and_pins_its_own_script(serve: Any, approval_desk: Any) -> None:
    base = await serve(approval_desk.app())
    async with httpx2.AsyncClient() as client:
        listing, focused, api = await client.get(f"{base}/approvals"), \
            await client.get(f"{base}/approvals/0123abcd"), await client.get(f"{base}/v1/approvals")
    assert listing.status_code == focused.status_code == 200
    assert listing.content == focused.content
    assert listing.headers["content-type"] == "text/html; charset=utf-8"
    csp = listing.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "connect-src 'self'" in csp
    assert "/*! approvals.js */" not in listing.text and "function api(" in listing.text
    assert api.status_code == 401


@needs_browser
async def test_the_page_pages_through_and_filters_every_request_the_approver_may_decide(
        serve: Any, approval_desk: Any, phone: Page) -> None:
    for _ in range(225):
        approval_desk.add()
    shells = [approval_desk.add(tool="shell_exec", args={"cmd": "uptime"}, principal="agent-7") for _ in range(5)]
    approval_desk.add(tool="vault_read", requirements=[Requirement("vault", "Security only", ["group:security"])])
    base = await serve(approval_desk.app())
    await sign_in(phone, base, "bob-key")

    count, more, cards = phone.get_by_test_id("count"), phone.get_by_test_id("more"), phone.get_by_test_id("approval")
    await expect(count).to_have_text("Showing 100 of 230")  # not the vault request: bob is no security approver
    await expect(cards).to_have_count(100)
    await more.click()
    await expect(count).to_have_text("Showing 200 of 230")
    await more.click()
    await expect(count).to_have_text("Showing 230 of 230")  # past the 200 newest
    await expect(cards).to_have_count(230)
    await expect(more).to_be_hidden()

    await phone.get_by_test_id("filter-tool").fill("shell_exec")
    await expect(count).to_have_text("Showing 5 of 5")
    await expect(cards).to_have_count(5)
    for shell in shells:
        await expect(phone.locator(f'[data-approval-id="{shell.id}"]')).to_be_visible()
    await phone.get_by_test_id("filter-tool").fill("")
    await phone.get_by_test_id("filter-principal").fill("agent-7")
    await phone.get_by_test_id("filter-text").fill("uptime")
    await expect(cards).to_have_count(5)
    await phone.get_by_test_id("filter-text").fill("no such text")
    await expect(phone.get_by_test_id("empty")).to_have_text("No requests match these filters.")
    await expect(cards).to_have_count(0)
