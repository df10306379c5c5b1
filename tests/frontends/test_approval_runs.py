"""A pending request in the approver API shows its run's labels and latest calls (issue 21): over a real gateway
on loopback with a held call, and over the approver API alone on a real SQLite store (runs set up in the store)."""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

import httpx2
import pytest
from approval_support import approve_rule, policy
from browser_support import chromium_page, needs_browser

from gateway.core.clock import rfc3339
from gateway.core.limits import APPROVAL_RUN_HISTORY_SHOWN
from gateway.policy.flow import history_entry
from gateway.store.model import SessionState
from gateway.store.sqlite import SqliteStore

try:
    from playwright.async_api import expect
except ImportError:  # CI installs it with the `test` extra (needs_browser skips then)
    expect = None

BOB = {"Authorization": "Bearer bob-key"}
HOSTILE = "<img src=x onerror=alert(1)>"


async def with_run(store: Any, state: SessionState, labels: list[str], entries: list[dict[str, Any]]) -> None:
    """Give the run labels and history as the pipeline does, through the store."""
    store.add_labels(state, labels)
    for one in entries:
        store.add_history(state, one)
    await store.flushed()


def entry(tool: str, verdict: str = "allow", time: str = "2026-12-02T16:20:00Z", **more: Any) -> dict[str, Any]:
    return history_entry(tool, verdict, more.get("rule"), more.get("labels", []), time)


@pytest.mark.session_loop
async def test_a_held_call_shows_the_labels_and_calls_of_its_run(bench: Any, call_id: Any) -> None:
    gw = await bench.start(policy(approve_rule("deploys-need-ops", approvers=["group:ops"])))
    alice = bench.rest(gw, "alice")
    earlier = await alice.post("/v1/tools/ops_vanishing/invoke",
                               json={"arguments": {"note": "first"}, "session_id": "run-7"})
    assert earlier.status_code == 200, earlier.text
    store = gw.gateway.store
    state = await store.find_session("alice", "run-7")
    assert state is not None and state.calls == 1
    # The pipeline records history (another part of issue 21); without it, the entry it would record.
    await with_run(store, state, ["untrusted", HOSTILE],
                   [] if state.history else [entry("ops_vanishing")])

    cid = call_id()
    held = await alice.post("/v1/tools/ops_deploy/invoke",
                            json={"arguments": {"service": "billing"}, "call_id": cid, "session_id": "run-7"})
    assert held.status_code == 202, held.text
    pending = await bench.wait_pending(gw, cid)

    run = pending["run"]
    assert run["labels"] == ["untrusted", HOSTILE]
    assert [(h["tool"], h["verdict"]) for h in run["history"]] == [("ops_vanishing", "allow")]
    assert set(run["history"][0]) == {"tool", "verdict", "rule", "labels", "time"}
    one = await bench.approval(gw, pending["id"])  # the request alone says the same
    assert one["run"] == run
    # Once decided, the request no longer shows the run (it is there for the decision).
    assert (await bench.decide(gw, "bob", pending["id"])).status_code == 200
    assert "run" not in await bench.approval(gw, pending["id"])


async def test_only_the_latest_calls_are_shown_and_each_run_is_its_own(serve: Any, approval_desk: Any) -> None:
    store = approval_desk.sqlite
    mine = await store.session("alice", "session-1")
    for _ in range(14):
        store.count_call(mine, "mail_read")
    await with_run(store, mine, ["untrusted"], [entry(f"tool_{i}") for i in range(14)])
    other = await store.session("agent-7", "session-1")  # another principal's run of the same id
    await with_run(store, other, ["secret"], [entry("vault_read")])
    approval = approval_desk.add(principal="alice")
    theirs = approval_desk.add(principal="agent-7")
    base = await serve(approval_desk.app())

    async with httpx2.AsyncClient(base_url=base, headers=BOB) as client:
        listed = {a["id"]: a for a in (await client.get("/v1/approvals")).json()["approvals"]}
    run = listed[approval.id]["run"]
    assert run["calls"] == 14 and run["labels"] == ["untrusted"]
    assert [h["tool"] for h in run["history"]] == [f"tool_{i}" for i in range(14 - APPROVAL_RUN_HISTORY_SHOWN, 14)]
    assert listed[theirs.id]["run"]["labels"] == ["secret"]
    assert [h["tool"] for h in listed[theirs.id]["run"]["history"]] == ["vault_read"]


async def test_a_run_the_store_has_not_is_left_out_and_never_made(serve: Any, approval_desk: Any) -> None:
    approval = approval_desk.add(principal="alice")  # its run, session-1, was never seen by the store
    base = await serve(approval_desk.app())
    async with httpx2.AsyncClient(base_url=base, headers=BOB) as client:
        [listed] = (await client.get("/v1/approvals")).json()["approvals"]
        one = (await client.get(f"/v1/approvals/{approval.id}")).json()
    assert "run" not in listed and "run" not in one
    assert await approval_desk.sqlite.find_session("alice", "session-1") is None


async def test_a_store_that_cannot_be_read_leaves_the_run_out_but_lists_the_request(
        serve: Any, approval_desk: Any, tmp_path: Any, caplog: Any) -> None:
    elsewhere = SqliteStore(tmp_path / "gateway.sqlite3")  # another process's calls: rows this one never read
    for run in ("session-1", "session-2"):
        elsewhere.count_call(await elsewhere.session("alice", run), "mail_read")
    await elsewhere.flushed()
    elsewhere.close()
    first = approval_desk.add(principal="alice")
    base = await serve(approval_desk.app())
    async with httpx2.AsyncClient(base_url=base, headers=BOB) as client:
        [shown] = (await client.get("/v1/approvals")).json()["approvals"]
        assert shown["run"]["calls"] == 1  # read from the database (and kept by this process from now on)
        second = approval_desk.add(principal="alice", session="session-2")
        with sqlite3.connect(tmp_path / "gateway.sqlite3") as db:  # the sessions table is gone: reads fail
            db.execute("ALTER TABLE sessions RENAME TO sessions_elsewhere")
        listed = await client.get("/v1/approvals")
    assert listed.status_code == 200, listed.text
    shown_now = {a["id"]: a for a in listed.json()["approvals"]}
    assert shown_now[first.id]["run"]["calls"] == 1 and "run" not in shown_now[second.id]
    assert "could not be read" in caplog.text


@needs_browser
async def test_the_page_shows_the_run_as_text(serve: Any, approval_desk: Any) -> None:
    """An approver sees why the call was held ("mail_read — allow — 2 min ago"); what a run carries is shown
    as text, so a hostile tool name or label is never HTML."""
    store = approval_desk.sqlite
    state = await store.session("alice", "session-1")
    two_min_ago = rfc3339(time.time() - 150)
    await with_run(store, state, ["untrusted", HOSTILE], [
        entry("mail_read", time=two_min_ago, rule="mail-is-untrusted", labels=["untrusted"]),
        entry(HOSTILE, "reject", time=rfc3339(time.time() - 5), rule="no-such-tool")])
    approval = approval_desk.add(tool="mail_send", principal="alice")
    bare = approval_desk.add(tool="mail_send", principal="alice", session="never-seen")
    base = await serve(approval_desk.app())
    async with chromium_page(watch=[base]) as (page, errors):
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await page.goto(f"{base}/approvals/{approval.id}")
        await page.get_by_test_id("key-input").fill("bob-key")
        await page.get_by_test_id("key-submit").click()

        card = page.locator(f'[data-approval-id="{approval.id}"]')
        await expect(card.get_by_test_id("run-label")).to_have_text(["untrusted", HOSTILE])
        await expect(card.get_by_test_id("run-step-line")).to_have_text(
            ["mail_read — allow — 2 min ago", re.compile(rf"^{re.escape(HOSTILE)} — reject — \d+s ago$")])
        await expect(card.get_by_test_id("run-step").first).to_contain_text("rule mail-is-untrusted")
        await expect(card.get_by_test_id("run-step").first).to_contain_text("added untrusted")
        await expect(card.locator("img")).to_have_count(0)
        # A request whose run the store does not have shows no run, and is decided all the same.
        other = page.locator(f'[data-approval-id="{bare.id}"]')
        await expect(other.get_by_test_id("approve")).to_be_visible()
        await expect(other.get_by_test_id("run-labels")).to_have_count(0)
        assert await page.locator("img").count() == 0
    assert dialogs == [] and errors == []
