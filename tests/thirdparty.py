"""Third-party servers the tests run beside our own: installed from their registries on first use.

``@modelcontextprotocol/server-everything`` is the MCP project's reference server, written by
nobody here. It comes from npm at a pinned version into ``.cache/npm`` at the repository root
(git-ignored), once per machine; Node.js and npm come from Debian (``bash .ci/install-system``).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

SERVER_EVERYTHING_VERSION = "2026.8.31"
_ROOT = Path(__file__).resolve().parent.parent
_NPM_CACHE = _ROOT / ".cache" / "npm"


def server_everything() -> list[str]:
    """The command line that starts server-everything over stdio (``[node, script, "stdio"]``)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise RuntimeError("node and npm are needed for the third-party MCP server: bash .ci/install-system")
    prefix = _NPM_CACHE / f"server-everything-{SERVER_EVERYTHING_VERSION}"
    script = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:  # one installer at a time across test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not script.exists():
            subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
                            f"@modelcontextprotocol/server-everything@{SERVER_EVERYTHING_VERSION}"],
                           check=True, timeout=600)
    return [node, str(script), "stdio"]
