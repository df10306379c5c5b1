"""`gateway check --config` knows the agent-run tools that `models[].client_tools` declares (the real command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cli_run import run_cli

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_SERVER = REPO / "tests" / "upstream_mcp_server.py"

POLICY = """\
policy: agent
rules:
  - id: shell
    tools: [run_shell]
    when: has(args.command) && args.command.startsWith("rm")
    action: reject
  - id: mail
    tools: [mail_send]
    action: allow
  - id: typo
    tools: [run_shel]
    action: reject
  - id: gateway-tool
    tools: [up_echo]
    action: allow
"""


def gateway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `gateway ARGS` in ``cwd``, in this process (``run_subprocess`` for the real console entry)."""
    return run_cli(cwd, *args)


def config(tmp_path: Path, upstreams: bool, **model: Any) -> None:
    """gateway.yaml with one model route (and the test MCP server as upstream ``up``) and the policy."""
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "agent.yaml").write_text(POLICY)
    spec: dict[str, Any] = {"policies": ["policies"],
                            "models": [{"name": "*", "base_url": "http://127.0.0.1:9/v1", **model}]}
    if upstreams:
        spec["upstreams"] = [{"name": "up", "mcp": {"command": sys.executable, "args": [str(UPSTREAM_SERVER)]}}]
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def errors(out: subprocess.CompletedProcess[str]) -> list[str]:
    """The diagnostic lines (not the source excerpts under them)."""
    return [line for line in out.stderr.splitlines() if ": error[" in line or ": warning[" in line]


def test_declared_client_tools_are_known_and_a_typo_still_is_not(tmp_path: Path) -> None:
    config(tmp_path, upstreams=True, client_tools=["run_shell", "mail_*"])
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode == 1
    policy = tmp_path / "policies" / "agent.yaml"
    # run_shell (a name), mail_send (under the glob mail_*) and up_echo (the upstream's) are known;
    # run_shell reads args.command with no schema known: no unknown-argument either.
    assert errors(out) == [f"{policy}:11:13: error[unknown-tool]: no tool matches 'run_shel'; the rule never applies"
                           " (rule agent/typo); hint: did you mean 'run_shell'?"]


def test_without_the_declaration_agent_tools_are_unknown(tmp_path: Path) -> None:
    config(tmp_path, upstreams=True)
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode == 1
    unknown = [line.split("no tool matches ")[1].split(";")[0] for line in errors(out) if "unknown-tool" in line]
    assert unknown == ["'run_shell'", "'mail_send'", "'run_shel'"]


def test_a_model_proxy_without_upstreams_is_checked_against_its_client_tools(tmp_path: Path) -> None:
    config(tmp_path, upstreams=False, client_tools=["run_shell", "run_shel", "mail_*"])
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode == 1
    [error] = errors(out)  # run_shel is declared here; the gateway's tool up_echo exists nowhere
    assert ": error[unknown-tool]: no tool matches 'up_echo'; the rule never applies (rule agent/gateway-tool)" in error
    # --no-upstreams still means: no catalog checks at all
    assert gateway(tmp_path, "check", "--config", "gateway.yaml", "--no-upstreams").returncode == 0


def test_a_malformed_client_tools_glob_is_a_config_error(tmp_path: Path) -> None:
    config(tmp_path, upstreams=False, client_tools=["run_[z-a]"])
    out = gateway(tmp_path, "check", "--config", "gateway.yaml")
    assert out.returncode != 0
    assert "client_tools" in out.stderr


def test_the_model_proxy_example_checks_clean_with_its_config() -> None:
    out = gateway(REPO, "check", "--config", "examples/model-proxy/gateway.yaml")
    assert out.returncode == 0, out.stderr
