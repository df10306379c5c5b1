"""OpenTelemetry: an in-memory exporter sees the call span and its stage spans with verdict and rule, and a
client's W3C traceparent reaches real HTTP and MCP upstreams (with tracing on, and passed through with it off)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from gateway_harness import Configs, run_gateway, write_gateway
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"

POLICY = """
policy: obs
rules:
  - id: no-forbidden
    tools: [up_echo]
    when: args.text == "forbidden"
    action: reject
    message: Not that word.
  - id: redact-access-keys
    tools: [up_secret]
    stage: response
    action: rewrite
    rewrite:
      redact: ['AKIA[0-9A-Z]{16}']
  - id: deletes-need-a-human
    tools: [up_delete_thing]
    action: approve
    message: Deletes need a human.
    approval: {approvers: ["group:ops"], timeout: 30s, on_timeout: reject, via: page}
"""


def _config(configs: Any, http_url: str, *, tracing: bool) -> dict[str, Any]:
    return configs.base(configs.mcp_upstream("up", env={"UPSTREAM_TRACE_TOOL": "1"}),
                        configs.http_upstream("api", http_url, prefix="web"),
                        tracing={"enabled": tracing, "exporter": "none"})


# One gateway of each kind for the module (each start launches the stdio test server: seconds of CPU); every
# test reads only the spans and audit events of its own call ids.
@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def traced(tmp_path_factory: pytest.TempPathFactory, http_api: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A gateway with tracing on and an in-memory exporter on its tracer provider."""
    root = tmp_path_factory.mktemp("traced")
    async with run_gateway(write_gateway(root, _config(Configs, http_api.url, tracing=True), {"obs.yaml": POLICY})) \
            as gw:
        exporter = InMemorySpanExporter()
        gw.gateway.observer.tracing.provider.add_span_processor(SimpleSpanProcessor(exporter))
        yield gw, exporter


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def untraced(tmp_path_factory: pytest.TempPathFactory, http_api: Any) -> AsyncIterator[Any]:
    """A gateway with tracing off (the default)."""
    root = tmp_path_factory.mktemp("untraced")
    async with run_gateway(write_gateway(root, _config(Configs, http_api.url, tracing=False), {"obs.yaml": POLICY})) \
            as gw:
        yield gw


def _spans(exporter: InMemorySpanExporter, call_id: str) -> dict[str, ReadableSpan]:
    """The spans of one call by name: its call span and the spans under it."""
    spans = exporter.get_finished_spans()
    [call] = [s for s in spans if s.name == "gateway.call" and (s.attributes or {}).get("gateway.call_id") == call_id]
    assert call.context is not None
    found = {"gateway.call": call}
    for span in spans:
        if span.parent is not None and span.parent.span_id == call.context.span_id:
            assert span.name not in found, f"two {span.name} spans"
            found[span.name] = span
    return found


async def _invoke(gw: Any, keys: dict[str, str], tool: str, arguments: dict[str, Any], call_id: str,
                  traceparent: str | None = TRACEPARENT) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {keys['alice']}", **({"traceparent": traceparent} if traceparent else {})}
    async with httpx2.AsyncClient(base_url=gw.url, headers=headers) as client:
        response = await client.post(f"/v1/tools/{tool}/invoke", json={"arguments": arguments, "call_id": call_id})
    body: dict[str, Any] = response.json()
    return body


def _parts(traceparent: str) -> tuple[str, str]:
    version, trace_id, parent, flags = traceparent.split("-")
    assert (version, len(flags)) == ("00", 2)
    return trace_id, parent


async def test_a_call_span_with_decide_and_upstream_children_continues_the_clients_trace(traced, keys, call_id):
    gw, exporter = traced
    cid = call_id()
    assert (await _invoke(gw, keys, "up_echo", {"text": "hi"}, cid))["decision"] == "allow"

    spans = _spans(exporter, cid)
    call = spans["gateway.call"]
    assert call.parent is not None and call.parent.is_remote
    assert (f"{call.parent.trace_id:032x}", f"{call.parent.span_id:016x}") == (TRACE_ID, CLIENT_SPAN)
    assert {s.context.trace_id for s in spans.values() if s.context} == {int(TRACE_ID, 16)}
    assert set(spans) == {"gateway.call", "gateway.decide", "gateway.upstream"}
    decide = spans["gateway.decide"].attributes or {}
    assert (decide["gateway.stage"], decide["gateway.verdict"]) == ("request", "allow")
    assert (spans["gateway.upstream"].attributes or {})["gateway.upstream.outcome"] == "ok"
    attributes = call.attributes or {}
    assert (attributes["gateway.verdict"], attributes["gateway.outcome"], attributes["gen_ai.tool.name"]) == (
        "allow", "allow", "up_echo")


async def test_a_rejected_call_names_its_rule_and_never_reaches_the_upstream(traced, keys, call_id):
    gw, exporter = traced
    cid = call_id()
    assert (await _invoke(gw, keys, "up_echo", {"text": "forbidden"}, cid))["decision"] == "reject"

    spans = _spans(exporter, cid)
    assert set(spans) == {"gateway.call", "gateway.decide"}
    decide = spans["gateway.decide"].attributes or {}
    assert (decide["gateway.verdict"], decide["gateway.rule"]) == ("reject", "obs/no-forbidden")
    call = spans["gateway.call"].attributes or {}
    assert (call["gateway.verdict"], call["gateway.rule"]) == ("reject", "obs/no-forbidden")


async def test_response_policies_and_an_approval_wait_get_their_own_spans(traced, keys, call_id):
    gw, exporter = traced
    cid = call_id()
    assert (await _invoke(gw, keys, "up_secret", {}, cid))["decision"] == "allow"
    spans = _spans(exporter, cid)
    assert set(spans) == {"gateway.call", "gateway.decide", "gateway.upstream", "gateway.response_policies"}
    response = spans["gateway.response_policies"].attributes or {}
    assert response["gateway.stage"] == "response"
    assert list(response["gateway.rules"]) == ["obs/redact-access-keys"]  # a rewrite applies, it decides nothing
    upstream, after = spans["gateway.upstream"], spans["gateway.response_policies"]
    assert upstream.end_time is not None and after.start_time is not None and after.start_time >= upstream.end_time

    held = call_id()
    body = await _invoke(gw, keys, "up_delete_thing", {"id": "t1"}, held)  # no wait: 202 pending at once
    assert body["decision"] == "pending", body
    spans = _spans(exporter, held)
    assert set(spans) == {"gateway.call", "gateway.decide", "gateway.approval_wait"}
    wait = spans["gateway.approval_wait"].attributes or {}
    assert wait["gateway.approval.result"] == "pending" and wait["gateway.approval_id"] == body["approval_id"]
    assert (spans["gateway.decide"].attributes or {})["gateway.rule"] == "obs/deletes-need-a-human"


async def test_traceparent_reaches_a_real_http_upstream_as_the_upstream_spans_child(traced, keys, http_api, call_id):
    gw, exporter = traced
    marker, cid = f"item-{uuid.uuid4().hex}", call_id()
    assert (await _invoke(gw, keys, "web_get_item", {"item_id": marker}, cid))["decision"] == "allow"

    [request] = http_api.seen(marker)
    trace_id, parent = _parts(request["headers"]["traceparent"])
    upstream = _spans(exporter, cid)["gateway.upstream"]
    assert upstream.context is not None
    assert (trace_id, parent) == (TRACE_ID, f"{upstream.context.span_id:016x}")


async def test_traceparent_reaches_a_real_mcp_upstream_in_meta(traced, keys, call_id):
    gw, exporter = traced
    cid = call_id()
    body = await _invoke(gw, keys, "up_trace_context", {}, cid)
    seen = body["structured"]
    trace_id, parent = _parts(seen["traceparent"])
    upstream = _spans(exporter, cid)["gateway.upstream"]
    assert upstream.context is not None
    assert (trace_id, parent) == (TRACE_ID, f"{upstream.context.span_id:016x}")


async def _mcp_call(gw: Any, keys: dict[str, str], mode: str, *, meta: dict[str, Any] | None = None,
                    header: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {keys['alice']}", **({"traceparent": header} if header else {})}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http, \
            Client(streamable_http_client(gw.mcp_url, http_client=http), mode=mode) as client:
        result = await client.call_tool("up_trace_context", {}, meta=meta)
    assert not result.is_error, result
    seen: dict[str, Any] = result.structured_content or json.loads(result.content[0].text)  # type: ignore[union-attr]
    return seen


async def test_mcp_clients_pass_trace_context_in_meta_or_header_in_both_eras(traced, keys):
    gw, _exporter = traced
    other = "0af7651916cd43dd8448eb211c80319c"
    for mode in ("legacy", "2026-07-28"):
        from_meta = await _mcp_call(gw, keys, mode, meta={"traceparent": TRACEPARENT})
        assert _parts(from_meta["traceparent"])[0] == TRACE_ID, mode
        from_header = await _mcp_call(gw, keys, mode, header=f"00-{other}-{CLIENT_SPAN}-01")
        assert _parts(from_header["traceparent"])[0] == other, mode
        # _meta (per request) wins over the connection's header
        both = await _mcp_call(gw, keys, mode, meta={"traceparent": TRACEPARENT},
                               header=f"00-{other}-{CLIENT_SPAN}-01")
        assert _parts(both["traceparent"])[0] == TRACE_ID, mode


async def test_a_malformed_traceparent_starts_a_new_trace(traced, keys, http_api, call_id):
    gw, exporter = traced
    for bad in (f"00-{'0' * 32}-{CLIENT_SPAN}-01", "00-xyz-abc-01", f"ff-{TRACE_ID}-{CLIENT_SPAN}-01",
                "00-" + TRACE_ID + "-" + CLIENT_SPAN + "-01" + "x" * 600):
        marker, cid = f"item-{uuid.uuid4().hex}", call_id()
        assert (await _invoke(gw, keys, "web_get_item", {"item_id": marker}, cid, traceparent=bad))["decision"] == \
            "allow"
        call = _spans(exporter, cid)["gateway.call"]
        assert call.parent is None and call.context is not None, bad  # a root span of a new trace
        [request] = http_api.seen(marker)
        assert _parts(request["headers"]["traceparent"])[0] == f"{call.context.trace_id:032x}" != TRACE_ID


async def test_tracing_off_passes_the_clients_traceparent_through_unchanged(untraced, keys, http_api, call_id):
    assert untraced.gateway.observer.tracing.provider is None
    marker = f"item-{uuid.uuid4().hex}"
    assert (await _invoke(untraced, keys, "web_get_item", {"item_id": marker}, call_id()))["decision"] == "allow"
    [request] = http_api.seen(marker)
    assert request["headers"]["traceparent"] == TRACEPARENT
    seen = (await _invoke(untraced, keys, "up_trace_context", {}, call_id()))["structured"]
    assert seen["traceparent"] == TRACEPARENT

    # no trace context from the client: none is made up
    marker = f"item-{uuid.uuid4().hex}"
    await _invoke(untraced, keys, "web_get_item", {"item_id": marker}, call_id(), traceparent=None)
    [request] = http_api.seen(marker)
    assert "traceparent" not in request["headers"]
    assert (await _invoke(untraced, keys, "up_trace_context", {}, call_id(), traceparent=None))["structured"] == {}
    # a malformed one is not passed on
    seen = (await _invoke(untraced, keys, "up_trace_context", {}, call_id(), traceparent="00-bad"))["structured"]
    assert seen == {}


# --- the audit line names the call's trace (gateway/core/audit_head.py) -------------------------------------

HEAD = ["event", "id", "time", "trace_id"]


def _call_events(gw: Any, call_id: str) -> list[dict[str, Any]]:
    return [e for e in gw.audit_events() if e.get("call_id") == call_id]


async def test_a_traced_calls_audit_events_carry_its_trace_id_first_in_their_head(traced, keys, call_id):
    gw, exporter = traced
    cid = call_id()
    assert (await _invoke(gw, keys, "up_echo", {"text": "hi"}, cid))["decision"] == "allow"
    call = _spans(exporter, cid)["gateway.call"]
    assert call.context is not None and f"{call.context.trace_id:032x}" == TRACE_ID
    events = _call_events(gw, cid)
    assert [e["event"] for e in events] == ["call.intent", "call.outcome"]
    for event in events:
        assert list(event)[:4] == HEAD and event["trace_id"] == TRACE_ID
        assert list(event)[4] == "call_id"  # the rest of the line as before

    # no trace context from the client: the trace the gateway started
    cid = call_id()
    assert (await _invoke(gw, keys, "up_echo", {"text": "forbidden"}, cid, traceparent=None))["decision"] == "reject"
    call = _spans(exporter, cid)["gateway.call"]
    assert call.context is not None
    [event] = _call_events(gw, cid)
    assert event["trace_id"] == f"{call.context.trace_id:032x}" != TRACE_ID


async def test_untraced_audit_events_carry_the_clients_valid_trace_id_or_null(untraced, keys, call_id):
    cid = call_id()
    await _invoke(untraced, keys, "up_echo", {"text": "hi"}, cid)
    assert {e["trace_id"] for e in _call_events(untraced, cid)} == {TRACE_ID}
    for traceparent in (None, "00-bad", f"00-{'0' * 32}-{CLIENT_SPAN}-01"):
        cid = call_id()
        await _invoke(untraced, keys, "up_echo", {"text": "hi"}, cid, traceparent=traceparent)
        events = _call_events(untraced, cid)
        assert events and all(list(e)[:4] == HEAD and e["trace_id"] is None for e in events), traceparent
