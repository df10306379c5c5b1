"""When things go wrong: upstreams down or slow, arguments that do not fit the schema.

A tool's own failure is its result (see test_actions); an upstream the gateway cannot reach or
that takes too long is "the tool failed" for the model, and the details go to the audit event only.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from gateway_harness import SHARED_CALL_TIMEOUT

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TOOL_FAILED = "The tool failed. Try again later or use another tool."


async def test_an_http_upstream_that_is_down_is_a_tool_failure(shared_gateway, rest, rest_call, call_id,
                                                                closed_port):
    cid = call_id()
    body = await rest_call(rest(shared_gateway), "ping", call_id=cid)

    assert (body["_status"], body["decision"], body["is_error"]) == (200, "tool_failed", True)
    assert body["content"] == [{"type": "text", "text": TOOL_FAILED}]
    assert str(closed_port) not in json.dumps(body)
    outcome = shared_gateway.audit_event(cid)["upstream_outcome"]
    assert outcome["status"] == "failed"
    assert f"127.0.0.1:{closed_port}" in outcome["error"]  # the details, for operators only


async def test_an_mcp_upstream_that_is_down_is_a_tool_failure_until_it_is_back(start_gateway, configs, rest,
                                                                                rest_call, call_id, tmp_path):
    down = tmp_path / "upstream-down"  # while this exists the upstream exits as soon as it is launched
    gateway = await start_gateway(
        configs.base(configs.mcp_upstream("up", env={"UPSTREAM_DOWN_FILE": str(down)}), limits={"call_timeout": 10}),
        {"p.yaml": "policy: p\nrules: []\n"})
    client = rest(gateway)
    pid = (await rest_call(client, "up_pid"))["structured"]["result"]

    down.touch()
    os.kill(pid, signal.SIGKILL)
    failures = [call_id(), call_id()]  # the call that finds the connection dead, then a failed relaunch
    for cid in failures:
        body = await rest_call(client, "up_echo", {"text": "anyone there?"}, call_id=cid)
        assert (body["decision"], body["content"]) == ("tool_failed", [{"type": "text", "text": TOOL_FAILED}])
        assert gateway.audit_event(cid)["upstream_outcome"]["status"] == "failed"
    assert gateway.audit_event(failures[0])["upstream_outcome"]["error"].startswith("up: ")
    # the dead connection was dropped, so the next call tried to launch the upstream again
    assert "cannot connect" in gateway.audit_event(failures[1])["upstream_outcome"]["error"]

    down.unlink()
    back = await rest_call(client, "up_echo", {"text": "back again"})
    assert (back["decision"], back["is_error"], back["structured"]) == ("allow", False, {"result": "back again"})
    assert (await rest_call(client, "up_pid"))["structured"]["result"] != pid


async def test_an_upstream_timeout_is_a_tool_failure_and_the_upstream_stays_usable(mcp_alice, shared_gateway,
                                                                                   call_id):
    cid = call_id()
    result = await mcp_alice.call("up_slow", {"seconds": 30}, call_id=cid)

    assert result.is_error is True
    assert [b.text for b in result.content] == [TOOL_FAILED]
    assert result.meta["gateway/decision"] == "tool_failed"
    event = shared_gateway.audit_event(cid)
    assert event["upstream_outcome"]["status"] == "failed"
    assert "timed out" in event["upstream_outcome"]["error"]
    timeout_ms = SHARED_CALL_TIMEOUT * 1000
    assert timeout_ms - 100 <= event["latency"]["upstream_ms"] < timeout_ms + 8_000  # the shared limits.call_timeout

    after = await mcp_alice.call("up_echo", {"text": "still here"})
    assert (after.is_error, after.content[0].text) == (False, "still here")


async def test_arguments_a_rewrite_broke_are_refused_naming_the_schema_problem(mcp_alice, shared_gateway, call_id):
    cid = call_id()
    result = await mcp_alice.call("up_add", {"a": 13, "b": 1}, call_id=cid)  # the rewrite sets b to "thirteen"

    assert result.is_error is True
    text = result.content[0].text
    assert text.startswith("The arguments do not match the tool's input schema: ")
    assert "argument `b` must be an integer, got a string" in text and "thirteen" not in text
    assert result.meta["gateway/decision"] == "invalid_arguments"
    event = shared_gateway.audit_event(cid)
    assert (event["original_args"], event["final_args"]) == ({"a": 13, "b": 1}, {"a": 13, "b": "thirteen"})
    assert event["upstream_outcome"] == {"status": "not_called"}

    fine = await mcp_alice.call("up_add", {"a": 12, "b": 1})
    assert (fine.is_error, fine.structured_content) == (False, {"result": 13})


async def test_arguments_the_caller_got_wrong_are_refused_before_the_upstream(shared_gateway, rest, rest_call,
                                                                              http_api):
    body = await rest_call(rest(shared_gateway), "web_create_item", {"name": "bad-qty-item", "qty": "many"})

    assert (body["decision"], body["is_error"]) == ("invalid_arguments", True)
    assert "argument `qty` must be an integer, got a string" in body["content"][0]["text"]
    assert "many" not in body["content"][0]["text"]  # the value is not repeated: the audit redacts only arguments
    assert http_api.seen("bad-qty-item") == []


async def test_a_wrongly_typed_argument_a_rule_reads_is_named_with_the_type_it_needs(mcp_alice, shared_gateway,
                                                                                    call_id):
    """``prefix-echo`` reads ``args.text.startsWith(...)``: an integer there made the rule fail to evaluate, and the
    model read "the policy rule main/prefix-echo could not be evaluated", which says nothing it can fix."""
    cid = call_id()
    result = await mcp_alice.call("up_echo", {"text": 5}, call_id=cid)

    text = result.content[0].text
    assert (result.is_error, result.meta["gateway/decision"]) == (True, "invalid_arguments"), text
    assert "argument `text` must be a string, got an integer" in text
    assert "could not be evaluated" not in text
    event = shared_gateway.audit_event(cid)
    assert (event["rules"], event["upstream_outcome"]) == ([], {"status": "not_called"})  # no rule saw the value

    fixed = await mcp_alice.call("up_echo", {"text": "5"})
    assert (fixed.is_error, fixed.content[0].text) == (False, "5")


async def test_a_rewrite_still_mends_a_missing_argument_before_the_schema_check(start_gateway, configs, connect_mcp):
    """Only the values sent are checked before policies: a required argument a rewrite adds is not refused."""
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": """
policy: p
rules:
  - id: b-defaults-to-one
    tools: [up_add]
    when: '!has(args.b)'
    action: rewrite
    rewrite:
      set: {b: '1'}
"""})
    async with connect_mcp(gateway, "alice") as conn:
        mended = await conn.call("up_add", {"a": 2})
        missing = await conn.call("up_add", {"b": 2})
    assert (mended.is_error, mended.structured_content) == (False, {"result": 3})
    assert missing.is_error and "argument `a` is required" in missing.content[0].text


async def test_arguments_over_the_size_limit_are_refused_before_the_upstream(start_gateway, configs, http_api, rest,
                                                                             rest_call):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url),
                                               limits={"max_argument_bytes": 200}),
                                  {"p.yaml": "policy: p\nrules: []\n"})
    client = rest(gateway)

    big = await rest_call(client, "api_search", {"q": "too-big-" + "x" * 300})
    small = await rest_call(client, "api_search", {"q": "small-enough"})

    assert (big["decision"], big["is_error"], big["content"][0]["text"]) == (
        "reject", True, "The arguments are too large.")
    assert http_api.seen("too-big-") == []
    assert (small["decision"], small["is_error"]) == ("allow", False)


async def test_an_http_upstreams_own_timeout_applies(start_gateway, configs, http_api, rest, rest_call, call_id):
    gateway = await start_gateway(
        configs.base(configs.http_upstream("api", http_api.url, options={"timeout": 1}), limits={"call_timeout": 10}),
        {"p.yaml": "policy: p\nrules: []\n"})
    cid = call_id()

    body = await rest_call(rest(gateway), "api_nap", {"seconds": 2, "tag": "own-timeout"}, call_id=cid)

    assert (body["decision"], body["content"][0]["text"]) == ("tool_failed", TOOL_FAILED)
    assert gateway.audit_event(cid)["latency"]["upstream_ms"] < 1_900
