"""GET /metrics: the Prometheus exposition, for keys with `metrics: true` or `admin: true` (behind RequireIdentity)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.frontends.identity import identity_of
from gateway.frontends.rest import error_response
from gateway.observe.metrics import CONTENT_TYPE, Metrics

__all__ = ["METRICS_PATH", "metrics_routes"]

METRICS_PATH = "/metrics"


def metrics_routes(metrics: Metrics) -> list[Route]:
    """The scrape route (it expects ``RequireIdentity`` in front, like the admin API)."""

    async def scrape(request: Request) -> Response:
        identity = identity_of(request.scope)
        if not (identity.metrics or identity.admin):
            return error_response(403, "not-allowed-metrics", "Only keys with metrics: true or admin: true may "
                                  "read the metrics.")
        # multiprocess mode reads every worker's files: off the event loop
        body = await asyncio.to_thread(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE)

    return [Route(METRICS_PATH, scrape, methods=["GET"])]


