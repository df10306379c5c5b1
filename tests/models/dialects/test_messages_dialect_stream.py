"""gateway/models/dialects/messages_stream.py: one agent stream over several model turns, as the SDK reads it.

The upstream events are the API's own (each validated with the SDK's ``RawMessageStreamEvent``), and so is every
event the agent gets; the agent's stream is then checked the way ``messages.stream`` accumulates it: one
``message_start``, block indexes 0, 1, 2, ... each started before its deltas, one ``message_delta``, the end.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from gateway.core.errors import ModelUpstreamError
from gateway.models.dialects.base import Reply
from gateway.models.dialects.messages import DIALECT
from gateway.models.dialects.messages_stream import MessagesStream

Json = dict[str, Any]
EVENT = TypeAdapter(RawMessageStreamEvent)


def upstream(*blocks: Json, stop: str = "tool_use", msg: str = "msg_1") -> list[Json]:
    """The events of one streamed answer (tool inputs in two pieces)."""
    events: list[Json] = [{"type": "message_start", "message": {
        "id": msg, "type": "message", "role": "assistant", "model": "claude-x", "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}, {"type": "ping"}]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events += [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]}}]
        else:
            text = block.get("raw", json.dumps(block["input"]))
            events += [{"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}},
                       *({"type": "content_block_delta", "index": index,
                          "delta": {"type": "input_json_delta", "partial_json": part}}
                         for part in (text[:3], text[3:]))]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 4}}, {"type": "message_stop"}]
    for event in events:
        if event["type"] != "ping":
            EVENT.validate_python(event)
    return events


def read(sent: list[bytes]) -> list[Json]:
    """The agent's events, each checked: its ``event:`` line names its type and the SDK's types accept it."""
    out = []
    for raw in sent:
        head, data = raw.decode().rstrip("\n").split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        if event["type"] != "ping":
            EVENT.validate_python(event)
        out.append(event)
    return out


def turn(stream: MessagesStream, events: list[Json]) -> list[Json]:
    stream.turn()
    return read([b for e in events for b in stream.add(e)])


def use(call_id: str, service: str, **extra: Any) -> Json:
    return {"type": "tool_use", "id": call_id, "name": "deploy", "input": {"service": service}, **extra}


def assert_well_formed(events: list[Json]) -> None:
    """What the SDK's accumulation relies on."""
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1
    assert kinds[-2:] == ["message_delta", "message_stop"] and kinds.count("message_delta") == 1
    started = [e["index"] for e in events if e["type"] == "content_block_start"]
    assert started == list(range(len(started)))
    for position, event in enumerate(events):
        if event["type"] in ("content_block_delta", "content_block_stop"):
            opened = [e["index"] for e in events[:position] if e["type"] == "content_block_start"]
            assert opened and opened[-1] == event["index"]


def test_text_streams_at_once_calls_wait_for_the_decision_and_indexes_run_over_every_turn() -> None:
    stream = MessagesStream("claude-x")
    first = turn(stream, upstream({"type": "text", "text": "Trying prod."}, use("toolu_a", "prod")))
    assert [e["type"] for e in first] == ["message_start", "ping", "content_block_start", "content_block_delta",
                                          "content_block_stop"]  # the tool_use block is held
    answered = stream.answer()
    assert [(c.id, c.arguments) for c in answered.calls] == [("toolu_a", {"service": "prod"})]
    assert answered.raw["content"][1]["input"] == {"service": "prod"} and answered.usage == {"input_tokens": 10,
                                                                                             "output_tokens": 4}
    second = turn(stream, upstream({"type": "text", "text": "Then api."}, use("toolu_b", "api"),
                                   use("toolu_c", "db"), msg="msg_2"))
    assert [e["type"] for e in second] == ["ping", "content_block_start", "content_block_delta",
                                           "content_block_stop"]  # no second message_start
    assert {e["index"] for e in second if "index" in e} == {1}
    last = stream.answer()
    usage = DIALECT.add_usage(DIALECT.add_usage(None, answered.usage), last.usage)
    closing = read(stream.close(Reply("claude-x", last, [(last.calls[0], {"service": "api-canary"})], None, usage,
                                      {"run": "r", "model_requests": 2, "calls": []})))
    everything = [*first, *second, *closing]
    assert_well_formed(everything)
    start, delta, stop, finish, _ = closing
    assert (start["index"], start["content_block"]) == (2, {"type": "tool_use", "id": "toolu_b", "name": "deploy",
                                                           "input": {}})
    assert json.loads(delta["delta"]["partial_json"]) == {"service": "api-canary"} and stop["index"] == 2
    assert finish["delta"]["stop_reason"] == "tool_use" and finish["gateway"]["model_requests"] == 2
    assert finish["usage"] == {"input_tokens": 20, "output_tokens": 8}


def test_a_gateway_text_ends_the_stream_even_when_the_model_was_never_asked() -> None:
    stream = MessagesStream("claude-x")
    events = read(stream.close(Reply("claude-x", None, [], "This run was terminated.", None, {"run": "r"})))
    assert_well_formed(events)
    assert events[0]["message"]["model"] == "claude-x"
    assert events[2]["delta"] == {"type": "text_delta", "text": "This run was terminated."}
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


def test_streamed_arguments_that_are_not_json_refuse_the_call_and_never_go_back_as_sent() -> None:
    stream = MessagesStream("claude-x")
    turn(stream, upstream(use("toolu_a", "x", raw="{not json")))
    [call] = stream.answer().calls
    assert call.refused is not None and "not valid JSON" in call.refused
    assert call.raw["input"] == {}


@pytest.mark.parametrize("event", [
    {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
    {"type": "content_block_start", "content_block": {"type": "text", "text": ""}},
], ids=["never-started", "no-index"])
def test_an_event_the_stream_cannot_place_is_a_bad_answer(event: Json) -> None:
    stream = MessagesStream("claude-x")
    stream.turn()
    with pytest.raises(ModelUpstreamError):
        stream.add(event)


def test_the_error_event_is_the_one_the_sdk_raises_on() -> None:
    raw = MessagesStream("m").error("model-upstream", "the model upstream failed")
    assert raw.startswith(b"event: error\n")
    assert json.loads(raw.split(b"data: ")[1])["error"]["type"] == "api_error"


def test_thinking_and_server_tool_blocks_stream_through_and_are_kept_for_the_next_request() -> None:
    stream = MessagesStream("claude-x")
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                              "model": "claude-x", "content": [], "stop_reason": None,
                                              "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1,
                                                                               "cache_read_input_tokens": 2}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                      "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Prod? "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "No."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"query": "status"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {**use("toolu_a", "prod"), "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"service": "prod"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 9}}]
    for event in events:
        EVENT.validate_python(event)
    sent = turn(stream, events)
    assert [(e["type"], e.get("index")) for e in sent][1:] == [
        ("content_block_start", 0), *[("content_block_delta", 0)] * 3, ("content_block_stop", 0),
        ("content_block_start", 1), ("content_block_delta", 1), ("content_block_stop", 1)]
    answer = stream.answer()
    thinking, server, call = answer.raw["content"]
    assert thinking == {"type": "thinking", "thinking": "Prod? No.", "signature": "sig=="}
    assert server["input"] == {"query": "status"} and [c.id for c in answer.calls] == ["toolu_a"]
    assert call["input"] == {"service": "prod"}
    assert answer.usage == {"input_tokens": 3, "output_tokens": 9, "cache_read_input_tokens": 2}
    # the exchange keeps the thinking block, signed, as the API wants it back with the tool results
    assert DIALECT.exchange(answer, [])[0]["content"][0]["signature"] == "sig=="


def test_the_models_own_ending_keeps_its_stop_sequence() -> None:
    stream = MessagesStream("claude-x")
    events = upstream({"type": "text", "text": "Done. END"}, stop="stop_sequence")
    events[-2] = {**events[-2], "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"}}
    turn(stream, events)
    answer = stream.answer()
    finish = read(stream.close(Reply("claude-x", answer, [], None, answer.usage, {"run": "r"})))[-2]
    assert finish["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
