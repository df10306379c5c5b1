"""The console's API over a real gateway on loopback: calls made through REST show as decisions with their
deciding rule's file and line, filtered, paged, charted and exported; runs with their timelines; the policies'
hit counts and a refused reload; the upstreams and their tools. Admins only, except whoami and an approver's
read of the run of a request they may see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from gateway_harness import eventually

from gateway.auth.keys import hash_key

pytestmark = pytest.mark.session_loop

ADMIN_KEY = "console-admin-key-3f9a"
POLICY = """
policy: shop
rules:
  - id: no-secret-search
    tools: [api_search]
    when: args.q == "secret"
    action: reject
    message: "Not that <img src=x onerror=alert(1)>."
  - id: searches
    tools: [api_search]
    action: allow
  - id: never-used
    tools: [api_get_item]
    when: args.id == "nobody-asks-this"
    action: reject
    message: never
"""


async def _gateway(start_gateway: Any, configs: Any, http_api: Any) -> Any:
    keys = [*configs.api_keys("alice", "bob"), {"principal": {"id": "dora"}, "sha256": hash_key(ADMIN_KEY),
                                                "admin": True}]
    return await start_gateway(configs.base(configs.http_upstream("api", http_api.url),
                                            auth={"api_keys": keys}), {"shop.yaml": POLICY})


async def _calls(gateway: Any, keys: dict[str, str], run: str, queries: list[str]) -> None:
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30, headers={
            "Authorization": f"Bearer {keys['alice']}", "X-Gateway-Session": run}) as alice:
        for q in queries:
            answer = await alice.post("/v1/tools/api_search/invoke", json={"arguments": {"q": q}})
            assert answer.status_code == 200, answer.text


def _admin(gateway: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=gateway.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN_KEY}"})


async def test_decisions_are_listed_filtered_paged_charted_and_exported(start_gateway, configs, http_api, keys):
    gateway = await _gateway(start_gateway, configs, http_api)
    await _calls(gateway, keys, "run-a", [f"q{i}" for i in range(7)] + ["secret"])
    async with _admin(gateway) as admin:
        everything = (await admin.get("/v1/admin/decisions")).json()
        assert everything["total"] == 8 and everything["next"] is None
        newest = everything["decisions"][0]
        assert newest["verdict"] == "reject" and newest["rule"] == "shop/no-secret-search"
        assert newest["rule_source"] == {"file": "policies/shop.yaml", "line": 3}
        assert newest["message"] == "Not that <img src=x onerror=alert(1)>."  # data, shown as text by the page
        assert newest["principal"] == "alice" and newest["run"] == "run-a" and newest["tool"] == "api_search"
        assert newest["arguments"] == {"q": "secret"} and newest["latency"]["decision_ms"] >= 0

        rejected = (await admin.get("/v1/admin/decisions", params={"verdict": "reject"})).json()
        assert [d["arguments"] for d in rejected["decisions"]] == [{"q": "secret"}]

        seen, cursor = [], None
        while True:
            page = (await admin.get("/v1/admin/decisions", params={"limit": 3, **({"cursor": cursor} if cursor
                                                                                   else {})})).json()
            seen += [d["id"] for d in page["decisions"]]
            cursor = page["next"]
            if cursor is None:
                break
        assert seen == [d["id"] for d in everything["decisions"]]  # every row once, in order

        chart = (await admin.get("/v1/admin/decisions/chart")).json()["minutes"]
        assert sum(m["counts"].get("allow", 0) for m in chart) == 7
        assert sum(m["counts"].get("reject", 0) for m in chart) == 1

        export = await admin.get("/v1/admin/decisions/export", params={"verdict": "allow"})
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert len(lines) == 7 and all(line["verdict"] == "allow" for line in lines)

        bad = await admin.get("/v1/admin/decisions", params={"since": "yesterday"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid-time"


async def test_runs_show_their_calls_in_order_and_only_admins_read_them(start_gateway, configs, http_api, keys):
    gateway = await _gateway(start_gateway, configs, http_api)
    await _calls(gateway, keys, "run-b", ["first", "secret", "last"])
    async with _admin(gateway) as admin:
        runs = (await admin.get("/v1/admin/runs", params={"principal": "alice"})).json()["runs"]
        [run] = [r for r in runs if r["run"] == "run-b"]
        assert run["calls"] == 3 and run["rejected"] == 1 and run["terminated"] is False
        shown = (await admin.get("/v1/admin/runs/alice/run-b")).json()
        assert [(d["arguments"]["q"], d["verdict"]) for d in shown["timeline"]] == [
            ("first", "allow"), ("secret", "reject"), ("last", "allow")]
        assert (await admin.get("/v1/admin/whoami")).json() == {"principal": "dora", "admin": True, "approver": False}
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys['bob']}"}) as bob:
        for path in ("/v1/admin/decisions", "/v1/admin/runs", "/v1/admin/policies", "/v1/admin/upstreams",
                     "/v1/admin/decisions/export"):
            refused = await bob.get(path)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "not-an-admin", path
        assert (await bob.get("/v1/admin/runs/alice/run-b")).status_code == 404  # not even whether it exists
        assert (await bob.get("/v1/admin/whoami")).json()["admin"] is False


async def test_policies_show_hits_rules_never_fired_and_a_refused_reload(start_gateway, configs, http_api, keys):
    gateway = await _gateway(start_gateway, configs, http_api)
    await _calls(gateway, keys, "run-c", ["one", "two", "secret"])
    policy_file: Path = gateway.root / "policies" / "shop.yaml"
    policy_file.write_text(policy_file.read_text() + "  - id: broken\n    tools: [api_search]\n    when: 'args.q ==\n",
                           encoding="utf-8")
    async with _admin(gateway) as admin:
        async def refused() -> list[dict[str, Any]]:
            reloads = (await admin.get("/v1/admin/policies")).json()["reloads"]
            return [r for r in reloads if r["result"] == "refused"]

        [reload] = await eventually(refused)
        assert reload["file"] == "policies/shop.yaml" and reload["line"] >= 13 and reload["error"]
        shown = (await admin.get("/v1/admin/policies")).json()
        rules = {r["id"]: r for f in shown["files"] for r in f["rules"]}
        # a rule "hits" when it fires: the allow rule fired for the refused call too (the reject decided it)
        assert rules["shop/searches"]["hits_hour"] == 3 and rules["shop/searches"]["hits_day"] == 3
        assert rules["shop/no-secret-search"]["hits_hour"] == 1 and rules["shop/searches"]["line"] == 8
        assert shown["never_fired"] == ["shop/never-used"]
        upstreams = (await admin.get("/v1/admin/upstreams")).json()
        [api] = upstreams["upstreams"]
        assert api["name"] == "api" and api["state"] == "up" and upstreams["tools_lock"] is None
        search = next(t for t in api["tools"] if t["name"] == "api_search")
        assert search["input_schema"]["type"] == "object" and search["drift"] is None and search["hidden"] is False
