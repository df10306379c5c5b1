"""Resources and prompts of a third-party MCP server (@modelcontextprotocol/server-everything over stdio)
through the gateway, in both protocol eras, compared with what a direct connection gets."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from raw_mcp import RawMcp
from thirdparty import server_everything

from gateway.frontends.mcp.resources import REFUSED

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

MODES = pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])

ARCHITECTURE = "demo://resource/static/document/architecture.md"
POLICY = """
    policy: everything
    rules:
      - id: no-text-resource-13
        resources: ["gateway://ev/demo://resource/dynamic/text/*"]
        when: args.resourceId == "13"
        action: reject
        message: resource 13 is off limits
      - id: no-weather-in-hell
        prompts: [ev_args-prompt]
        when: args.city == "Hell"
        action: reject
        message: not that city
      - id: documents-for-alice
        resources: ["gateway://ev/demo://resource/static/document/structure.md"]
        prompts: [ev_resource-prompt]
        when: principal.id != "alice"
        action: reject
"""


async def _direct() -> dict[str, Any]:
    node, *args = server_everything()
    async with Client(StdioServerParameters(command=node, args=args), mode="legacy") as client:
        return {
            "resources": (await client.list_resources()).resources,
            "templates": (await client.list_resource_templates()).resource_templates,
            "prompts": (await client.list_prompts()).prompts,
            "architecture": await client.read_resource(ARCHITECTURE),
            "args-prompt": await client.get_prompt("args-prompt", {"city": "Paris"}),
        }


def _subscribe(uri: str) -> types.SubscribeRequest:
    """resources/subscribe (the SDK's method for it warns that 2026-07-28 removed it: tests fail on warnings)."""
    return types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))


async def _gateway(start_gateway: Any, configs: Any) -> Any:
    return await start_gateway(configs.base(configs.everything_upstream("ev")), {"all.yaml": POLICY})


@MODES
async def test_everything_resources_and_prompts_are_listed_namespaced_and_read_like_directly(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    direct = await _direct()
    gateway = await _gateway(start_gateway, configs)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        resources = (await conn.client.list_resources()).resources
        templates = (await conn.client.list_resource_templates()).resource_templates
        prompts = (await conn.client.list_prompts()).prompts
        read = await conn.client.read_resource(f"gateway://ev/{ARCHITECTURE}")
        dynamic = await conn.client.read_resource("gateway://ev/demo://resource/dynamic/text/7")
        prompt = await conn.client.get_prompt("ev_args-prompt", {"city": "Paris"})
    assert len(direct["resources"]) == 7
    assert [(r.uri, r.name, r.mime_type) for r in resources] == [
        (f"gateway://ev/{r.uri}", r.name, r.mime_type) for r in direct["resources"]]
    assert [t.uri_template for t in templates] == [f"gateway://ev/{t.uri_template}" for t in direct["templates"]]
    assert {p.name: p.arguments for p in prompts} == {f"ev_{p.name}": p.arguments for p in direct["prompts"]}
    assert {p.name for p in prompts} >= {"ev_simple-prompt", "ev_args-prompt", "ev_completable-prompt",
                                         "ev_resource-prompt"}
    assert [c.text for c in read.contents] == [c.text for c in direct["architecture"].contents]  # type: ignore[union-attr]
    assert [c.uri for c in read.contents] == [f"gateway://ev/{ARCHITECTURE}"]
    assert [c.uri for c in dynamic.contents] == ["gateway://ev/demo://resource/dynamic/text/7"]
    assert prompt.messages == direct["args-prompt"].messages


@MODES
async def test_everything_reads_and_gets_under_policy(mode: str, start_gateway: Any, configs: Any,
                                                      connect_mcp: Any) -> None:
    gateway = await _gateway(start_gateway, configs)
    structure = "gateway://ev/demo://resource/static/document/structure.md"
    async with connect_mcp(gateway, "alice", mode=mode) as alice, connect_mcp(gateway, "bob", mode=mode) as bob:
        with pytest.raises(MCPError) as read:
            await alice.client.read_resource("gateway://ev/demo://resource/dynamic/text/13")
        with pytest.raises(MCPError) as got:
            await alice.client.get_prompt("ev_args-prompt", {"city": "Hell"})
        alice_sees = {r.uri for r in (await alice.client.list_resources()).resources}
        alice_reads = await alice.client.read_resource(structure)
        bob_sees = {r.uri for r in (await bob.client.list_resources()).resources}
        bob_prompts = {p.name for p in (await bob.client.list_prompts()).prompts}
        with pytest.raises(MCPError) as hidden:
            await bob.client.read_resource(structure)
        with pytest.raises(MCPError) as unknown:
            await bob.client.read_resource("gateway://ev/demo://resource/static/document/nothing.md")
        with pytest.raises(MCPError) as hidden_prompt:
            await bob.client.get_prompt("ev_resource-prompt", {"resourceType": "Text", "resourceId": "1"})
    assert (read.value.code, read.value.message) == (REFUSED, "resource 13 is off limits")
    assert (got.value.code, got.value.message) == (REFUSED, "not that city")
    assert structure in alice_sees and structure not in bob_sees and len(bob_sees) == 6
    assert alice_reads.contents[0].uri == structure
    assert "ev_resource-prompt" not in bob_prompts and "ev_args-prompt" in bob_prompts
    assert (hidden.value.code, hidden.value.message) == (-32602, f"Unknown resource: {structure}")
    assert (unknown.value.code, unknown.value.message) == (
        -32602, "Unknown resource: gateway://ev/demo://resource/static/document/nothing.md")
    assert (hidden_prompt.value.code, hidden_prompt.value.message) == (-32602, "Unknown prompt: ev_resource-prompt")
    events = [e for e in gateway.audit_events() if e["event"] in ("resource.outcome", "prompt.outcome")]
    assert {(e["principal"]["id"], e["method"], e["verdict"], tuple(e["decided_by"])) for e in events} == {
        ("alice", "resources/read", "reject", ("everything/no-text-resource-13",)),
        ("alice", "prompts/get", "reject", ("everything/no-weather-in-hell",)),
        ("alice", "resources/read", "allow", ()),
        ("bob", "resources/read", "unknown", ()),  # hidden
        ("bob", "resources/read", "allow", ()),  # allowed, but the server knows no such document
        ("bob", "prompts/get", "unknown", ()),
    }
    missing = next(e for e in events if e["principal"]["id"] == "bob" and e["verdict"] == "allow")
    assert missing["upstream_outcome"] == {"status": "not_found"}
    refused = next(e for e in events if e["decided_by"] == ["everything/no-text-resource-13"])
    assert refused["arguments"] == {"resourceId": "13"} and refused["upstream"] == "ev"
    assert refused["upstream_name"] == "demo://resource/dynamic/text/13"


async def test_everything_resource_updates_reach_the_subscribed_client(start_gateway: Any, configs: Any,
                                                                       connect_mcp: Any) -> None:
    gateway = await _gateway(start_gateway, configs)
    uri = f"gateway://ev/{ARCHITECTURE}"
    async with connect_mcp(gateway, "alice", mode="legacy") as conn, \
            connect_mcp(gateway, "bob", mode="legacy") as other:
        await conn.client.session.send_request(_subscribe(uri), types.EmptyResult)
        # The server sends an update for each subscribed URI as soon as updates are switched on.
        assert not (await conn.client.call_tool("ev_toggle-subscriber-updates")).is_error
        with anyio.fail_after(10):
            while not any(isinstance(n, types.ResourceUpdatedNotification) for n in conn.notifications):
                await anyio.sleep(0.05)
        updates = [n.params.uri for n in conn.notifications if isinstance(n, types.ResourceUpdatedNotification)]
        await conn.client.session.send_request(
            types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)), types.EmptyResult)
    assert set(updates) == {uri}
    assert not any(isinstance(n, types.ResourceUpdatedNotification) for n in other.notifications)
    subscribed = [e for e in gateway.audit_events() if e["event"] == "resource.subscribe"]
    assert [(e["name"], e["verdict"]) for e in subscribed] == [(uri, "allow")]


async def test_a_hidden_resource_is_answered_like_an_unknown_one_to_subscribe_read_and_unsubscribe(
        start_gateway: Any, configs: Any, keys: dict[str, str]) -> None:
    gateway = await _gateway(start_gateway, configs)
    hidden = "gateway://ev/demo://resource/static/document/structure.md"
    unknown = "gateway://ev/demo://resource/static/document/structurx.md"  # this server subscribes to anything
    instance = "gateway://ev/demo://resource/dynamic/text/7"  # not listed: the gateway cannot tell it exists
    async with RawMcp.open(gateway.url, keys["bob"]) as bob:
        answers = {method: [await bob.answer_about(method, uri) for uri in (hidden, unknown, instance)]
                   for method in ("resources/subscribe", "resources/unsubscribe", "resources/read")}
    to_hidden, to_unknown, to_instance = answers["resources/subscribe"]
    assert to_hidden == to_unknown == to_instance
    assert json.loads(to_hidden[2])["error"] == {"code": -32602, "message": "Unknown resource: <uri>"}
    to_hidden, to_unknown, to_instance = answers["resources/unsubscribe"]
    assert to_hidden == to_unknown == to_instance and json.loads(to_hidden[2])["result"] == {}
    to_hidden, to_unknown, _ = answers["resources/read"]
    assert to_hidden == to_unknown
    subscribed = [e for e in gateway.audit_events() if e["event"] == "resource.subscribe"]
    assert [e["verdict"] for e in subscribed] == ["unknown"] * 3



@MODES
async def test_resource_links_in_tool_results_are_read_through_the_gateway(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await _gateway(start_gateway, configs)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        links = await conn.client.call_tool("ev_get-resource-links", {"count": 2})
        embedded = await conn.client.call_tool("ev_get-resource-reference", {"resourceType": "Text", "resourceId": 2})
        uris = [b.uri for b in links.content if isinstance(b, types.ResourceLink)]
        read = await conn.client.read_resource(uris[-1])
    assert uris == ["gateway://ev/demo://resource/dynamic/blob/1", "gateway://ev/demo://resource/dynamic/text/2"]
    assert [b.resource.uri for b in embedded.content if isinstance(b, types.EmbeddedResource)] == [
        "gateway://ev/demo://resource/dynamic/text/2"]
    assert [c.uri for c in read.contents] == [uris[-1]]
    assert "Resource 2" in read.contents[0].text  # type: ignore[union-attr]
