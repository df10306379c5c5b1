"""One agent run to its final output, as each framework's docs show it, streamed or not.

Shared by the drivers whose agents call the gateway's MCP endpoint (drivers.py) and those whose model is
the gateway (model_proxy_drivers.py).
"""

from __future__ import annotations

from typing import Any

from agent_framework import Agent as MafAgent
from agents import Agent, ModelProvider, RunConfig, Runner
from pydantic_ai import Agent as PydanticAgent

__all__ = ["INSTRUCTIONS", "maf_output", "openai_agents_output", "pydantic_ai_output"]

INSTRUCTIONS = "Follow the JSON script in the user's message."


async def openai_agents_output(agent: Agent[Any], prompt: str, stream: bool,
                                provider: ModelProvider | None = None) -> str:
    """An OpenAI Agents SDK agent's final output (its events read to the end, if streamed); `provider` resolves
    an agent's model given by name (the SDK's default provider when None)."""
    # Tracing would export spans to OpenAI's servers; these tests never leave 127.0.0.1.
    config = RunConfig(tracing_disabled=True) if provider is None else \
        RunConfig(tracing_disabled=True, model_provider=provider)
    if stream:
        streamed = Runner.run_streamed(agent, prompt, run_config=config)
        async for _ in streamed.stream_events():
            pass
        return str(streamed.final_output)
    return str((await Runner.run(agent, prompt, run_config=config)).final_output)


async def maf_output(agent: MafAgent, prompt: str, stream: bool) -> str:
    """A Microsoft Agent Framework agent's final text (its updates read to the end, if streamed)."""
    if stream:
        updates = agent.run(prompt, stream=True)
        async for _ in updates:
            pass
        return (await updates.get_final_response()).text
    return (await agent.run(prompt)).text


async def pydantic_ai_output(agent: PydanticAgent[None, str], prompt: str, stream: bool) -> str:
    """A pydantic-ai agent's final text (its stream read to the end, if streamed)."""
    if stream:
        async with agent.run_stream(prompt) as streamed:
            return await streamed.get_output()
    return (await agent.run(prompt)).output
