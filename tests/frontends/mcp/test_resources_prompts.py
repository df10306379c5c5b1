"""Resources and prompts through the gateway, under policy, with our stdio test server in both protocol eras.

The upstream ``up`` has ``notes://public``, ``notes://secret``, the template ``notes://users/{user}`` and the
prompts ``greet`` and ``confidential``. Clients see ``gateway://up/<the upstream's URI>`` and ``up_<prompt>``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import RunningGateway, base_config, mcp_upstream, run_gateway, write_gateway
from mcp import MCPError

from gateway.frontends.mcp.resources import REFUSED
from gateway.pipeline.items import NOT_RECORDED

pytestmark = [pytest.mark.parametrize("mode", ["legacy", "2026-07-28"]), pytest.mark.session_loop]

PUBLIC = "gateway://up/notes://public"
SECRET = "gateway://up/notes://secret"

POLICY = """
    policy: items
    rules:
      - id: no-mallory-notes
        resources: ["gateway://up/notes://users/*"]
        when: args.user == "mallory"
        action: reject
        message: not mallory's notes
      - id: no-greeting-mallory
        prompts: [up_greet]
        when: args.name == "Mallory"
        action: reject
        message: do not greet Mallory
      - id: secrets-for-alice
        resources: ["gateway://up/notes://secret"]
        prompts: [up_confidential]
        when: principal.id != "alice"
        action: reject
      - id: tools-only
        tools: ["*"]
        action: reject
        when: principal.id == "nobody"
"""


async def _gateway(start_gateway: Any, configs: Any, policy: str = POLICY) -> Any:
    return await start_gateway(configs.base(configs.mcp_upstream("up")), {"items.yaml": policy})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def items(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    """One gateway with ``POLICY`` for the tests that change nothing, in both eras (the era is the client's):
    each start launches the stdio server, seconds of CPU. A test reads only the audit events it caused."""
    root = tmp_path_factory.mktemp("items-gateway")
    async with run_gateway(write_gateway(root, base_config(mcp_upstream("up")), {"items.yaml": POLICY})) as running:
        yield running


async def _refusal(call: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await call
    return caught.value


async def test_resources_templates_and_prompts_are_listed_under_gateway_names(
        mode: str, items: RunningGateway, connect_mcp: Any) -> None:
    gateway = items
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        resources = {r.uri: r for r in (await conn.client.list_resources()).resources}
        templates = [t.uri_template for t in (await conn.client.list_resource_templates()).resource_templates]
        prompts = {p.name: p for p in (await conn.client.list_prompts()).prompts}
    assert set(resources) == {PUBLIC, SECRET}
    assert resources[PUBLIC].title == "Public notes" and resources[PUBLIC].mime_type == "text/plain"
    assert templates == ["gateway://up/notes://users/{user}"]
    assert set(prompts) == {"up_greet", "up_confidential"}
    assert prompts["up_greet"].title == "Greeting"
    assert [a.name for a in prompts["up_greet"].arguments or []] == ["name"]


async def test_reads_and_gets_reach_the_owning_upstream(mode: str, items: RunningGateway, connect_mcp: Any) -> None:
    gateway = items
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        public = await conn.client.read_resource(PUBLIC)
        templated = await conn.client.read_resource("gateway://up/notes://users/ann")
        prompt = await conn.client.get_prompt("up_greet", {"name": "Ann"})
    assert [(c.uri, c.text) for c in public.contents] == [(PUBLIC, "the public notes")]  # type: ignore[union-attr]
    assert [(c.uri, c.text) for c in templated.contents] == [  # type: ignore[union-attr]
        ("gateway://up/notes://users/ann", "notes of ann")]
    assert prompt.messages[0].content.text == "Please greet Ann warmly."  # type: ignore[union-attr]


async def test_a_policy_refuses_a_read_and_a_get_and_the_client_reads_why(
        mode: str, items: RunningGateway, connect_mcp: Any) -> None:
    gateway, before = items, len(items.audit_events())
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        read = await _refusal(conn.client.read_resource("gateway://up/notes://users/mallory"))
        got = await _refusal(conn.client.get_prompt("up_greet", {"name": "Mallory"}))
        still = await conn.client.get_prompt("up_greet", {"name": "Bea"})
    assert (read.code, read.message) == (REFUSED, "not mallory's notes")
    assert (got.code, got.message) == (REFUSED, "do not greet Mallory")
    assert "Bea" in still.messages[0].content.text  # type: ignore[union-attr]
    events = [e for e in gateway.audit_events()[before:] if e["event"] in ("resource.outcome", "prompt.outcome")]
    refused_read = next(e for e in events if e["name"] == "gateway://up/notes://users/mallory")
    assert refused_read["verdict"] == "reject" and refused_read["decided_by"] == ["items/no-mallory-notes"]
    assert refused_read["upstream_outcome"] == {"status": "not_called"}
    assert refused_read["principal"]["id"] == "alice"
    refused_get = next(e for e in events if e["method"] == "prompts/get" and e["verdict"] == "reject")
    assert refused_get["arguments"] == {"name": "Mallory"} and refused_get["upstream"] == "up"
    allowed = next(e for e in events if e["method"] == "prompts/get" and e["verdict"] == "allow")
    assert allowed["arguments"] == {"name": "Bea"} and allowed["upstream_outcome"] == {"status": "ok"}


async def test_hidden_items_are_not_listed_for_bob_but_are_for_alice(mode: str, items: RunningGateway,
                                                                     connect_mcp: Any) -> None:
    gateway = items
    async with connect_mcp(gateway, "alice", mode=mode) as alice, connect_mcp(gateway, "bob", mode=mode) as bob:
        alice_sees = {r.uri for r in (await alice.client.list_resources()).resources}
        bob_sees = {r.uri for r in (await bob.client.list_resources()).resources}
        bob_prompts = {p.name for p in (await bob.client.list_prompts()).prompts}
        secret = await alice.client.read_resource(SECRET)
    assert SECRET in alice_sees and SECRET not in bob_sees and PUBLIC in bob_sees
    assert bob_prompts == {"up_greet"}
    assert secret.contents[0].text == "the secret notes"  # type: ignore[union-attr]


async def test_a_hidden_item_read_by_name_is_refused_exactly_like_an_unknown_one(
        mode: str, items: RunningGateway, connect_mcp: Any) -> None:
    gateway = items
    async with connect_mcp(gateway, "bob", mode=mode) as bob:
        hidden = await _refusal(bob.client.read_resource(SECRET))
        missing = await _refusal(bob.client.read_resource("gateway://up/notes://missing"))  # the upstream's "no"
        hidden_prompt = await _refusal(bob.client.get_prompt("up_confidential"))
        missing_prompt = await _refusal(bob.client.get_prompt("up_nothing"))
    assert (hidden.code, hidden.message) == (-32602, f"Unknown resource: {SECRET}")
    assert (missing.code, missing.message) == (-32602, "Unknown resource: gateway://up/notes://missing")
    assert (hidden_prompt.code, hidden_prompt.message) == (-32602, "Unknown prompt: up_confidential")
    assert (missing_prompt.code, missing_prompt.message) == (-32602, "Unknown prompt: up_nothing")
    assert "secret notes" not in str(gateway.audit_events())


async def test_a_uri_that_names_no_upstream_never_reaches_one(mode: str, items: RunningGateway,
                                                             connect_mcp: Any) -> None:
    gateway, before = items, len(items.audit_events())
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        for uri in ("notes://public", "gateway://other/notes://public", "gateway://up/", "gateway://up"):
            refused = await _refusal(conn.client.read_resource(uri))
            assert (refused.code, refused.message) == (-32602, f"Unknown resource: {uri}")
    unknown = [e for e in gateway.audit_events()[before:] if e.get("verdict") == "unknown"]
    assert len(unknown) == 4 and all(e["upstream"] is None for e in unknown)


async def test_tool_rules_do_not_decide_reads_and_request_kind_tells_them_apart(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    policy = """
        policy: kinds
        rules:
          - id: no-tools-for-bob
            tools: ["*"]
            when: principal.id == "bob"
            action: reject
            message: no tools for bob
          - id: bob-reads-nothing-but-calls-echo
            tools: [up_echo]
            resources: ["**"]
            when: principal.id == "bob" && request.kind == "resource" && request.method == "resources/read"
            action: reject
          - id: everything-for-alice
            when: principal.id == "alice" && request.kind != "tool"
            action: reject
            message: never applies to reads
    """
    gateway = await _gateway(start_gateway, configs, policy)
    async with connect_mcp(gateway, "alice", mode=mode) as alice, connect_mcp(gateway, "bob", mode=mode) as bob:
        read = await alice.client.read_resource(PUBLIC)  # the untargeted rule decides tools only
        echoed = await bob.client.call_tool("up_echo", {"text": "hi"})
        refused = await _refusal(bob.client.read_resource(PUBLIC))  # refused whatever: hidden
        bob_sees = (await bob.client.list_resources()).resources
        greeted = await bob.client.get_prompt("up_greet", {"name": "Ann"})  # no rule names prompts
    assert read.contents[0].text == "the public notes"  # type: ignore[union-attr]
    assert echoed.is_error and "no tools for bob" in echoed.content[0].text  # type: ignore[union-attr]
    assert (refused.code, refused.message) == (-32602, f"Unknown resource: {PUBLIC}") and bob_sees == []
    assert "Ann" in greeted.messages[0].content.text  # type: ignore[union-attr]


async def test_under_default_reject_only_allowed_items_are_listed_and_readable(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    policy = """
        policy: closed
        default: reject
        rules:
          - id: public-notes
            resources: ["gateway://up/notes://public"]
            action: allow
    """
    gateway = await _gateway(start_gateway, configs, policy)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        listed = [r.uri for r in (await conn.client.list_resources()).resources]
        prompts = (await conn.client.list_prompts()).prompts
        public = await conn.client.read_resource(PUBLIC)
        secret = await _refusal(conn.client.read_resource(SECRET))
    assert listed == [PUBLIC] and prompts == []
    assert public.contents[0].text == "the public notes"  # type: ignore[union-attr]
    assert (secret.code, secret.message) == (-32602, f"Unknown resource: {SECRET}")


async def test_a_conditional_default_reject_refuses_with_a_message(mode: str, start_gateway: Any, configs: Any,
                                                                  connect_mcp: Any) -> None:
    policy = """
        policy: closed
        default: reject
        rules:
          - id: greetings-for-ann
            prompts: [up_greet]
            when: args.name == "Ann"
            action: allow
    """
    gateway = await _gateway(start_gateway, configs, policy)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        names = [p.name for p in (await conn.client.list_prompts()).prompts]
        ann = await conn.client.get_prompt("up_greet", {"name": "Ann"})
        bea = await _refusal(conn.client.get_prompt("up_greet", {"name": "Bea"}))
    assert names == ["up_greet"]  # it might be allowed, so it is listed
    assert "Ann" in ann.messages[0].content.text  # type: ignore[union-attr]
    assert (bea.code, bea.message) == (REFUSED, "No policy allows this prompt request: up_greet.")


async def test_a_new_upstream_resource_is_listed_after_list_changed(mode: str, start_gateway: Any, configs: Any,
                                                                    connect_mcp: Any) -> None:
    gateway = await _gateway(start_gateway, configs)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        assert not (await conn.client.call_tool("up_register_note")).is_error
        extra = "gateway://up/notes://extra"
        for _ in range(400):  # up to 20 s on a loaded machine
            if extra in {r.uri for r in (await conn.client.list_resources(cache_mode="refresh")).resources}:
                break
            await anyio.sleep(0.05)
        else:
            raise AssertionError("notes://extra never listed")
        read = await conn.client.read_resource(extra)
        if mode == "legacy":  # the handshake era hears of it (2026-07-28: through subscriptions/listen)
            with anyio.fail_after(10):
                while not any(isinstance(n, types.ResourceListChangedNotification) for n in conn.notifications):
                    await anyio.sleep(0.05)
    assert read.contents[0].text == "the extra notes"  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
async def test_a_read_that_cannot_be_recorded_is_not_given(mode: str, start_gateway: Any, configs: Any,
                                                           connect_mcp: Any, tmp_path: Path) -> None:
    root = tmp_path / "gw"
    (root / "data").mkdir(parents=True)
    (root / "data" / "audit.jsonl").symlink_to("/dev/full")
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"items.yaml": POLICY}, root=root)
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        read = await _refusal(conn.client.read_resource(PUBLIC))
        got = await _refusal(conn.client.get_prompt("up_greet", {"name": "Ann"}))
    assert (read.code, read.message) == (REFUSED, NOT_RECORDED)
    assert (got.code, got.message) == (REFUSED, NOT_RECORDED)


async def test_an_upstream_that_fails_a_read_is_a_refusal_that_names_no_details(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any, tmp_path: Path) -> None:
    down = tmp_path / "upstream-down"  # while this exists the upstream exits as soon as it is launched
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up", env={"UPSTREAM_DOWN_FILE": str(down)})),
                                  {"items.yaml": POLICY})
    async with connect_mcp(gateway, "alice", mode=mode) as conn:
        pid = (await conn.client.call_tool("up_pid")).structured_content["result"]  # type: ignore[index]
        down.touch()
        os.kill(pid, signal.SIGKILL)
        failed = await _refusal(conn.client.read_resource(PUBLIC))
        down.unlink()
        back = await conn.client.read_resource(PUBLIC)  # the next read launches the upstream again
    assert (failed.code, failed.message) == (REFUSED, "The resource could not be read: its server failed. "
                                                      "Try again later.")
    assert back.contents[0].text == "the public notes"  # type: ignore[union-attr]
    event = next(e for e in gateway.audit_events() if e.get("upstream_outcome", {}).get("status") == "error")
    assert event["name"] == PUBLIC and event["upstream_outcome"]["error"].startswith("up: ")
