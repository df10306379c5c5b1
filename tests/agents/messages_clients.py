"""Agents on Anthropic's Messages API whose model is the gateway (``POST /v1/messages``), each running ``deploy``.

    anthropic       ``AsyncAnthropic(base_url=<gateway>)``: ``messages.create``, or ``messages.stream`` and its
                    final message; the agent loop written out (run every ``tool_use``, send ``tool_result``s)
    LangChain       ``ChatAnthropic(base_url=<gateway>).bind_tools([deploy])``, ``ainvoke`` or ``astream``

The local tool ``deploy(service)`` records every service it ran with and answers ``deployed <service>``
(tests/agents/model_proxy_drivers.py's ``LocalTool``). The SDKs append ``/v1/messages`` to the base URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic
from fake_messages import MODEL
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from model_proxy_drivers import LocalTool

__all__ = ["DEPLOY", "MessagesRun", "Turn", "anthropic_client", "anthropic_run", "ask", "langchain_run"]

Json = dict[str, Any]

DEPLOY: Json = {"name": "deploy", "description": "Deploy a service.", "input_schema": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}
ROUNDS = 12  # an agent run's most model requests


@dataclass
class Turn:
    """One response as the client read it: the message, the SDK's events (streamed) and the ``gateway`` field."""

    message: anthropic.types.Message
    extension: Json
    events: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The last text block (a stream carries the text of every turn the gateway made, each its own block)."""
        return next((b.text for b in reversed(self.message.content) if b.type == "text"), "")


@dataclass
class MessagesRun:
    """One agent run: its final text, what ``deploy`` ran, and every response."""

    output: str
    ran: list[str]
    turns: list[Turn]


def anthropic_client(url: str, key: str | None, run_id: str | None = None, x_api_key: bool = False,
                     **headers: str) -> anthropic.AsyncAnthropic:
    """The official client, the gateway its base URL; its key as ``Authorization: Bearer`` (the SDK's way), or
    as ``x-api-key`` (the API's documented header) when asked."""
    more = {**headers, **({"X-Gateway-Session": run_id} if run_id else {}),
            **({"x-api-key": key} if x_api_key and key else {})}
    return anthropic.AsyncAnthropic(base_url=url, api_key=None if x_api_key else key, max_retries=0,
                                    default_headers=more)


async def ask(client: anthropic.AsyncAnthropic, messages: list[Json], stream: bool, **extra: Any) -> Turn:
    """One request: ``messages.create``, or ``messages.stream`` read to its final message."""
    params: Json = {"model": MODEL, "max_tokens": 1024, "messages": messages, "tools": [DEPLOY], **extra}
    if not stream:
        message = await client.messages.create(**params)
        return Turn(message, (message.model_extra or {}).get("gateway", {}))
    events, extension = [], {}
    async with client.messages.stream(**params) as streamed:
        async for event in streamed:
            events.append(event)
            if event.type == "message_delta":
                extension = (event.model_extra or {}).get("gateway", extension)
        message = await streamed.get_final_message()
    return Turn(message, extension, events)


async def anthropic_run(url: str, key: str, prompt: str, stream: bool, run_id: str | None = None,
                        x_api_key: bool = False) -> MessagesRun:
    """An agent loop on the official client: every ``tool_use`` run locally, answered by ``tool_result``s."""
    local, turns = LocalTool(), []
    messages: list[Json] = [{"role": "user", "content": prompt}]
    async with anthropic_client(url, key, run_id, x_api_key) as client:
        for _ in range(ROUNDS):
            turn = await ask(client, messages, stream)
            turns.append(turn)
            uses = [b for b in turn.message.content if b.type == "tool_use"]
            if not uses:
                return MessagesRun(turn.text, local.ran, turns)
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                              for b in turn.message.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": local.deploy(str(b.input["service"]))}
                for b in uses]})
    raise AssertionError(f"the agent was still calling tools after {ROUNDS} requests")


async def langchain_run(url: str, key: str, prompt: str, stream: bool, run_id: str | None = None) -> MessagesRun:
    """A LangChain agent loop: ``ChatAnthropic`` with ``deploy`` bound, ``ToolMessage``s for its calls."""
    local = LocalTool()

    @tool
    def deploy(service: str) -> str:
        """Deploy a service."""
        return local.deploy(service)

    model = ChatAnthropic(model_name=MODEL, base_url=url, api_key=key, max_retries=0, timeout=30, stop=None,
                          default_headers={"X-Gateway-Session": run_id} if run_id else {})
    chat = model.bind_tools([deploy])
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    for _ in range(ROUNDS):
        if stream:
            chunks = [chunk async for chunk in chat.astream(messages)]
            answer: BaseMessage = chunks[0]
            for chunk in chunks[1:]:
                answer = answer + chunk  # type: ignore[operator]
        else:
            answer = await chat.ainvoke(messages)
        assert isinstance(answer, AIMessage), answer
        if not answer.tool_calls:
            return MessagesRun(answer.text, local.ran, [])
        messages.append(answer)
        messages.extend(ToolMessage(deploy.invoke(call["args"]), tool_call_id=call["id"]) for call in answer.tool_calls)
    raise AssertionError(f"the agent was still calling tools after {ROUNDS} requests")
