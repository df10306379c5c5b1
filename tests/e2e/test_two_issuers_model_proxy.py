"""Two issuers' ``sub: alice`` through the model proxy (gateway/models/proxy.py): the same run id names two runs,
so one alice cannot continue (or find ended) the other's run, nor get back what the gateway resolved in it, and
the same conversation without a run id is in each alice's own implicit run.

Issuer A is the real OpenID Provider (``idp``), issuer B a loopback JWKS of our own (tests/two_issuers_support.py).
The gateway is served from its config over real HTTP, its model a small scripted OpenAI-compatible model served
here on loopback, its gateway tools the test REST API's; the agent is the official OpenAI client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from loopback import serve_app
from openai import AsyncOpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from two_issuers_support import alices, two_issuers_auth

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

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
DEPLOY = {"type": "function", "function": {"name": "deploy", "description": "Deploy a service.", "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}}


class ScriptedModel:
    """A chat-completions model driven by the user's words: ``deploy:<service>`` asks for the agent's ``deploy``;
    ``read:<item>`` asks for the gateway's ``api_get_item`` and, once it has the result, for ``deploy(after-read)``;
    after a deploy's result it answers with every tool result it read. It keeps every request it got."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            return JSONResponse({"id": f"m-{uuid.uuid4().hex}", "object": "chat.completion", "created": 0,
                                 "model": "m", "choices": [{"index": 0, "message": self._answer(body["messages"]),
                                                            "finish_reason": "stop"}]})

        return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])

    @staticmethod
    def _answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        last = messages[-1]
        if last["role"] == "user":
            verb, _, value = last["content"].partition(":")
            return _call("deploy", service=value) if verb == "deploy" else _call("api_get_item", item_id=value)
        calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
        if calls.get(last.get("tool_call_id")) == "api_get_item":
            return _call("deploy", service="after-read")
        read = [m["content"] for m in messages if m["role"] == "tool"]
        return {"role": "assistant", "content": json.dumps({"read": read})}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call-{uuid.uuid4().hex[:12]}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def scripted_model() -> AsyncIterator[tuple[ScriptedModel, str]]:
    """The model and its base URL, served in the session loop for the module."""
    model = ScriptedModel()
    async with serve_app(model.app(), lifespan="off") as url:
        yield model, url


@pytest_asyncio.fixture(loop_scope="session")
async def two_alices(idp, second_issuer, start_gateway, configs, http_api, scripted_model):
    """(gateway, the model, alice's token from issuer A, alice's from issuer B)."""
    model, url = scripted_model
    config = configs.base(configs.http_upstream("api", http_api.url),
                          auth=two_issuers_auth(idp, second_issuer, []),
                          models=[{"name": "*", "base_url": f"{url}/v1", "model": "m", "gateway_tools": ["api_*"]}])
    gateway = await start_gateway(config, {"p.yaml": POLICY})
    token_a, token_b = await alices(idp, second_issuer)
    return gateway, model, token_a, token_b


async def _ask(gateway: Any, token: str, run: str | None, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat completion through the gateway as the token's principal, in run ``run`` (else the implicit one):
    the assistant message."""
    headers = {"X-Gateway-Session": run} if run else {}
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=token, max_retries=0,
                           default_headers=headers) as client:
        done = await client.chat.completions.create(model="m", messages=messages, tools=[DEPLOY])  # type: ignore[arg-type,list-item]
    message: dict[str, Any] = done.choices[0].message.model_dump(exclude_none=True)
    return message


async def test_one_issuers_alice_cannot_find_the_others_ended_run(two_alices):
    gateway, _, token_a, token_b = two_alices
    run = f"run-{uuid.uuid4().hex}"
    ended = await _ask(gateway, token_a, run, [{"role": "user", "content": "deploy:stop"}])
    again = await _ask(gateway, token_a, run, [{"role": "user", "content": "deploy:go"}])
    other = await _ask(gateway, token_b, run, [{"role": "user", "content": "deploy:go"}])
    assert ended["content"].startswith(TERMINATED) and again["content"].startswith(TERMINATED)
    [call] = other["tool_calls"]  # the same run id, her own run: the model was asked and its call reaches her
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("deploy", {"service": "go"})


async def test_one_issuers_alice_does_not_get_what_the_gateway_resolved_in_the_others_run(two_alices):
    gateway, model, token_a, token_b = two_alices
    run = f"run-{uuid.uuid4().hex}"
    asked = [{"role": "user", "content": "read:a-secret-item"}]
    returned = await _ask(gateway, token_a, run, asked)  # the gateway ran api_get_item; the agent sees only deploy
    [call] = returned["tool_calls"]
    assert call["function"]["name"] == "deploy"
    conversation = [*asked, returned, {"role": "tool", "tool_call_id": call["id"], "content": "deployed after-read"}]

    def read_by_model(answer: dict[str, Any]) -> list[str]:
        read: list[str] = json.loads(answer["content"])["read"]
        return read

    own = read_by_model(await _ask(gateway, token_a, run, conversation))
    seen_by_a = model.requests[-1]["messages"]
    other = read_by_model(await _ask(gateway, token_b, run, conversation))
    assert len(own) == 2 and "a-secret-item" in own[0]  # A's conversation: the gateway's call put back
    assert any(c["function"]["name"] == "api_get_item" for m in seen_by_a for c in m.get("tool_calls") or [])
    assert other == ["deployed after-read"]  # B's, the same ids in the same run id: nothing of A's put in


async def test_the_same_conversation_without_a_run_id_is_each_alices_own_implicit_run(two_alices):
    gateway, _, token_a, token_b = two_alices
    service = uuid.uuid4().hex
    opening = [{"role": "user", "content": f"deploy:{service}"}]  # the same opening, from the same client
    for token in (token_a, token_b):
        assert (await _ask(gateway, token, None, opening))["tool_calls"]
    runs = {e["principal"]["issuer"]: e["session"] for e in gateway.audit_events()
            if e.get("event") == "call.outcome" and e["final_args"] == {"service": service}}
    assert len(runs) == 2 and len(set(runs.values())) == 2, runs  # two issuers, two runs
