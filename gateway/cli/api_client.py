"""What the commands that talk to a running gateway share: its URL and key, one request, safe printing.

`gateway approvals`, `gateway sessions` and `gateway status` are clients of the gateway's own API.
Answers are not trusted text: everything printed from them goes through ``clean`` first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import httpx2

__all__ = ["DEFAULT_URL", "TIMEOUT_SECONDS", "Failed", "call", "clean", "options", "run"]

DEFAULT_URL = "http://127.0.0.1:8080"

# Seconds to wait for the gateway; the API answers from memory or its own database, so this is generous.
TIMEOUT_SECONDS = 10.0

# Characters that could move a terminal's cursor or change its colours (in untrusted text).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(text: Any) -> str:
    """``text`` with control characters shown as escapes, so an answer cannot drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def options(key_help: str | None) -> argparse.ArgumentParser:
    """The ``--url``, ``--key`` (when ``key_help`` says whose) and ``--format`` options, as a parent parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("GATEWAY_URL", DEFAULT_URL),
                        help=f"the gateway (default: $GATEWAY_URL or {DEFAULT_URL})")
    if key_help is not None:
        common.add_argument("--key", default=os.environ.get("GATEWAY_API_KEY"),
                            help=f"{key_help} (default: $GATEWAY_API_KEY)")
    common.add_argument("--format", choices=("text", "json"), default="text")
    return common


class Failed(Exception):
    """The request failed; ``code`` is the exit code and the message says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None,
         key_hint: str = "Pass an API key with --key or GATEWAY_API_KEY.") -> Any:
    """One API request; the JSON answer, or ``Failed`` with exit code 1 (HTTP error) or 2 (unreachable)."""
    base = args.url.rstrip("/")
    headers = {"accept": "application/json"}
    key = getattr(args, "key", None)
    if key:
        headers["authorization"] = f"Bearer {key}"
    try:
        with httpx2.Client(timeout=TIMEOUT_SECONDS) as client:
            response = client.request(method, f"{base}{path}", headers=headers, json=body)
    except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
        raise Failed(2, f"bad gateway URL {base!r}: {exc}") from exc
    except httpx2.HTTPError as exc:  # refused, timed out, reset: nothing was changed
        raise Failed(2, f"cannot connect to the gateway at {base}: {exc or type(exc).__name__}") from exc
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success and data is not None:
        return data
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        code = f" {error['code']}" if isinstance(error.get("code"), str) else ""
        message = f"{clean(error['message'])} (HTTP {response.status_code}{clean(code)})"
    else:
        message = f"HTTP {response.status_code} {response.reason_phrase}: {clean(response.text[:200])}"
    if response.status_code == 401 and not key:
        message += f"\n{key_hint}"
    raise Failed(1, message)


def run(args: argparse.Namespace, command: str, method: str, path: str, body: dict[str, Any] | None,
        text: Callable[[Any], str], key_hint: str = "Pass an API key with --key or GATEWAY_API_KEY.") -> int:
    """Call the API and print its answer as JSON or through ``text``; the exit code."""
    try:
        data = call(args, method, path, body, key_hint)
    except Failed as failed:
        print(f"gateway {command}: {failed}", file=sys.stderr)
        return failed.code
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.format == "json" else text(data))
    return 0
