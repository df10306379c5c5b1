"""An approver signs in to the approvals page with the real IdP, in headless Chromium, and approves a real held call.

The gateway is the whole of it (``build_app`` from a gateway.yaml with ``auth.jwt`` and ``approvals.sso``), in
front of the counting MCP upstream; an agent's REST call to ``ops_deploy`` is held for approval meanwhile. The IdP
is npm ``oidc-provider`` (tests/idp_support.py), signed in to through its own dev login form.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
import yaml
from approval_support import STEP_SECONDS, approve_rule, finished, in_background, policy
from browser_support import chromium_page, needs_browser
from e2e_clients import CountingUpstream
from idp_support import Idp
from loopback import serve_app
from sso_support import jwt_auth, register_client
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gateway.app import build_app

try:
    from playwright.async_api import expect
except ImportError:  # skipped then (needs_browser)
    expect = None  # type: ignore[assignment]
from gateway.auth.keys import hash_key
from gateway.config.load import load_config

pytestmark = needs_browser

AGENT_KEY, WATCHER_KEY = "agent-key-5e1f0c", "watcher-key-c01d2e"  # the caller; an admin who looks (and tidies up)


@pytest_asyncio.fixture(loop_scope="module")
async def gateway(tmp_path: Path, idp: Idp, upstream: CountingUpstream) -> AsyncIterator[str]:
    """The gateway with single sign-on at the IdP; deploys need a lead. Its base URL."""
    upstream.reset()
    client = await register_client(idp)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "policy.yaml").write_text(policy(approve_rule(
        "deploys-need-leads", "ops_deploy", approvers=["group:leads"], timeout="120s")), encoding="utf-8")
    (tmp_path / "sso-secret").write_text(str(client.client_secret), encoding="utf-8")
    spec = {"policies": ["policies"], "store": {"sqlite": "data/gateway.sqlite3"},
            "audit": {"file": "data/audit.jsonl"},
            "auth": {"api_keys": [{"principal": {"id": "agent"}, "sha256": hash_key(AGENT_KEY)},
                                  {"principal": {"id": "watcher", "groups": ["leads"]}, "sha256": hash_key(WATCHER_KEY),
                                   "approver": True, "admin": True}],
                     "jwt": [jwt_auth(idp)]},
            "approvals": {"sso": {"issuer": idp.issuer, "client_id": client.client_id,
                                  "client_secret": {"file": "sso-secret"}, "name": "Test IdP"}},
            "upstreams": [{"name": "ops", "mcp": {"url": f"{upstream.url}/mcp"}}]}
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    async with serve_app(build_app(load_config(tmp_path / "gateway.yaml")), startup=STEP_SECONDS, grace=1) as url:
        await idp.set_user("alice")  # the table's groups (another test may have changed them)
        yield url


async def held_deploy(gateway: str, service: str) -> httpx2.Response:
    """The agent's call, held until someone decides (REST ``?wait=``)."""
    async with httpx2.AsyncClient(base_url=gateway, headers={"Authorization": f"Bearer {AGENT_KEY}"},
                                  timeout=120) as http:
        return await http.post("/v1/tools/ops_deploy/invoke", params={"wait": "100s"},
                               json={"arguments": {"service": service}, "call_id": f"deploy-{service}"})


async def pending(gateway: str, service: str) -> dict[str, Any]:
    """The pending request for ``service``, once the held call has made it (as the watcher sees it)."""
    async with httpx2.AsyncClient(base_url=gateway, headers={"Authorization": f"Bearer {WATCHER_KEY}"},
                                  timeout=STEP_SECONDS) as http:
        async with asyncio.timeout(STEP_SECONDS):
            while True:
                found = (await http.get("/v1/approvals", params={"q": service})).json()["approvals"]
                if found:
                    return dict(found[0])
                await asyncio.sleep(0.05)


async def sign_in_at_the_idp(page: Any, gateway: str, user: str) -> None:
    """The IdP's own dev pages: its login form, then its consent page when it asks."""
    await page.locator("input[name=login]").fill(user)
    await page.locator("input[name=password]").fill("any password")
    await page.locator("button[type=submit]").first.click()
    for _ in range(3):
        await page.wait_for_load_state()
        if page.url.startswith(gateway):
            return
        await page.locator("button[type=submit]").first.click()  # consent: "Continue"
    await page.wait_for_url(re.compile(f"^{re.escape(gateway)}/"))


async def test_an_approver_signs_in_with_the_idp_approves_a_held_call_and_signs_out(
        gateway: str, idp: Idp, upstream: CountingUpstream) -> None:
    async with in_background(held_deploy(gateway, "billing")) as call, chromium_page([gateway]) as (page, errors):
        approval = await pending(gateway, "billing")
        await page.goto(f"{gateway}/approvals/{approval['id']}")
        sso = page.get_by_test_id("sso-sign-in")
        await expect(sso).to_have_text("Sign in with Test IdP")
        await expect(page.get_by_test_id("key-input")).to_be_visible()  # pasting a key still works beside it
        await sso.click()
        await page.wait_for_url(re.compile(f"^{re.escape(idp.issuer)}/"))
        await sign_in_at_the_idp(page, gateway, "alice")

        assert page.url == f"{gateway}/approvals/{approval['id']}"
        await expect(page.get_by_test_id("who")).to_have_text("alice")
        card = page.locator(f'[data-approval-id="{approval["id"]}"]')
        await expect(card.get_by_test_id("tool")).to_have_text("ops_deploy")
        await expect(card.get_by_test_id("principal")).to_contain_text("agent")
        cookies = {c["name"]: c for c in await page.context.cookies()}
        session = cookies["gateway-approver"]
        assert (session["httpOnly"], session["sameSite"]) == (True, "Strict")
        assert "gateway-sso-login" not in cookies
        assert await page.evaluate("document.cookie") == ""  # no script on the page can read it

        # the cookie is an approver's session for the approvals page, and nothing else: no tool call, no admin API
        async with httpx2.AsyncClient(base_url=gateway, cookies={"gateway-approver": session["value"]}) as http:
            assert (await http.get("/approvals/sso/session")).json()["session"]["principal"] == "alice"
            tool = await http.post("/v1/tools/ops_deploy/invoke", headers={"Origin": gateway},
                                   json={"arguments": {"service": "cookie"}})
            assert tool.status_code == 401
            assert (await http.get("/v1/admin/sessions")).status_code == 401
            assert (await http.get("/v1/tools")).status_code == 401
        assert upstream.ran("deploy", service="cookie") == 0

        await card.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("notice")).to_have_text("Approved: ops_deploy requested by agent")
        answer = await finished(call)
        assert answer.status_code == 200, answer.text
        assert upstream.ran("deploy", service="billing") == 1
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {WATCHER_KEY}"}) as http:
            decided = (await http.get(f"{gateway}/v1/approvals/{approval['id']}")).json()
        assert [(v["approver"], v["approve"]) for v in decided["votes"]] == [("alice", True)]

        await page.get_by_test_id("sign-out").click()
        await page.wait_for_url(re.compile(f"^{re.escape(idp.issuer)}/"))  # the IdP's own sign-out, too
        await page.get_by_role("button", name="Yes, sign me out").click()
        await page.wait_for_url(f"{gateway}/approvals")
        await expect(page.get_by_test_id("sign-in")).to_be_visible()
        await expect(page.get_by_test_id("sso-sign-in")).to_be_visible()
        assert "gateway-approver" not in {c["name"] for c in await page.context.cookies()}
        # the cookie a thief copied before is worth nothing now
        async with httpx2.AsyncClient(cookies={"gateway-approver": session["value"]}) as http:
            after = await http.get(f"{gateway}/approvals/sso/session")
        assert after.json()["session"] is None
        assert not errors


ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>prize</title><iframe name="sink"></iframe>
<script>
async function attack(url) {
  const body = JSON.stringify({approve: true, comment: "from another site"});
  const seen = {};
  try { await fetch(url, {method: "POST", mode: "no-cors", credentials: "include",
                          headers: {"Content-Type": "text/plain"}, body}); seen.simple = "sent"; }
  catch (e) { seen.simple = String(e); }
  try { const r = await fetch(url, {method: "POST", credentials: "include",
                                    headers: {"Content-Type": "application/json"}, body}); seen.cors = r.status; }
  catch (e) { seen.cors = "blocked"; }
  const form = document.createElement("form");
  form.method = "POST"; form.enctype = "text/plain"; form.action = url; form.target = "sink";
  const field = document.createElement("input");
  field.name = '{"approve": true, "comment": "'; field.value = '"}';
  form.append(field); document.body.append(form);
  await new Promise((done) => { document.querySelector("iframe").onload = done; form.submit(); });
  return seen;
}
</script>"""


@contextlib.asynccontextmanager
async def attacker_site() -> AsyncIterator[str]:
    """A page on another origin of loopback (its port differs: same site as 127.0.0.1, another origin)."""

    async def home(request: Any) -> HTMLResponse:
        return HTMLResponse(ATTACK_PAGE)

    async with serve_app(Starlette(routes=[Route("/", home)]), lifespan="off", startup=STEP_SECONDS) as url:
        yield url


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])  # same site, another origin; another site
async def test_a_page_elsewhere_cannot_decide_with_the_approvers_cookie(gateway: str, idp: Idp, host: str) -> None:
    async with in_background(held_deploy(gateway, f"payroll-{host}")) as call, attacker_site() as evil, \
            chromium_page([gateway]) as (page, errors):
        approval = await pending(gateway, f"payroll-{host}")
        await page.goto(f"{gateway}/approvals")
        await page.get_by_test_id("sso-sign-in").click()
        await sign_in_at_the_idp(page, gateway, "alice")
        await expect(page.locator(f'[data-approval-id="{approval["id"]}"]')).to_be_visible()

        await page.goto(evil.replace("127.0.0.1", host))
        target = f"{gateway}/v1/approvals/{approval['id']}/decision"
        seen = await page.evaluate("(url) => attack(url)", target)
        assert seen["cors"] == "blocked"  # the preflight is refused: the JSON request is never sent
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {WATCHER_KEY}"}) as http:
            still = (await http.get(f"{gateway}/v1/approvals/{approval['id']}")).json()
            assert still["state"] == "pending" and still["votes"] == []
            assert not call.done()
            denied = await http.post(f"{gateway}/v1/approvals/{approval['id']}/decision",
                                     json={"approve": False, "comment": "test over"})
            assert denied.status_code == 200  # the held call ends now, not when the gateway stops
        ended = await finished(call)
        assert ended.status_code == 200 and ended.json()["decision"] == "reject", ended.text
        assert not errors
