"""Prometheus /metrics: scraped from a gateway on loopback after real calls, the series move; only keys
with `metrics: true` or `admin: true` may scrape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx2
import pytest
import pytest_asyncio
from gateway_harness import Configs, RunningGateway, run_gateway, write_gateway
from sso_support import HttpApprover, jwt_auth, register_client

from gateway.auth.keys import hash_key
from gateway.auth.sso import SSO_REFUSAL_REASONS
from gateway.observe.metrics import families

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

SCRAPER_KEY = "scraper-key-metrics-1"
ROOT_KEY = "root-key-admin-1"
APPROVER_KEY = "approver-key-obs-1"

POLICY = """
policy: obs
rules:
  - id: no-forbidden
    tools: [up_echo]
    when: args.text == "forbidden"
    action: reject
    message: Not that word.
  - id: deletes-need-a-human
    tools: [up_delete_thing]
    action: approve
    message: Deletes need a human.
    approval: {approvers: ["group:ops"], timeout: 30s, on_timeout: reject, via: page}
"""

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _keys(configs: Any) -> list[dict[str, Any]]:
    return [*configs.api_keys("alice"),
            {"principal": {"id": "scraper"}, "sha256": hash_key(SCRAPER_KEY), "metrics": True},
            {"principal": {"id": "root"}, "sha256": hash_key(ROOT_KEY), "admin": True},
            {"principal": {"id": "olga", "groups": ["ops"]}, "sha256": hash_key(APPROVER_KEY), "approver": True}]


async def scrape(gw: Any, key: str = SCRAPER_KEY) -> Series:
    """Every sample of one scrape, by (name, labels)."""
    async with httpx2.AsyncClient(base_url=gw.url, headers={"Authorization": f"Bearer {key}"}) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {(name, frozenset(labels.items())): value for name, labels, value in families(response.content)}


def value(series: Series, name: str, **labels: str) -> float:
    """One sample's value (0 when the series does not exist yet)."""
    return series.get((name, frozenset(labels.items())), 0.0)


def _observed_config(configs: Any, closed_port: int) -> dict[str, Any]:
    # a model route too, so the model proxy's door is there to knock on (its upstream is never reached)
    return configs.base(configs.mcp_upstream("up", timeout="1s"), auth={"api_keys": _keys(configs)},
                        models=[{"name": "*", "base_url": f"http://127.0.0.1:{closed_port}/v1"}])


@pytest_asyncio.fixture(loop_scope="session")
async def observed(start_gateway, configs, closed_port):
    """A gateway of the test's own: the tests that read series read them from zero."""
    return await start_gateway(_observed_config(configs, closed_port), {"obs.yaml": POLICY})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def doors(tmp_path_factory: pytest.TempPathFactory, closed_port: int) -> AsyncIterator[RunningGateway]:
    """The same gateway, one for the module, for the tests that are only refused (no series read): each start
    launches the stdio test server, seconds of CPU."""
    root = tmp_path_factory.mktemp("metrics-doors")
    async with run_gateway(write_gateway(root, _observed_config(Configs, closed_port), {"obs.yaml": POLICY})) as gw:
        yield gw


async def test_scrape_after_real_calls_shows_decisions_calls_and_upstream_errors_moving(observed, rest, rest_call):
    before = await scrape(observed)
    client = rest(observed)

    assert (await rest_call(client, "up_echo", {"text": "hi-marker-7f3a"}, call_id="call-marker-91bc"))["decision"] \
        == "allow"
    assert (await rest_call(client, "up_echo", {"text": "forbidden"}))["decision"] == "reject"
    failed = await rest_call(client, "up_slow", {"seconds": 5})  # the upstream's own timeout is 1s
    assert failed["decision"] == "tool_failed"
    after = await scrape(observed)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("gateway_decisions_total", stage="request", verdict="allow", rule="default") == 2
    assert moved("gateway_decisions_total", stage="request", verdict="reject", rule="obs/no-forbidden") == 1
    assert moved("gateway_decision_duration_seconds_count", stage="request") == 3
    assert moved("gateway_calls_total", upstream="up", outcome="allow") == 1
    assert moved("gateway_calls_total", upstream="up", outcome="reject") == 1
    assert moved("gateway_calls_total", upstream="up", outcome="tool_failed") == 1
    assert moved("gateway_call_duration_seconds_count", upstream="up", outcome="tool_failed") == 1
    assert moved("gateway_upstream_duration_seconds_count", upstream="up", outcome="ok") == 1
    assert moved("gateway_upstream_errors_total", upstream="up", kind="failed") == 1
    # the failed call waited for the 1s timeout; the histogram's sum says so
    assert moved("gateway_upstream_duration_seconds_sum", upstream="up", outcome="failed") >= 0.9
    assert value(after, "gateway_calls_in_flight") == 0 and value(after, "gateway_active_runs") == 0
    # an unknown tool is counted too, under no upstream
    unknown = await rest_call(client, "up_nothing_here", {})
    assert unknown["_status"] == 404
    assert value(await scrape(observed), "gateway_calls_total", upstream="", outcome="unknown_tool") == 1
    # no label names a caller, a call or an argument
    async with httpx2.AsyncClient(base_url=observed.url, headers={"Authorization": f"Bearer {SCRAPER_KEY}"}) as c:
        text = (await c.get("/metrics")).text
    assert "gateway_calls_total" in text and "_created" not in text  # no creation-time twin of every series
    for secret in ("alice", "call-marker-91bc", "hi-marker-7f3a"):
        assert secret not in text


async def test_held_call_is_pending_then_its_wait_is_timed(observed, rest, until, call_id):
    alice = rest(observed)
    cid = call_id()
    held = asyncio.ensure_future(alice.post("/v1/tools/up_delete_thing/invoke", params={"wait": "30s"},
                                            json={"arguments": {"id": "x1"}, "call_id": cid}))
    try:
        async def pending() -> Series | None:
            series = await scrape(observed)
            return series if value(series, "gateway_approvals_pending") == 1 else None

        during = await until(pending)
        assert value(during, "gateway_calls_in_flight") == 1 and value(during, "gateway_active_runs") == 1
        assert value(during, "gateway_approvals_open") == 1  # from the store
        assert value(during, "gateway_decisions_total", stage="request", verdict="approve",
                     rule="obs/deletes-need-a-human") == 1
        async with httpx2.AsyncClient(base_url=observed.url,
                                      headers={"Authorization": f"Bearer {APPROVER_KEY}"}) as olga:
            listed = (await olga.get("/v1/approvals", params={"state": "pending"})).json()["approvals"]
            [approval] = [a for a in listed if a["call_id"] == cid]
            decided = await olga.post(f"/v1/approvals/{approval['id']}/decision", json={"approve": True})
            assert decided.status_code == 200, decided.text
        response = await asyncio.wait_for(held, 20)  # woken by the decision (the approval waits 30 s)
        assert response.json()["decision"] == "approve", response.text
    finally:
        held.cancel()
    after = await scrape(observed)
    assert value(after, "gateway_approvals_pending") == 0 and value(after, "gateway_approvals_open") == 0
    assert value(after, "gateway_approval_wait_seconds_count", result="approved") == 1
    assert value(after, "gateway_approval_wait_seconds_sum", result="approved") > 0
    assert value(after, "gateway_calls_total", upstream="up", outcome="approve") == 1
    assert value(after, "gateway_calls_in_flight") == 0


async def test_a_held_call_whose_caller_left_is_open_in_the_store_but_not_waiting(observed, rest, rest_call,
                                                                                    call_id):
    body = await rest_call(rest(observed), "up_delete_thing", {"id": "x2"}, call_id=call_id())  # no wait: 202
    assert (body["_status"], body["decision"]) == (202, "pending")
    series = await scrape(observed)
    assert value(series, "gateway_approvals_open") == 1 and value(series, "gateway_approvals_pending") == 0
    assert value(series, "gateway_approval_wait_seconds_count", result="pending") == 1


async def test_reloads_are_counted_by_result(observed, until):
    before = await scrape(observed)
    policies = observed.root / "policies"
    (policies / "more.yaml").write_text("policy: more\nrules:\n  - id: no-add\n    tools: [up_add]\n"
                                        "    action: reject\n", encoding="utf-8")

    async def counted(result: str, at_least: float) -> bool:
        return value(await scrape(observed), "gateway_policy_reloads_total", result=result) >= at_least

    await until(lambda: counted("applied", value(before, "gateway_policy_reloads_total", result="applied") + 1))
    (policies / "broken.yaml").write_text("policy: broken\nrules: [\n", encoding="utf-8")
    await until(lambda: counted("refused", value(before, "gateway_policy_reloads_total", result="refused") + 1))


async def test_metrics_are_refused_without_a_metrics_or_admin_key(doors, keys):
    async with httpx2.AsyncClient(base_url=doors.url) as client:
        anonymous = await client.get("/metrics")
        agent = await client.get("/metrics", headers={"Authorization": f"Bearer {keys['alice']}"})
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer not-a-key"})
        admin = await client.get("/metrics", headers={"Authorization": f"Bearer {ROOT_KEY}"})
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert agent.status_code == 403 and "gateway_" not in agent.text
    assert admin.status_code == 200 and "gateway_calls_in_flight" in admin.text


async def test_a_metrics_key_may_not_use_the_admin_api(doors):
    async with httpx2.AsyncClient(base_url=doors.url, headers={"Authorization": f"Bearer {SCRAPER_KEY}"}) as c:
        response = await c.get("/v1/admin/sessions")
    assert response.status_code == 403


_MCP = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "scraper", "version": "1"}}}
_CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "up_echo", "arguments": {"text": "hi"}}}
_CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}

# Every door of the gateway but /metrics: (method, path, JSON body, extra headers).
DOORS = [
    ("GET", "/v1/tools", None, {}),
    ("POST", "/v1/tools/up_echo/invoke", {"arguments": {"text": "hi"}}, {}),
    ("GET", "/v1/policies", None, {}),
    ("POST", "/mcp", _INITIALIZE, _MCP),
    ("POST", "/mcp", _CALL, _MCP),
    ("GET", "/mcp", None, _MCP),
    ("DELETE", "/mcp", None, _MCP),
    ("POST", "/v1/chat/completions", _CHAT, {}),
    ("GET", "/v1/approvals", None, {}),
    ("GET", "/v1/approvals/a-1", None, {}),
    ("POST", "/v1/approvals/a-1/decision", {"approve": True}, {}),
    ("GET", "/v1/admin/sessions", None, {}),
    ("POST", "/v1/admin/sessions/s-1/reset", {}, {}),
    ("POST", "/metrics", {}, {}),
    ("GET", "/v1/nothing-here", None, {}),
]


@pytest.mark.parametrize(("method", "path", "body", "headers"), DOORS, ids=[f"{m} {p}" for m, p, *_ in DOORS])
async def test_a_metrics_key_is_refused_at_every_door_but_the_scrape(doors, method, path, body, headers):
    # hostile: the scrape key Prometheus holds (often in a shared secret store) tries to act as an agent
    async with httpx2.AsyncClient(base_url=doors.url, headers={"Authorization": f"Bearer {SCRAPER_KEY}"}) as c:
        response = await c.request(method, path, json=body, headers=headers)
    assert response.status_code == 403, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == "metrics-key-scrape-only"
    assert "GET /metrics" in error["message"]


async def test_a_metrics_key_calls_no_tool_and_still_scrapes(observed, rest, rest_call):
    async with httpx2.AsyncClient(base_url=observed.url, headers={"Authorization": f"Bearer {SCRAPER_KEY}"}) as c:
        refused = await c.post("/v1/tools/up_echo/invoke", json={"arguments": {"text": "scraper-was-here"}})
        assert (await c.get("/healthz")).status_code == 200
    assert refused.status_code == 403
    assert not [e for e in observed.audit_events() if "scraper-was-here" in json.dumps(e)]
    await scrape(observed)  # the one thing it may do
    allowed = await rest_call(rest(observed), "up_echo", {"text": "hi"})  # an agent key is not affected
    assert allowed["decision"] == "allow"


async def test_metrics_off_means_no_route(start_gateway, configs):
    config = configs.base(auth={"api_keys": _keys(configs)}, metrics={"enabled": False})
    gw = await start_gateway(config, {"obs.yaml": "policy: empty\nrules: []\n"})
    async with httpx2.AsyncClient(base_url=gw.url, headers={"Authorization": f"Bearer {ROOT_KEY}"}) as client:
        assert (await client.get("/metrics")).status_code == 404


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
async def test_audit_write_failures_are_counted(start_gateway, configs, rest, rest_call, tmp_path):
    root = tmp_path / "full"
    (root / "data").mkdir(parents=True)
    (root / "data" / "audit.jsonl").symlink_to("/dev/full")
    config = configs.base(configs.mcp_upstream("up"), auth={"api_keys": _keys(configs)})
    gw = await start_gateway(config, {"obs.yaml": POLICY}, root=root)
    refused = await rest_call(rest(gw), "up_echo", {"text": "hi"})
    assert refused["decision"] == "audit_failed"
    series = await scrape(gw)
    assert value(series, "gateway_audit_write_failures_total") >= 1
    assert value(series, "gateway_calls_total", upstream="up", outcome="audit_failed") == 1


async def test_refused_sign_ins_at_the_approvals_page_count_once_each_by_a_bounded_reason(
        idp, start_gateway, configs, monkeypatch):
    """A forged state and a signed-in non-approver each count once; a good sign-in counts nothing; a hostile
    state or IdP error text never becomes a label."""
    client = await register_client(idp)
    monkeypatch.setenv("TEST_SSO_SECRET", str(client.client_secret))
    config = configs.base(auth={"api_keys": _keys(configs), "jwt": [jwt_auth(idp)]},
                          approvals={"sso": {"issuer": idp.issuer, "client_id": client.client_id,
                                             "client_secret": {"env": "TEST_SSO_SECRET"}}})
    gw = await start_gateway(config, {"obs.yaml": "policy: empty\nrules: []\n"})
    await idp.set_user("alice")  # the table's groups (another test may have changed them)
    before = await scrape(gw)
    browsers = [HttpApprover(gw.url, idp) for _ in range(3)]
    try:
        forger, bob, alice = browsers
        callback = urlsplit(await forger.at_idp(await forger.start(), "alice"))
        query = {**dict(parse_qsl(callback.query)), "state": "forged-<script>-" + "x" * 40}
        forged = await forger.back(urlunsplit(callback._replace(query=urlencode(query))))
        assert forged.status_code == 400
        assert (await bob.sign_in("bob")).status_code == 403  # signed in at the IdP, but no approver here
        assert (await alice.sign_in("alice")).status_code == 303  # a lead: signed in, nothing refused
    finally:
        for browser in browsers:
            await browser.aclose()
    after = await scrape(gw)
    moved = {dict(labels)["reason"]: count - before.get((name, labels), 0.0)
             for (name, labels), count in after.items() if name == "gateway_sso_refusals_total"}
    assert {reason: n for reason, n in moved.items() if n} == {"bad-state": 1, "not-approver": 1}
    assert set(moved) <= SSO_REFUSAL_REASONS | {"other"}  # the label's values are a fixed set
