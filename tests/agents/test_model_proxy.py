"""The model proxy (docs/model-proxy.md): agents whose model is the gateway, their tool calls decided by policy.

Real clients only: the official ``openai`` client, the OpenAI Agents SDK (``OpenAIChatCompletionsModel``)
and MAF's ``OpenAIChatCompletionClient``, each pointed at the gateway's ``/v1``; the gateway forwards to
the scripted fake model on loopback (tests/agents/fake_model.py), which reports every tool result it read.
The agents run a local function tool ``deploy`` (tests/agents/model_proxy_drivers.py) that records each run.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from agent_stage import RUN_SECONDS, STEP_SECONDS, Stage
from approval_support import PEOPLE
from fake_model import ScriptedCall, script, tool_results_of
from loopback import serve_app
from model_proxy_drivers import PROXY_DRIVERS, ProxyRun, gateway_model_client
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

FRAMEWORKS = ["openai-agents", "maf"]

POLICY = """
policy: model
rules:
  - id: no-prod
    tools: [deploy]
    when: args.service == "prod"
    action: reject
    message: Deploying to prod is not allowed from an agent.
  - id: api-goes-canary
    tools: [deploy]
    when: args.service == "api"
    action: rewrite
    rewrite:
      set: {service: '"api-canary"'}
  - id: docs-dry-run
    tools: [deploy]
    when: args.service == "docs" && tool.upstream == "client"
    action: skip
    result: {deployed: false, note: docs deploys are a dry run}
  - id: echo-call
    tools: [deploy]
    when: args.service == "echo"
    action: rewrite
    rewrite:
      set: {service: '"echo-" + call.id + "-" + string(call.iteration)'}
  - id: stop-word
    tools: [deploy]
    when: args.service == "stop"
    action: terminate
    message: This run is over; no more deploys.
  - id: payments-need-a-human
    tools: [deploy, ops_deploy]
    when: args.service == "payments"
    action: approve
    message: Deploying payments needs someone from ops.
    approval: {approvers: ["group:ops"], timeout: 60s}
  - id: gateway-prod
    tools: [ops_deploy]
    when: args.service == "prod"
    action: reject
    message: The gateway will not deploy prod.
"""

REFUSAL = "Deploying to prod is not allowed from an agent."
SKIP_RESULT = {"deployed": False, "note": "docs deploys are a dry run"}
TERMINATED = "This run is over; no more deploys."


def models(stage: Stage, **extra: Any) -> list[dict[str, Any]]:
    """`models:` serving every model name from the fake."""
    return [{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model", **extra}]


async def run(stage: Stage, framework: str, prompt: str, run_id: str | None = None, stream: bool = False,
              who: str = "alice") -> ProxyRun:
    """One agent run of ``framework`` with the last gateway as its model."""
    async with asyncio.timeout(RUN_SECONDS):
        return await PROXY_DRIVERS[framework](stage.url, PEOPLE[who][0], run_id, prompt, stream)


def audit(stage: Stage) -> list[dict[str, Any]]:
    """The call outcomes the last gateway audited."""
    path = stage.root / f"gw-{len(list(stage.root.glob('gw-*'))) - 1}" / "data" / "audit.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in events if e.get("event") == "call.outcome"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_every_action_reaches_the_agents_local_tool_as_decided(stage: Stage, framework: str,
                                                                    stream: bool) -> None:
    await stage.start(POLICY, models=models(stage))
    prompt = script(("deploy", {"service": "staging"}), ("deploy", {"service": "api"}),
                    ("deploy", {"service": "prod"}), ("deploy", {"service": "docs"}),
                    ("deploy", {"service": "echo"}))
    result = await run(stage, framework, prompt, run_id=f"run-{uuid.uuid4().hex}", stream=stream)
    # allow runs as asked; rewrite runs with the rewritten arguments; reject and skip never run; call.id and
    # call.iteration (the assistant turn, 1-based) are what the policy saw
    assert result.ran == ["staging", "api-canary", "echo-call_4_deploy-5"]
    seen = tool_results_of(result.output)
    assert seen[:3] == ["deployed staging", "deployed api-canary", REFUSAL]
    assert json.loads(seen[3]) == SKIP_RESULT
    assert seen[4] == "deployed echo-call_4_deploy-5"
    verdicts = [(e["final_args"].get("service"), e["verdict"], e["frontend"]) for e in audit(stage)]
    assert ("prod", "reject", "model") in verdicts and ("docs", "skip", "model") in verdicts


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_terminate_ends_the_run_and_the_model_is_not_asked_again(stage: Stage, framework: str) -> None:
    await stage.start(POLICY, models=models(stage))
    run_id = f"run-{uuid.uuid4().hex}"
    prompt = script(("deploy", {"service": "a"}), ("deploy", {"service": "stop"}), ("deploy", {"service": "b"}))
    first = await run(stage, framework, prompt, run_id=run_id)
    assert first.ran == ["a"]
    assert first.output == TERMINATED
    asked = len(stage.model.requests)
    again = await run(stage, framework, prompt, run_id=run_id)
    assert again.output == TERMINATED and again.ran == []
    assert len(stage.model.requests) == asked  # answered by the gateway, without the model
    other = await run(stage, framework, script(("deploy", {"service": "a"})), run_id=f"run-{uuid.uuid4().hex}")
    assert other.ran == ["a"]  # another run is not affected


async def test_a_held_call_waits_for_its_approval_and_then_reaches_the_agent(stage: Stage) -> None:
    await stage.start(POLICY, models=models(stage))

    async def approve() -> None:
        pending = await stage.wait_pending("deploy")
        await stage.decide(pending["id"], True, who="dave")

    deciding = asyncio.create_task(approve())
    result = await run(stage, "openai-agents", script(("deploy", {"service": "payments"})),
                       run_id=f"run-{uuid.uuid4().hex}")
    await deciding
    assert result.ran == ["payments"]
    assert tool_results_of(result.output) == ["deployed payments"]


async def test_answer_mode_says_the_call_awaits_approval_and_releases_it_on_the_retry(stage: Stage) -> None:
    await stage.start(POLICY, models=models(stage, approval="answer"))
    tools = [{"type": "function", "function": {"name": "deploy", "description": "Deploy a service.",
                                               "parameters": {"type": "object",
                                                              "properties": {"service": {"type": "string"}}}}}]
    messages: list[Any] = [{"role": "user", "content": script(("deploy", {"service": "payments"}))}]
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], f"run-{uuid.uuid4().hex}") as client:
        held = await client.chat.completions.create(model="any", messages=messages, tools=tools)
        choice = held.choices[0]
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
        [call] = (held.model_extra or {})["gateway"]["calls"]
        assert call["status"] == "pending"
        assert choice.message.content is not None and "Approval pending" in choice.message.content
        assert call["approval_id"] in choice.message.content
        still = await client.chat.completions.create(model="any", messages=messages, tools=tools)
        assert not still.choices[0].message.tool_calls  # not released before it is decided
        assert len(await stage.approvals("pending")) == 1  # the retry is bound to the same request
        await stage.decide(call["approval_id"], True, who="dave")
        released = await client.chat.completions.create(model="any", messages=messages, tools=tools)
        [tool_call] = released.choices[0].message.tool_calls or []
        assert released.choices[0].finish_reason == "tool_calls"
        assert json.loads(tool_call.function.arguments) == {"service": "payments"}
        # exactly once: the approval was used; the same call again is a new request for approval
        again = await client.chat.completions.create(model="any", messages=messages, tools=tools)
    assert not again.choices[0].message.tool_calls
    [new] = await stage.approvals("pending")
    assert new["id"] != call["approval_id"]


async def test_the_official_client_reads_what_was_resolved_and_rewritten(stage: Stage) -> None:
    await stage.start(POLICY, models=models(stage))
    tools = [{"type": "function", "function": {"name": "deploy", "parameters": {"type": "object"}}}]
    prompt = script(("deploy", {"service": "prod"}), ("deploy", {"service": "api"}))
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], None) as client:
        response = await client.chat.completions.create(
            model="gpt-anything", messages=[{"role": "user", "content": prompt}], tools=tools)
    [call] = response.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"service": "api-canary"}
    extension = (response.model_extra or {})["gateway"]
    assert extension["model_requests"] == 2
    assert [(c["tool"], c["status"], c["decision"]) for c in extension["calls"]] == [
        ("deploy", "answered", "reject"), ("deploy", "returned", "allow")]
    assert extension["calls"][0]["message"] == REFUSAL and extension["calls"][1]["rewritten"] is True
    # the model was asked again with the refused call and its refusal appended, and sent its real name
    second = stage.model.requests[-1]
    assert second["model"] == "fake-model"
    assert [m["role"] for m in second["messages"]][-2:] == ["assistant", "tool"]
    assert second["messages"][-1]["content"] == REFUSAL


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]"])
async def test_arguments_that_are_not_a_json_object_fail_closed(stage: Stage, raw: str) -> None:
    await stage.start(POLICY, models=models(stage))
    prompt = script(ScriptedCall("deploy", raw=raw), ("deploy", {"service": "staging"}))
    result = await run(stage, "openai-agents", prompt, run_id=f"run-{uuid.uuid4().hex}")
    assert result.ran == ["staging"]  # the unreadable call never reached the agent
    seen = tool_results_of(result.output)
    assert seen[0].startswith("The call was refused: the arguments are not")
    assert any(e["verdict"] == "invalid_input" and e["frontend"] == "model" for e in audit(stage))


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_gateway_run_tools_run_under_policy_and_the_agent_gets_its_own_calls(stage: Stage,
                                                                                 framework: str) -> None:
    await stage.start(POLICY, models=models(stage, gateway_tools=["ops_*"]))
    prompt = script(("ops_deploy", {"service": "svc1"}), ("ops_deploy", {"service": "prod"}),
                    ScriptedCall("nosuch_tool", {}, force=True), ("deploy", {"service": "local"}))
    result = await run(stage, framework, prompt, run_id=f"run-{uuid.uuid4().hex}")
    assert stage.upstream.ran("deploy", service="svc1") == 1
    assert stage.upstream.ran("deploy", service="prod") == 0  # refused by policy, like any gateway call
    assert result.ran == ["local"]
    seen = tool_results_of(result.output)
    assert seen[0].startswith("deploy done")
    assert seen[1] == "The gateway will not deploy prod."
    assert seen[2] == "Error: there is no tool named 'nosuch_tool'. Call only the tools you were given."
    assert seen[3] == "deployed local"
    offered = stage.model.offered_tools(stage.model.requests[-1])
    assert "ops_deploy" in offered and "deploy" in offered


@pytest.mark.parametrize("fragments", [1, 4], ids=["whole", "fragmented"])
async def test_streamed_tool_calls_come_decided_and_whole(stage: Stage, fragments: int) -> None:
    await stage.start(POLICY, models=models(stage))
    tools = [{"type": "function", "function": {"name": "deploy", "parameters": {"type": "object"}}}]
    prompt = script(("deploy", {"service": "prod"}), ("deploy", {"service": "api"}))
    chunks = []
    stage.model.fragments = fragments  # the model streams each call's arguments in pieces
    try:
        async with gateway_model_client(stage.url, PEOPLE["alice"][0], None) as client:
            stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}],
                                                          tools=tools, stream=True)
            async for chunk in stream:
                chunks.append(chunk)
    finally:
        stage.model.fragments = 1
    calls = [tc for c in chunks for ch in c.choices for tc in (ch.delta.tool_calls or [])]
    assert len(calls) == 1  # the refused call never streams; the admitted one comes whole, once decided
    assert calls[0].function is not None and json.loads(calls[0].function.arguments or "") == {"service": "api-canary"}
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]
    assert (chunks[-1].model_extra or {})["gateway"]["calls"][0]["decision"] == "reject"


async def test_unknown_model_and_missing_key_are_refused(stage: Stage) -> None:
    await stage.start(POLICY, models=[{"name": "gpt-*", "base_url": f"{stage.model_url}/v1"}])
    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    unknown = await stage.api("POST", "/v1/chat/completions", who="alice", json=body)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown-model"
    import httpx2

    async with httpx2.AsyncClient(base_url=stage.url) as anonymous:
        refused = await anonymous.post("/v1/chat/completions", json={**body, "model": "gpt-x"})
        elsewhere = await anonymous.post("/v1/tools/deploy/invoke", json={})
    # in OpenAI's error format on the model API's path (the SDK reads error.message), the gateway's elsewhere
    assert refused.status_code == 401 and refused.json() == {"error": {
        "message": "Send an API key as 'Authorization: Bearer KEY'.", "type": "invalid_request_error",
        "code": "unauthorized"}}
    assert elsewhere.status_code == 401 and elsewhere.json() == {"error": {
        "code": "unauthorized", "message": "Send an API key as 'Authorization: Bearer KEY'."}}
    asked = len(stage.model.requests)
    for bad in ({"model": "gpt-x", "messages": "hi"}, {**body, "model": "gpt-x", "n": 2},
                {**body, "model": "gpt-x", "functions": [{"name": "deploy", "parameters": {}}]},
                {**body, "model": "gpt-x", "tools": [{"type": "custom", "custom": {"name": "deploy"}}]}):
        refused = await stage.api("POST", "/v1/chat/completions", who="alice", json=bad)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid-request", bad
    assert len(stage.model.requests) == asked  # nothing the policies cannot read reaches the model


# With three at a time each run waits until all three are under way: counted at the upstream, not timed.
@pytest.mark.parametrize(("concurrency", "seconds"), [(1, "0.1"), (3, "until-3-at-once")])
async def test_parallel_calls_each_get_exactly_one_result_and_gateway_calls_run_concurrently(
        stage: Stage, concurrency: int, seconds: str) -> None:
    await stage.start(POLICY, models=models(stage, gateway_tools=["ops_*"], tool_concurrency=concurrency))
    slow = ScriptedCall("ops_slow", {"seconds": seconds}, with_next=True)
    prompt = script(slow, slow, slow, ScriptedCall("nosuch_tool", force=True, with_next=True),
                    ("deploy", {"service": "prod"}))
    tools = [{"type": "function", "function": {"name": "deploy", "parameters": {"type": "object"}}}]
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], None) as client:
        response = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}],
                                                        tools=tools)
    assert stage.upstream.ran("slow") == 3
    assert stage.upstream.most_at_once == concurrency  # all three at once, or one after another
    seen = tool_results_of(response.choices[0].message.content or "")
    assert len(seen) == 5 and seen[3].startswith("Error: there is no tool") and seen[4] == REFUSAL
    last = stage.model.requests[-1]["messages"]
    [turn] = [m for m in last if m.get("tool_calls")]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert answered == [c["id"] for c in turn["tool_calls"]]  # one result per call, in order, none missing


async def test_streamed_text_reaches_the_client_while_the_model_is_still_answering(stage: Stage) -> None:
    await stage.start(POLICY, models=models(stage))
    gate = stage.model.gate = asyncio.Event()
    try:
        async with gateway_model_client(stage.url, PEOPLE["alice"][0], None) as client:
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": script()}], stream=True)
            text = ""
            async with asyncio.timeout(STEP_SECONDS):  # the model has not finished: only passed-through text arrives
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        text = chunk.choices[0].delta.content
                        break
            assert json.loads(text) == {"tool_results": []} and not gate.is_set()
            gate.set()
            finishes = [ch.finish_reason async for c in stream for ch in c.choices if ch.finish_reason]
        assert finishes == ["stop"]
    finally:
        gate.set()
        stage.model.gate = None


async def test_model_upstream_failures_are_clear_errors(stage: Stage) -> None:
    failing = Starlette(routes=[Route("/v1/chat/completions", lambda request: JSONResponse(
        {"error": {"message": "context too long", "type": "invalid_request_error"}}, status_code=400),
        methods=["POST"])])
    async with serve_app(failing, lifespan="off") as failing_url:
        await stage.start(POLICY, models=[{"name": "bad", "base_url": f"{failing_url}/v1"},
                                          {"name": "gone", "base_url": "http://127.0.0.1:9/v1"}])
        body = {"messages": [{"role": "user", "content": "hi"}]}
        for model, status, stream in (("bad", 400, False), ("bad", 400, True), ("gone", 502, False),
                                      ("gone", 502, True)):
            answer = await stage.api("POST", "/v1/chat/completions", who="alice",
                                     json={**body, "model": model, "stream": stream})
            assert answer.status_code == status, (model, stream, answer.text)
            assert answer.json()["error"]["code"] == "model-upstream"
            assert ("context too long" in answer.json()["error"]["message"]) is (model == "bad")
