"""dialects/chat_answer.py: every tool call in a model's answer ends up in ``tool_calls``, or the answer is refused."""

from __future__ import annotations

import json

import pytest

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.chat_answer import StreamedMessage, assistant_message

CALL = {"name": "deploy", "arguments": '{"service": "prod"}'}


def test_a_legacy_function_call_becomes_one_tool_call() -> None:
    read = assistant_message({"role": "assistant", "content": None, "function_call": CALL})
    assert "function_call" not in read
    [call] = read["tool_calls"]
    assert call["type"] == "function" and call["function"] == CALL and call["id"].startswith("call_")


@pytest.mark.parametrize("message", [
    {"tool_calls": {"id": "c", "function": CALL}},  # an object instead of a list
    {"tool_calls": "deploy"},
    {"function_call": "deploy"},
    {"function_call": CALL, "tool_calls": [{"id": "c", "type": "function", "function": CALL}]},  # which one?
], ids=["tool-calls-object", "tool-calls-text", "function-call-text", "both"])
def test_a_call_that_cannot_be_read_one_way_is_a_bad_answer(message: dict[str, object]) -> None:
    with pytest.raises(ModelUpstreamError) as raised:
        assistant_message({"role": "assistant", **message})
    assert raised.value.status == 502


def test_streamed_calls_and_a_legacy_call_are_assembled_and_never_passed_through() -> None:
    streamed = StreamedMessage()
    assert streamed.add({"role": "assistant", "function_call": {"name": "deploy", "arguments": ""}}) == \
        {"role": "assistant"}
    for piece in ('{"serv', 'ice": ', '"prod"}'):
        assert streamed.add({"function_call": {"arguments": piece}}) == {}
    [call] = streamed.message()["tool_calls"]
    assert call["function"] == CALL


def test_streamed_argument_pieces_are_joined_whole_in_order() -> None:
    streamed = StreamedMessage()
    streamed.add({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "second", "arguments": ""}},
                                 {"index": 0, "id": "a", "function": {"name": "first", "arguments": ""}}]})
    text = json.dumps({"data": "x" * 100_000})
    for start in range(0, len(text), 7):
        streamed.add({"tool_calls": [{"index": 0, "function": {"arguments": text[start:start + 7]}}]})
    streamed.add({"content": "thinking"})
    message = streamed.message()
    assert [c["id"] for c in message["tool_calls"]] == ["a", "b"]
    assert message["tool_calls"][0]["function"]["arguments"] == text
    assert message["content"] == "thinking"


def test_a_streamed_tool_calls_that_is_not_a_list_is_a_bad_answer() -> None:
    with pytest.raises(ModelUpstreamError):
        StreamedMessage().add({"tool_calls": {"index": 0, "function": CALL}})
