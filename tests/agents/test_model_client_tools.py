"""`models[].client_tools`: the agent-run tools a model route declares, and refuses any other (docs/model-proxy.md)."""

from __future__ import annotations

from typing import Any

from agent_stage import Stage
from fake_model import script

POLICY = """
policy: model
rules:
  - id: no-prod
    tools: [deploy]
    when: args.service == "prod"
    action: reject
    message: Deploying to prod is not allowed from an agent.
"""


def tool(name: str) -> dict[str, Any]:
    """An agent's function tool."""
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"service": {"type": "string"}}}}}


async def test_declared_agent_tools_are_served_and_any_other_is_refused_before_the_model(stage: Stage) -> None:
    await stage.start(POLICY, models=[{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model",
                                       "client_tools": ["deploy", "mail_*"]}])
    body = {"model": "m", "messages": [{"role": "user", "content": script(("deploy", {"service": "staging"}))}]}
    served = await stage.api("POST", "/v1/chat/completions", who="alice",
                             json={**body, "tools": [tool("deploy"), tool("mail_send")]})
    assert served.status_code == 200, served.text
    [call] = served.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "deploy"
    asked = len(stage.model.requests)
    refused = await stage.api("POST", "/v1/chat/completions", who="alice",
                              json={**body, "tools": [tool("deploy"), tool("wipe_disk"), tool("mailer")]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid-request"
    assert "'wipe_disk', 'mailer'" in error["message"] and "client_tools" in error["message"]
    assert len(stage.model.requests) == asked  # the model never saw the undeclared tool


async def test_without_client_tools_any_agent_tool_is_served(stage: Stage) -> None:
    await stage.start(POLICY, models=[{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model"}])
    body = {"model": "m", "messages": [{"role": "user", "content": script(("wipe_disk", {"service": "x"}))}],
            "tools": [tool("wipe_disk")]}
    served = await stage.api("POST", "/v1/chat/completions", who="alice", json=body)
    assert served.status_code == 200, served.text
    assert served.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "wipe_disk"
