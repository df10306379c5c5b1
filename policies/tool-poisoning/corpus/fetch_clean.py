"""Write clean.json: the tools real MCP servers list, as their `tools/list` gives them.

    python policies/tool-poisoning/corpus/fetch_clean.py [--install]

Each server below is installed at a pinned version from its registry (npm, or PyPI into a venv of its
own) under the repository's git-ignored ``.cache/corpus/``, launched over stdio with the MCP SDK's
client, asked ``tools/list`` once, and stopped. Tokens and connection strings are dummies on loopback:
listing tools needs none of them, and nothing is called. The output is sorted, so running this again
on the same versions writes the same bytes. ``--install`` installs what is missing first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CACHE = ROOT / ".cache" / "corpus"
NPM = CACHE / "npm"
OUT = HERE / "clean.json"


class Server(NamedTuple):
    """One MCP server: where it comes from and how it is started (``{tmp}`` is a scratch folder)."""

    registry: str  # "npm" or "pypi"
    package: str
    version: str
    command: str  # an npm package's script under node_modules, or a console script of the venv
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    requires: tuple[str, ...] = ()  # more pins for a PyPI server's venv


SERVERS = [
    Server("npm", "@modelcontextprotocol/server-everything", "2026.8.31", "dist/index.js", ("stdio",)),
    Server("npm", "@modelcontextprotocol/server-filesystem", "2026.8.31", "dist/index.js", ("{tmp}",)),
    Server("npm", "@modelcontextprotocol/server-memory", "2026.8.31", "dist/index.js",
           env=(("MEMORY_FILE_PATH", "{tmp}/memory.jsonl"),)),
    Server("npm", "@modelcontextprotocol/server-sequential-thinking", "2026.8.31", "dist/index.js"),
    Server("npm", "@modelcontextprotocol/server-github", "2025.4.8", "dist/index.js",
           env=(("GITHUB_PERSONAL_ACCESS_TOKEN", "dummy"),)),
    Server("npm", "@modelcontextprotocol/server-gitlab", "2025.4.25", "dist/index.js",
           env=(("GITLAB_PERSONAL_ACCESS_TOKEN", "dummy"), ("GITLAB_API_URL", "http://127.0.0.1:9/api/v4"))),
    Server("npm", "@modelcontextprotocol/server-slack", "2025.4.25", "dist/index.js",
           env=(("SLACK_BOT_TOKEN", "dummy"), ("SLACK_TEAM_ID", "T0"))),
    Server("npm", "@modelcontextprotocol/server-brave-search", "0.6.2", "dist/index.js",
           env=(("BRAVE_API_KEY", "dummy"),)),
    Server("npm", "@modelcontextprotocol/server-google-maps", "0.6.2", "dist/index.js",
           env=(("GOOGLE_MAPS_API_KEY", "dummy"),)),
    Server("npm", "@modelcontextprotocol/server-everart", "0.6.2", "dist/index.js",
           env=(("EVERART_API_KEY", "dummy"),)),
    Server("npm", "@modelcontextprotocol/server-aws-kb-retrieval", "0.6.2", "dist/index.js",
           env=(("AWS_ACCESS_KEY_ID", "dummy"), ("AWS_SECRET_ACCESS_KEY", "dummy"), ("AWS_REGION", "us-east-1"))),
    Server("npm", "@modelcontextprotocol/server-postgres", "0.6.2", "dist/index.js",
           ("postgresql://127.0.0.1:9/none",)),
    Server("npm", "@modelcontextprotocol/server-puppeteer", "2025.5.12", "dist/index.js"),
    Server("pypi", "mcp-server-git", "2026.10.19", "mcp-server-git", ("--repository", "{tmp}/repo")),
    Server("pypi", "mcp-server-fetch", "2026.10.24", "mcp-server-fetch"),
    Server("pypi", "mcp-server-time", "2026.10.19", "mcp-server-time", ("--local-timezone", "UTC")),
    # written for the MCP SDK's first major version, which its package does not pin
    Server("pypi", "mcp-server-sqlite", "2025.4.25", "mcp-server-sqlite", ("--db-path", "{tmp}/test.db"),
           requires=("mcp<2",)),
]
# Not here: server-redis exits unless a Redis server answers; server-gdrive unless it has OAuth credentials.
LIST_SECONDS = 60.0


def install() -> None:
    """Install every server not installed yet (npm into .cache/corpus/npm, each PyPI one into a venv of its own)."""
    npm = [f"{s.package}@{s.version}" for s in SERVERS if s.registry == "npm" and not _npm_script(s).exists()]
    if npm:
        NPM.mkdir(parents=True, exist_ok=True)
        # puppeteer would download a browser of its own; listing its tools needs none
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(NPM), *npm],
                       check=True, env={**_base_env(), "PUPPETEER_SKIP_DOWNLOAD": "1"})
    for server in (s for s in SERVERS if s.registry == "pypi"):
        venv = _venv(server)
        if not (venv / "bin" / server.command).exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"{server.package}=={server.version}",
                            *server.requires], check=True)


def _venv(server: Server) -> Path:
    return CACHE / f"venv-{server.package}"


def _npm_script(server: Server) -> Path:
    return NPM / "node_modules" / server.package / server.command


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}


def _parameters(server: Server, tmp: Path) -> StdioServerParameters:
    args = [a.replace("{tmp}", str(tmp)) for a in server.args]
    env = {**_base_env(), **{k: v.replace("{tmp}", str(tmp)) for k, v in server.env}}
    if server.registry == "npm":
        return StdioServerParameters(command="node", args=[str(_npm_script(server)), *args], env=env)
    return StdioServerParameters(command=str(_venv(server) / "bin" / server.command), args=args, env=env)


async def list_tools(server: Server) -> list[dict[str, Any]]:
    """The server's tools, each ``{server, version, name, title, description, inputSchema}``."""
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        (tmp / "repo").mkdir()
        subprocess.run(["git", "init", "--quiet", str(tmp / "repo")], check=True)
        async with asyncio.timeout(LIST_SECONDS), Client(_parameters(server, tmp), mode="legacy") as client:
            listed = (await client.list_tools()).tools
    return [{"server": server.package, "version": server.version, "name": t.name, "title": t.title or "",
             "description": t.description or "", "inputSchema": t.input_schema} for t in listed]


async def main() -> None:
    """List every server's tools and write clean.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="install the servers first")
    if parser.parse_args().install:
        install()
    tools: list[dict[str, Any]] = []
    for server in SERVERS:
        try:
            found = await list_tools(server)
        except Exception as exc:  # a server that will not start is reported and left out
            print(f"{server.package}: not listed ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        print(f"{server.package} {server.version}: {len(found)} tools", file=sys.stderr)
        tools.extend(found)
    tools.sort(key=lambda t: (t["server"], t["name"]))
    OUT.write_text(json.dumps(tools, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(tools)} tools to {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
