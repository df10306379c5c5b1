"""``Gateway.decide``: the decide-only path runs every step up to the hand-out and executes nothing.

Built in-process from plain parts (a policy file, an empty registry, SQLite, an audit file): the agent-run
tool's upstream fails any call made to it, so an admitted outcome proves nothing ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.models.dialects.chat_tools import client_tools
from gateway.pipeline import CallRequest, Gateway
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.settings import CallSettings
from gateway.policy.call import Principal
from gateway.reload.holder import PolicyHolder
from gateway.store.sqlite import SqliteStore
from gateway.upstreams.registry import ToolRegistry

POLICY = """
policy: agent
rules:
  - id: staging-only
    tools: [deploy]
    action: rewrite
    rewrite:
      set: {service: '"staging"'}
  - id: no-wipe
    tools: [wipe]
    action: reject
    message: Not that.
"""

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"service": {"type": "string"}}}}} for name in ("deploy", "wipe")]


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "agent.yaml").write_text(POLICY)
    store = SqliteStore(tmp_path / "gw.db")
    audit = AuditLog(tmp_path / "audit.jsonl")
    built = Gateway(PolicyHolder([tmp_path / "p"]), ToolRegistry([]), store, audit, CallSettings({"stage": "ci"}))
    yield built
    audit.close()
    store.close()


def _request(tool: str, arguments: dict[str, Any], call_id: str) -> CallRequest:
    exposed = client_tools(TOOLS)
    assert isinstance(exposed, dict)
    return CallRequest(tool=tool, arguments=arguments, principal=Principal("alice"), session_id="run-1",
                       call_id=call_id, frontend="model", exposed=exposed[tool])


def _events(gateway: Any) -> list[dict[str, Any]]:
    path = gateway.audit.path
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_an_admitted_call_is_handed_out_with_its_rewritten_arguments_and_nothing_runs(gateway: Any) -> None:
    outcome = await gateway.decide(_request("deploy", {"service": "prod"}, "c-1"))
    assert (outcome.decision, outcome.is_error, outcome.admitted) == ("allow", False, {"service": "staging"})
    assert outcome.meta["gateway/rewritten"] is True
    intent, done = _events(gateway)
    assert (intent["event"], done["event"]) == ("call.intent", "call.outcome")
    assert intent["id"] == done["id"] and intent["upstream"] == done["upstream"] == "client"
    assert intent["final_args"] == done["final_args"] == {"service": "staging"}
    assert done["upstream_outcome"] == {"status": "ok", "is_error": False}  # handed to the agent, recorded as before


async def test_the_same_call_through_call_would_reach_the_agents_upstream_which_runs_nothing(gateway: Any) -> None:
    outcome = await gateway.call(_request("deploy", {"service": "prod"}, "c-2"))
    assert (outcome.decision, outcome.is_error, outcome.admitted) == ("tool_failed", True, None)


async def test_a_refused_call_is_not_handed_out_and_writes_no_intent(gateway: Any) -> None:
    outcome = await gateway.decide(_request("wipe", {}, "c-3"))
    assert (outcome.decision, outcome.text, outcome.admitted) == ("reject", "Not that.", None)
    [done] = _events(gateway)
    assert done["event"] == "call.outcome" and done["upstream_outcome"] == {"status": "not_called"}
