"""Which run a model-proxy request belongs to when the agent names none (docs/runs.md "Implicit runs"):
the conversation's opening narrows the implicit run, so a new task is a new run while every request of one
conversation stays in its run; and a run id the gateway does not take is refused before the model is asked.
Real frameworks (the OpenAI Agents SDK, MAF) and the official client against the gateway's /v1.
"""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from agent_stage import RUN_SECONDS, Stage
from approval_support import PEOPLE, auth_header
from fake_model import script
from model_proxy_drivers import PROXY_DRIVERS, ProxyRun

POLICY = """
policy: model-runs
rules:
  - id: stop-word
    tools: [deploy]
    when: args.service == "stop"
    action: terminate
    message: This run is over; no more deploys.
"""

TERMINATED = "This run is over; no more deploys."


def _models(stage: Stage) -> list[dict[str, str]]:
    return [{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model"}]


async def _run(stage: Stage, framework: str, prompt: str) -> ProxyRun:
    async with asyncio.timeout(RUN_SECONDS):
        return await PROXY_DRIVERS[framework](stage.url, PEOPLE["alice"][0], None, prompt, False)


@pytest.mark.parametrize("framework", ["openai-agents", "maf"])
async def test_without_a_run_id_a_new_conversation_is_a_new_run(stage: Stage, framework: str) -> None:
    await stage.start(POLICY, models=_models(stage))
    ended = script(("deploy", {"service": "a"}), ("deploy", {"service": "stop"}), ("deploy", {"service": "b"}))

    first = await _run(stage, framework, ended)
    other_task = await _run(stage, framework, script(("deploy", {"service": "c"})))
    same_task_again = await _run(stage, framework, ended)

    assert first.ran == ["a"] and first.output.startswith(TERMINATED)
    assert other_task.ran == ["c"]  # the same client, a new conversation: its own run, not the ended one
    assert same_task_again.ran == [] and same_task_again.output.startswith(TERMINATED)
    assert "X-Gateway-Session" in same_task_again.output  # and its operator reads how to start a new run


# HTTP refuses C0 controls in a header, but carries bytes 0x80-0xff, read as Latin-1: C1 controls (NEL, CSI)
@pytest.mark.parametrize("run_id", [b"run\x85x", b"run\x9b2J"], ids=["next-line", "control-sequence-introducer"])
async def test_a_run_id_with_a_control_character_is_refused_before_the_model_is_asked(stage: Stage,
                                                                                     run_id: bytes) -> None:
    await stage.start(POLICY, models=_models(stage))
    asked = len(stage.model.requests)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx2.AsyncClient(base_url=stage.url, timeout=30,
                                  headers={**auth_header("alice"), "X-Gateway-Session": run_id}) as client:
        response = await client.post("/v1/chat/completions", json=body)

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid-input" and "run id" in response.json()["error"]["message"]
    assert len(stage.model.requests) == asked
    path = sorted(stage.root.glob("gw-*"))[-1] / "data" / "audit.jsonl"
    [event] = [e for e in map(json.loads, path.read_text().splitlines()) if e.get("event") == "request.refused"]
    assert (event["verdict"], event["frontend"]) == ("invalid_input", "model")
    assert (event["principal"]["id"], event["principal"]["kind"]) == ("alice", "key")
