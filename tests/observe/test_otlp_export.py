"""tracing.exporter: otlp, with the `otlp` extra the image installs: spans reach a real OTLP/HTTP receiver.

The receiver is a loopback Starlette app at /v1/traces; the gateway's exporter finds it through the
standard OTEL_EXPORTER_OTLP_ENDPOINT, and the batch processor flushes every 50 ms (OTEL_BSP_SCHEDULE_DELAY).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx2
import pytest
import pytest_asyncio
from loopback import serve_app
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLICY = """
policy: otlp
rules:
  - id: no-forbidden
    tools: [up_echo]
    when: args.text == "forbidden"
    action: reject
    message: Not that word.
"""

EXPORT_SECONDS = 10.0  # the batch processor's delay is 50 ms here; this is the wait for a busy machine


@pytest_asyncio.fixture(loop_scope="session")
async def receiver() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """An OTLP/HTTP trace receiver on loopback: its base URL and the export requests it got."""
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        received.append(message)
        return Response(b"", media_type="application/x-protobuf")  # an empty ExportTraceServiceResponse

    async with serve_app(Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])]), lifespan="off") as url:
        yield url, received


async def test_call_spans_reach_an_otlp_receiver(start_gateway, configs, keys, receiver,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, received = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-under-test")
    gw = await start_gateway(configs.base(configs.mcp_upstream("up"), tracing={"enabled": True, "exporter": "otlp"}),
                             {"otlp.yaml": POLICY})
    call_id = f"otlp-{uuid.uuid4().hex[:8]}"
    async with httpx2.AsyncClient(base_url=gw.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as client:
        response = await client.post("/v1/tools/up_echo/invoke",
                                     json={"arguments": {"text": "forbidden"}, "call_id": call_id})
    assert response.status_code == 200 and response.json()["decision"] == "reject"

    def call_span() -> tuple[str, dict[str, str]] | None:
        for request in received:
            for resource_spans in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: a.value.string_value for a in span.attributes}
                        if span.name == "gateway.call" and attributes.get("gateway.call_id") == call_id:
                            return service["service.name"], attributes
        return None

    async with asyncio.timeout(EXPORT_SECONDS):
        while (found := call_span()) is None:
            await asyncio.sleep(0.05)
    service, attributes = found
    assert service == "gateway-under-test"
    assert attributes["gateway.rule"] == "otlp/no-forbidden"
