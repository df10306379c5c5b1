"""Every policy action end to end, through MCP and REST, on the shared gateway (see MAIN_POLICY)."""

from __future__ import annotations

import json

import pytest
from mcp import MCPError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TERMINATED = "This session has been ended by policy."


# --- allow -----------------------------------------------------------------------------------------


async def test_allow_returns_the_tool_result_unchanged_over_mcp(mcp_alice, shared_gateway, call_id):
    cid = call_id()
    result = await mcp_alice.call("up_echo", {"text": "hello there"}, call_id=cid)

    assert result.is_error is False
    assert [(b.type, b.text) for b in result.content] == [("text", "hello there")]
    assert result.structured_content == {"result": "hello there"}
    assert result.meta == {"gateway/call_id": cid, "gateway/decision": "allow"}
    event = shared_gateway.audit_event(cid)
    assert event["verdict"] == "allow"
    assert event["upstream_outcome"] == {"status": "ok", "is_error": False}


async def test_allow_returns_the_tool_result_unchanged_over_rest(shared_gateway, rest, rest_call, http_api):
    body = await rest_call(rest(shared_gateway), "web_get_item", {"item_id": "it-7?admin=1", "verbose": True})

    assert body["_status"] == 200
    assert (body["decision"], body["is_error"]) == ("allow", False)
    # the path parameter is percent-encoded: it cannot add a query parameter
    assert body["structured"] == {"id": "it-7?admin=1", "query": {"verbose": "true"}}
    [seen] = http_api.seen("it-7")
    assert seen["raw_path"] == "/items/it-7%3Fadmin%3D1"
    assert (seen["method"], seen["query"]) == ("GET", {"verbose": "true"})


async def test_allow_sends_body_and_query_arguments_where_the_http_tool_says(shared_gateway, rest, rest_call,
                                                                            http_api):
    client = rest(shared_gateway)
    created = await rest_call(client, "web_create_item", {"name": "widget-31", "qty": 3})
    found = await rest_call(client, "web_search", {"q": "widget-32", "limit": 2})

    assert created["structured"] == {"created": {"name": "widget-31", "qty": 3}}
    [post] = http_api.seen("widget-31")
    assert (post["method"], post["path"], post["query"], post["body"]) == ("POST", "/items", {}, {"name": "widget-31",
                                                                                                  "qty": 3})
    assert found["structured"] == {"query": {"q": "widget-32", "limit": "2"}}
    [get] = http_api.seen("widget-32")
    assert (get["method"], get["body"]) == ("GET", None)


async def test_allow_keeps_the_upstream_is_error_of_an_mcp_tool(mcp_alice, shared_gateway, call_id):
    cid = call_id()
    result = await mcp_alice.call("up_fail", {}, call_id=cid)

    assert result.is_error is True
    assert result.content[0].text == "Error executing tool fail"  # the upstream's own text, kept
    assert result.meta["gateway/decision"] == "allow"
    assert shared_gateway.audit_event(cid)["upstream_outcome"] == {"status": "ok", "is_error": True}


async def test_allow_keeps_the_upstream_is_error_of_an_http_tool(shared_gateway, rest, rest_call):
    body = await rest_call(rest(shared_gateway), "web_boom")

    assert (body["_status"], body["decision"], body["is_error"]) == (200, "allow", True)
    assert body["content"][0]["text"].startswith("HTTP 500: ")
    assert "the widget store is on fire" in body["content"][0]["text"]


# --- reject ----------------------------------------------------------------------------------------


def _assert_no_internals(text: str) -> None:
    for internal in ("main/", "no-forbidden-echo", "up_echo", "upstream", "rule"):
        assert internal not in text


async def test_reject_is_an_error_with_the_rules_message_over_mcp(mcp_alice, shared_gateway, call_id):
    cid = call_id()
    result = await mcp_alice.call("up_echo", {"text": "forbidden"}, call_id=cid)

    assert result.is_error is True
    assert [b.text for b in result.content] == ["Echoing that word is not allowed."]
    assert result.meta == {"gateway/call_id": cid, "gateway/decision": "reject"}
    _assert_no_internals(json.dumps(result.model_dump(mode="json")))
    event = shared_gateway.audit_event(cid)  # the rule is named in the audit event only
    assert event["decided_by"] == ["main/no-forbidden-echo"]
    assert event["upstream_outcome"] == {"status": "not_called"}


async def test_reject_is_an_error_with_the_rules_message_over_rest(shared_gateway, rest, rest_call):
    body = await rest_call(rest(shared_gateway), "up_echo", {"text": "forbidden"})

    assert (body["_status"], body["decision"], body["is_error"]) == (200, "reject", True)
    assert body["content"] == [{"type": "text", "text": "Echoing that word is not allowed."}]
    _assert_no_internals(json.dumps({k: v for k, v in body.items() if k != "call_id"}))


# --- skip ------------------------------------------------------------------------------------------


async def test_skip_answers_for_the_tool_without_calling_it(mcp_alice, shared_gateway, call_id, rest, rest_call):
    cid = call_id()
    result = await mcp_alice.call("up_echo", {"text": "skip me"}, call_id=cid)

    assert result.is_error is False
    assert result.structured_content == {"result": "dry run"}
    assert json.loads(result.content[0].text) == {"result": "dry run"}
    assert result.meta["gateway/skipped"] is True
    assert result.meta["gateway/decision"] == "skip"
    assert shared_gateway.audit_event(cid)["upstream_outcome"] == {"status": "not_called"}

    body = await rest_call(rest(shared_gateway), "up_echo", {"text": "skip me"})
    assert (body["is_error"], body["structured"], body["meta"]["gateway/skipped"]) == (
        False, {"result": "dry run"}, True)


# --- rewrite ---------------------------------------------------------------------------------------


async def test_rewrite_runs_the_tool_with_the_new_arguments(mcp_alice, shared_gateway, call_id):
    cid = call_id()
    result = await mcp_alice.call("up_echo", {"text": "rw:abc"}, call_id=cid)

    assert result.is_error is False
    assert result.content[0].text == "rewritten rw:abc"  # echo shows what it received
    assert result.meta["gateway/rewritten"] is True
    event = shared_gateway.audit_event(cid)
    assert event["original_args"] == {"text": "rw:abc"}
    assert event["final_args"] == {"text": "rewritten rw:abc"}
    assert event["verdict"] == "allow"


async def test_rewrite_over_rest(shared_gateway, rest, rest_call, call_id):
    cid = call_id()
    body = await rest_call(rest(shared_gateway), "up_echo", {"text": "rw:rest"}, call_id=cid)

    assert (body["call_id"], body["is_error"], body["content"][0]["text"]) == (cid, False, "rewritten rw:rest")
    assert shared_gateway.audit_event(cid)["final_args"] == {"text": "rewritten rw:rest"}


async def test_response_rewrite_redacts_the_result(mcp_alice):
    result = await mcp_alice.call("up_secret")

    assert result.is_error is False
    assert result.content[0].text == "key [REDACTED] belongs to ops@example.com"
    assert "AKIA" not in json.dumps(result.model_dump(mode="json"))


# --- terminate -------------------------------------------------------------------------------------


async def test_terminate_ends_this_mcp_session_only(shared_gateway, connect_mcp, call_id):
    async with connect_mcp(shared_gateway, "alice") as ended, connect_mcp(shared_gateway, "alice") as other:
        first = await ended.call("up_echo", {"text": "terminate"})
        assert first.is_error is True
        # no run id named: the run is implicit, so its operator is also told how to start a new one
        assert first.content[0].text.startswith(TERMINATED) and "X-Gateway-Session" in first.content[0].text
        assert first.meta["gateway/terminated"] is True
        assert first.meta["gateway/decision"] == "terminate"

        cid = call_id()
        for tool, args in (("up_echo", {"text": "hello"}), ("up_add", {"a": 1, "b": 2}), ("web_boom", {})):
            later = await ended.call(tool, args, call_id=cid if tool == "up_echo" else None)
            assert later.is_error is True
            assert [b.text for b in later.content] == [first.content[0].text]
            assert later.meta["gateway/terminated"] is True
        event = shared_gateway.audit_event(cid)
        assert (event["verdict"], event["upstream_outcome"]) == ("terminated", {"status": "not_called"})
        assert event["session"].startswith("implicit-")  # the MCP session is no run id (docs/runs.md)

        still = await other.call("up_echo", {"text": "hello"})
        assert (still.is_error, still.content[0].text) == (False, "hello")
        assert other.session_id != ended.session_id


async def test_terminate_ends_this_rest_session_only(shared_gateway, rest, rest_call):
    ended, other = rest(shared_gateway), rest(shared_gateway)

    first = await rest_call(ended, "up_echo", {"text": "terminate"})
    later = await rest_call(ended, "up_add", {"a": 1, "b": 2})
    still = await rest_call(other, "up_add", {"a": 1, "b": 2})

    assert (first["is_error"], first["content"][0]["text"], first["meta"]["gateway/terminated"]) == (
        True, TERMINATED, True)
    assert (later["is_error"], later["decision"], later["content"][0]["text"]) == (True, "terminated", TERMINATED)
    assert (still["is_error"], still["structured"]) == (False, {"result": 3})


# --- unknown tools ---------------------------------------------------------------------------------


async def test_unknown_tool_is_a_protocol_error_naming_only_the_requested_name(mcp_alice):
    with pytest.raises(MCPError) as caught:
        await mcp_alice.call("up_nonexistent", {"text": "x"})

    assert caught.value.code == -32602
    assert caught.value.message == "Unknown tool: up_nonexistent"
    assert caught.value.data is None


async def test_unknown_tool_over_rest_is_a_404(shared_gateway, rest):
    response = await rest(shared_gateway).post("/v1/tools/up_nonexistent/invoke", json={"arguments": {}})

    assert response.status_code == 404
    assert response.json() == {"error": {"code": "unknown-tool", "message": "Unknown tool: up_nonexistent"}}
