"""The operator console (/console) in a real headless Chromium (driven by Playwright) against a real gateway on
loopback: 60-odd calls made through REST, one of them held and approved, show in every view, filtered and paged;
a run's timeline shows its calls in order with the deciding rule and the latencies, and an admin ends and resets
it; the views work with the keyboard alone; axe-core finds nothing serious in light or dark mode; hostile strings
stay text; an approver sees the approvals and the run of a request they may decide, nothing else.

Screenshots of each view in both modes go to tests/artifacts/console/ (git-ignored); with
CONSOLE_DOCS_SCREENSHOTS=1 the runs and decisions views in light mode are also written to docs/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from browser_support import chromium_page, needs_browser
from gateway_harness import (
    KEYS,
    RunningGateway,
    api_keys,
    base_config,
    eventually,
    http_api_tools,
    http_upstream,
    run_gateway,
    write_gateway,
)
from thirdparty import axe_core

from gateway.auth.keys import hash_key

try:
    from playwright.async_api import Page, expect
except ImportError:  # CI installs it with the `test` extra
    pass

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
VIEWPORT = {"width": 1280, "height": 800}
ADMIN_KEY = "dora-console-key-8c1e"
BOB_KEY = "bob-approver-key-2b7d"  # an approver in group managers, who may decide deletes
HOSTILE = "<img src=x onerror=alert(1)>"
BULK_RUNS = 55  # runs of one call each: with the main run's and bob's, past one page of 50 runs and of decisions
POLICY = f"""
policy: shop
rules:
  - id: no-secret-search
    tools: [api_search]
    when: args.q == "secret"
    action: reject
    message: "Not that {HOSTILE}."
  - id: searches
    tools: [api_search]
    action: allow
  - id: deletes-need-a-manager
    tools: [api_delete_item]
    action: approve
    message: Deleting needs a manager
    approval: {{approvers: ["group:managers"], timeout: 10m}}
  - id: never-used
    tools: [api_get_item]
    when: args.item_id == "nobody-asks-this"
    action: reject
    message: never
"""
# The main run, in order: (tool, what the timeline shows as its verdict).
MAIN = [("api_search", "allow"), ("api_search", "allow"), ("api_search", "reject"), ("api_delete_item", "pending"),
        ("api_delete_item", "approve"), ("api_search", "allow")]


def _tools() -> list[dict[str, Any]]:
    """The HTTP API's tools, one with a hostile title and description (an upstream is not trusted)."""
    tools = http_api_tools()
    search = next(t for t in tools if t["name"] == "search")
    search["description"] = f"Search the items {HOSTILE}"
    search["annotations"] = {"title": HOSTILE, "readOnlyHint": True}
    return tools


async def _invoke(client: httpx2.AsyncClient, tool: str, arguments: dict[str, Any], **body: Any) -> httpx2.Response:
    return await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments, **body})


def _client(gw: RunningGateway, key: str, run: str | None = None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {key}", **({"X-Gateway-Session": run} if run else {})}
    return httpx2.AsyncClient(base_url=gw.url, timeout=30, headers=headers)


async def _held(gw: RunningGateway, run: str, item: str, call_id: str) -> str:
    """A delete held for approval in ``run``; its approval id."""
    async with _client(gw, KEYS["alice"], run) as alice:
        held = await _invoke(alice, "api_delete_item", {"item_id": item}, call_id=call_id)
    assert held.status_code == 202, held.text
    approval_id: str = held.json()["approval_id"]
    return approval_id


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def console(tmp_path_factory: pytest.TempPathFactory, http_api: Any) -> AsyncIterator[RunningGateway]:
    """One gateway with alice's calls in runs (run-main, bulk-NN, run-end) and bob's (bob-run), all in the console."""
    keys = [*api_keys("alice"), {"principal": {"id": "bob", "groups": ["managers"]}, "sha256": hash_key(BOB_KEY),
                                 "approver": True},
            {"principal": {"id": "dora"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
    config = base_config(http_upstream("api", http_api.url, _tools()), auth={"api_keys": keys})
    root = tmp_path_factory.mktemp("console")
    async with run_gateway(write_gateway(root, config, {"shop.yaml": POLICY})) as gw:
        async with _client(gw, KEYS["alice"], "run-main") as alice:
            for q in ("first", HOSTILE, "secret"):
                assert (await _invoke(alice, "api_search", {"q": q})).status_code == 200
        approval = await _held(gw, "run-main", "A-1", "delete-a-1")
        async with _client(gw, BOB_KEY) as bob:
            # approve -> edit -> decided again by the policies -> run: the approver changes the item before approving
            decided = await bob.post(f"/v1/approvals/{approval}/decision",
                                     json={"approve": True, "comment": "ok", "arguments": {"item_id": "A-2"}})
            assert decided.status_code == 200, decided.text
            assert (await _invoke(bob, "api_search", {"q": "bob's own"})).status_code == 200
        async with _client(gw, KEYS["alice"], "run-main") as alice:
            released = await _invoke(alice, "api_delete_item", {"item_id": "A-1"}, call_id="delete-a-1")
            assert released.status_code == 200, released.text
            assert (await _invoke(alice, "api_search", {"q": "last"})).status_code == 200
        for i in range(BULK_RUNS):
            async with _client(gw, KEYS["alice"], f"bulk-{i:02d}") as alice:
                assert (await _invoke(alice, "api_search", {"q": f"bulk {i}"})).status_code == 200
        async with _client(gw, KEYS["alice"], "run-end") as alice:
            assert (await _invoke(alice, "api_search", {"q": "to be ended"})).status_code == 200
        async with _client(gw, ADMIN_KEY) as admin:
            async def written() -> bool:  # the console's rows are written behind the audit log
                total = (await admin.get("/v1/admin/decisions")).json()["total"]
                return bool(total == len(MAIN) + 1 + BULK_RUNS + 1)
            await eventually(written)
        yield gw


async def sign_in(page: Page, base: str, key: str, route: str = "") -> None:
    await page.goto(f"{base}/console{route}")
    await page.get_by_test_id("key-input").fill(key)
    await page.get_by_test_id("key-submit").click()
    await expect(page.get_by_test_id("view-title")).to_be_visible()


async def test_the_page_needs_no_key_pins_its_scripts_and_keeps_the_edge(console: RunningGateway) -> None:
    async with httpx2.AsyncClient(base_url=console.url) as client:
        page = await client.get("/console")
        elsewhere = await client.get("/console", headers={"Host": "evil.example"})
        api = await client.get("/v1/admin/whoami")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert len(re.findall(r"'sha256-", csp)) == 8 + 2  # the eight scripts and two style sheets, nothing else
    assert "/*! " not in page.text and "window.consoleKit" in page.text
    assert elsewhere.status_code == 421  # the edge's host check, as for /approvals
    assert api.status_code == 401


@needs_browser
async def test_each_view_loads_filters_and_pages(console: RunningGateway, tmp_path: Path) -> None:
    async with chromium_page(watch=[console.url], viewport=VIEWPORT, accept_downloads=True) as (page, errors):
        await sign_in(page, console.url, ADMIN_KEY)
        await expect(page).to_have_url(re.compile(r"/console#/runs$"))  # an admin starts on the runs
        await expect(page.get_by_test_id("who")).to_have_text("dora")
        rows = page.get_by_test_id("runs-row")
        runs = 1 + BULK_RUNS + 2  # run-main, the bulk runs, run-end and bob's
        await expect(rows).to_have_count(50)
        await expect(page.get_by_test_id("page")).to_have_text(f"Page 1 of {runs} matches")
        await page.get_by_test_id("page-older").click()
        await expect(rows).to_have_count(runs - 50)
        await expect(page.get_by_test_id("page")).to_have_text(f"Page 2 of {runs} matches")
        await page.get_by_test_id("filter-principal").fill("bob")
        await page.get_by_test_id("filter-apply").click()
        await expect(rows).to_have_count(1)
        await expect(page.get_by_test_id("page")).to_have_text("Page 1 of 1 match")  # a new filter starts afresh

        await page.get_by_test_id("nav-decisions").click()
        decisions = page.get_by_test_id("decisions-row")
        total = len(MAIN) + 1 + BULK_RUNS + 1
        await expect(decisions).to_have_count(50)
        await expect(page.get_by_test_id("page")).to_have_text(f"Page 1 of {total} matches")
        await expect(page.get_by_test_id("page-newer")).to_be_disabled()
        await page.get_by_test_id("page-older").click()
        await expect(decisions).to_have_count(total - 50)
        await page.get_by_test_id("page-newer").click()
        await expect(decisions).to_have_count(50)
        assert await page.get_by_test_id("chart-bar").count() >= 1
        await expect(page.get_by_test_id("chart-legend")).to_contain_text("reject 1")
        await expect(page.locator('[data-testid=chart-bar][data-verdict="reject"]')).to_have_count(1)
        await page.get_by_test_id("filter-verdict").select_option("reject")
        await page.get_by_test_id("filter-apply").click()
        await expect(decisions).to_have_count(1)
        await expect(decisions.get_by_test_id("decision-rule")).to_have_text("shop/no-secret-search"
                                                                            " (policies/shop.yaml:3)")
        await page.get_by_test_id("filter-verdict").select_option("")
        await page.get_by_test_id("filter-tool").fill("api_delete_item")
        await page.get_by_test_id("filter-apply").click()
        await expect(decisions).to_have_count(2)
        async with page.expect_download() as download:
            await page.get_by_test_id("export").click()
        saved = tmp_path / "decisions.jsonl"
        await (await download.value).save_as(saved)
        lines = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
        assert [d["tool"] for d in lines] == ["api_delete_item", "api_delete_item"]  # the selection, not all

        await page.get_by_test_id("nav-policies").click()
        await expect(page.get_by_test_id("policy-revision")).not_to_have_text("—")
        await expect(page.get_by_test_id("rules-row")).to_have_count(4)
        searches = page.get_by_test_id("rules-row").filter(has_text="shop/searches")
        await expect(searches.get_by_test_id("rule-hits-hour")).to_have_text(str(4 + 1 + BULK_RUNS + 1))  # every search
        await expect(page.get_by_test_id("never-fired")).to_have_text("shop/never-used")
        await page.get_by_test_id("filter-q").fill("approve")
        await page.get_by_test_id("filter-apply").click()
        await expect(page.get_by_test_id("rule-id")).to_have_text(["shop/deletes-need-a-manager"])

        await page.get_by_test_id("nav-upstreams").click()
        await expect(page.get_by_test_id("upstream-state")).to_have_text("up")
        await expect(page.get_by_test_id("tools-lock")).to_contain_text("No tools lock")
        await expect(page.get_by_test_id("tool")).to_have_count(len(http_api_tools()))
        await page.get_by_test_id("filter-q").fill("search")
        await page.get_by_test_id("filter-apply").click()
        await expect(page.get_by_test_id("tool")).to_have_count(1)
        await expect(page.get_by_test_id("tool-schema")).to_be_hidden()  # collapsed until asked for
        await page.get_by_test_id("tool-summary").click()
        await expect(page.get_by_test_id("tool-schema")).to_contain_text('"q"')

        await page.get_by_test_id("nav-approvals").click()
        await expect(page).to_have_url(re.compile(r"/approvals$"))
        await expect(page.get_by_test_id("empty")).to_be_visible()  # the key carried over: no second sign-in
        await expect(page.get_by_test_id("nav-runs")).to_be_visible()  # the same header, with the admin's views
    assert errors == []


@needs_browser
async def test_a_timeline_shows_the_calls_in_order_and_an_admin_ends_and_resets_the_run(
        console: RunningGateway) -> None:
    async with chromium_page(watch=[console.url], viewport=VIEWPORT) as (page, errors):
        await sign_in(page, console.url, ADMIN_KEY, "#/runs/alice/run-main")
        calls = page.get_by_test_id("timeline-call")
        await expect(calls).to_have_count(len(MAIN))
        await expect(calls.get_by_test_id("call-tool")).to_have_text([tool for tool, _ in MAIN])
        await expect(calls.get_by_test_id("call-verdict")).to_have_text([verdict for _, verdict in MAIN])
        await expect(calls.get_by_test_id("call-args")).to_have_text([
            'Arguments {"q":"first"}', f'Arguments {{"q":"{HOSTILE}"}}', 'Arguments {"q":"secret"}',
            'Arguments {"item_id":"A-1"}', 'Arguments (rewritten) {"item_id":"A-2"}', 'Arguments {"q":"last"}'])
        await expect(calls.nth(2).get_by_test_id("call-rule")).to_have_text(
            "shop/no-secret-search (policies/shop.yaml:3)")
        await expect(calls.nth(0).get_by_test_id("call-rule")).to_have_text("shop/searches (policies/shop.yaml:8)")
        await expect(calls.nth(2).get_by_test_id("call-message")).to_have_text(f"Not that {HOSTILE}.")
        for i in range(len(MAIN)):
            await expect(calls.nth(i).get_by_test_id("call-latency")).to_have_text(re.compile(
                r"^decision \d+(\.\d)? ms · approval wait (—|\d+(\.\d)? ms) · upstream (—|\d+(\.\d)? ms)"
                r" · total \d+(\.\d)? ms$"))
        await expect(calls.nth(4).get_by_test_id("call-approval")).to_contain_text("approved by bob")
        await expect(calls.nth(4).get_by_test_id("call-edited")).to_have_text(
            "Arguments edited by bob before it ran")  # and it ran with them: the arguments above
        await expect(page.get_by_test_id("run-calls")).to_have_text(re.compile(r"^\d+, 1 rejected$"))

        await page.goto(f"{console.url}/console#/runs/alice/run-end")
        await expect(page.get_by_test_id("run-state")).to_have_text("active")
        await page.get_by_test_id("run-end").click()
        await expect(page.get_by_test_id("confirm")).to_be_visible()
        await page.get_by_test_id("confirm-cancel").click()  # asked, and not done
        await expect(page.get_by_test_id("confirm")).to_be_hidden()
        await expect(page.get_by_test_id("run-state")).to_have_text("active")
        await page.get_by_test_id("run-end").click()
        await page.get_by_test_id("confirm-message").fill("Stopped from the console.")
        await page.get_by_test_id("confirm-ok").click()
        await expect(page.get_by_test_id("notice")).to_have_text("The run was ended.")
        await expect(page.get_by_test_id("run-state")).to_have_text("terminated")
        await expect(page.get_by_test_id("run-terminated")).to_contain_text("Stopped from the console.")
        async with _client(console, KEYS["alice"], "run-end") as alice:
            refused = (await _invoke(alice, "api_search", {"q": "after the end"})).json()
        assert refused["is_error"] is True and "Stopped from the console." in json.dumps(refused["content"])
        await page.get_by_test_id("run-reset").click()
        await page.get_by_test_id("confirm-ok").click()
        await expect(page.get_by_test_id("notice")).to_have_text("The run was reset.")
        await expect(page.get_by_test_id("run-state")).to_have_text("active")
        async with _client(console, KEYS["alice"], "run-end") as alice:
            assert (await _invoke(alice, "api_search", {"q": "after the reset"})).json()["is_error"] is False
    assert errors == []


async def _tab_to(page: Page, testid: str, key: str = "Tab", most: int = 40) -> None:
    """Press ``key`` (Tab or Shift+Tab) until the element with ``testid`` has the focus (fails after ``most``)."""
    for _ in range(most):
        if await page.evaluate("document.activeElement && document.activeElement.dataset.testid") == testid:
            return
        await page.keyboard.press(key)
    pytest.fail(f"{testid} never got the focus by {key}")


@needs_browser
async def test_the_keyboard_alone_signs_in_navigates_filters_and_opens_a_timeline(console: RunningGateway) -> None:
    async with chromium_page(watch=[console.url], viewport=VIEWPORT) as (page, errors):
        await page.goto(f"{console.url}/console")
        await expect(page.get_by_test_id("key-input")).to_be_focused()  # where typing starts
        await page.keyboard.type(ADMIN_KEY)
        await page.keyboard.press("Enter")
        await expect(page.get_by_test_id("view-title")).to_have_text("Runs")
        await _tab_to(page, "nav-decisions", "Shift+Tab")  # back from the view's heading to the header
        await page.keyboard.press("Enter")
        await expect(page.get_by_test_id("view-title")).to_be_focused()  # the view's heading, ready to read on
        await _tab_to(page, "filter-tool")
        await page.keyboard.type("api_delete_item")
        await page.keyboard.press("Enter")
        await expect(page.get_by_test_id("decisions-row")).to_have_count(2)
        await expect(page.get_by_test_id("filter-tool")).to_be_focused()  # the focus stays where it was
        await _tab_to(page, "run-link")
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(re.compile(r"#/runs/alice/run-main$"))
        await _tab_to(page, "call-args")
        await page.keyboard.press("Enter")
        await expect(page.locator("details[open] pre.json")).to_have_count(1)
        await _tab_to(page, "theme", "Shift+Tab")
        await page.keyboard.press("Enter")
        assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert errors == []


# Each view: its route, and what shows once it has loaded.
VIEWS = [("runs", "#/runs", "runs-row"), ("timeline", "#/runs/alice/run-main", "timeline-call"),
         ("decisions", "#/decisions", "decisions-row"), ("policies", "#/policies", "rules-row"),
         ("upstreams", "#/upstreams", "upstream"), ("approvals", None, "empty")]


@needs_browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_axe_finds_nothing_serious_on_any_view(console: RunningGateway, scheme: str) -> None:
    """Each view (and the approvals page) through axe-core, in light and dark mode; a screenshot of each."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    axe = axe_core()
    async with chromium_page(watch=[console.url], viewport=VIEWPORT, color_scheme=scheme) as (page, errors):
        await sign_in(page, console.url, ADMIN_KEY)
        found: dict[str, list[str]] = {}
        for name, route, loaded in VIEWS:
            await page.goto(f"{console.url}/approvals" if route is None else f"{console.url}/console{route}")
            await expect(page.get_by_test_id(loaded).first).to_be_visible()
            await page.evaluate(axe)  # through the DevTools protocol: the page's CSP stays as it is
            result = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
            found[name] = [f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}" for v in result["violations"]
                           if v["impact"] in ("serious", "critical")]
            await page.screenshot(path=str(ARTIFACTS / f"{name}-{scheme}.png"))
            if os.environ.get("CONSOLE_DOCS_SCREENSHOTS") and scheme == "light" and name in ("runs", "decisions"):
                await page.screenshot(path=str(ROOT / "docs" / f"console-{name}.png"))
    assert found == {name: [] for name, _, _ in VIEWS}
    assert errors == []


@needs_browser
async def test_hostile_strings_are_shown_as_text(console: RunningGateway) -> None:
    async with chromium_page(watch=[console.url], viewport=VIEWPORT) as (page, errors):
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await sign_in(page, console.url, ADMIN_KEY, "#/runs/alice/run-main")
        await expect(page.get_by_test_id("call-message")).to_have_text(f"Not that {HOSTILE}.")
        await expect(page.get_by_test_id("call-args").nth(1)).to_contain_text(HOSTILE)
        await page.goto(f"{console.url}/console#/decisions")
        await page.get_by_test_id("filter-verdict").select_option("reject")
        await page.get_by_test_id("filter-apply").click()
        await expect(page.get_by_test_id("decision-message")).to_have_text(f"Not that {HOSTILE}.")
        await page.goto(f"{console.url}/console#/upstreams")
        search = page.locator('[data-tool="api_search"]')
        await search.get_by_test_id("tool-summary").click()
        await expect(search.get_by_test_id("tool-description")).to_have_text(f"Search the items {HOSTILE}")
        await expect(search.get_by_test_id("tool-annotations")).to_contain_text(HOSTILE)
        assert await page.locator("img").count() == 0
    assert dialogs == [] and errors == []


@needs_browser
async def test_an_approver_sees_the_approvals_and_the_run_of_a_request_they_may_decide(
        console: RunningGateway) -> None:
    approval = await _held(console, "run-held", "B-2", "delete-b-2")
    async with chromium_page(watch=[console.url], viewport=VIEWPORT) as (page, errors):
        await sign_in(page, console.url, BOB_KEY)
        await expect(page.get_by_test_id("approver-home")).to_be_visible()
        for view in ("runs", "decisions", "policies", "upstreams"):
            await expect(page.get_by_test_id(f"nav-{view}")).to_be_hidden()
        await page.goto(f"{console.url}/console#/decisions")
        await expect(page.get_by_test_id("admins-only")).to_be_visible()
        await page.goto(f"{console.url}/console#/runs/alice/run-main")  # no request of his names it
        await expect(page.get_by_test_id("run-error")).to_contain_text("There is no such run")

        await page.get_by_test_id("nav-approvals").click()
        card = page.locator(f'[data-approval-id="{approval}"]')
        await card.get_by_test_id("run-link").click()
        await expect(page).to_have_url(re.compile(rf"#/runs/alice/run-held\?approval={approval}$"))
        await expect(page.get_by_test_id("call-tool")).to_have_text(["api_delete_item"])
        await expect(page.get_by_test_id("call-verdict")).to_have_text(["pending"])
        await expect(page.get_by_test_id("run-end")).to_have_count(0)  # ending and resetting are an admin's
    assert errors == []


@needs_browser
async def test_a_refused_reload_shows_its_error_and_where(console: RunningGateway) -> None:
    """Last in this file: the policy file is left broken (the gateway keeps the set it had)."""
    policy = console.root / "policies" / "shop.yaml"
    broken = "  - id: broken\n    tools: [api_search]\n    when: 'args.q ==\n"
    policy.write_text(policy.read_text(encoding="utf-8") + broken, encoding="utf-8")
    async with _client(console, ADMIN_KEY) as admin:
        async def refused() -> bool:
            reloads = (await admin.get("/v1/admin/policies")).json()["reloads"]
            return any(r["result"] == "refused" for r in reloads)
        await eventually(refused)
    async with chromium_page(watch=[console.url], viewport=VIEWPORT) as (page, errors):
        await sign_in(page, console.url, ADMIN_KEY, "#/policies")
        refusal = page.get_by_test_id("reloads-row").filter(has_text="refused")
        await expect(refusal.get_by_test_id("reload-result")).to_have_text("refused")
        await expect(refusal.get_by_test_id("reload-error")).not_to_have_text("—")
        await expect(refusal).to_contain_text(re.compile(r"policies/shop\.yaml:\d+"))
        await expect(page.get_by_test_id("rules-row")).to_have_count(4)  # the set in force is the last good one
    assert errors == []
