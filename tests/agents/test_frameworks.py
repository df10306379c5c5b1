"""Every policy action as an agent of a real framework meets it: OpenAI Agents SDK, Microsoft Agent Framework
and pydantic-ai.

Each test runs the framework's agent (tests/agents/drivers.py, the framework's default MCP timeouts
and retries) against the gateway on loopback; the scripted fake model makes the tool calls and reports
what it read back (tests/agents/fake_model.py). A scenario asserts what the model read, what the
upstream ran (``CountingUpstream`` records every run), and what the approver API shows.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from agent_stage import Stage
from fake_model import ScriptedCall, script

FRAMEWORKS = ["openai-agents", "maf", "pydantic-ai"]
pytestmark = pytest.mark.parametrize("framework", FRAMEWORKS)

DEPLOY = "ops_deploy"  # the upstream's ``deploy`` tool, as the gateway exposes it

ACTIONS = """
policy: agents
rules:
  - id: no-prod
    tools: [ops_deploy]
    when: args.service == "prod"
    action: reject
    message: Deploying to prod is not allowed from an agent.
  - id: api-goes-canary
    tools: [ops_deploy]
    when: args.service == "api"
    action: rewrite
    rewrite:
      set: {service: '"api-canary"'}
  - id: docs-dry-run
    tools: [ops_deploy]
    when: args.service == "docs"
    action: skip
    result: {deployed: false, note: docs deploys are a dry run}
"""

HELD = """
policy: agents
rules:
  - id: payments-need-a-human
    tools: [ops_deploy]
    when: args.service == "payments"
    action: approve
    message: Deploying payments needs someone from ops.
    approval: {approvers: ["group:ops"], timeout: TIMEOUT}
"""

BUDGET = """
policy: agents
rules:
  - id: run-budget
    tools: [ops_deploy]
    when: session.calls >= LIMIT
    action: terminate
    message: This run has used its budget of deploys.
"""


WINDOW = """
policy: agents
rules:
  - id: hourly-deploys
    tools: [ops_deploy]
    when: >-
      has(usage.hour) && tool.name in usage.hour.calls_by_tool
        && usage.hour.calls_by_tool[tool.name] >= LIMIT
    action: reject
    message: This key has used its deploys for this hour.
"""


def held(timeout: str = "30s") -> str:
    """The approval policy, with this approval timeout."""
    return HELD.replace("TIMEOUT", timeout)


def budget(limit: int) -> str:
    """A run may make ``limit`` deploys; the next one ends it."""
    return BUDGET.replace("LIMIT", str(limit))


def from_upstream(seen: str) -> bool:
    """Whether a tool result is the upstream's own answer to a deploy (as text, or structured)."""
    return "deploy done (run " in seen or re.search(r'"tool":\s*"deploy"', seen) is not None  # JSON, spaced or not


def run_id() -> str:
    """A fresh run id, as an agent host would send in ``X-Gateway-Session``."""
    return f"run-{uuid.uuid4().hex}"


# --- allow, reject, rewrite, skip ------------------------------------------------------------------


async def test_allow_the_model_reads_the_tool_result(stage: Stage, framework: str) -> None:
    await stage.start(ACTIONS)
    run = await stage.run(framework, script((DEPLOY, {"service": "web"})))
    assert stage.upstream.runs == [("deploy", {"service": "web"})]
    [seen] = run.tool_results
    assert from_upstream(seen), seen


async def test_allow_with_a_streamed_model(stage: Stage, framework: str) -> None:
    """The same through the framework's streaming run (the fake answers in Server-Sent Events)."""
    await stage.start(ACTIONS)
    run = await stage.run(framework, script((DEPLOY, {"service": "web"})), stream=True)
    assert stage.upstream.runs == [("deploy", {"service": "web"})]
    [seen] = run.tool_results
    assert from_upstream(seen), seen
    assert all(r.get("stream") for r in stage.model.requests[-2:])  # both model turns were streamed


async def test_reject_the_model_reads_the_rules_message(stage: Stage, framework: str) -> None:
    await stage.start(ACTIONS)
    run = await stage.run(framework, script((DEPLOY, {"service": "prod"})))
    assert stage.upstream.runs == []
    [seen] = run.tool_results
    assert "Deploying to prod is not allowed from an agent." in seen


async def test_rewrite_the_upstream_gets_the_new_arguments(stage: Stage, framework: str) -> None:
    await stage.start(ACTIONS)
    run = await stage.run(framework, script((DEPLOY, {"service": "api"})))
    assert stage.upstream.runs == [("deploy", {"service": "api-canary"})]
    [seen] = run.tool_results
    assert from_upstream(seen), seen


async def test_skip_the_model_reads_the_synthetic_result(stage: Stage, framework: str) -> None:
    await stage.start(ACTIONS)
    run = await stage.run(framework, script((DEPLOY, {"service": "docs"})))
    assert stage.upstream.runs == []
    [seen] = run.tool_results
    assert "docs deploys are a dry run" in seen


# --- approvals within the client's timeout -----------------------------------------------------------


async def test_approve_within_the_hold_runs_the_tool_once(stage: Stage, framework: str) -> None:
    await stage.start(held())
    agent = asyncio.create_task(stage.run(framework, script((DEPLOY, {"service": "payments"}))))
    pending = await stage.wait_pending(DEPLOY)
    assert stage.upstream.runs == []  # held: nothing ran before the decision
    await stage.decide(pending["id"], approve=True)
    run = await agent
    assert stage.upstream.runs == [("deploy", {"service": "payments"})]
    [seen] = run.tool_results
    assert from_upstream(seen), seen
    assert [a["id"] for a in await stage.approvals()] == [pending["id"]]


async def test_deny_the_model_reads_the_denial(stage: Stage, framework: str) -> None:
    await stage.start(held())
    agent = asyncio.create_task(stage.run(framework, script((DEPLOY, {"service": "payments"}))))
    pending = await stage.wait_pending(DEPLOY)
    await stage.decide(pending["id"], approve=False, comment="not during the freeze")
    run = await agent
    assert stage.upstream.runs == []
    [seen] = run.tool_results
    assert "Denied by an approver: not during the freeze" in seen


async def test_expiry_the_model_reads_that_nobody_approved(stage: Stage, framework: str) -> None:
    await stage.start(held(timeout="1s"))  # expires well inside every client's timeout
    run = await stage.run(framework, script((DEPLOY, {"service": "payments"})))
    assert stage.upstream.runs == []
    [seen] = run.tool_results
    assert "Nobody approved this call in time" in seen
    assert [a["state"] for a in await stage.approvals()] == ["expired"]


# --- budgets and runs --------------------------------------------------------------------------------


async def test_budget_terminates_within_one_run_and_a_second_run_is_unaffected(stage: Stage, framework: str) -> None:
    await stage.start(budget(2))
    first = await stage.run(framework, script(*[(DEPLOY, {"service": f"web-{i}"}) for i in range(3)]),
                            run_id=run_id())
    assert [from_upstream(seen) for seen in first.tool_results] == [True, True, False]
    assert "This run has used its budget of deploys." in first.tool_results[2]
    assert [args["service"] for _, args in stage.upstream.runs] == ["web-0", "web-1"]

    second = await stage.run(framework, script((DEPLOY, {"service": "web-again"})), run_id=run_id())
    [seen] = second.tool_results
    assert from_upstream(seen), seen


async def test_two_concurrent_runs_of_one_key_keep_their_own_budgets(stage: Stage, framework: str) -> None:
    await stage.start(budget(3))
    prompts = [script(*[(DEPLOY, {"service": f"{who}-{i}"}) for i in range(3)]) for who in ("a", "b")]
    runs = await asyncio.gather(*(stage.run(framework, prompt, run_id=run_id()) for prompt in prompts))
    for run in runs:
        assert all(from_upstream(seen) for seen in run.tool_results), run.tool_results
    assert len(stage.upstream.runs) == 6  # merged into one run, calls 4-6 would have been terminated


async def test_a_usage_window_budget_holds_across_runs(stage: Stage, framework: str) -> None:
    """A per-principal budget over a rolling window: a new run id (or none) does not escape it."""
    await stage.start(WINDOW.replace("LIMIT", "2"), usage_windows={"hour": "1h"})
    first = await stage.run(framework, script((DEPLOY, {"service": "w-0"}), (DEPLOY, {"service": "w-1"})),
                            run_id=run_id())
    second = await stage.run(framework, script((DEPLOY, {"service": "w-2"})), run_id=run_id())
    third = await stage.run(framework, script((DEPLOY, {"service": "w-3"})))
    assert all(from_upstream(seen) for seen in first.tool_results), first.tool_results
    for later in (second, third):
        [seen] = later.tool_results
        assert "This key has used its deploys for this hour." in seen
    assert [args["service"] for _, args in stage.upstream.runs] == ["w-0", "w-1"]


async def test_without_a_run_id_a_terminated_run_ends_after_the_idle_timeout(stage: Stage, framework: str) -> None:
    """Runs that name no run id share the implicit run of (key, client) until it idles out; then a fresh one."""
    await stage.start(budget(1), runs={"idle_timeout": "1s"})
    used = await stage.run(framework, script((DEPLOY, {"service": "i-0"}), (DEPLOY, {"service": "i-1"})))
    assert "This run has used its budget of deploys." in used.tool_results[1]
    await asyncio.sleep(1.3)
    fresh = await stage.run(framework, script((DEPLOY, {"service": "i-2"})))
    [seen] = fresh.tool_results
    assert from_upstream(seen), seen
    assert [args["service"] for _, args in stage.upstream.runs] == ["i-0", "i-2"]


# --- held calls that outlast the client (issue 8 part 2), and run ids -----------------------------------


async def test_approve_after_the_hold_retry_gets_the_one_execution(stage: Stage, framework: str) -> None:
    """The gateway's default hold ends before the framework's default timeout; the model reads "pending",
    an approver approves, the model calls again with the same arguments and reads the one run's result."""
    await stage.start(held())
    approved: list[str] = []

    async def approve(seen: list[str]) -> None:
        pending = await stage.wait_pending(DEPLOY)
        await stage.decide(pending["id"], approve=True)
        approved.append(pending["id"])

    stage.hook("approve", approve)
    call = {"service": "payments"}
    run = await stage.run(framework, script((DEPLOY, call), ScriptedCall(DEPLOY, call, before="approve")),
                          seconds=10)  # the hold is below every client timeout: 5 s for OpenAI Agents
    first, second = run.tool_results
    assert approved and approved[0] in first  # "pending", naming the request
    # What the model must read to act on it, under the framework's defaults (not hidden as an error).
    assert "has not run yet" in first and "again with exactly the same arguments" in first, first
    assert from_upstream(second), second
    assert stage.upstream.runs == [("deploy", call)]
    assert [a["id"] for a in await stage.approvals()] == approved


async def test_a_run_id_is_scoped_to_its_principal(stage: Stage, framework: str) -> None:
    """Another key sending the same run id gets its own run: alice's terminated budget is not bob's."""
    await stage.start(budget(1))
    shared = run_id()
    alice = await stage.run(framework, script((DEPLOY, {"service": "a-0"}), (DEPLOY, {"service": "a-1"})),
                            run_id=shared)
    assert "This run has used its budget of deploys." in alice.tool_results[1]
    bob = await stage.run(framework, script((DEPLOY, {"service": "b-0"})), who="bob", run_id=shared)
    [seen] = bob.tool_results
    assert from_upstream(seen), seen
