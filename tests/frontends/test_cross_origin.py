"""A malicious web page against an anonymous gateway, in a real headless Chromium (issue 7, item 2).

The page is served from another loopback port (a different origin) and tries what moved 900 USD
before: a `no-cors` text/plain `fetch`, a text/plain form post, a beacon and a CORS JSON request.
A DNS-rebinding page (its host name mapped to 127.0.0.1 by Chromium's resolver rules) tries
same-origin requests that reach the gateway with a foreign Host. Each attack is first aimed at the
HTTP API upstream directly, which has no defences: it must land there (so the browser really sends
it), and never through the gateway. The approvals page, in the same browser, still approves.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import pytest_asyncio
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gateway.auth.keys import hash_key

try:
    from playwright.async_api import Browser, async_playwright, expect
except ImportError:  # CI installs it with the `test` extra
    async_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
REBOUND = "rebound.example.test"  # the attacker's name, resolved to 127.0.0.1 inside the browser
# As tests/frontends/test_approvals_page.py launches it, plus the rebinding resolver rule and no
# local-network-access checks: older browsers have none, and the gateway must not rely on them.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
                 "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
                 "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults"]
WAIT_MS = 10_000
APPROVER_KEY = "dana-approver-key-27"

pytestmark = [pytest.mark.skipif(
    async_playwright is None or not CHROMIUM.exists(),
    reason="needs playwright (pip install -e '.[test]') and Debian's chromium at /usr/bin/chromium"
           " (bash .ci/install-system)"), pytest.mark.session_loop]

# Every cross-site way a page can send a body without a CORS preflight, plus one that needs one.
# The page reports what it could observe; whether the call ran is read from the upstream.
ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>cute cats</title>
<iframe name="sink"></iframe>
<script>
async function attack(url, marks) {
  const body = (mark) => JSON.stringify({arguments: {name: mark}, name: mark});
  const seen = {};
  try { await fetch(url, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
                          body: body(marks.fetch)}); seen.fetch = "sent"; }
  catch (e) { seen.fetch = String(e); }
  try { const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                                    body: body(marks.cors)}); seen.cors = r.status; }
  catch (e) { seen.cors = String(e); }
  seen.beacon = navigator.sendBeacon(url, body(marks.beacon));
  const form = document.createElement("form");
  form.method = "POST"; form.enctype = "text/plain"; form.action = url; form.target = "sink";
  const field = document.createElement("input");
  // a text/plain form sends "NAME=VALUE": this one makes {"arguments": {"name": MARK}, "x": "="}
  field.name = '{"arguments": {"name": "' + marks.form + '"}, "x": "'; field.value = '"}';
  form.append(field); document.body.append(form);
  await new Promise((done) => { document.querySelector("iframe").onload = done; form.submit(); });
  seen.form = "submitted";
  return seen;
}
</script>"""

REBOUND_PAGE = """<!doctype html><meta charset="utf-8"><title>rebound</title>
<script>
async function attack(path, mark) {
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                               body: JSON.stringify({arguments: {name: mark}, name: mark})});
  return {status: r.status, text: await r.text()};
}
</script>"""


@pytest_asyncio.fixture(loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    assert async_playwright is not None
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def attacker() -> AsyncIterator[str]:
    """The malicious site, on its own loopback port."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(ATTACK_PAGE)

    async with serve_app(Starlette(routes=[Route("/", page)]), lifespan="off") as url:
        yield url


@pytest_asyncio.fixture(loop_scope="session")
async def anonymous_gateway(start_gateway, configs, http_api) -> Any:
    """The quick start's setup: anonymous, on loopback; deletes need dana's approval."""
    config = configs.base(
        configs.http_upstream("api", http_api.url, prefix="web"),
        auth={"api_keys": [{"principal": {"id": "dana"}, "sha256": hash_key(APPROVER_KEY), "approver": True}],
              "anonymous": {"id": "guest"}})
    return await start_gateway(config, {"p.yaml": """
        policy: p
        rules:
          - id: deletes-need-a-human
            tools: [web_delete_item]
            action: approve
            message: Deletes need a human.
            approval: {approvers: [dana], timeout: 60s, on_timeout: reject}
    """})


def marks(prefix: str) -> dict[str, str]:
    return {kind: f"{prefix}-{kind}-{uuid.uuid4().hex}" for kind in ("fetch", "cors", "beacon", "form")}


async def test_a_page_on_another_origin_cannot_call_a_tool(browser, attacker, anonymous_gateway, http_api, until):
    page = await browser.new_page()
    page.set_default_timeout(WAIT_MS)
    await page.goto(attacker)

    # control: the same requests straight at the undefended upstream do arrive
    control = marks("control")
    await page.evaluate("([url, marks]) => attack(url, marks)", [f"{http_api.url}/items", control])
    for kind in ("fetch", "beacon", "form"):
        await until(lambda kind=kind: _async(http_api.seen(control[kind])), timeout=10)

    attack = marks("attack")
    seen = await page.evaluate("([url, marks]) => attack(url, marks)",
                               [f"{anonymous_gateway.url}/v1/tools/web_create_item/invoke", attack])
    assert seen["fetch"] == "sent" and seen["form"] == "submitted"  # the browser did send them
    assert seen["cors"] != 200
    control_done = f"control-{uuid.uuid4().hex}"  # a later request through the gateway runs, so earlier ones had time
    await page.request.post(f"{anonymous_gateway.url}/v1/tools/web_create_item/invoke",
                            data=json.dumps({"arguments": {"name": control_done}}),
                            headers={"Content-Type": "application/json"})
    await until(lambda: _async(http_api.seen(control_done)), timeout=10)
    for kind, mark in attack.items():
        assert http_api.seen(mark) == [], kind
    assert not any(mark in json.dumps(e) for e in anonymous_gateway.audit_events() for mark in attack.values())
    await page.close()


async def test_a_dns_rebinding_page_cannot_call_a_tool(browser, anonymous_gateway, http_api, until):
    page = await browser.new_page()
    page.set_default_timeout(WAIT_MS)

    async def rebound(target: str) -> dict[str, Any]:
        """Open the attacker's page at http://REBOUND:PORT (PORT: ``target``'s) and post to ``path`` from it."""
        origin = f"http://{REBOUND}:{urlsplit(target).port}"
        await page.route(f"{origin}/cats.html", lambda route: route.fulfill(body=REBOUND_PAGE,
                                                                            content_type="text/html"))
        await page.goto(f"{origin}/cats.html")
        return origin

    control = f"rebound-control-{uuid.uuid4().hex}"
    await rebound(http_api.url)  # the name now points at the upstream, which takes the request
    reached = await page.evaluate("(mark) => attack('/items', mark)", control)
    assert reached["status"] == 201
    assert len(http_api.seen(control)) == 1

    mark = f"rebound-{uuid.uuid4().hex}"
    await rebound(anonymous_gateway.url)  # ... and now at the gateway
    refused = await page.evaluate("(mark) => attack('/v1/tools/web_create_item/invoke', mark)", mark)
    assert refused["status"] == 421
    assert json.loads(refused["text"])["error"]["code"] == "host-not-allowed"
    assert http_api.seen(mark) == []
    await page.close()


async def test_the_approvals_page_still_approves_through_the_edge(browser, anonymous_gateway, http_api):
    # the page's own requests: same origin, JSON bodies, the key in the Authorization header, no cookies
    mark = f"approve-{uuid.uuid4().hex}"
    async with httpx2.AsyncClient(base_url=anonymous_gateway.url) as http:
        held = await http.post("/v1/tools/web_delete_item/invoke", json={"arguments": {"item_id": mark}})
        assert held.status_code == 202
        approval_id = held.json()["approval_id"]

        page = await browser.new_page()
        page.set_default_timeout(WAIT_MS)
        sent: list[dict[str, str]] = []
        page.on("request", lambda r: sent.append({**r.headers, "method": r.method}) if "/decision" in r.url else None)
        await page.goto(f"{anonymous_gateway.url}/approvals/{approval_id}")
        await page.get_by_test_id("key-input").fill(APPROVER_KEY)
        await page.get_by_test_id("key-submit").click()
        card = page.locator(f'[data-approval-id="{approval_id}"]')
        await card.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("notice")).to_contain_text("Approved: web_delete_item")
        assert await page.context.cookies() == []
        await page.close()

        assert len(sent) == 1
        assert sent[0]["method"] == "POST"
        assert sent[0]["authorization"] == f"Bearer {APPROVER_KEY}"
        assert sent[0]["content-type"] == "application/json"
        assert "cookie" not in sent[0]
        ran = await http.post("/v1/tools/web_delete_item/invoke",
                              json={"arguments": {"item_id": mark}, "call_id": held.json()["call_id"]})
        assert ran.status_code == 200
    assert len(http_api.seen(mark)) == 1


async def _async(value: Any) -> Any:
    return value
