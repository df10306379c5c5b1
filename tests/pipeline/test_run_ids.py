"""Run ids and call ids are at most 256 printable characters (docs/runs.md): one with a control character, a
bidi override or another non-printable is refused at the door, before any run is read or made and before
policies, and the refusal is audited. Through REST (body and header) and MCP (``_meta``), real clients.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx2
import pytest

from gateway.core.values import id_problem

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

# (id, the hostile id text, the code point the refusal names)
HOSTILE = [
    ("newline", "run-1\nforged audit line", "U+000A"),
    ("escape", "run-1\x1b[2Jcleared", "U+001B"),
    ("bell", "run\x07", "U+0007"),
    ("delete", "run\x7f", "U+007F"),
    ("c1-next-line", "run\x85", "U+0085"),
    ("bidi-override", "run-\u202eevil", "U+202E"),
    ("zero-width-space", "run\u200b", "U+200B"),
    ("line-separator", "run\u2028", "U+2028"),
]
IDS = [h[0] for h in HOSTILE]


def _outcomes(gateway: Any, marker: str) -> list[dict[str, Any]]:
    return [e for e in gateway.audit_events() if e.get("event") == "call.outcome"
            and e.get("original_args", {}).get("q") == marker]


async def _no_run_made(gateway: Any, hostile: str) -> bool:
    return await gateway.gateway.store.find_session("alice", hostile) is None


@pytest.mark.parametrize(("hostile", "named"), [h[1:] for h in HOSTILE], ids=IDS)
@pytest.mark.parametrize("field", ["session_id", "call_id"])
async def test_a_rest_id_with_a_non_printable_is_refused_and_audited(shared_gateway, http_api, hostile, named,
                                                                      field):
    marker = f"m-{uuid.uuid4().hex}"
    seen = len(http_api.requests)
    async with httpx2.AsyncClient(base_url=shared_gateway.url, timeout=httpx2.Timeout(30),
                                  headers={"Authorization": "Bearer alice-key-4f1c9e"}) as client:
        response = await client.post("/v1/tools/web_search/invoke", json={field: hostile, "arguments": {"q": marker}})

    assert response.status_code == 400, response.text
    message = response.json()["content"][0]["text"]
    assert named in message and ("run id" if field == "session_id" else "call id") in message
    assert hostile not in message  # named by code point, never echoed
    [event] = _outcomes(shared_gateway, marker)
    assert event["verdict"] == "invalid_input"
    assert len(http_api.requests) == seen  # the tool never ran
    assert await _no_run_made(shared_gateway, hostile)
    lines = shared_gateway.audit_path.read_bytes().splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)  # no id forged a line of its own


async def test_a_run_header_with_a_c1_control_is_refused(shared_gateway, http_api):
    """HTTP carries bytes 0x80-0xff in a header; read as Latin-1, 0x85 is NEL, a C1 control."""
    marker = f"m-{uuid.uuid4().hex}"
    async with httpx2.AsyncClient(base_url=shared_gateway.url, timeout=httpx2.Timeout(30),
                                  headers={"Authorization": "Bearer alice-key-4f1c9e",
                                           "X-Gateway-Session": b"run\x85x"}) as client:
        response = await client.post("/v1/tools/web_search/invoke", json={"arguments": {"q": marker}})

    assert response.status_code == 400, response.text
    assert "U+0085" in response.json()["content"][0]["text"]
    [event] = _outcomes(shared_gateway, marker)
    assert event["verdict"] == "invalid_input"
    assert await _no_run_made(shared_gateway, "run\x85x")


@pytest.mark.parametrize(("hostile", "named"), [h[1:] for h in HOSTILE], ids=IDS)
@pytest.mark.parametrize("meta_key", ["gateway/session", "gateway/call_id"])
async def test_an_mcp_id_with_a_non_printable_is_refused_and_audited(shared_gateway, connect_mcp, http_api,
                                                                      hostile, named, meta_key):
    marker = f"m-{uuid.uuid4().hex}"
    seen = len(http_api.requests)
    async with connect_mcp(shared_gateway, "alice", mode="auto") as conn:
        result = await conn.client.call_tool("web_search", {"q": marker}, meta={meta_key: hostile})

    assert result.is_error is True
    assert (result.meta or {}).get("gateway/decision") == "invalid_input"
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert named in text and hostile not in text
    [event] = _outcomes(shared_gateway, marker)
    assert (event["verdict"], event["frontend"]) == ("invalid_input", "mcp")
    assert len(http_api.requests) == seen
    assert await _no_run_made(shared_gateway, hostile)


@pytest.mark.parametrize("fine", ["run-7", "Lauf für Jörg", "実行-1", "a b", "x" * 256, "emoji-🚀"])
def test_printable_ids_are_taken(fine):
    assert id_problem("run id", fine) is None

