"""`gateway approvals ...` against the real approver API on loopback: in this process (a worker thread, while
the API serves on the test's event loop), and once as a real process (the console entry, its environment)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from cli_run import run_cli_async as gateway
from cli_run import run_subprocess_async

from gateway.approvals.model import ApprovalState, Edit, Requirement, args_digest
from gateway.core.clock import now_rfc3339


async def test_list_and_show_as_text_and_json(serve: Any, approval_desk: Any) -> None:
    refund = approval_desk.add(args={"order": "A-1", "amount": 900}, final_args={"order": "A-1", "amount": 100})
    shell = approval_desk.add(tool="shell_exec", args={"cmd": "ls"}, principal="agent-7", requirements=[
        Requirement("shell", "Shell needs two people", ["group:managers"], "dave"),
        Requirement("shell-2", "and security", ["group:security"])])
    base = await serve(approval_desk.app())
    auth = ["--url", base, "--key", "bob-key"]

    listed = await gateway("approvals", "list", *auth)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "STATE", "TOOL", "REQUESTED", "BY", "CREATED", "TIME", "LEFT", "APPROVALS",
                              "THE", "CALL"]
    assert sorted(row.split()[:4] for row in rows) == sorted([
        [refund.id, "pending", "payments_refund", "alice"], [shell.id, "pending", "shell_exec", "agent-7"]])
    assert next(r for r in rows if r.startswith(shell.id)).split()[-5:] == ["1/2", "waiting", "for", "a", "decision"]

    as_json = await gateway("approvals", "list", "--format", "json", *auth)
    assert {a["id"] for a in json.loads(as_json.stdout)["approvals"]} == {refund.id, shell.id}

    none = await gateway("approvals", "list", "--state", "denied", *auth)
    assert (none.returncode, none.stdout) == (0, "No denied approval requests.\n")

    shown = await gateway("approvals", "show", refund.id, *auth)
    assert shown.returncode == 0, shown.stderr
    assert f"Approval {refund.id}: pending" in shown.stdout
    assert "Requested by:  alice (groups: support)" in shown.stdout
    assert "Tool:          payments_refund (upstream payments)" in shown.stdout  # whose tool it is (issue 18)
    assert "The call:      waiting for a decision" in shown.stdout
    assert "[ ] big-refund: Refunds over 100 need a manager" in shown.stdout
    assert "approvers: group:managers, alice; waiting" in shown.stdout
    assert "amount: 900 -> 100   (rewritten by policy)" in shown.stdout
    assert '  order: "A-1"' in shown.stdout

    shown_json = await gateway("approvals", "show", shell.id, "--format", "json", *auth)
    assert json.loads(shown_json.stdout) == approval_desk.service.store.get(shell.id).to_dict()


async def test_show_says_who_edited_the_arguments_and_what_runs(serve: Any, approval_desk: Any) -> None:
    refund = approval_desk.add(args={"order": "A-1", "amount": 900})
    edited = {"order": "A-1", "amount": 50, "note": "\x1b[31mpaid"}
    approved = dataclasses.replace(refund, state=ApprovalState.APPROVED, decided_at=now_rfc3339(),
                                   decided_ts=time.time(), edit=Edit("bob", "2026-12-02T16:20:00Z", edited, edited,
                                                                     args_digest(edited), "allow"))
    assert approval_desk.service.store.transition(approved, ApprovalState.PENDING)
    base = await serve(approval_desk.app())

    shown = await gateway("approvals", "show", refund.id, "--url", base, "--key", "bob-key")

    assert shown.returncode == 0, shown.stderr
    assert "Edited by bob at 2026-12-02T16:20:00Z; the call runs with:\n  amount: 50\n" in shown.stdout
    assert "\x1b" not in shown.stdout  # untrusted text cannot drive the terminal


async def test_approve_then_conflict_then_deny(serve: Any, approval_desk: Any) -> None:
    first, second = approval_desk.add(), approval_desk.add(tool="shell_exec", args={"cmd": "ls"})
    base = await serve(approval_desk.app())
    env = {"GATEWAY_URL": base, "GATEWAY_API_KEY": "bob-key"}  # the defaults come from the environment

    approved = await run_subprocess_async("approvals", "approve", first.id, "--comment", "fine by me", env=env)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"Approved {first.id} (payments_refund for alice).\n"
    stored = approval_desk.service.store.get(first.id)
    assert stored.state is ApprovalState.APPROVED
    assert [(v.approver, v.approve, v.comment) for v in stored.votes] == [("bob", True, "fine by me")]

    again = await gateway("approvals", "approve", first.id, env=env)
    assert again.returncode == 1
    assert again.stderr == f"gateway approvals: approval {first.id} is already approved (HTTP 409 approval-conflict)\n"

    no_reason = await gateway("approvals", "deny", second.id, env=env)
    assert no_reason.returncode == 2 and "--comment" in no_reason.stderr
    assert approval_desk.service.store.get(second.id).state is ApprovalState.PENDING

    denied = await gateway("approvals", "deny", second.id, "--comment", "not on a Friday", "--format", "json", env=env)
    assert denied.returncode == 0, denied.stderr
    assert json.loads(denied.stdout)["state"] == "denied"
    assert approval_desk.service.store.get(second.id).votes[0].comment == "not on a Friday"


async def test_refusals_print_the_apis_message_and_exit_1(serve: Any, approval_desk: Any) -> None:
    mine = approval_desk.add(principal="alice")
    base = await serve(approval_desk.app())

    own = await gateway("approvals", "approve", mine.id, "--url", base, "--key", "alice-key")
    assert (own.returncode, own.stderr) == (
        1, "gateway approvals: you cannot approve your own call (HTTP 403 approval-forbidden)\n")

    not_approver = await gateway("approvals", "list", "--url", base, "--key", "carol-key")
    assert not_approver.returncode == 1 and "This key may not see approval requests. (HTTP 403" in not_approver.stderr

    missing = await gateway("approvals", "show", "nope", "--url", base, "--key", "bob-key")
    assert missing.returncode == 1 and "No such approval request. (HTTP 404 approval-not-found)" in missing.stderr

    no_key = await gateway("approvals", "list", "--url", base)
    assert no_key.returncode == 1
    assert "(HTTP 401 unauthorized)" in no_key.stderr and "--key or GATEWAY_API_KEY" in no_key.stderr
    assert approval_desk.service.store.get(mine.id).state is ApprovalState.PENDING


async def test_untrusted_text_cannot_drive_the_terminal(serve: Any, approval_desk: Any) -> None:
    approval_desk.add(tool="evil\x1b[2J\x1b]0;pwned\x07", principal="mallory\r\nfake line")
    base = await serve(approval_desk.app())
    listed = await gateway("approvals", "list", "--url", base, "--key", "bob-key")
    assert listed.returncode == 0
    assert "\x1b" not in listed.stdout and "\r" not in listed.stdout
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07" in listed.stdout and "mallory\\x0d\\x0afake line" in listed.stdout


async def test_an_unreachable_gateway_exits_2(refused_url: str) -> None:
    run = await gateway("approvals", "list", "--url", refused_url, "--key", "bob-key")
    assert run.returncode == 2
    assert run.stderr.startswith(f"gateway approvals: cannot connect to the gateway at {refused_url}")


async def test_list_filters_and_pages_on_the_server(serve: Any, approval_desk: Any) -> None:
    refund = approval_desk.add()
    shell = approval_desk.add(tool="shell_exec", args={"cmd": "uptime"}, principal="agent-7")
    approval_desk.add(tool="shell_exec", args={"cmd": "ls"})
    base = await serve(approval_desk.app())
    auth = ["--url", base, "--key", "bob-key", "--format", "json"]

    async def ids(*args: str) -> set[str]:
        run = await gateway("approvals", "list", *args, *auth)
        assert run.returncode == 0, run.stderr
        return {a["id"] for a in json.loads(run.stdout)["approvals"]}

    assert await ids("--tool", "payments_refund") == {refund.id}
    assert await ids("--principal", "agent-7") == {shell.id}
    assert await ids("--search", "uptime") == {shell.id}
    assert await ids("--tool", "shell_exec", "--principal", "alice", "--search", "uptime") == set()
    first = await gateway("approvals", "list", "--limit", "2", "--url", base, "--key", "bob-key")
    assert first.returncode == 0, first.stderr
    assert first.stdout.rstrip().endswith("(2 of 3 shown; see more with --offset 2)")
    assert len(await ids("--limit", "2", "--offset", "2")) == 1
