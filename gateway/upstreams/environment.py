"""The environment of a process the gateway launches (a stdio MCP server, an HTTP service's `launch:`).

A launched process gets a minimal base (``BASE_NAMES``: what programs need to find executables,
a home, a locale, a time zone and a temp dir), plus the gateway's variables named in its
``env_passthrough``, plus its explicit ``env:``. Nothing else: the gateway's own secrets (API
keys for other upstreams, database passwords, cloud credentials) never reach a tool's process
unless the config passes them by name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

__all__ = ["BASE_NAMES", "child_environment"]

# Inherited by every launched process. POSIX: the MCP SDK's own stdio defaults (HOME, LOGNAME,
# PATH, SHELL, TERM, USER) plus locale, time zone and temp dir, which no credential lives in.
# Windows: what the SDK keeps, plus what the C runtime and Python need to start at all.
# A name ending in ``*`` matches every variable that starts with the rest.
BASE_NAMES: tuple[str, ...] = (
    ("APPDATA", "COMSPEC", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "PROCESSOR_ARCHITECTURE",
     "PROGRAMDATA", "PROGRAMFILES", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP", "USERNAME", "USERPROFILE",
     "WINDIR", "TZ")
    if sys.platform == "win32"
    else ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR")
)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    key = name.upper() if sys.platform == "win32" else name  # Windows variable names ignore case
    for pattern in patterns:
        wanted = pattern.upper() if sys.platform == "win32" else pattern
        if (wanted.endswith("*") and key.startswith(wanted[:-1])) or key == wanted:
            return True
    return False


def child_environment(explicit: Mapping[str, str], passthrough: Iterable[str] = (),
                      source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The base variables and the ``passthrough`` ones found in ``source`` (the gateway's), then ``explicit``."""
    source = os.environ if source is None else source
    passthrough = tuple(passthrough)
    env: dict[str, str] = {}
    for name, value in source.items():
        if _matches(name, passthrough):
            env[name] = value
        elif _matches(name, BASE_NAMES) and not value.startswith("()"):
            env[name] = value  # a "()" value is an exported shell function: code, not configuration
    env.update(explicit)
    return env
