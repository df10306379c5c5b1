"""Real MCP clients in their default settings, no run id sent (docs/runs.md "What each client gets"):
the held-call scenario (one approval request, approved, the retry runs the call exactly once), the budget
scenario (a per-run budget of 5 stops the 6th call) and the second-run scenario (after a terminate, a
separate run gets a fresh budget, or a message that tells its operator how to start one).

Clients that open a session per call (the SDK as LangChain's MCP adapters drive it, the Inspector CLI) were
a new run per call before: one held call made a new approval request at every retry, and no per-run
budget ever stopped them (issue 18, item 20).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from e2e_clients import E2E, Answer

POLICY = """
policy: e2e
rules:
  - id: payments-need-a-human
    tools: [ops_deploy]
    when: args.service == "payments"
    action: approve
    message: Deploying payments needs someone from ops.
    approval: {approvers: ["group:ops"], timeout: 60s, hold: 1s}
  - id: run-budget
    tools: [ops_deploy]
    when: session.calls >= 5
    action: terminate
    message: This run has used its budget of 5 deploys.
"""

BUDGET = "This run has used its budget of 5 deploys."
# The Inspector CLI is a node process per call (seconds each on a loaded 2-core machine): its tests are slow.
PER_CALL_CLIENTS = ["sdk-session-per-call", pytest.param("inspector-cli", marks=pytest.mark.slow)]


async def _call(e2e: E2E, client: str, service: str, headers: dict[str, Any] | None = None) -> Answer:
    """One ``ops_deploy`` call the way ``client`` makes it: a session (or process) of its own."""
    if client == "inspector-cli":
        return await e2e.inspector("ops_deploy", {"service": service}, headers)
    return await e2e.per_call("ops_deploy", {"service": service}, headers)


@pytest.mark.parametrize("client", PER_CALL_CLIENTS)
async def test_a_held_call_retried_in_a_new_session_runs_once_on_one_approval(e2e, client):
    await e2e.start(POLICY)

    held = await _call(e2e, client, "payments")
    pending = await e2e.wait_pending("ops_deploy")
    await e2e.approve(pending["id"])
    retried = await _call(e2e, client, "payments")

    assert held.decision == "pending" and "call ops_deploy again" in held.text
    assert retried.decision == "approve" and "deploy done" in retried.text, retried.text
    assert e2e.upstream.ran("deploy", service="payments") == 1
    assert [a["id"] for a in await e2e.approvals()] == [pending["id"]]  # one request, not one per session


# One test, not two: the budget's six calls were the first half of the terminate test word for word.
@pytest.mark.parametrize("client", PER_CALL_CLIENTS)
async def test_a_run_budget_of_five_stops_the_sixth_call_of_sessions_per_call_and_the_next_run_is_told_how_to_start(
        e2e, client):
    await e2e.start(POLICY)

    answers = [await _call(e2e, client, f"web-{i}") for i in range(6)]

    assert [a.decision for a in answers] == ["allow"] * 5 + ["terminate"]
    assert answers[5].text.startswith(BUDGET)
    assert sum(e2e.upstream.ran("deploy", service=f"web-{i}") for i in range(6)) == 5

    next_run = await _call(e2e, client, "web-next")
    named = await _call(e2e, client, "web-named", {"X-Gateway-Session": f"run-{uuid.uuid4().hex}"})

    # the same client with no run id: nothing tells this run from the last, so it reads how to start one
    assert next_run.decision == "terminated"
    assert next_run.text.startswith(BUDGET)
    assert "X-Gateway-Session" in next_run.text and "gateway sessions end alice implicit-" in next_run.text
    assert "runs.idle_timeout" in next_run.text
    assert named.decision == "allow"  # a fresh run id is a fresh budget


async def test_the_sdk_client_that_keeps_one_session_per_run_gets_a_fresh_budget_per_run(e2e):
    await e2e.start(POLICY)

    async with e2e.session("legacy") as first_run:
        first = [Answer.of(await first_run.call_tool("ops_deploy", {"service": f"a-{i}"})) for i in range(6)]
    async with e2e.session("legacy") as second_run:
        second = [Answer.of(await second_run.call_tool("ops_deploy", {"service": f"b-{i}"})) for i in range(2)]

    assert [a.decision for a in first] == ["allow"] * 5 + ["terminate"]
    assert [a.decision for a in second] == ["allow", "allow"]


async def test_the_sdk_client_without_protocol_sessions_is_told_how_to_start_a_new_run(e2e):
    await e2e.start(POLICY)

    async with e2e.session("2026-07-28") as first_run:
        first = [Answer.of(await first_run.call_tool("ops_deploy", {"service": f"a-{i}"})) for i in range(6)]
    async with e2e.session("2026-07-28") as second_run:
        second = Answer.of(await second_run.call_tool("ops_deploy", {"service": "b-0"}))
    async with e2e.session("2026-07-28", {"X-Gateway-Session": f"run-{uuid.uuid4().hex}"}) as named_run:
        named = Answer.of(await named_run.call_tool("ops_deploy", {"service": "c-0"}))

    assert [a.decision for a in first] == ["allow"] * 5 + ["terminate"]
    assert second.decision == "terminated" and "X-Gateway-Session" in second.text
    assert named.decision == "allow"
