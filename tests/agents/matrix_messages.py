"""The Messages side of the action matrix (tests/agents/api_matrix.py): the official ``anthropic`` client's
``messages.create`` and ``messages.stream`` against the scripted fake of tests/agents/fake_messages.py.

The matrix's entries give no ``api_key``, so this fake checks no key (tests/agents/test_model_messages.py
proves the key the gateway sends); it still wants the ``anthropic-version`` the gateway passes on.
"""

from __future__ import annotations

from typing import Any

from api_matrix import DEPLOY, Side, Turn
from fake_messages import FakeMessages
from messages_clients import anthropic_client, ask

__all__ = ["SIDE"]

Json = dict[str, Any]

TOOLS = [{"name": DEPLOY["name"], "description": DEPLOY["description"], "input_schema": DEPLOY["parameters"]}]


def _fake() -> FakeMessages:
    fake = FakeMessages(api_key=None)
    fake.usage = {"input_tokens": 1, "output_tokens": 1}
    return fake


class MessagesDriver:
    """An agent loop on the Messages API: the conversation is its ``messages``."""

    def start(self, prompt: str) -> list[Json]:
        return [{"role": "user", "content": prompt}]

    async def ask(self, url: str, key: str, run_id: str | None, state: list[Json], stream: bool) -> Turn:
        async with anthropic_client(url, key, run_id) as client:
            read = await ask(client, state, stream, tools=TOOLS)
        message = read.message
        state.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        usage = {"input": message.usage.input_tokens, "output": message.usage.output_tokens}
        return Turn(read.text, calls, read.extension, usage, message.stop_reason or "")

    def results(self, state: list[Json], turn: Turn, outputs: list[str]) -> None:
        state.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": output}
            for (call_id, _, _), output in zip(turn.calls, outputs, strict=True)]})


def _read_error(body: Any) -> str:
    """The message of a Messages error body (``{"type": "error", "error": {"type", "message"}}``)."""
    assert isinstance(body, dict) and body.get("type") == "error", body
    error = body["error"]
    assert isinstance(error, dict) and isinstance(error.get("type"), str) and isinstance(error.get("message"), str)
    return str(error["message"])


SIDE = Side(api="messages", path="/messages", driver=MessagesDriver(), fake=_fake,
            error_body=lambda message: {"type": "error", "error": {"type": "invalid_request_error",
                                                                   "message": message}},
            read_error=_read_error,
            skip={"invalid_json:whole": "a whole Message's tool input is always a JSON object (the SDK's types "
                                        "say so): only a stream's input_json_delta can carry text that is not; "
                                        "tests/agents/test_model_messages.py covers it streamed"})
