"""Resource reads are decided on the URI the server reads (issue 18, items 1 and 16).

A real MCP client talks to the gateway, which fronts the SDK's own ``MCPServer`` (files_mcp_server.py)
with the templates ``file:///{+path}``, ``records://{id}`` and ``notes://users/{name}``. Every other
spelling of a guarded resource (escapes, dot segments, case) is decided exactly as the resource it
decodes to, or refused as unclear; the server never reads a guarded one. Hidden and unknown resources
get the same answers to reads, subscriptions and unsubscriptions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError
from raw_mcp import RawMcp

from gateway.frontends.mcp.resources import REFUSED

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

SERVER = Path(__file__).parents[2] / "files_mcp_server.py"

POLICY = """
    policy: documents
    rules:
      - id: finance-docs-for-finance
        resources: ["gateway://docs/file:///finance/**"]
        when: '!("finance" in principal.groups)'
        action: reject
      - id: no-record-13
        resources: ["gateway://docs/records://*"]
        when: args.id == "13"
        action: reject
        message: Record 13 is sealed.
      - id: alices-notes-for-alice
        resources: ["gateway://docs/notes://users/*"]
        when: args.name == "alice" && principal.id != "alice"
        action: reject
        message: Only alice reads alice's notes.
"""

FINANCE = "gateway://docs/file:///finance/q3.txt"
SUMMARY = "gateway://docs/file:///finance/summary.txt"  # listed, and hidden from bob like the rest of finance
RECORD_13 = "gateway://docs/records://13"
ALICES = "gateway://docs/notes://users/alice"
UNCLEAR = None

# Each spelling, and the URI it must be decided as (UNCLEAR: refused, with the reason).
FORMS: dict[str, str | None] = {
    "gateway://docs/file:///finance%2Fq3.txt": UNCLEAR,
    "gateway://docs/file:///finance%2fq3.txt": UNCLEAR,
    "gateway://docs/file:///./finance/q3.txt": FINANCE,
    "gateway://docs/file:///public/../finance/q3.txt": FINANCE,
    "gateway://docs/file:///public/%2e%2e/finance/q3.txt": FINANCE,
    "gateway://docs/file:///public/%2E%2e/finance/q3.txt": FINANCE,
    "gateway://docs/file:///public/.%2E/finance/q3.txt": FINANCE,
    "gateway://docs/file:///%66inance/q3.txt": FINANCE,
    "gateway://docs/file:///%66%69%6E%61%6e%63%65/q3%2etxt": FINANCE,
    "gateway://docs/FILE:///finance/q3.txt": FINANCE,
    "gateway://docs/file://localhost/finance/q3.txt": FINANCE,
    "gateway://docs/File://LocalHost/finance/q3.txt": FINANCE,
    "gateway://docs/file:///../finance/q3.txt": FINANCE,
    "gateway://docs/file:///../../finance/./q3.txt": FINANCE,
    "gateway://docs/file:///finance/x/../q3.txt": FINANCE,
    "gateway://docs/file:///public/..%2Ffinance/q3.txt": UNCLEAR,
    "gateway://docs/file:///public/%252e%252e/finance/q3.txt": UNCLEAR,
    "gateway://docs/file:///public/%25%32%65%25%32%65/finance/q3.txt": UNCLEAR,
    "gateway://docs/file:///public\\..\\finance\\q3.txt": UNCLEAR,
    "gateway://docs/file:///public/..%5Cfinance/q3.txt": UNCLEAR,
    "gateway://docs/file:///finance./q3.txt": UNCLEAR,
    "gateway://docs/file:///finance/q3.txt.": UNCLEAR,
    "gateway://docs/file:///finance%20/q3.txt": UNCLEAR,
    "gateway://docs/file:////finance/q3.txt": UNCLEAR,
    "gateway://docs/file:///public//../finance/q3.txt": UNCLEAR,
    "gateway://docs/file:///finance/q3.txt%00": UNCLEAR,
    "gateway://docs/file:///finance/q3.txt%": UNCLEAR,
    "gateway://docs/file:///%66inance/summary.txt": SUMMARY,
    "gateway://docs/file:///public/../finance/./summary.txt": SUMMARY,
    "gateway://docs/file:///finance/summary.txt/": FINANCE,  # not the listed one: through the template
    "gateway://docs/records://%31%33": RECORD_13,
    "gateway://docs/records://%313": RECORD_13,
    "gateway://docs/records://1%33": RECORD_13,
    "gateway://docs/records://%2e%2e": UNCLEAR,
    "gateway://docs/notes://users/%61lice": ALICES,
    "gateway://docs/notes://users/%61%6C%69%63%65": ALICES,
    "gateway://docs/notes://users/bob/../alice": ALICES,
    "gateway://docs/notes://users/./alice": ALICES,
    "gateway://docs/notes://users/%2e/alice": ALICES,
}


def _docs_upstream(log: Path) -> dict[str, Any]:
    return {"name": "docs", "mcp": {"command": sys.executable, "args": [str(SERVER)],
                                    "env": {"FILES_READ_LOG": str(log)}}}


async def _gateway(start_gateway: Any, configs: Any, tmp_path: Path) -> tuple[Any, Path]:
    log = tmp_path / "reads.log"
    log.touch()
    return await start_gateway(configs.base(_docs_upstream(log)), {"documents.yaml": POLICY}), log


async def _outcome(client: Any, uri: str) -> tuple[Any, ...]:
    """What a read gives, with the URI asked for written ``<uri>`` (so two spellings compare)."""
    try:
        result = await client.read_resource(uri)
    except MCPError as exc:
        return "error", exc.code, exc.message.replace(uri, "<uri>")
    return "read", [c.text for c in result.contents]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_every_spelling_of_a_guarded_resource_is_decided_as_the_resource_it_decodes_to(
        mode: str, start_gateway: Any, configs: Any, connect_mcp: Any, tmp_path: Path) -> None:
    gateway, log = await _gateway(start_gateway, configs, tmp_path)
    async with connect_mcp(gateway, "bob", mode=mode) as bob:
        plain = {uri: await _outcome(bob.client, uri) for uri in (FINANCE, SUMMARY, RECORD_13, ALICES)}
        got = {uri: await _outcome(bob.client, uri) for uri in FORMS}
    assert plain == {
        FINANCE: ("error", -32602, "Unknown resource: <uri>"),  # hidden from bob
        SUMMARY: ("error", -32602, "Unknown resource: <uri>"),
        RECORD_13: ("error", REFUSED, "Record 13 is sealed."),
        ALICES: ("error", REFUSED, "Only alice reads alice's notes."),
    }
    wrong = {}
    for uri, decided_as in FORMS.items():
        outcome = got[uri]
        if decided_as is UNCLEAR:
            ok = outcome[:2] == ("error", REFUSED) and outcome[2].startswith("This resource URI is refused: ")
        else:
            ok = outcome == plain[decided_as]
        if not ok:
            wrong[uri] = outcome
    assert wrong == {}
    assert "SECRET" not in log.read_text(encoding="utf-8")
    assert not [line for line in log.read_text(encoding="utf-8").splitlines()
                if line.startswith("finance/") or line in ("record 13", "notes alice")]
    events = [e for e in gateway.audit_events() if e["event"] == "resource.outcome"]
    assert len(events) == len(FORMS) + len(plain)
    assert all(e["upstream_outcome"]["status"] == "not_called" or e["verdict"] == "unknown" for e in events)
    unclear = next(e for e in events if e["name"] == "gateway://docs/file:///finance%2Fq3.txt")
    assert (unclear["verdict"], unclear["upstream"]) == ("reject", None)
    assert unclear["message"].startswith("This resource URI is refused: it has an encoded '/' (%2F)")


async def test_a_read_is_sent_upstream_in_the_form_it_was_decided_on(start_gateway: Any, configs: Any,
                                                                     connect_mcp: Any, tmp_path: Path) -> None:
    gateway, log = await _gateway(start_gateway, configs, tmp_path)
    async with connect_mcp(gateway, "alice") as alice:
        listed = await alice.client.read_resource("gateway://docs/file:///public/./%72eadme.txt")
        record = await alice.client.read_resource("gateway://docs/records://%37")
        notes = await alice.client.read_resource("gateway://docs/notes://users/%61lice")  # alice's own
    assert [(c.uri, c.text) for c in listed.contents] == [  # type: ignore[union-attr]
        ("gateway://docs/file:///public/readme.txt", "the public readme")]
    assert [(c.uri, c.text) for c in record.contents] == [  # type: ignore[union-attr]
        ("gateway://docs/records://7", "record seven")]
    assert [c.text for c in notes.contents] == ["SECRET notes of alice"]  # type: ignore[union-attr]
    assert log.read_text(encoding="utf-8").splitlines() == ["public/readme.txt", "record 7", "notes alice"]
    events = {e["name"]: e for e in gateway.audit_events() if e["event"] == "resource.outcome"}
    record_event = events["gateway://docs/records://%37"]
    assert (record_event["upstream_name"], record_event["arguments"]) == ("records://7", {"id": "7"})
    assert events["gateway://docs/file:///public/./%72eadme.txt"]["upstream_name"] == "file:///public/readme.txt"


async def test_hidden_and_unknown_resources_get_identical_answers(start_gateway: Any, configs: Any,
                                                                  keys: dict[str, str], tmp_path: Path) -> None:
    gateway, log = await _gateway(start_gateway, configs, tmp_path)
    pairs = [
        (FINANCE, "gateway://docs/file:///finance/q4.txt"),  # hidden, through the template / the server has no q4
        (SUMMARY, "gateway://docs/file:///finance/summarx.txt"),  # hidden and listed / not listed
        (SUMMARY, "gateway://nothing/file:///finance/summary.txt"),  # / no such upstream
    ]
    unclear = ("gateway://docs/file:///finance%2Fq3.txt", "gateway://nothing/file:///finance%2Fq3.txt")
    async with RawMcp.open(gateway.url, keys["bob"]) as bob:
        for method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
            for hidden, unknown in [*pairs, unclear]:
                to_hidden, to_unknown = await bob.answer_about(method, hidden), await bob.answer_about(method, unknown)
                assert to_hidden == to_unknown, (method, hidden, unknown)
        subscribed = await bob.answer_about("resources/subscribe", SUMMARY)
        unsubscribed = await bob.answer_about("resources/unsubscribe", SUMMARY)
    assert json.loads(subscribed[2])["error"] == {"code": -32602, "message": "Unknown resource: <uri>"}
    assert json.loads(unsubscribed[2])["result"] == {}
    assert not [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("finance/")]
