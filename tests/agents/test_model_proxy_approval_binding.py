"""An agent-run tool's approval never releases the gateway's tool of the same name (issue 18, item 3).

The agent declares its own function tool ``ops_deploy``, the name of the gateway's MCP tool of the
upstream ``ops``. Its call, through the model proxy, needs ``group:ops`` (bob), who approves it; the
gateway's own ``ops_deploy`` needs ``group:security``. The same principal then calls the gateway's tool in
the same run with the same arguments and no call id: that is a new request, held for security, and the
upstream never runs. Real parts: the official ``openai`` client against the gateway's ``/v1``, the
scripted fake model, the REST frontend and the counting MCP upstream.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx2
from agent_stage import STEP_SECONDS, Stage
from approval_support import PEOPLE, auth_header
from fake_model import script
from model_proxy_drivers import gateway_model_client

POLICY = """
policy: mail
rules:
  - id: agent-deploys-need-ops
    tools: [ops_deploy]
    when: tool.upstream == "client"
    action: approve
    message: The agent's deploys need ops.
    approval: {approvers: ["group:ops"], timeout: 60s}
  - id: gateway-deploys-need-security
    tools: [ops_deploy]
    when: tool.upstream == "ops"
    action: approve
    message: The gateway's deploys need security.
    approval: {approvers: ["group:security"], timeout: 60s}
"""

AGENT_TOOL = [{"type": "function", "function": {
    "name": "ops_deploy", "description": "The agent's own deploy.",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}}}}]


async def test_an_agent_tools_approval_does_not_run_the_gateway_tool_of_the_same_name(stage: Stage) -> None:
    await stage.start(POLICY, models=[{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model",
                                       "approval": "answer"}])
    run_id = f"run-{uuid.uuid4().hex}"
    messages: list[Any] = [{"role": "user", "content": script(("ops_deploy", {"service": "search"}))}]
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], run_id) as model:
        held = await model.chat.completions.create(model="any", messages=messages, tools=AGENT_TOOL)
    [call] = (held.model_extra or {})["gateway"]["calls"]
    assert call["status"] == "pending"
    agent_approval = call["approval_id"]
    await stage.decide(agent_approval, True, who="bob")  # ops approves the agent's own call

    async with httpx2.AsyncClient(base_url=stage.url, headers=auth_header("alice"), timeout=STEP_SECONDS) as rest:
        attack = await rest.post("/v1/tools/ops_deploy/invoke",
                                 json={"arguments": {"service": "search"}, "session_id": run_id})

    assert attack.status_code == 202, attack.text  # held, not run
    assert stage.upstream.ran("deploy") == 0
    assert attack.json()["approval_id"] != agent_approval
    [held_gateway] = await stage.approvals("pending")
    assert (held_gateway["upstream"], held_gateway["tool"]) == ("ops", "ops_deploy")
    assert [r["approvers"] for r in held_gateway["requirements"]] == [["group:security"]]
    refused = await stage.api("POST", f"/v1/approvals/{held_gateway['id']}/decision", who="bob",
                              json={"approve": True})
    assert refused.status_code in (403, 404), refused.text  # ops cannot release the gateway's tool
    agent = (await stage.api("GET", f"/v1/approvals/{agent_approval}")).json()
    assert (agent["upstream"], agent["state"]) == ("client", "approved")  # still the agent's, unused

    async with gateway_model_client(stage.url, PEOPLE["alice"][0], run_id) as model:
        released = await model.chat.completions.create(model="any", messages=messages, tools=AGENT_TOOL)
    [tool_call] = released.choices[0].message.tool_calls or []
    assert json.loads(tool_call.function.arguments) == {"service": "search"}
    assert stage.upstream.ran("deploy") == 0  # the agent runs its own tool; the gateway's never ran
