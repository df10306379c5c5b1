"""What agents see in tools/list: exposed names, annotations and schemas passed through, name
collisions refused at startup, and tools an upstream adds at runtime."""

from __future__ import annotations

import mcp_types as types
import pytest

from gateway.app import build_app
from gateway.config.load import load_config
from gateway.core.errors import ConfigError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

UP_TOOLS = {"echo", "add", "slow", "fail", "secret", "delete_thing", "pid", "register_extra", "weather", "steps",
            "linger", "register_note", "research", "ask_model", "ask_user", "ask_roots", "ask_roots_briefly",
            "ask_model_later", "chatter"}
API_TOOLS = {"get_item", "create_item", "delete_item", "search", "boom", "nap"}


async def test_exposed_names_are_prefixed_by_upstream_or_override_or_not_at_all(mcp_alice):
    names = await mcp_alice.tool_names()

    # "up": the upstream name is the prefix; "api": prefix "web"; "ghost": an empty prefix
    assert names == {f"up_{t}" for t in UP_TOOLS} | {f"web_{t}" for t in API_TOOLS} | {"ping"}


async def test_annotations_schemas_and_titles_pass_through_to_mcp(mcp_alice):
    tools = {t.name: t for t in (await mcp_alice.client.list_tools(cache_mode="refresh")).tools}

    delete = tools["up_delete_thing"]  # from the MCP upstream
    assert delete.annotations is not None
    assert (delete.annotations.destructive_hint, delete.annotations.read_only_hint) == (True, False)
    assert delete.title == "Delete a thing"
    assert delete.input_schema["properties"] == {"id": {"title": "Id", "type": "string"}}
    get_item = tools["web_get_item"]  # from the http upstream's config
    assert get_item.annotations == types.ToolAnnotations(title="Get an item", read_only_hint=True,
                                                         destructive_hint=False)
    assert get_item.input_schema["required"] == ["item_id"]
    assert get_item.description == "One item."
    assert tools["up_echo"].annotations is None


async def test_annotations_pass_through_to_rest(shared_gateway, rest):
    tools = {t["name"]: t for t in (await rest(shared_gateway).get("/v1/tools")).json()["tools"]}

    assert tools["up_delete_thing"]["annotations"] == {"title": "Delete a thing", "readOnlyHint": False,
                                                       "destructiveHint": True}
    assert (tools["up_delete_thing"]["upstream"], tools["web_search"]["upstream"]) == ("up", "api")


async def test_a_name_collision_stops_the_gateway_from_starting(tmp_path, configs, http_api):
    config = configs.base(configs.http_upstream("one", http_api.url, prefix="x"),
                          configs.http_upstream("two", http_api.url, prefix="x"))
    app = build_app(load_config(configs.write(tmp_path, config, {"p.yaml": "policy: p\nrules: []\n"})))

    with pytest.raises(ConfigError) as caught:
        async with app.router.lifespan_context(app):
            pass

    message = str(caught.value)
    assert "tool name 'x_get_item' is exposed by both one and two" in message
    assert "give one upstream a different prefix" in message


async def test_a_tool_added_upstream_appears_and_clients_are_told(start_gateway, configs, connect_mcp, until):
    gateway = await start_gateway(configs.base(configs.mcp_upstream("up")), {"p.yaml": "policy: p\nrules: []\n"})
    async with connect_mcp(gateway, "alice") as conn:
        assert "up_extra" not in await conn.tool_names()

        registered = await conn.call("up_register_extra")
        assert registered.content[0].text == "registered"

        async def listed() -> bool:
            return "up_extra" in await conn.tool_names()

        async def told() -> bool:
            return any(isinstance(m, types.ToolListChangedNotification) for m in conn.notifications)

        await until(listed)
        await until(told)
        extra = await conn.call("up_extra", {"text": "new"})
        assert (extra.is_error, extra.content[0].text) == (False, "extra:new")
