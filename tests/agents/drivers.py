"""Run one agent of a real framework against the gateway's MCP endpoint, with the fake model as its LLM.

Each driver builds the framework's agent the way its documentation shows, pointing the model client at
the fake (tests/agents/fake_model.py) and the MCP client at the gateway with the given headers (the
API key, and a run id when a test gives one). Every MCP timeout and retry is left at the framework's
default: the point is to see what a user of that framework sees.

    OpenAI Agents SDK   MCPServerStreamableHttp(params={"url", "headers"}): 5 s read timeout by default
    MAF                 MCPStreamableHTTPTool(url=..., static_headers=...): 30 s, 300 s read by default
    pydantic-ai         MCPToolset(url, headers=...) (FastMCP's client underneath); the model reads a result's
                        structuredContent when there is one and every content block is text

A driver returns what the model read as each tool result and the agent's final output.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent_framework import Agent as MafAgent
from agent_framework import MCPStreamableHTTPTool
from agent_framework.openai import OpenAIChatCompletionClient
from agent_runs import INSTRUCTIONS, maf_output, openai_agents_output, pydantic_ai_output
from agents import Agent, OpenAIChatCompletionsModel
from agents.mcp import MCPServerStreamableHttp
from fake_model import MODEL, tool_results_of
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

__all__ = ["DRIVERS", "AgentRun", "Driver", "run_maf", "run_openai_agents", "run_pydantic_ai"]

@dataclass(frozen=True)
class AgentRun:
    """What one agent run produced: the tool results as the model read them, and the final output."""

    tool_results: list[str]
    output: str


class Driver(Protocol):
    """``await driver(model_url, mcp_url, headers, prompt, stream=False)``: one agent run."""

    def __call__(self, model_url: str, mcp_url: str, headers: Mapping[str, str], prompt: str, *,
                 stream: bool = False) -> Awaitable[AgentRun]: ...


def _model_client(model_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{model_url}/v1", api_key="fake-model-key", max_retries=0)


async def run_openai_agents(model_url: str, mcp_url: str, headers: Mapping[str, str], prompt: str, *,
                            stream: bool = False) -> AgentRun:
    """One run of an OpenAI Agents SDK agent with the gateway as an MCP server (streamed, if asked)."""
    async with (_model_client(model_url) as openai_client,
                MCPServerStreamableHttp(params={"url": mcp_url, "headers": dict(headers)}) as gateway):
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=openai_client)
        agent = Agent(name="tester", instructions=INSTRUCTIONS, model=model, mcp_servers=[gateway])
        output = await openai_agents_output(agent, prompt, stream)
    return AgentRun(tool_results_of(output), output)


async def run_maf(model_url: str, mcp_url: str, headers: Mapping[str, str], prompt: str, *,
                  stream: bool = False) -> AgentRun:
    """One run of a Microsoft Agent Framework agent with the gateway as an MCP tool (streamed, if asked)."""
    async with (_model_client(model_url) as openai_client,
                MCPStreamableHTTPTool(name="gateway", url=mcp_url, static_headers=dict(headers)) as gateway):
        # MAF hides a tool's error text from the model by default ("Error: Function failed."); a refusal
        # is only useful if the model can read why, so the docs tell MAF users to turn details on.
        client = OpenAIChatCompletionClient(model=MODEL, async_client=openai_client,
                                            function_invocation_configuration={"include_detailed_errors": True})
        agent = MafAgent(client=client, name="tester", instructions=INSTRUCTIONS, tools=gateway)
        output = await maf_output(agent, prompt, stream)
    return AgentRun(tool_results_of(output), output)


async def run_pydantic_ai(model_url: str, mcp_url: str, headers: Mapping[str, str], prompt: str, *,
                          stream: bool = False) -> AgentRun:
    """One run of a pydantic-ai agent with the gateway as an MCP toolset (streamed, if asked)."""
    async with _model_client(model_url) as openai_client:
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=openai_client))
        agent = PydanticAgent(model, instructions=INSTRUCTIONS,
                              toolsets=[MCPToolset(mcp_url, headers=dict(headers))])
        async with agent:
            output = await pydantic_ai_output(agent, prompt, stream)
    return AgentRun(tool_results_of(output), output)


DRIVERS: dict[str, Driver] = {"openai-agents": run_openai_agents, "maf": run_maf, "pydantic-ai": run_pydantic_ai}
