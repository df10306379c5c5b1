"""Assemble the gateway from a config: upstreams, registry, policies, store, audit, frontends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ApprovalStore
from gateway.approvals.webhooks import WebhookNotifier
from gateway.auth import Authenticator
from gateway.config.load import LoadedConfig, resolve_secret
from gateway.config.model import UpstreamSpec
from gateway.diagnostics import Diagnostic
from gateway.errors import ConfigError, StoreUnavailable
from gateway.frontends.approvals_api import approval_routes
from gateway.frontends.approvals_page import approvals_page_routes
from gateway.frontends.identity import RequireIdentity
from gateway.frontends.mcp import McpFrontend
from gateway.frontends.rest import rest_routes
from gateway.pipeline import Gateway
from gateway.pipeline.audit import AuditLog, Redactor
from gateway.policy.model import parse_duration
from gateway.reload import PolicyHolder
from gateway.store.sqlite import SqliteStore
from gateway.upstreams.base import Upstream, UpstreamTool
from gateway.upstreams.http import HttpOperation, HttpUpstream
from gateway.upstreams.launch import LaunchedUpstream
from gateway.upstreams.mcp import McpUpstream
from gateway.upstreams.registry import Source, ToolRegistry

__all__ = ["build_app", "build_gateway", "build_upstream"]

log = logging.getLogger("gateway")


def build_upstream(spec: UpstreamSpec, config: LoadedConfig) -> Upstream:
    """One upstream from its config."""
    base = config.base
    if spec.mcp is not None:
        m = spec.mcp
        return McpUpstream(
            spec.name, url=m.url, headers={k: resolve_secret(v, base) for k, v in m.headers.items()},
            command=m.command, args=m.args, env={k: resolve_secret(v, base) for k, v in m.env.items()},
            cwd=config.path(m.cwd) if m.cwd else base,
        )
    http: HttpUpstream
    if spec.http is not None:
        headers = {k: resolve_secret(v, base) for k, v in spec.http.headers.items()}
        ops = [HttpOperation.build(
            _upstream_tool(t.name, t.description, t.input_schema, t.title, t.annotations),
            t.method, t.path, tuple(t.query), None if t.body is None else t.body == "json") for t in spec.http.tools]
        http, launch = HttpUpstream(spec.name, spec.http.base_url, ops, headers), spec.http.launch
    else:
        assert spec.openapi is not None
        from gateway.upstreams.openapi import openapi_upstream

        headers = {k: resolve_secret(v, base) for k, v in spec.openapi.headers.items()}
        http, launch = openapi_upstream(spec.name, spec.openapi, base, headers), spec.openapi.launch
    if launch is None:
        return http
    return LaunchedUpstream(http, http.base_url, launch.command, launch.args,
                            {k: resolve_secret(v, base) for k, v in launch.env.items()},
                            config.path(launch.cwd) if launch.cwd else base)


def _own_timeout(spec: UpstreamSpec) -> float:
    kind = spec.http or spec.openapi or spec.mcp
    assert kind is not None
    return parse_duration(kind.timeout)


def _upstream_tool(name: str, description: str, schema: dict[str, Any], title: str | None,
                   annotations: dict[str, Any]) -> UpstreamTool:
    return UpstreamTool(name, description, dict(schema), title, dict(annotations))


def public_url(config: LoadedConfig) -> str:
    """Where people reach this gateway (for links in progress messages and webhooks)."""
    listen = config.spec.listen
    return (config.spec.approvals.public_url or f"http://{listen.host}:{listen.port}").rstrip("/")


def build_gateway(config: LoadedConfig) -> Gateway:
    """The call pipeline with its policies, store, audit log and approvals (upstreams not started yet)."""
    spec = config.spec
    registry = ToolRegistry([Source(build_upstream(u, config), u.exposed_name, _own_timeout(u))
                             for u in spec.upstreams])
    policies = PolicyHolder(config.policy_paths(), spec.engine)
    store = SqliteStore(config.path(spec.store.sqlite))
    audit = AuditLog(config.path(spec.audit.file) if spec.audit.file else None, spec.audit.stdout,
                     Redactor(spec.audit.redact_keys, spec.audit.redact_patterns))
    page = f"{public_url(config)}/approvals"
    notifier = WebhookNotifier.from_specs(spec.approvals.webhooks, config.base, page) \
        if spec.approvals.webhooks else None
    approvals = ApprovalService(ApprovalStore(store), notifier, page)
    return Gateway(policies, registry, store, audit, env=spec.env, call_timeout=config.call_timeout,
                   max_argument_bytes=spec.limits.max_argument_bytes, approvals=approvals)


def build_app(config: LoadedConfig, gateway: Gateway | None = None) -> Starlette:
    """The ASGI app: /mcp, /v1/*, /healthz, with upstreams started and policies watched in its lifespan."""
    gateway = gateway or build_gateway(config)
    auth = Authenticator(config.spec.auth, config.base)
    mcp = McpFrontend(gateway)
    interval = parse_duration(config.spec.reload_interval)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await _start_upstreams(gateway, config)
        tasks = [asyncio.create_task(gateway.policies.watch(interval), name="policy-watcher")]
        if isinstance(gateway.approvals, ApprovalService):
            try:
                interrupted = await gateway.approvals.recover()
            except StoreUnavailable as exc:  # the sweeper does it once the database is free
                log.warning("approved calls not checked at start: %s", exc)
                interrupted = 0
            if interrupted:
                log.warning("%d approved calls were interrupted (their gateway stopped); marked as such", interrupted)
            tasks.append(asyncio.create_task(gateway.approvals.sweep(), name="approval-sweeper"))
        try:
            async with mcp.sessions.run():
                yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if isinstance(gateway.approvals, ApprovalService):
                await gateway.approvals.aclose()
            for upstream in gateway.registry.upstreams:
                await upstream.close()
            gateway.audit.close()
            gateway.store.close()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "revision": gateway.policies.current.revision,
                             "tools": len(gateway.registry.all())})

    api = [Route("/mcp", mcp.endpoint, methods=["GET", "POST", "DELETE"]), *rest_routes(gateway)]
    open_routes: list[BaseRoute] = [Route("/healthz", healthz)]
    if isinstance(gateway.approvals, ApprovalService):
        api.extend(approval_routes(gateway.approvals))
        open_routes.extend(approvals_page_routes())
    protected = Starlette(routes=api, middleware=[Middleware(RequireIdentity, auth=auth)])
    app = Starlette(routes=[*open_routes, Mount("/", app=protected)], lifespan=lifespan)
    app.state.gateway = gateway
    return app


async def _start_upstreams(gateway: Gateway, config: LoadedConfig) -> None:
    async def start(upstream: Upstream) -> None:
        try:
            await upstream.start()
        except Exception as exc:  # a down upstream must not keep the others from serving
            log.error("upstream %s failed to start: %s", upstream.name, exc)

    await asyncio.gather(*(start(u) for u in gateway.registry.upstreams))
    problems = gateway.registry.rebuild()
    if problems:
        raise ConfigError([Diagnostic("tool-names", p, str(config.file)) for p in problems])
    log.info("serving %d tools from %d upstreams; policy revision %s", len(gateway.registry.all()),
             len(gateway.registry.upstreams), gateway.policies.current.revision)


