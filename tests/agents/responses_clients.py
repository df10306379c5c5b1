"""Agent frameworks on their OpenAI Responses model classes, the gateway as their model (docs/model-proxy.md).

    OpenAI Agents SDK   Agent(model=...) with the SDK's default OpenAIResponsesModel over AsyncOpenAI(base_url)
    MAF                 OpenAIChatClient (MAF's Responses client) over the same AsyncOpenAI client
    LangChain           ChatOpenAI(use_responses_api=True, base_url=...).bind_tools([deploy]), its loop by hand

Each runs the local ``deploy`` tool (model_proxy_drivers.LocalTool) for every call it is handed.
"""

from __future__ import annotations

from typing import Any

from agent_framework import Agent as MafAgent
from agent_framework.openai import OpenAIChatClient
from agent_runs import INSTRUCTIONS, maf_output, openai_agents_output
from agents import Agent, OpenAIProvider, OpenAIResponsesModel, function_tool
from fake_responses import MODEL
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from model_proxy_drivers import LocalTool, ProxyRun, gateway_model_client

__all__ = ["langchain_run", "maf_run", "openai_agents_by_name_run", "openai_agents_run"]


async def openai_agents_run(url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """An OpenAI Agents SDK run on its default model class (Responses), ``deploy`` a function tool."""
    local = LocalTool()

    @function_tool
    def deploy(service: str) -> str:
        """Deploy a service."""
        return local.deploy(service)

    async with gateway_model_client(url, key, run_id) as client:
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        agent = Agent(name="tester", instructions=INSTRUCTIONS, tools=[deploy], model=model)
        output = await openai_agents_output(agent, prompt, stream)
    return ProxyRun(output, local.ran)


async def openai_agents_by_name_run(url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """An OpenAI Agents SDK run whose model is only a name: the SDK's own provider picks its default model class
    (Responses) over the gateway's client, as ``set_default_openai_client`` would, without the global."""
    local = LocalTool()

    @function_tool
    def deploy(service: str) -> str:
        """Deploy a service."""
        return local.deploy(service)

    async with gateway_model_client(url, key, run_id) as client:
        agent = Agent(name="tester", instructions=INSTRUCTIONS, tools=[deploy], model=MODEL)
        output = await openai_agents_output(agent, prompt, stream, OpenAIProvider(openai_client=client))
    return ProxyRun(output, local.ran)


async def maf_run(url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """A Microsoft Agent Framework run on its Responses chat client."""
    local = LocalTool()
    async with gateway_model_client(url, key, run_id) as client:
        chat = OpenAIChatClient(model=MODEL, async_client=client)
        agent = MafAgent(client=chat, name="tester", instructions=INSTRUCTIONS, tools=[local.deploy])
        output = await maf_output(agent, prompt, stream)
    return ProxyRun(output, local.ran)


async def langchain_run(url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """A LangChain loop on ``ChatOpenAI(use_responses_api=True)`` with ``deploy`` bound as a tool."""
    local = LocalTool()
    headers = {"X-Gateway-Session": run_id} if run_id else {}
    chat = ChatOpenAI(model=MODEL, base_url=f"{url}/v1", api_key=key, use_responses_api=True,  # type: ignore[arg-type]
                      max_retries=0, default_headers=headers, streaming=stream)
    bound = chat.bind_tools([local.deploy])
    messages: list[Any] = [HumanMessage(prompt)]
    for _ in range(8):
        answer = await bound.ainvoke(messages)
        messages.append(answer)
        if not answer.tool_calls:
            return ProxyRun(answer.text if isinstance(answer.text, str) else answer.text(), local.ran)
        messages.extend(ToolMessage(local.deploy(**call["args"]), tool_call_id=call["id"])
                        for call in answer.tool_calls)
    raise AssertionError("the LangChain loop did not end")
