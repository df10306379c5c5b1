"""Agents whose *model* is the gateway (the model proxy, docs/model-proxy.md), each running a local function tool.

    OpenAI Agents SDK   OpenAIChatCompletionsModel over AsyncOpenAI(base_url=<gateway>/v1), @function_tool
    MAF                 OpenAIChatCompletionClient over the same AsyncOpenAI client, a plain Python function tool

The local tool is ``deploy(service)``: it records every service it is run with in ``LocalTool.ran`` and
answers ``deployed <service>``. The gateway forwards to the scripted fake model (tests/agents/fake_model.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from agent_framework import Agent as MafAgent
from agent_framework.openai import OpenAIChatCompletionClient
from agent_runs import INSTRUCTIONS, maf_output, openai_agents_output
from agents import Agent, OpenAIChatCompletionsModel, function_tool
from fake_model import MODEL
from openai import AsyncOpenAI

__all__ = ["PROXY_DRIVERS", "LocalTool", "ProxyRun", "gateway_model_client"]

@dataclass
class LocalTool:
    """The agent's own ``deploy`` tool and every service it ran with."""

    ran: list[str] = field(default_factory=list)

    def deploy(self, service: Annotated[str, "The service to deploy."]) -> str:
        """Deploy a service."""
        self.ran.append(service)
        return f"deployed {service}"


@dataclass(frozen=True)
class ProxyRun:
    """One agent run: its final output and what the local tool ran."""

    output: str
    ran: list[str]


def gateway_model_client(gateway_url: str, key: str, run_id: str | None) -> AsyncOpenAI:
    """The official OpenAI client with the gateway as its base URL (the run id as a header, if given)."""
    headers = {"X-Gateway-Session": run_id} if run_id else {}
    return AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, default_headers=headers)


async def run_openai_agents(gateway_url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """One OpenAI Agents SDK run, its model the gateway, ``deploy`` a local function tool."""
    local = LocalTool()

    @function_tool
    def deploy(service: str) -> str:
        """Deploy a service."""
        return local.deploy(service)

    async with gateway_model_client(gateway_url, key, run_id) as client:
        agent = Agent(name="tester", instructions=INSTRUCTIONS, tools=[deploy],
                      model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
        output = await openai_agents_output(agent, prompt, stream)
    return ProxyRun(output, local.ran)


async def run_maf(gateway_url: str, key: str, run_id: str | None, prompt: str, stream: bool) -> ProxyRun:
    """One Microsoft Agent Framework run, its chat client's base URL the gateway, ``deploy`` a local function."""
    local = LocalTool()
    async with gateway_model_client(gateway_url, key, run_id) as client:
        chat = OpenAIChatCompletionClient(model=MODEL, async_client=client)
        agent = MafAgent(client=chat, name="tester", instructions=INSTRUCTIONS, tools=[local.deploy])
        output = await maf_output(agent, prompt, stream)
    return ProxyRun(output, local.ran)


PROXY_DRIVERS: dict[str, Callable[[str, str, str | None, str, bool], Awaitable[ProxyRun]]] = {
    "openai-agents": run_openai_agents, "maf": run_maf}
