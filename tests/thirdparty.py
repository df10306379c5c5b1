"""Third-party servers the tests run beside our own: installed from their registries on first use.

``@modelcontextprotocol/server-everything`` is the MCP project's reference server,
``@modelcontextprotocol/inspector`` its Inspector (run here as a client, in CLI mode), ``oidc-provider`` the
certified OpenID Provider the identity tests sign in with (tests/idp_support.py), ``@modelcontextprotocol/client``
the MCP TypeScript SDK's client (and its v1 line, ``@modelcontextprotocol/sdk``; tests/e2e/mcp_oauth_client.mjs),
and ``axe-core`` the accessibility checker the console's pages are run through (tests/frontends/test_console_page.py),
written by nobody here. Each comes from npm at a pinned version into ``.cache/npm`` at the repository root
(git-ignored), once per machine; Node.js and npm come from Debian (``bash .ci/install-system``).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

SERVER_EVERYTHING_VERSION = "2026.8.31"
INSPECTOR_VERSION = "2.12.0"
OIDC_PROVIDER_VERSION = "9.13.3"
MCP_TS_CLIENT_VERSION = "2.4.0"
MCP_TS_SDK_V1_VERSION = "1.32.2"
AXE_CORE_VERSION = "4.14.1"
_ROOT = Path(__file__).resolve().parent.parent
_NPM_CACHE = _ROOT / ".cache" / "npm"


def _npm_script(package: str, version: str, folder: str, script: str) -> list[str]:
    """``[node, path]`` of ``script`` inside npm ``package@version``, installed into ``.cache/npm/folder`` once."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise RuntimeError(f"node and npm are needed for {package}: bash .ci/install-system")
    prefix = _NPM_CACHE / f"{folder}-{version}"
    path = prefix / "node_modules" / package / script
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:  # one installer at a time across test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
                            f"{package}@{version}"], check=True, timeout=600)
    return [node, str(path)]


def server_everything() -> list[str]:
    """The command line that starts server-everything over stdio (``[node, script, "stdio"]``)."""
    return [*_npm_script("@modelcontextprotocol/server-everything", SERVER_EVERYTHING_VERSION, "server-everything",
                         "dist/index.js"), "stdio"]


def inspector_cli() -> list[str]:
    """The command line of the MCP Inspector in its CLI mode (``[node, launcher, "--cli"]``): one MCP
    session per invocation, as its users run it."""
    return [*_npm_script("@modelcontextprotocol/inspector", INSPECTOR_VERSION, "inspector",
                         "clients/launcher/build/index.js"), "--cli"]


def oidc_provider() -> tuple[str, Path]:
    """``(node, package folder)`` of npm ``oidc-provider``: tests/idp/provider.mjs imports it from that folder."""
    node, manifest = _npm_script("oidc-provider", OIDC_PROVIDER_VERSION, "oidc-provider", "package.json")
    return node, Path(manifest).parent


def mcp_ts_client(line: str = "v2") -> tuple[str, Path]:
    """``(node, package folder)`` of the MCP TypeScript SDK's client: npm ``@modelcontextprotocol/client`` (``v2``,
    both protocol eras) or ``@modelcontextprotocol/sdk`` (``v1``, 2025-11-25); tests/e2e/mcp_oauth_client.mjs
    imports it from that folder."""
    if line == "v1":
        node, manifest = _npm_script("@modelcontextprotocol/sdk", MCP_TS_SDK_V1_VERSION, "mcp-ts-sdk", "package.json")
    else:
        node, manifest = _npm_script("@modelcontextprotocol/client", MCP_TS_CLIENT_VERSION, "mcp-ts-client",
                                     "package.json")
    return node, Path(manifest).parent


def axe_core() -> str:
    """The source of npm ``axe-core``'s ``axe.min.js``, to evaluate in a page (it defines ``window.axe``)."""
    _, script = _npm_script("axe-core", AXE_CORE_VERSION, "axe-core", "axe.min.js")
    return Path(script).read_text(encoding="utf-8")
