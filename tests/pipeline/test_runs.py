"""Agent runs (docs/runs.md): where a call's run id comes from, implicit runs per (principal, client)
that end after `runs.idle_timeout`, per-principal usage windows that no run id escapes, `call.iteration`,
and the admin API that lists, resets and ends runs. Real gateway on loopback, real REST and MCP clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.auth.keys import hash_key

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ADMIN_KEY = "carol-admin-key-90be"

RUNS = """
policy: runs
rules:
  - id: run-budget
    tools: [api_search]
    when: session.calls >= 2
    action: terminate
    message: This run has used its budget of 2 searches.
  - id: name-your-run
    tools: [api_get_item]
    when: session.implicit
    action: reject
    message: Name your run to read items.
  - id: third-step
    tools: [api_create_item]
    when: call.iteration >= 2
    action: reject
    message: Only two steps.
"""

WINDOW = """
policy: window
rules:
  - id: hourly-budget
    when: has(usage.hour) && usage.hour.calls >= 3
    action: reject
    message: This key has used its 3 calls this hour.
"""

BUDGET_TEXT = "This run has used its budget of 2 searches."


def _config(configs: Any, http_api: Any, **overrides: Any) -> dict[str, Any]:
    keys = [*configs.api_keys("alice", "bob"),
            {"principal": {"id": "carol"}, "sha256": hash_key(ADMIN_KEY), "admin": True}]
    return configs.base(configs.http_upstream("api", http_api.url), auth={"api_keys": keys}, **overrides)


@contextlib.asynccontextmanager
async def _rest(gateway: Any, keys: dict[str, str], who: str = "alice",
                **headers: str) -> AsyncIterator[httpx2.AsyncClient]:
    sent = {"Authorization": f"Bearer {keys[who] if who in keys else ADMIN_KEY}",
            **{k.replace("_", "-"): v for k, v in headers.items()}}
    async with httpx2.AsyncClient(base_url=gateway.url, headers=sent, timeout=httpx2.Timeout(30)) as client:
        yield client


async def _invoke(client: httpx2.AsyncClient, tool: str, arguments: dict[str, Any], **body: Any) -> dict[str, Any]:
    call_id = f"c-{uuid.uuid4().hex}"
    response = await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments, "call_id": call_id,
                                                                    **body})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def _session_of(gateway: Any, data: dict[str, Any]) -> str:
    session: str = gateway.audit_event(data["call_id"])["session"]
    return session


@contextlib.asynccontextmanager
async def _modern(gateway: Any, keys: dict[str, str], who: str = "alice", name: str = "agent-a",
                  headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """An MCP client in the 2026-07-28 era (no Mcp-Session-Id), naming itself ``name`` in clientInfo."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys[who]}", **(headers or {})},
                              timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(gateway.mcp_url, http_client=http),
                            client_info=types.Implementation(name=name, version="1.0")) as client:
        yield client


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


# --- where the run id comes from -------------------------------------------------------------------


async def test_rest_run_id_order_body_then_header_then_implicit(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _rest(gateway, keys, X_Gateway_Session="from-header") as client:
        from_body = await _invoke(client, "api_search", {"q": "1"}, session_id="from-body")
        from_header = await _invoke(client, "api_search", {"q": "2"})
    async with _rest(gateway, keys, User_Agent="agent-rest/1") as client:
        implicit = [await _invoke(client, "api_search", {"q": str(i)}) for i in range(2)]

    assert _session_of(gateway, from_body) == "from-body"
    assert _session_of(gateway, from_header) == "from-header"
    runs = {_session_of(gateway, d) for d in implicit}
    assert len(runs) == 1 and runs.pop().startswith("implicit-")


async def test_mcp_run_id_order_header_then_meta_then_implicit(start_gateway, configs, http_api, keys,
                                                               connect_mcp):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    meta = {"gateway/session": "from-meta"}
    async with _modern(gateway, keys, headers={"X-Gateway-Session": "from-header"}) as client:
        await client.call_tool("api_search", {"q": "header-beats-meta"}, meta=meta)
    async with _modern(gateway, keys) as client:
        await client.call_tool("api_search", {"q": "meta-alone"}, meta=meta)
        await client.call_tool("api_search", {"q": "modern-implicit"})
    async with connect_mcp(gateway, "alice") as legacy:
        await legacy.client.call_tool("api_search", {"q": "meta-beats-mcp-session"}, meta=meta)
        await legacy.call("api_search", {"q": "mcp-session"})
        mcp_session = legacy.session_id
    async with connect_mcp(gateway, "alice", headers={"X-Gateway-Session": "header-in-a-session"}) as legacy:
        await legacy.call("api_search", {"q": "header-beats-mcp-session"})
        assert legacy.session_id

    def session_for(q: str) -> str:
        [event] = [e for e in gateway.audit_events() if e["event"] == "call.outcome"
                   and e["original_args"].get("q") == q]
        session: str = event["session"]
        return session

    assert session_for("header-beats-meta") == "from-header"
    assert session_for("meta-alone") == "from-meta"
    assert session_for("modern-implicit").startswith("implicit-")
    assert session_for("meta-beats-mcp-session") == "from-meta"
    # the MCP session is no run id: the call is the client's implicit run (docs/runs.md)
    assert mcp_session and session_for("mcp-session").startswith("implicit-")
    assert session_for("header-beats-mcp-session") == "header-in-a-session"


# --- implicit runs -----------------------------------------------------------------------------------


async def test_implicit_runs_are_separate_per_client_and_per_principal(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _rest(gateway, keys, User_Agent="agent-one/1") as one:
        first = [(await _invoke(one, "api_search", {"q": f"one-{i}"}))["decision"] for i in range(4)]
    async with _rest(gateway, keys, User_Agent="agent-two/1") as two, \
            _rest(gateway, keys, "bob", User_Agent="agent-one/1") as bob:
        other_client = (await _invoke(two, "api_search", {"q": "two"}))["decision"]
        other_principal = (await _invoke(bob, "api_search", {"q": "bob"}))["decision"]
    # MCP 2026-07-28 clients behind one User-Agent are told apart by their clientInfo
    async with _modern(gateway, keys, name="agent-a") as a, _modern(gateway, keys, name="agent-b") as b:
        a_seen = [_text(await a.call_tool("api_search", {"q": f"a-{i}"})) for i in range(3)]
        b_seen = _text(await b.call_tool("api_search", {"q": "b-0"}))

    assert first == ["allow", "allow", "terminate", "terminated"]
    assert (other_client, other_principal) == ("allow", "allow")
    assert a_seen[2].startswith(BUDGET_TEXT) and BUDGET_TEXT not in a_seen[0] + a_seen[1]
    assert BUDGET_TEXT not in b_seen


async def test_session_implicit_tells_named_runs_from_made_up_ones(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _rest(gateway, keys) as implicit, _rest(gateway, keys, X_Gateway_Session="run-7") as named:
        refused = await _invoke(implicit, "api_get_item", {"item_id": "1"})
        allowed = await _invoke(named, "api_get_item", {"item_id": "1"})
    assert (refused["decision"], refused["content"][0]["text"]) == ("reject", "Name your run to read items.")
    assert allowed["decision"] == "allow"


async def test_a_terminated_implicit_run_does_not_lock_the_key_after_the_idle_timeout(start_gateway, configs,
                                                                                      http_api, keys):
    gateway = await start_gateway(_config(configs, http_api, runs={"idle_timeout": "1s"}), {"runs.yaml": RUNS})
    async with _rest(gateway, keys, User_Agent="agent-idle/1") as client:
        used = [(await _invoke(client, "api_search", {"q": f"idle-{i}"}))["decision"] for i in range(4)]
        await asyncio.sleep(1.3)
        fresh = [await _invoke(client, "api_search", {"q": f"later-{i}"}) for i in range(3)]

    assert used == ["allow", "allow", "terminate", "terminated"]
    assert [d["decision"] for d in fresh] == ["allow", "allow", "terminate"]  # a new run with its own budget
    assert _session_of(gateway, fresh[0]) != gateway.audit_event(
        next(e["call_id"] for e in gateway.audit_events() if "idle-0" in str(e.get("original_args"))))["session"]


async def test_an_implicit_run_lasts_across_a_restart_within_the_idle_timeout(tmp_path, configs, http_api, keys):
    config_file = configs.write(tmp_path, _config(configs, http_api), {"runs.yaml": RUNS})
    async with configs.run(config_file) as gateway, _rest(gateway, keys, User_Agent="agent-r/1") as client:
        before = [(await _invoke(client, "api_search", {"q": f"r-{i}"}))["decision"] for i in range(3)]
    async with configs.run(config_file) as gateway, _rest(gateway, keys, User_Agent="agent-r/1") as client:
        after = (await _invoke(client, "api_search", {"q": "r-after"}))["decision"]
    assert before == ["allow", "allow", "terminate"]
    assert after == "terminated"  # a restart is not a way out of a budget


# --- call.iteration ----------------------------------------------------------------------------------


async def test_call_iteration_defaults_to_the_runs_call_count(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _rest(gateway, keys, X_Gateway_Session=f"iter-{uuid.uuid4().hex}") as client:
        steps = [await _invoke(client, "api_create_item", {"name": f"n{i}"}) for i in range(3)]
        given = await _invoke(client, "api_create_item", {"name": "given"}, iteration=0)
    assert [s["decision"] for s in steps] == ["allow", "allow", "reject"]
    assert [gateway.audit_event(s["call_id"])["iteration"] for s in steps] == [0, 1, 2]
    assert given["decision"] == "allow"  # the client's own iteration wins


async def test_call_iteration_over_mcp_from_meta_or_the_run(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _modern(gateway, keys, headers={"X-Gateway-Session": f"iter-{uuid.uuid4().hex}"}) as client:
        texts = [_text(await client.call_tool("api_create_item", {"name": f"m{i}"})) for i in range(3)]
        given = await client.call_tool("api_create_item", {"name": "g"}, meta={"gateway/iteration": 1})
    assert texts[2] == "Only two steps." and "Only two steps." not in texts[0] + texts[1]
    assert not given.is_error
    iterations = {e["original_args"]["name"]: e["iteration"] for e in gateway.audit_events()
                  if e["event"] == "call.outcome"}
    assert iterations == {"m0": 0, "m1": 1, "m2": 2, "g": 1}


# --- usage windows -------------------------------------------------------------------------------------


async def test_a_usage_window_budget_holds_across_runs_and_run_ids(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api, usage_windows={"hour": "1h"}), {"w.yaml": WINDOW})
    decisions = []
    for i in range(3):
        async with _rest(gateway, keys, X_Gateway_Session=f"fresh-{i}") as client:
            decisions.append((await _invoke(client, "api_search", {"q": f"w-{i}"}))["decision"])
    async with _rest(gateway, keys, X_Gateway_Session="yet-another") as named, \
            _rest(gateway, keys, User_Agent="new-client/9") as implicit, _rest(gateway, keys, "bob") as bob:
        late = [await _invoke(named, "api_search", {"q": "w-named"}), await _invoke(implicit, "api_search", {"q": "x"})]
        bobs = (await _invoke(bob, "api_search", {"q": "bob"}))["decision"]
    assert decisions == ["allow", "allow", "allow"]
    assert [d["decision"] for d in late] == ["reject", "reject"]
    assert late[0]["content"][0]["text"] == "This key has used its 3 calls this hour."
    assert bobs == "allow"  # usage is per principal


async def test_concurrent_calls_cannot_overrun_a_usage_window(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api, usage_windows={"hour": "1h"}), {"w.yaml": WINDOW})
    tag = f"par-{uuid.uuid4().hex[:8]}"

    async def one(i: int) -> str:
        async with _rest(gateway, keys, X_Gateway_Session=f"{tag}-run-{i}") as client:
            return str((await _invoke(client, "api_nap", {"seconds": 0.3, "tag": f"{tag}-{i}"}))["decision"])

    decisions = await asyncio.gather(*(one(i) for i in range(6)))
    assert sorted(decisions) == ["allow"] * 3 + ["reject"] * 3
    assert len(http_api.seen(f"{tag}-")) == 3


async def test_a_restart_keeps_usage(tmp_path, configs, http_api, keys):
    config_file = configs.write(tmp_path, _config(configs, http_api, usage_windows={"hour": "1h", "day": "24h"}),
                                {"w.yaml": WINDOW})

    async def calls(count: int) -> list[str]:
        async with configs.run(config_file) as gateway, _rest(gateway, keys, X_Gateway_Session=uuid.uuid4().hex) as c:
            return [(await _invoke(c, "api_search", {"q": f"restart-{i}"}))["decision"] for i in range(count)]

    assert await calls(2) == ["allow", "allow"]
    assert await calls(2) == ["allow", "reject"]


def test_usage_windows_and_idle_timeout_are_checked_in_config(tmp_path, configs, http_api):
    from gateway.core.errors import ConfigError

    for bad in ({"usage_windows": {"Hour": "1h"}}, {"usage_windows": {"half": "30s"}}, {"runs": {"idle_timeout": 0}},
                {"runs": {"idle": "1m"}}):
        path = configs.write(tmp_path / str(len(list(tmp_path.iterdir()))), _config(configs, http_api, **bad), {})
        with pytest.raises(ConfigError):
            configs.load(path)


# --- the admin API ---------------------------------------------------------------------------------------


async def test_only_admin_keys_manage_sessions_and_each_change_is_audited(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _rest(gateway, keys, User_Agent="agent-admin/1") as agent:
        used = [(await _invoke(agent, "api_search", {"q": f"adm-{i}"}))["decision"] for i in range(3)]
        implicit_run = _session_of(gateway, {"call_id": next(
            e["call_id"] for e in gateway.audit_events() if "adm-0" in str(e.get("original_args")))})
    path = f"/v1/admin/sessions/alice/{implicit_run}"

    async with _rest(gateway, keys, "alice") as alice:
        refused = [await alice.get("/v1/admin/sessions"), await alice.get(path),
                   await alice.post(f"{path}/reset", json={}), await alice.post(f"{path}/end", json={})]
    assert [r.status_code for r in refused] == [403] * 4

    async with _rest(gateway, keys, "carol") as admin:
        listed = (await admin.get("/v1/admin/sessions", params={"principal": "alice", "implicit": "true"})).json()
        shown = (await admin.get(path)).json()
        bad = await admin.get("/v1/admin/sessions", params={"terminated": "maybe"})
        missing = await admin.get("/v1/admin/sessions/alice/no-such-run")
        reset = await admin.post(f"{path}/reset", json={})
    assert used == ["allow", "allow", "terminate"]
    assert [s["id"] for s in listed["sessions"]] == [implicit_run] and listed["total"] == 1
    assert (shown["calls"], shown["terminated"], shown["client"]) == (3, True, "agent-admin/1")
    assert (bad.status_code, missing.status_code) == (400, 404)
    assert reset.status_code == 200 and reset.json()["calls"] == 0 and reset.json()["terminated"] is False

    async with _rest(gateway, keys, User_Agent="agent-admin/1") as agent:
        again = (await _invoke(agent, "api_search", {"q": "after-reset"}))
        assert again["decision"] == "allow" and _session_of(gateway, again) == implicit_run
        async with _rest(gateway, keys, "carol") as admin:
            ended = await admin.post(f"{path}/end", json={"message": "Stopped by ops."})
        fresh = await _invoke(agent, "api_search", {"q": "after-end"})
    assert ended.status_code == 200 and ended.json()["terminated"] is True
    assert fresh["decision"] == "allow" and _session_of(gateway, fresh) != implicit_run  # a new implicit run

    async with _rest(gateway, keys, X_Gateway_Session="named-run") as named:
        await _invoke(named, "api_search", {"q": "named"})
        async with _rest(gateway, keys, "carol") as admin:
            await admin.post("/v1/admin/sessions/alice/named-run/end", json={"message": "Stopped by ops."})
        stopped = await _invoke(named, "api_search", {"q": "named-again"})
    assert (stopped["decision"], stopped["content"][0]["text"]) == ("terminated", "Stopped by ops.")

    events = [e for e in gateway.audit_events() if e["event"] == "session.admin"]
    assert [(e["action"], e["admin"], e["session"]) for e in events] == [
        ("reset", "carol", implicit_run), ("end", "carol", implicit_run), ("end", "carol", "named-run")]
    assert events[0]["before"]["terminated"] is True


async def test_a_hostile_client_name_is_cleaned_and_cut(start_gateway, configs, http_api, keys):
    gateway = await start_gateway(_config(configs, http_api), {"runs.yaml": RUNS})
    async with _modern(gateway, keys, name="evil\x1b[2J\n" + "y" * 5000) as client:
        result = await client.call_tool("api_search", {"q": "hostile"})
    async with _rest(gateway, keys, "carol") as admin:
        [run] = (await admin.get("/v1/admin/sessions", params={"implicit": "true"})).json()["sessions"]
    assert not result.is_error
    assert run["client"] == ("evil[2J" + "y" * 5000)[:200]
