"""The Responses side of the action matrix (tests/agents/api_matrix.py): the official ``openai`` client's
``responses.create`` and ``responses.stream`` against the scripted fake of tests/agents/fake_responses.py.

The driver sends the whole conversation every time and leaves ``store`` at its default, as the OpenAI
Agents SDK does: the upstream keeps every response, so the gateway chains the turns it answers itself on the
last answer's id (``previous_response_id``). A streamed turn is checked against its own closing response:
the text deltas and the function calls streamed are exactly the final response's.
"""

from __future__ import annotations

import json
from typing import Any

from api_matrix import DEPLOY, Side, Turn
from fake_responses import FakeResponses, error_body
from model_proxy_drivers import gateway_model_client

__all__ = ["SIDE", "ResponsesDriver", "read_turn"]

Json = dict[str, Any]

TOOLS = [{"type": "function", **DEPLOY}]


def read_turn(response: Any) -> Turn:
    """A Turn from an ``openai.types.responses.Response``."""
    calls = [(i.call_id, i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
    usage = {"input": response.usage.input_tokens, "output": response.usage.output_tokens} if response.usage else {}
    return Turn(response.output_text, calls, (response.model_extra or {})["gateway"], usage, response.status or "")


class ResponsesDriver:
    """An agent loop on ``responses.create`` / ``responses.stream``: the conversation is its ``input``."""

    def __init__(self, **options: Any) -> None:
        self.options = options  # more fields of every request (store=False, say)

    def start(self, prompt: str) -> list[Json]:
        return [{"role": "user", "content": prompt}]

    async def ask(self, url: str, key: str, run_id: str | None, state: list[Json], stream: bool) -> Turn:
        async with gateway_model_client(url, key, run_id) as client:
            if stream:
                response = await streamed(client, model="any", input=state, tools=TOOLS, **self.options)
            else:
                response = await client.responses.create(model="any", input=state, tools=TOOLS, **self.options)
        state.extend(i.model_dump(exclude_none=True) for i in response.output)
        return read_turn(response)

    def results(self, state: list[Json], turn: Turn, outputs: list[str]) -> None:
        state.extend({"type": "function_call_output", "call_id": call_id, "output": output}
                     for (call_id, _, _), output in zip(turn.calls, outputs, strict=True))


async def streamed(client: Any, **request: Any) -> Any:
    """One streamed response, its events checked against the final response they close with."""
    text: list[str] = []
    calls: list[Json] = []
    numbers: list[int] = []
    async with client.responses.stream(**request) as stream:
        async for event in stream:
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.output_item.done" and event.item.type == "function_call":
                calls.append(event.item.model_dump(exclude_none=True))
        response = await stream.get_final_response()
    assert numbers == sorted(set(numbers)), numbers  # strictly increasing
    assert "".join(text) == response.output_text
    assert calls == [i.model_dump(exclude_none=True) for i in response.output if i.type == "function_call"]
    return response


def _read_error(body: Any) -> str:
    """The message of an OpenAI error (the client hands over the ``error`` object)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    assert isinstance(error, dict) and isinstance(error.get("message"), str), body
    return str(error["message"])


SIDE = Side(api="responses", path="/responses", driver=ResponsesDriver(), fake=FakeResponses,
            error_body=error_body, read_error=_read_error)
