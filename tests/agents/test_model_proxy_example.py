"""examples/model-proxy/ as shipped, its model pointed at the scripted fake (tests/agents/fake_model.py).

The example's gateway launches the quick start's notes server as its gateway-run tools; the official
``openai`` client is the agent. The example's own check and test commands (its README) pass as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_stage import STEP_SECONDS
from fake_model import FakeModel, script
from loopback import serve_app
from model_proxy_drivers import gateway_model_client

from gateway.app import build_app, server_options
from gateway.cli import main
from gateway.config.load import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model-proxy"
APPROVER_KEY = "demo-approver-key"  # the example's only key (its README)
SHELL = {"type": "function", "function": {"name": "run_shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}}}}}


async def test_the_example_refuses_rewrites_and_runs_its_gateway_tools(
        tmp_path: Path, fake_model: tuple[FakeModel, str]) -> None:
    model, model_url = fake_model
    config = load_config(EXAMPLE / "gateway.yaml")
    config.spec.models[0].base_url = f"{model_url}/v1"
    config.spec.store.sqlite = str(tmp_path / "gateway.sqlite3")  # nothing written into the repository
    config.spec.audit.file = str(tmp_path / "audit.jsonl")
    prompt = script(("run_shell", {"command": "rm -rf /"}), ("run_shell", {"command": "rm --recursive --force /"}),
                    ("notes_search", {"query": "q3"}), ("run_shell", {"command": "df -h"}))
    async with serve_app(build_app(config), startup=STEP_SECONDS, options=server_options(config)) as url, \
            gateway_model_client(url, APPROVER_KEY, "example-run") as client:
        response = await client.chat.completions.create(
            model="llama3.2", messages=[{"role": "user", "content": prompt}], tools=[SHELL])
    [call] = response.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"command": "df -h", "cwd": "/tmp/sandbox"}
    calls = (response.model_extra or {})["gateway"]["calls"]
    assert [(c["tool"], c["decision"], c["status"]) for c in calls] == [
        ("run_shell", "reject", "answered"), ("run_shell", "reject", "answered"), ("notes_search", "allow", "answered"),
        ("run_shell", "allow", "returned")]
    seen = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert seen[0] == seen[1] == "That command is destructive and is not allowed; use a safer one."
    assert "Q3 report" in seen[2]  # the notes server ran the search


def test_the_examples_check_and_test_commands_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE.parents[1])
    assert main(["check", "examples/model-proxy/policies", "--tools", "examples/model-proxy/tools.json"]) == 0
    assert main(["test", "examples/model-proxy/policies"]) == 0
    # the shell rule's suite (every spelling of rm -rf) passes on the other engine too
    assert main(["test", "examples/model-proxy/policies", "--engine", "cel-python"]) == 0
