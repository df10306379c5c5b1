"""The Responses dialect's pure parts (gateway/models/dialects/responses*.py) on real Responses JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Answered, HandedOut, Reply, RequestProblem
from gateway.models.dialects.responses import DIALECT
from gateway.pipeline.agent_results import Screened

Json = dict[str, Any]
EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
DEPLOY = {"type": "function", "name": "deploy", "parameters": {"type": "object"}}
USAGE = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5, "input_tokens_details": {"cached_tokens": 1},
         "output_tokens_details": {"reasoning_tokens": 1}}


def call(n: int, service: str) -> Json:
    return {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "deploy",
            "arguments": json.dumps({"service": service}), "status": "completed"}


def answer(*output: Json) -> Json:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "completed",
            "output": list(output), "parallel_tool_calls": True, "tool_choice": "auto", "tools": [DEPLOY],
            "usage": USAGE}


TEXT = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "On it.", "annotations": []}]}


def request(**body: Any) -> Any:
    return DIALECT.read_request({"model": "m", "input": "hi", "tools": [DEPLOY], **body}, {})


def test_the_request_reads_function_tools_passes_hosted_ones_and_refuses_mcp() -> None:
    read = request(tools=[DEPLOY, {"type": "web_search"}, {"type": "code_interpreter", "container": {}}])
    assert list(read.tools) == ["deploy"] and read.conversation == [{"type": "message", "role": "user",
                                                                     "content": "hi"}]
    for tool, said in (({"type": "mcp", "server_label": "x"}, "'mcp' tools are not served"),
                       ({"type": "custom", "name": "x"}, "'custom'")):
        with pytest.raises(RequestProblem, match=said):
            request(tools=[tool])
    with pytest.raises(RequestProblem, match="'input'"):
        request(input=42)


def test_an_answer_reads_its_calls_and_refuses_items_that_could_hide_one() -> None:
    read = DIALECT.read_answer(answer(TEXT, call(1, "web"), {**call(2, "x"), "call_id": "", "arguments": "{no"}))
    assert [(c.name, c.arguments) for c in read.calls] == [("deploy", {"service": "web"}), ("deploy", {})]
    assert read.calls[1].refused and read.calls[1].id.startswith("call_") and read.usage == USAGE
    with pytest.raises(ModelUpstreamError, match="'mcp_call'"):
        DIALECT.read_answer(answer({"type": "mcp_call", "id": "m"}))
    with pytest.raises(ModelUpstreamError, match="not a Responses response"):
        DIALECT.read_answer({"id": "x"})


def test_a_storing_upstream_is_chained_on_the_last_answer_with_the_outputs_only() -> None:
    read = DIALECT.read_answer(answer(call(1, "prod")))
    new = DIALECT.exchange(read, [Answered(read.calls[0], "refused", True)])
    assert new == [read.raw["output"][0], {"type": "function_call_output", "call_id": "call_1", "output": "refused"}]
    base = DIALECT.offer(request(), "upstream", [])
    assert DIALECT.model_request(base, ["c"], None, []) == {**base, "input": ["c"]}
    chained = DIALECT.model_request(base, ["c", *new], read, new)
    assert (chained["previous_response_id"], chained["input"]) == ("resp_1", new[1:])
    assert DIALECT.model_request({**base, "store": False}, ["c", *new], read, new)["input"] == ["c", *new]


def test_results_are_read_from_the_conversation_or_the_calls_handed_out() -> None:
    tools = request().tools
    sent = [call(1, "web"), {"type": "function_call_output", "call_id": "call_1", "output": "deployed web"},
            {"type": "function_call_output", "call_id": "call_9", "output": [{"type": "input_text", "text": "up"}]}]
    found = DIALECT.agent_results(sent, sent, tools, lambda i: HandedOut("deploy", {"service": "api"}, 4)
                                  if i == "call_9" else None)
    assert [(r.call_id, r.arguments, r.text, r.iteration) for _, r in found] == [
        ("call_1", {"service": "web"}, "deployed web", 1), ("call_9", {"service": "api"}, "up", 4)]
    screened = DIALECT.with_screened(sent, found, [Screened("call_1", "deploy", "allow", "[gone]"),
                                                   Screened("call_9", "deploy", "allow")])
    assert screened[1]["output"] == "[gone]" and screened[2] is sent[2]


def reply(read: Any, returned: list[Any], text: str | None = None) -> Reply:
    return Reply("agent-model", read, returned, text, DIALECT.add_usage(USAGE, USAGE), {"run": "r"})


def test_the_whole_response_keeps_only_the_returned_calls_with_their_admitted_arguments() -> None:
    read = DIALECT.read_answer(answer(TEXT, call(1, "api"), call(2, "prod")))
    whole = DIALECT.whole(reply(read, [(read.calls[0], {"service": "api-canary"})]))
    Response.model_validate(whole)
    assert [i["type"] for i in whole["output"]] == ["message", "function_call"]
    assert json.loads(whole["output"][1]["arguments"]) == {"service": "api-canary"}
    assert whole["usage"]["total_tokens"] == 10 and whole["usage"]["input_tokens_details"]["cached_tokens"] == 2
    assert whole["gateway"] == {"run": "r"}
    text = DIALECT.whole(reply(read, [], "over"))
    assert text["id"] != "resp_1" and [i["type"] for i in text["output"]] == ["message"]


def events(*answers: Json) -> list[Json]:
    """Every event of a stream of these answers, in the upstream's own numbering (restarting per answer)."""
    out = []
    for whole in answers:
        out.append({"type": "response.created", "response": {**whole, "output": [], "status": "in_progress"}})
        for index, item in enumerate(whole["output"]):
            out.append({"type": "response.output_item.added", "output_index": index, "item": item})
            if item["type"] == "function_call":
                out.append({"type": "response.function_call_arguments.delta", "output_index": index,
                            "item_id": item["id"], "delta": item["arguments"]})
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        out.append({"type": "response.completed", "response": whole})
    return [{**e, "sequence_number": n} for n, e in enumerate(out)]


def sent(data: list[bytes]) -> list[Json]:
    return [json.loads(b.decode().split("data: ", 1)[1]) for b in data]


def test_a_stream_passes_text_at_once_holds_calls_and_closes_with_what_it_streamed() -> None:
    stream = DIALECT.stream(request(stream=True))
    first = answer(call(1, "prod"))
    said = [e for ev in events(first) for e in sent(stream.add(ev))]
    assert [e["type"] for e in said] == ["response.created", "response.in_progress"]  # the call is held
    read = stream.answer()
    stream.turn()
    second = {**answer({**TEXT, "id": "msg_2"}, call(2, "api")), "id": "resp_2"}
    said += [e for ev in events(second) for e in sent(stream.add(ev))]
    assert {e.get("output_index") for e in said[2:]} == {0}  # the text item, re-indexed
    later = stream.answer()
    said += sent(stream.close(reply(later, [(later.calls[0], {"service": "api-canary"})])))
    for event in said:
        EVENT.validate_python(event)
    numbers = [e["sequence_number"] for e in said]
    assert numbers == list(range(len(said)))
    completed = said[-1]["response"]
    assert completed["id"] == "resp_1" and [i["type"] for i in completed["output"]] == ["message", "function_call"]
    assert [e["type"] for e in said[-5:-1]] == ["response.output_item.added", "response.function_call_arguments.delta",
                                                "response.function_call_arguments.done", "response.output_item.done"]
    assert said[-2]["output_index"] == 1 and read.calls[0].arguments == {"service": "prod"}
    assert DIALECT.offer(request(previous_response_id="resp_1"), "m", [])["previous_response_id"] == "resp_2"


def test_a_failed_stream_is_an_upstream_error() -> None:
    stream = DIALECT.stream(request(stream=True))
    with pytest.raises(ModelUpstreamError, match="overloaded"):
        stream.add({"type": "response.failed", "response": {"error": {"message": "overloaded"}}})
    assert json.loads(stream.error("model-upstream", "gone").decode().split("data: ")[1])["type"] == "error"
