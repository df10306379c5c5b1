"""Policies edited while the gateway runs: a good edit applies, a broken one is reported with its
position and the last good rules keep applying, and fixing it clears the errors."""

from __future__ import annotations

import textwrap

import pytest

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ALLOW_ALL = """
policy: p
rules:
  - id: allow-everything
    action: allow
"""

NO_WIDGETS = """
policy: p
rules:
  - id: no-widgets
    tools: [api_create_item]
    when: args.name.startsWith("widget")
    action: reject
    message: No more widgets.
"""

# The broken expression is on line 6 of the file (the text starts with a newline), columns 11-32.
BROKEN = """
policy: p
rules:
  - id: no-widgets
    tools: [api_create_item]
    when: args.name.startsWith(
    action: reject
"""

NO_GADGETS = NO_WIDGETS.replace("widget", "gadget").replace("No more gadgets", "No gadgets")


async def test_policy_edits_apply_while_running_and_broken_ones_do_not(start_gateway, configs, http_api, rest,
                                                                       rest_call, until):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), {"p.yaml": ALLOW_ALL})
    client = rest(gateway)
    policy_file = gateway.root / "policies" / "p.yaml"

    async def widget_refused() -> bool:
        body = await rest_call(client, "api_create_item", {"name": "widget-reload"})
        return body["is_error"] and body["content"][0]["text"] == "No more widgets."

    async def policies() -> dict:
        return (await client.get("/v1/policies")).json()

    first = await policies()
    assert not await widget_refused()

    policy_file.write_text(textwrap.dedent(NO_WIDGETS))
    await until(widget_refused, timeout=10)
    second = await policies()
    assert second["revision"] != first["revision"]
    assert second["errors"] == []

    policy_file.write_text(textwrap.dedent(BROKEN))

    async def errors() -> list:
        return (await policies())["errors"]

    [error] = await until(errors, timeout=10)
    assert (error["file"], error["line"], error["rule"], error["code"]) == ("policies/p.yaml", 6, "p/no-widgets",
                                                                             "cel-compile")
    assert 11 <= error["column"] <= 32
    assert error["severity"] == "error"
    assert (await policies())["revision"] == second["revision"]
    assert await widget_refused()  # the last good rules still apply

    policy_file.write_text(textwrap.dedent(NO_GADGETS))

    async def fixed() -> bool:
        return (await policies())["errors"] == []

    await until(fixed, timeout=10)
    assert not await widget_refused()
    gadget = await rest_call(client, "api_create_item", {"name": "gadget-reload"})
    assert (gadget["is_error"], gadget["content"][0]["text"]) == (True, "No gadgets.")
