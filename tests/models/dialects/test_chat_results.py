"""dialects/chat_results.py: which tool messages of a conversation are results of the agent's own tools."""

from __future__ import annotations

from typing import Any

from gateway.models.dialects.base import content_text
from gateway.models.dialects.chat_results import sent_results, with_screened
from gateway.models.dialects.chat_tools import client_tools
from gateway.pipeline.agent_results import Screened

Json = dict[str, Any]

TOOLS = client_tools([{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
                      for name in ("read_file", "deploy")])
assert isinstance(TOOLS, dict)


def turn(call_id: str, tool: str, arguments: str = "{}") -> Json:
    """An assistant message with one tool call."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": arguments}}]}


def result(call_id: str, content: Any) -> Json:
    """A tool message."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_each_result_is_matched_to_its_tool_call_and_turn() -> None:
    messages = [{"role": "user", "content": "go"}, turn("a", "read_file", '{"path": "x"}'), result("a", "one"),
                turn("b", "deploy", "{not json"), result("b", [{"type": "text", "text": "t"}, {"type": "x"}])]
    found = sent_results(messages, messages, TOOLS)
    assert [(i, r.call_id, r.tool.name, r.arguments, r.text, r.iteration) for i, r in found] == [
        (2, "a", "read_file", {"path": "x"}, "one", 1), (4, "b", "deploy", {}, "t", 2)]  # garbled: still screened


def test_results_the_rules_cannot_place_or_the_gateway_made_are_left_alone() -> None:
    splice = [turn("g", "notes_read"), result("g", "the gateway ran this")]
    sent = [turn("a", "read_file"), result("nobody", "no call"), turn("u", "not_offered"), result("u", "x"),
            result("a", "mine")]
    messages = [*splice, *sent]
    found = sent_results(messages, sent, TOOLS)
    assert [(i, r.call_id) for i, r in found] == [(6, "a")]
    assert sent_results([turn("g", "read_file"), result("g", "x")], [], TOOLS) == []  # not the agent's


def test_screened_contents_replace_the_results_and_nothing_else() -> None:
    messages = [turn("a", "read_file"), result("a", "secret"), turn("b", "read_file"), result("b", "plain"),
                result("a", "secret again")]  # a second result for one call is read too
    found = sent_results(messages, messages, TOOLS)
    out = with_screened(messages, found, [Screened("a", "read_file", "allow", "[REDACTED]", rewritten=True),
                                          Screened("b", "read_file", "allow"),
                                          Screened("a", "read_file", "allow", "[REDACTED] again", rewritten=True)])
    assert [m.get("content") for m in out] == [None, "[REDACTED]", None, "plain", "[REDACTED] again"]
    assert messages[1]["content"] == "secret"  # the agent's own message is not changed
    assert content_text(None) == "" and content_text(["x"]) == ""
