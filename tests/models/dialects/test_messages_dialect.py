"""gateway/models/dialects/messages.py: the Messages API read and written as the Anthropic SDK sends and reads it.

Every response the dialect writes is validated with ``anthropic.types.Message``; requests are Messages bodies
as the SDK sends them.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Answered, HandedOut, ModelAnswer, Reply, RequestProblem
from gateway.models.dialects.messages import DIALECT
from gateway.pipeline.agent_results import Screened

Json = dict[str, Any]

DEPLOY = {"name": "deploy", "description": "Deploy a service", "input_schema": {
    "type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}


def answer(*blocks: Json, stop: str = "tool_use") -> Json:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": list(blocks),
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 7, "output_tokens": 2}}


def use(call_id: str, service: str) -> Json:
    return {"type": "tool_use", "id": call_id, "name": "deploy", "input": {"service": service}}


def request(messages: list[Json], **extra: Any) -> Json:
    return {"model": "claude-x", "max_tokens": 100, "messages": messages, "tools": [DEPLOY], **extra}


def test_the_agents_tools_are_read_and_server_tools_pass_by() -> None:
    body = request([{"role": "user", "content": "hi"}], system="Be brief.", tool_choice={"type": "any"})
    body["tools"] = [DEPLOY, {"type": "bash_20250124", "name": "bash"},
                     {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
    read = DIALECT.read_request(body, {})
    assert sorted(read.tools) == ["bash", "deploy"]
    assert read.tools["deploy"].spec.input_schema == DEPLOY["input_schema"]
    offered = DIALECT.offer(read, "upstream-model", [])
    # system, tool_choice and the server tool go to the model as sent; the model is mapped; no stream flag
    assert offered["system"] == "Be brief." and offered["tool_choice"] == {"type": "any"}
    assert offered["tools"] == body["tools"] and offered["model"] == "upstream-model" and "stream" not in offered


@pytest.mark.parametrize(("change", "says"), [
    ({"messages": "hi"}, "'messages' must be a list"),
    ({"messages": [{"role": "system", "content": "x"}]}, "'role' must be 'user' or 'assistant'"),
    ({"messages": [{"role": "user", "content": 3}]}, "a string or a list of content blocks"),
    ({"tools": [{"type": "mystery_2030", "name": "m"}]}, "'mystery_2030' is not served"),
    ({"tools": [{"input_schema": {}}]}, "every tool needs a name"),
    ({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}, "'mcp_servers'"),
])
def test_a_request_that_cannot_be_served_says_why(change: Json, says: str) -> None:
    with pytest.raises(RequestProblem, match=says):
        DIALECT.read_request({**request([{"role": "user", "content": "hi"}]), **change}, {})


def test_headers_the_key_as_x_api_key_and_the_agents_version_and_betas() -> None:
    assert DIALECT.upstream_headers("sk-up") == {"x-api-key": "sk-up"}
    assert DIALECT.passed_headers({"anthropic-version": "2026-10-21", "anthropic-beta": "b1", "x-api-key": "gw"}) \
        == {"anthropic-version": "2026-10-21", "anthropic-beta": "b1"}
    assert DIALECT.passed_headers({}) == {"anthropic-version": "2023-06-01"}


def test_tool_use_blocks_are_the_calls_and_an_input_that_is_no_object_is_refused() -> None:
    read = DIALECT.read_answer(answer({"type": "text", "text": "Deploying."}, use("toolu_a", "api"),
                                      {"type": "tool_use", "id": "toolu_b", "name": "deploy", "input": [1]},
                                      {"type": "tool_use", "name": "deploy", "input": {}}))
    assert [(c.id, c.arguments, c.refused) for c in read.calls[:2]] == [
        ("toolu_a", {"service": "api"}, None), ("toolu_b", {}, "the input is not a JSON object")]
    assert read.calls[2].id.startswith("call_") and read.finish == "tool_use"
    assert read.raw["content"][2]["input"] == {}  # never sent back to the model as it was


@pytest.mark.parametrize("content", ["text", [1], [{"type": "mcp_tool_use", "id": "m", "name": "x", "input": {}}]])
def test_an_answer_that_could_hide_a_call_is_a_bad_answer(content: Any) -> None:
    with pytest.raises(ModelUpstreamError):
        DIALECT.read_answer({**answer(), "content": content})


def test_the_exchange_answers_every_call_in_order_with_is_error_for_refusals() -> None:
    read = DIALECT.read_answer(answer({"type": "text", "text": "On it."}, use("toolu_a", "prod"),
                                      use("toolu_b", "docs")))
    exchange = DIALECT.exchange(read, [Answered(read.calls[0], "Not prod.", True),
                                       Answered(read.calls[1], '{"dry": true}', False)])
    assert exchange == [
        {"role": "assistant", "content": read.raw["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "Not prod.", "is_error": True},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": '{"dry": true}'}]}]
    assert DIALECT.call_ids(exchange[0]) == ("toolu_a", "toolu_b") and DIALECT.call_ids(exchange[1]) == ()
    conversation = [{"role": "user", "content": "go"}, *exchange]
    assert DIALECT.model_request({"model": "m"}, conversation, read, exchange) == {"model": "m",
                                                                                 "messages": conversation}
    assert DIALECT.assistant_turns(conversation) == 1


def reply(read: ModelAnswer | None, returned: list[Any], text: str | None = None) -> Reply:
    return Reply("claude-x", read, returned, text, DIALECT.add_usage({"input_tokens": 7, "output_tokens": 2},
                                                                     {"input_tokens": 9, "output_tokens": 4,
                                                                      "cache_read_input_tokens": 5}),
                 {"run": "r", "model_requests": 2, "calls": []})


def test_the_whole_response_keeps_only_the_returned_calls_with_the_admitted_input() -> None:
    read = DIALECT.read_answer(answer({"type": "text", "text": "Two."}, use("toolu_a", "api"), use("toolu_b", "x")))
    whole = DIALECT.whole(reply(read, [(read.calls[0], {"service": "api-canary"})]))
    message = Message.model_validate(whole)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert whole["content"][1] == use("toolu_a", "api-canary") and message.stop_reason == "tool_use"
    assert whole["usage"] == {"input_tokens": 16, "output_tokens": 6, "cache_read_input_tokens": 5}
    assert whole["gateway"]["model_requests"] == 2


def test_a_gateway_text_replaces_the_answer_and_needs_no_model_answer() -> None:
    for read in (None, DIALECT.read_answer(answer(use("toolu_a", "stop")))):
        whole = DIALECT.whole(reply(read, [], "This run is over."))
        message = Message.model_validate(whole)
        assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", "This run is over.")]
        assert message.stop_reason == "end_turn" and whole["gateway"]["run"] == "r"


def test_errors_are_in_the_messages_format_with_the_type_the_sdk_maps() -> None:
    assert DIALECT.error_body(429, "model-upstream", "slow down") == {
        "type": "error", "error": {"type": "rate_limit_error", "message": "slow down", "code": "model-upstream"}}
    assert DIALECT.error_body(502, "model-upstream", "x")["error"]["type"] == "api_error"
    assert DIALECT.error_body(400, "wrong-api", "x")["error"]["type"] == "invalid_request_error"


def test_the_agents_tool_results_are_read_and_replaced_in_place() -> None:
    tools = DIALECT.read_request(request([{"role": "user", "content": "x"}]), {}).tools
    sent = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}, use("toolu_a", "api")]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "sec"},
                                                                              {"type": "text", "text": "ret"}]},
                {"type": "tool_result", "tool_use_id": "toolu_old", "content": "from before", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "nobody asked"},
                {"type": "text", "text": "and now?"}]}]
    earlier = {"toolu_old": HandedOut("deploy", {"service": "db"}, 1)}
    found = DIALECT.agent_results(sent, sent, tools, earlier.get)
    assert [(loc, r.call_id, r.arguments, r.text, r.iteration) for loc, r in found] == [
        ((2, 0), "toolu_a", {"service": "api"}, "secret", 1), ((2, 1), "toolu_old", {"service": "db"},
                                                               "from before", 1)]
    assert DIALECT.agent_results(sent, sent[:2], tools, earlier.get) == []  # only the agent's own turns
    screened = [Screened("toolu_a", "deploy", "allow", content="[redacted]", rewritten=True),
                Screened("toolu_old", "deploy", "reject", content="Refused.")]
    out = DIALECT.with_screened(sent, found, screened)
    assert out[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "[redacted]"}
    assert out[2]["content"][1]["content"] == "Refused." and out[2]["content"][1]["is_error"] is True
    assert out[2]["content"][2:] == sent[2]["content"][2:] and sent[2]["content"][0]["content"][0]["text"] == "sec"
