"""PostgreSQL stopped under a running gateway (issue 18, item 13): the admin sessions API answers 503
`store-unavailable` (not 500), and `/readyz` says not ready while every call would be refused
`store_unavailable`. The cluster is the test's own, so stopping it touches no other test."""

from __future__ import annotations

import httpx2
import pytest
from postgres_cluster import running_cluster

from gateway.auth.keys import hash_key

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ADMIN_KEY = "store-down-admin-key-5d1e"


async def test_with_postgresql_stopped_sessions_api_is_503_and_readyz_not_ready(start_gateway, configs, until):
    with running_cluster() as cluster:
        dsn = cluster.new_database()
        keys = [{"principal": {"id": "root"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
        gateway = await start_gateway(configs.base(store={"postgres": {"dsn": dsn}}, auth={"api_keys": keys}),
                                      {"p.yaml": "policy: p\nrules: []\n"})
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        async with httpx2.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as admin:
            ready = await admin.get("/readyz")
            assert (ready.status_code, ready.json()["store"]) == (200, {"state": "up", "last_error": None})
            assert (await admin.get("/v1/admin/sessions")).status_code == 200
            assert (await admin.get("/v1/admin/sessions/alice/run-1")).status_code == 404

            cluster.stop()

            listed = await admin.get("/v1/admin/sessions")
            assert listed.status_code == 503, listed.text
            assert listed.json()["error"]["code"] == "store-unavailable"
            one = await admin.get("/v1/admin/sessions/alice/run-1")
            assert (one.status_code, one.json()["error"]["code"]) == (503, "store-unavailable")

            async def not_ready() -> httpx2.Response | None:
                answer = await admin.get("/readyz")
                return answer if answer.status_code == 503 else None

            body = (await until(not_ready)).json()
            assert body["status"] == "not_ready"
            assert body["store"] == {"state": "down", "last_error": "not reachable"}
            assert str(cluster.port) not in (await admin.get("/readyz")).text  # open probe: no address
