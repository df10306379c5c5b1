"""Reading audit files in tests: strictly, each line a chained event, and the events without their chain fields.

Imported by name (``from audit_support import strict_lines``), as ``loopback`` is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gateway.pipeline.audit_chain import CHAIN_FIELDS

__all__ = ["chained_lines", "payload", "strict_lines"]

Json = dict[str, Any]
_HEX32, _HEX64 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{64}")


def chained_lines(path: Path) -> list[Json]:
    """Every line of an audit file, parsed by a strict JSON parser (no NaN, valid UTF-8, one object a line),
    each with its chain fields (``chain``, ``seq``, ``prev``) as the writer puts them."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends inside a line: {data[-80:]!r}"

    def refuse(name: str) -> Any:
        raise AssertionError(f"not strict JSON: {name}")

    events = [json.loads(line.decode("utf-8"), parse_constant=refuse) for line in data.split(b"\n")[:-1]]
    for event in events:
        assert isinstance(event, dict), event
        assert list(event)[-3:] == list(CHAIN_FIELDS), f"the chain fields are not the last ones: {event}"
        assert _HEX32.fullmatch(event["chain"]) and type(event["seq"]) is int and event["seq"] >= 1, event
        assert event["prev"] is None or _HEX64.fullmatch(event["prev"]), event
    return events


def payload(event: Json) -> Json:
    """The event as it was given to the writer: without the chain fields."""
    return {k: v for k, v in event.items() if k not in CHAIN_FIELDS}


def strict_lines(path: Path) -> list[Json]:
    """``chained_lines``, each event without its chain fields."""
    return [payload(e) for e in chained_lines(path)]
