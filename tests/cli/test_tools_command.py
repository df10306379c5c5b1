"""`gateway tools --config`: the real command starts the config's upstreams (the stdio MCP test server
and an `http:` upstream), prints the tools they expose, and stops the launched server again."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run_cli, run_subprocess

from gateway.policy.catalog import Catalog

UPSTREAM_SERVER = Path(__file__).parents[1] / "upstream_mcp_server.py"

API_TOOLS = [
    {"name": "get_item", "description": "One item.\nMore text.", "method": "GET", "path": "/items/{item_id}",
     "input_schema": {"type": "object", "required": ["item_id"], "properties": {"item_id": {"type": "string"}}},
     "annotations": {"readOnlyHint": True}},
    {"name": "delete_item", "method": "DELETE", "path": "/items/{item_id}",
     "input_schema": {"type": "object", "required": ["item_id"], "properties": {"item_id": {"type": "string"}},
                      "additionalProperties": False},
     "annotations": {"destructiveHint": True}},
]


def gateway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `gateway ARGS` in ``cwd``, in this process (``run_subprocess`` for the real console entry)."""
    return run_cli(cwd, *args)


def write_config(root: Path, marker: str, *extra: dict[str, Any]) -> Path:
    """gateway.yaml with the stdio MCP test server (``marker`` on its command line) and an `http:` upstream."""
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "main.yaml").write_text("policy: main\nrules:\n  - id: r\n    tools: [up_echo]\n"
                                                 "    action: allow\n")
    upstreams = [
        {"name": "up", "mcp": {"command": sys.executable, "args": [str(UPSTREAM_SERVER), marker]}},
        {"name": "api", "http": {"base_url": "http://127.0.0.1:9", "tools": API_TOOLS}},
        *extra,
    ]
    path = root / "gateway.yaml"
    path.write_text(yaml.safe_dump({"policies": ["policies"], "upstreams": upstreams}, sort_keys=False))
    return path


def running_with(marker: str) -> list[int]:
    """Process ids whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`gateway tools --format json` run once: (its folder, the result)."""
    root = tmp_path_factory.mktemp("tools")
    write_config(root, f"marker-{uuid.uuid4().hex}")
    return root, run_subprocess(root, "tools", "--config", "gateway.yaml", "--format", "json")


def test_the_json_snapshot_has_every_exposed_tool_with_schema_and_annotations(snapshot):
    _, out = snapshot
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["version"] == 1
    tools = {t["name"]: t for t in data["tools"]}
    assert [t["name"] for t in data["tools"]] == sorted(tools)
    assert {"up_echo", "up_add", "up_delete_thing", "api_get_item", "api_delete_item"} <= set(tools)
    assert tools["up_echo"]["upstream"] == "up"
    assert tools["up_echo"]["input_schema"]["properties"]["text"]["type"] == "string"
    assert tools["up_add"]["input_schema"]["required"] == ["a", "b"]
    assert tools["up_delete_thing"]["annotations"]["destructiveHint"] is True
    assert tools["api_get_item"] == {
        "name": "api_get_item", "upstream": "api", "title": "", "description": "One item.\nMore text.",
        "input_schema": API_TOOLS[0]["input_schema"], "annotations": {"readOnlyHint": True}}


def test_the_snapshot_round_trips_and_is_deterministic(snapshot):
    root, out = snapshot
    data = json.loads(out.stdout)
    assert Catalog.from_json(data).to_json() == data
    again = gateway(root, "tools", "--config", "gateway.yaml", "--format", "json")
    assert again.returncode == 0, again.stderr
    assert again.stdout == out.stdout


async def test_reading_the_catalog_stops_the_server_it_launched_before_returning(tmp_path):
    # in this process, whose pipes to the server stay open: only an explicit stop ends it
    from gateway.app import build_registry
    from gateway.config.load import load_config
    from gateway.upstreams.catalog import read_catalog

    marker = f"marker-{uuid.uuid4().hex}"
    config = load_config(write_config(tmp_path, marker))
    catalog, problems = await read_catalog(build_registry(config), "gateway.yaml")
    assert problems == []
    assert catalog is not None and "up_echo" in catalog.tools and "api_delete_item" in catalog.tools
    assert running_with(marker) == []


def test_text_lists_each_tool_with_its_arguments(tmp_path):
    write_config(tmp_path, f"marker-{uuid.uuid4().hex}")
    out = gateway(tmp_path, "tools", "--config", "gateway.yaml")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("api_get_item  (api)")
    assert lines[at + 1:at + 4] == ["    args: item_id*", "    annotations: readOnlyHint=true", "    One item."]
    assert "up_add  (up)" in lines and "    args: a*, b*" in lines
    assert lines[-1].endswith(" tools") and int(lines[-1].split()[0]) >= 7


def test_an_upstream_that_does_not_start_fails_the_command_and_prints_no_catalog(tmp_path):
    down = tmp_path / "down"
    down.touch()
    write_config(tmp_path, f"marker-{uuid.uuid4().hex}", {"name": "gone", "mcp": {
        "command": sys.executable, "args": [str(UPSTREAM_SERVER)], "env": {"UPSTREAM_DOWN_FILE": str(down)}}})
    out = gateway(tmp_path, "tools", "--config", "gateway.yaml", "--format", "json")
    assert out.returncode == 1
    assert out.stdout == ""
    assert "error[upstream-unavailable]: upstream 'gone' did not start" in out.stderr
    assert "hint: start it (or fix its config), or check offline against a snapshot with --tools" in out.stderr


def test_a_broken_config_is_reported_with_a_caret(tmp_path):
    (tmp_path / "gateway.yaml").write_text("upstreams:\n  - {name: a, htp: {}}\n")
    out = gateway(tmp_path, "tools", "--config", "gateway.yaml")
    assert out.returncode == 1
    assert out.stdout == ""
    first, line, caret = out.stderr.splitlines()[:3]
    assert first.startswith("gateway.yaml:2:")
    assert line == "  2 |   - {name: a, htp: {}}"
    assert caret.startswith("    |") and caret.endswith("^")
