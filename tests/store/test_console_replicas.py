"""Two gateways on one database, as two replicas (PostgreSQL) or two processes on one SQLite file: a call made on
one shows in the other's console: its decisions, chart and export, its run and timeline, the rule's hits; the
policies and upstreams views read on the same store. How soon is measured by bench/console.py
(a timed test would fail on a loaded machine, so this one waits for the condition)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from gateway_harness import KEYS, api_keys, base_config, eventually, run_gateway, write_gateway

from gateway.auth.keys import hash_key

pytestmark = pytest.mark.session_loop

ADMIN_KEY = "replica-admin-key-90d1"
POLICY = "policy: plain\nrules:\n  - id: all\n    tools: ['*']\n    action: allow\n"


def _replica(root: Path, store: dict[str, Any], api_url: str) -> Path:
    keys = [*api_keys("alice"), {"principal": {"id": "dora"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
    upstream = {"name": "api", "http": {"base_url": api_url, "tools": [{"name": "search", "method": "GET",
                                                                         "path": "/search", "query": ["q"]}]}}
    return write_gateway(root, base_config(upstream, store=store, auth={"api_keys": keys}), {"plain.yaml": POLICY})


async def test_a_call_on_one_replica_shows_on_the_others_console(backend, request, tmp_path, http_api):
    if backend == "postgres":
        store: dict[str, Any] = {"postgres": {"dsn": request.getfixturevalue("postgres_dsn")}}
    else:
        store = {"sqlite": str(tmp_path / "shared.sqlite3"), "shared": True}
    async with run_gateway(_replica(tmp_path / "a", store, http_api.url)) as a, \
            run_gateway(_replica(tmp_path / "b", store, http_api.url)) as b:
        async with httpx2.AsyncClient(base_url=a.url, headers={"Authorization": f"Bearer {KEYS['alice']}",
                                                               "X-Gateway-Session": "run-r"}) as alice:
            called = await alice.post("/v1/tools/api_search/invoke", json={"arguments": {"q": "replicated"}})
            assert called.status_code == 200, called.text
        async with httpx2.AsyncClient(base_url=b.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
            async def on_b() -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = (await admin.get("/v1/admin/decisions",
                                                               params={"run": "run-r"})).json()["decisions"]
                return found

            [decision] = await eventually(on_b, timeout=30)
            assert decision["arguments"] == {"q": "replicated"} and decision["replica"] != ""
            timeline = (await admin.get("/v1/admin/runs/alice/run-r")).json()["timeline"]
            assert [d["id"] for d in timeline] == [decision["id"]]
            # every view's data on this store, read on the replica that did not make the call
            runs = (await admin.get("/v1/admin/runs", params={"principal": "alice"})).json()["runs"]
            assert [(r["run"], r["calls"]) for r in runs] == [("run-r", 1)]
            chart = (await admin.get("/v1/admin/decisions/chart", params={"run": "run-r"})).json()["minutes"]
            assert [m["counts"] for m in chart] == [{"allow": 1}]
            policies = (await admin.get("/v1/admin/policies")).json()
            [rule] = [r for f in policies["files"] for r in f["rules"]]
            assert (rule["id"], rule["hits_hour"], policies["never_fired"]) == ("plain/all", 1, [])
            [api] = (await admin.get("/v1/admin/upstreams")).json()["upstreams"]
            assert api["state"] == "up" and [t["name"] for t in api["tools"]] == ["api_search"]
            lines = (await admin.get("/v1/admin/decisions/export", params={"run": "run-r"})).text.splitlines()
            assert len(lines) == 1
