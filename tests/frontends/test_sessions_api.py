"""The sessions admin API shows a run's labels, tallies, seen values and history, and a reset clears them in the
store (issue 21): a real gateway on loopback, a real client, and a second store on the same database file, as
another gateway process would read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway.auth.keys import hash_key
from gateway.policy.flow import TallyChange, history_entry
from gateway.store.model import SessionState
from gateway.store.sqlite import SqliteStore

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ADMIN_KEY = "dora-admin-key-61c2"
POLICY = """
policy: open
rules:
  - id: searches-are-fine
    tools: [api_search]
    when: "false"
    action: reject
    message: never
"""


async def read_elsewhere(db: Path) -> SessionState | None:
    """The run as another gateway process sharing the database reads it (a store of its own, no cache)."""
    elsewhere = SqliteStore(db)
    try:
        return await elsewhere.find_session("alice", "run-3")
    finally:
        elsewhere.close()


async def test_show_gives_labels_tallies_seen_and_history_and_reset_clears_them(
        start_gateway: Any, configs: Any, http_api: Any, keys: dict[str, str]) -> None:
    admins = [*configs.api_keys("alice"), {"principal": {"id": "dora"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url),
                                               auth={"api_keys": admins}), {"open.yaml": POLICY})
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30,
                                  headers={"Authorization": f"Bearer {keys['alice']}",
                                           "X-Gateway-Session": "run-3"}) as alice:
        called = await alice.post("/v1/tools/api_search/invoke", json={"arguments": {"q": "x"}})
    assert called.status_code == 200, called.text
    store = gateway.gateway.store
    state = await store.find_session("alice", "run-3")
    # What the pipeline adds when a policy labels and tallies (another part of issue 21), through the store.
    store.add_labels(state, ["untrusted"])
    await store.admit(state, lambda view: (None, TallyChange(
        sums={"transferred": 250.0}, distinct={"recipients": ("a@example.test", "b@example.test")})))
    mail = history_entry("mail_read", "allow", "web-is-untrusted", ["untrusted"], "2026-12-02T16:20:00Z")
    store.add_history(state, mail)
    await store.flushed()

    path = "/v1/admin/sessions/alice/run-3"
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30,
                                  headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        shown = (await admin.get(path)).json()
        [listed] = (await admin.get("/v1/admin/sessions", params={"principal": "alice"})).json()["sessions"]
        other = await read_elsewhere(gateway.root / "data" / "gateway.sqlite3")
        reset = await admin.post(f"{path}/reset", json={})
        await store.flushed()
        cleared = await read_elsewhere(gateway.root / "data" / "gateway.sqlite3")
        after = (await admin.get(path)).json()

    assert shown["labels"] == ["untrusted"]
    assert shown["tallies"] == {"transferred": 250.0, "recipients": 2}
    assert shown["seen"] == {"recipients": ["a@example.test", "b@example.test"]}
    assert shown["history"][-1] == mail
    assert (listed["labels"], listed["tallies"], listed["history"][-1]) == (["untrusted"], shown["tallies"], mail)
    assert other is not None and (other.labels, other.tallies.values) == (["untrusted"], shown["tallies"])
    assert reset.status_code == 200, reset.text
    assert cleared is not None and (cleared.labels, cleared.tallies.values, cleared.history) == ([], {}, [])
    for view in (reset.json(), after):
        assert (view["labels"], view["tallies"], view["seen"], view["history"], view["calls"]) == ([], {}, {}, [], 0)
    [event] = [e for e in gateway.audit_events() if e["event"] == "session.admin"]
    assert event["action"] == "reset" and event["before"]["labels"] == ["untrusted"]  # what the reset cleared
