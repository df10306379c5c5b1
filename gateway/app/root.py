"""Assemble the gateway from a config: upstreams, registry, policies, store, audit, frontends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Scope

from gateway.app.audit import build_audit
from gateway.app.console import build_console
from gateway.app.credentials import build_authenticator, build_notifier, build_upstream_credentials
from gateway.app.model_proxy import build_model_proxy
from gateway.app.pins import build_pins, report_drifts
from gateway.app.protected_resource import build_protected_resource
from gateway.app.readiness import readiness
from gateway.app.sso import build_sso
from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ApprovalStore
from gateway.auth.keys import Authenticator
from gateway.config.load import LoadedConfig, resolve_secret
from gateway.config.model import UpstreamSpec
from gateway.core.diagnostics import Diagnostic
from gateway.core.durations import parse_duration
from gateway.core.errors import ConfigError, StoreUnavailable
from gateway.core.limits import (
    BODY_OVERHEAD_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_SETTLE_SECONDS,
    LEASE_RENEWALS,
    SETTLE_POLLS,
)
from gateway.frontends.approvals_api import approval_routes
from gateway.frontends.approvals_page import approvals_page_routes
from gateway.frontends.challenge import PLAIN, Challenge
from gateway.frontends.console_page import console_page_routes
from gateway.frontends.http.edge import LOOPBACK_NAMES, BodyLimit, HostOriginGuard, HostRules, JsonOnly, is_loopback
from gateway.frontends.http.errors import json_http_errors
from gateway.frontends.http.protocol import edge_protocol
from gateway.frontends.http.shares import ConnectionShares, Shares
from gateway.frontends.identity import RefusalBodies, RequireIdentity, gateway_body
from gateway.frontends.mcp import McpFrontend
from gateway.frontends.metrics_api import METRICS_PATH, metrics_routes
from gateway.frontends.model_endpoints import model_refusal_bodies, model_routes
from gateway.frontends.openapi_doc import openapi_routes
from gateway.frontends.protected_resource import protected_resource_routes
from gateway.frontends.rest import rest_routes
from gateway.frontends.sessions_api import session_admin_routes
from gateway.frontends.sso import SessionCookies, SsoPages
from gateway.observe import CallObserver, Metrics
from gateway.observe.metrics import counting_reloads
from gateway.observe.tracing import build_tracing
from gateway.pipeline import Gateway
from gateway.pipeline.audit import AuditLog, Redactor
from gateway.pipeline.principal_limits import PrincipalLimits
from gateway.pipeline.settings import CallSettings
from gateway.reload.holder import PolicyHolder
from gateway.store.sql import SqlStore
from gateway.store.sqlite import SqliteStore
from gateway.upstreams.base import Upstream, UpstreamTool
from gateway.upstreams.client_requests import KINDS, ClientRequestRules
from gateway.upstreams.http import HttpOperation, HttpUpstream
from gateway.upstreams.launch import LaunchedUpstream
from gateway.upstreams.mcp import McpUpstream
from gateway.upstreams.pinning import Pins
from gateway.upstreams.registry import Source, ToolRegistry
from gateway.upstreams.supervise import Backoff, Supervisor

__all__ = ["build_app", "build_gateway", "build_model_proxy", "build_registry", "build_store", "build_supervisor",
           "build_upstream", "server_options"]

log = logging.getLogger("gateway")


def build_upstream(spec: UpstreamSpec, config: LoadedConfig) -> Upstream:
    """One upstream from its config."""
    base = config.base
    if spec.mcp is not None:
        m = spec.mcp
        return McpUpstream(
            spec.name, url=m.url, headers={k: resolve_secret(v, base) for k, v in m.headers.items()},
            command=m.command, args=m.args, env={k: resolve_secret(v, base) for k, v in m.env.items()},
            cwd=config.path(m.cwd) if m.cwd else base, env_passthrough=m.env_passthrough,
            max_response_bytes=config.spec.limits.max_response_bytes, protocol=m.protocol,
            client_requests=ClientRequestRules(
                **{kind: getattr(m.client_requests, kind) == "allow" for kind in KINDS},
                needs=tuple((pattern, frozenset(kinds)) for pattern, kinds in m.tools_need_client.items())),
            fast_calls=m.fast_calls, credentials=build_upstream_credentials(m.auth, spec.name, config),
        )
    http: HttpUpstream
    if spec.http is not None:
        headers = {k: resolve_secret(v, base) for k, v in spec.http.headers.items()}
        ops = [HttpOperation.build(
            UpstreamTool(t.name, t.description, dict(t.input_schema), t.title, dict(t.annotations)),
            t.method, t.path, tuple(t.query), None if t.body is None else t.body == "json") for t in spec.http.tools]
        http = HttpUpstream(spec.name, spec.http.base_url, ops, headers,
                            max_response_bytes=config.spec.limits.max_response_bytes,
                            credentials=build_upstream_credentials(spec.http.auth, spec.name, config))
        launch = spec.http.launch
    else:
        assert spec.openapi is not None
        from gateway.upstreams.openapi import openapi_upstream

        headers = {k: resolve_secret(v, base) for k, v in spec.openapi.headers.items()}
        http = openapi_upstream(spec.name, spec.openapi, base, headers,
                                max_response_bytes=config.spec.limits.max_response_bytes,
                                credentials=build_upstream_credentials(spec.openapi.auth, spec.name, config))
        launch = spec.openapi.launch
    if launch is None:
        return http
    # A spec URL's upstream learns its base URL when it starts: until then the spec's origin is the service's.
    answers_on = http.base_url or (spec.openapi.spec if spec.openapi else "")
    return LaunchedUpstream(http, answers_on, launch.command, launch.args,
                            {k: resolve_secret(v, base) for k, v in launch.env.items()},
                            config.path(launch.cwd) if launch.cwd else base, launch.env_passthrough)


def _own_timeout(spec: UpstreamSpec) -> float:
    kind = spec.http or spec.openapi or spec.mcp
    assert kind is not None
    return parse_duration(kind.timeout)


def public_url(config: LoadedConfig) -> str:
    """Where people reach this gateway (for links in progress messages and webhooks)."""
    listen = config.spec.listen
    return (config.spec.approvals.public_url or f"http://{listen.host}:{listen.port}").rstrip("/")


def _settle_seconds(config: LoadedConfig) -> float:
    """How long changed policy files must stay unchanged before they are loaded."""
    if config.spec.reload.settle is not None:
        return parse_duration(config.spec.reload.settle)
    return max(DEFAULT_SETTLE_SECONDS, SETTLE_POLLS * parse_duration(config.spec.reload_interval))


def build_registry(config: LoadedConfig, pins: Pins | None = None) -> ToolRegistry:
    """Every configured upstream (not started) under the names agents see, checked against ``pins`` if given."""
    return ToolRegistry([Source(build_upstream(u, config), u.exposed_name, _own_timeout(u))
                         for u in config.spec.upstreams], pins)


def build_supervisor(config: LoadedConfig, registry: ToolRegistry) -> Supervisor:
    """What keeps the registry's upstreams up, with `supervision:`'s retry and check times."""
    knobs = config.spec.supervision
    return Supervisor(registry, Backoff(parse_duration(knobs.retry_first), parse_duration(knobs.retry_max),
                                        parse_duration(knobs.check_interval)))


def build_gateway(config: LoadedConfig) -> Gateway:
    """The call pipeline with its policies, store, audit log and approvals (upstreams not started yet)."""
    spec = config.spec
    pins = build_pins(config)  # first: an unreadable lock starts nothing
    registry = build_registry(config, pins)
    audit = build_audit(config, Redactor(spec.audit.redact_keys, spec.audit.redact_patterns))
    try:
        return _gateway(config, registry, audit)
    except BaseException:
        audit.close()  # a start that failed holds nothing: the audit file (and its lock) is let go
        raise


def _gateway(config: LoadedConfig, registry: ToolRegistry, audit: AuditLog) -> Gateway:
    spec, redactor = config.spec, audit.redactor
    metrics = Metrics() if spec.metrics.enabled else None
    if metrics is not None:
        audit.on_failure = metrics.audit_failed
    policies = PolicyHolder(config.policy_paths(), spec.engine, settle=_settle_seconds(config),
                            manifest=config.path(spec.reload.manifest) if spec.reload.manifest else None,
                            base=config.base,
                            on_reload=audit.write if metrics is None else counting_reloads(audit.write, metrics))
    store = build_store(config)
    page = f"{public_url(config)}/approvals"
    notifier = build_notifier(config, page) if spec.approvals.webhooks else None
    lease = parse_duration(spec.store.lease)
    def audited(event: dict[str, Any]) -> None:  # approval events carry the revision too (a mixed fleet shows)
        audit.write({**event, "revision": policies.current.revision})

    approvals = ApprovalService(ApprovalStore(store), notifier, page,
                                redact=redactor if spec.approvals.redact else None, audit=audited,
                                audit_redactor=redactor, lease_seconds=lease, heartbeat_seconds=lease / LEASE_RENEWALS)
    if metrics is not None:
        metrics.count_open_approvals(lambda: approvals.store.list_requests("pending", 1, 0)[1])
    per_principal = spec.limits.per_principal
    limits = PrincipalLimits(per_principal.max_concurrent_calls, per_principal.calls_per_minute,
                             max_held=per_principal.max_held_calls)
    tracing = build_tracing(spec.tracing.enabled, spec.tracing.exporter, spec.tracing.service_name, str(config.file))
    settings = CallSettings(spec.env, config.call_timeout, spec.limits.max_argument_bytes)
    gateway = Gateway(policies, registry, store, audit, settings, approvals=approvals, limits=limits,
                      observer=CallObserver(metrics, tracing))
    if registry.pins is not None:
        report_drifts(registry.pins, gateway.record, metrics)
    return gateway


def build_store(config: LoadedConfig) -> SqlStore:
    """The store `store:` names: the SQLite file (the default) or PostgreSQL (docs/store.md)."""
    spec = config.spec
    idle = parse_duration(spec.runs.idle_timeout)
    windows = {name: parse_duration(d) for name, d in spec.usage_windows.items()}
    if spec.store.postgres is not None:
        from gateway.store.postgres import PostgresStore  # loads the driver only when configured

        try:
            dsn = resolve_secret(spec.store.postgres.dsn, config.base)
        except ValueError as exc:
            raise ConfigError([Diagnostic("store-dsn", f"store.postgres.dsn: {exc}", str(config.file))]) from None
        return PostgresStore(dsn, idle_timeout=idle, usage_windows=windows)
    return SqliteStore(config.path(spec.store.sqlite), idle_timeout=idle, usage_windows=windows,
                       write_through=spec.store.shared)


def build_app(config: LoadedConfig, gateway: Gateway | None = None) -> Starlette:
    """The ASGI app: /mcp, /v1/*, /healthz, /readyz, with upstreams supervised and policies watched in its lifespan."""
    edge = _edge_middleware(config)  # first: a config the edge refuses starts nothing
    gateway = gateway or build_gateway(config)
    try:
        return _app(config, gateway, edge)
    except BaseException:
        gateway.audit.close()  # a start that failed holds nothing: the audit file (and its lock) is let go
        raise


def _app(config: LoadedConfig, gateway: Gateway, edge: list[Middleware]) -> Starlette:
    auth = build_authenticator(config, refused=gateway.observer.auth_refused)
    resource = build_protected_resource(config)
    challenge = PLAIN if resource is None else resource.challenge()
    mcp = McpFrontend(gateway, max_sessions_per_principal=config.spec.limits.max_sessions_per_principal,
                      task_timeout=parse_duration(config.spec.limits.task_timeout),
                      fast_path=config.spec.mcp.fast_path)
    interval = parse_duration(config.spec.reload_interval)
    supervisor = build_supervisor(config, gateway.registry)
    models = build_model_proxy(config, gateway)
    bodies = model_refusal_bodies() if models.routes else gateway_body
    sso = build_sso(config, auth.jwt, refused=gateway.observer.sso_refused)
    console = build_console(config, gateway, supervisor)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if config.spec.auth.anonymous is not None:
            log.warning("anonymous access is on: requests without a key act as principal %r (auth.anonymous)",
                        config.spec.auth.anonymous.id)
        if (risk := gateway.policies.partial_set_risk()) is not None:
            log.warning("%s", risk)
        await _start_upstreams(gateway, supervisor, config)
        auth.start()  # the identity providers' keys, fetched in the background
        tasks = [asyncio.create_task(gateway.policies.watch(interval), name="policy-watcher")]
        if isinstance(gateway.approvals, ApprovalService):
            try:
                interrupted = await gateway.approvals.recover()
            except StoreUnavailable as exc:  # the sweeper does it once the database is free
                log.warning("approved calls not checked at start: %s", exc)
                interrupted = 0
            if interrupted:
                log.warning("%d approved calls were interrupted (their gateway stopped); marked as such", interrupted)
            gateway.approvals.watch()  # decisions made through other processes wake calls held here
            tasks.append(asyncio.create_task(gateway.approvals.sweep(), name="approval-sweeper"))
        try:
            async with mcp.sessions.run():
                yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await mcp.tasks.aclose()  # running MCP tasks end (cancelled, audited) before the audit log closes
            if isinstance(gateway.approvals, ApprovalService):
                await gateway.approvals.aclose()
            await supervisor.close()
            await models.close()
            if sso is not None:
                await sso.flow.aclose()
            await auth.aclose()
            gateway.audit.close()
            console.close()  # its queued rows are written before the store closes
            gateway.store.close()
            gateway.observer.tracing.shutdown()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "revision": gateway.policies.current.revision,
                             "tools": len(gateway.registry.all())})

    async def readyz(request: Request) -> JSONResponse:
        ready, body = await readiness(gateway, supervisor, auth)
        return JSONResponse(body, status_code=200 if ready else 503)

    api = [Route("/mcp", mcp.endpoint, methods=["GET", "POST", "DELETE"]), *rest_routes(gateway),
           *session_admin_routes(gateway, gateway.store), *(model_routes(models) if models.routes else []),
           *console.routes]
    # the pages for people (the console with its API, the approvals page with approvals) hold no data: APIs check keys
    open_routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/readyz", readyz), *openapi_routes(),
                                    *(console_page_routes() if console.routes else []),
                                    *(protected_resource_routes(resource) if resource is not None else [])]
    scrape_routes: list[BaseRoute] = []
    if gateway.observer.metrics is not None:
        # the one app that admits scrape-only keys; every route in `api` refuses them at the door
        scrape = Starlette(routes=metrics_routes(gateway.observer.metrics),
                           middleware=[Middleware(RequireIdentity, auth=auth, scrapers=True, challenge=challenge)],
                           exception_handlers=json_http_errors())
        scrape.router.redirect_slashes = False
        scrape_routes.append(Route(METRICS_PATH, scrape, methods=["GET"]))
    _approvals(gateway, sso, api, open_routes, edge)
    # each key's share of the connections, counted before the body is read (BodyLimit, the last of the edge)
    edge.insert(-1, _connection_shares(config, auth, gateway, open_routes, challenge, bodies))
    protected = Starlette(routes=api, middleware=[Middleware(RequireIdentity, auth=auth, challenge=challenge,
                                                             bodies=bodies)],
                          exception_handlers=json_http_errors())
    app = Starlette(routes=[*open_routes, *scrape_routes, Mount("/", app=protected)], lifespan=lifespan,
                    middleware=edge, exception_handlers=json_http_errors())
    for router in (protected.router, app.router):
        # No 307 to the slash-less path: an API answers the path it was asked, as JSON (404 if unknown).
        router.redirect_slashes = False
    app.state.gateway = gateway
    app.state.supervisor = supervisor
    app.state.mcp = mcp
    app.state.auth = auth
    return app


def _approvals(gateway: Gateway, sso: SsoPages | None, api: list[Route], open_routes: list[BaseRoute],
               edge: list[Middleware]) -> None:
    """The approver API, the page and its sign-in, when this gateway serves approvals."""
    if not isinstance(gateway.approvals, ApprovalService):
        return
    api.extend(approval_routes(gateway.approvals, gateway.store, gateway.judge_edit))
    open_routes.extend(approvals_page_routes())
    if sso is not None:  # the approver's session cookie is read before the shares count the request
        open_routes.extend(sso.routes())
        edge.insert(-1, Middleware(SessionCookies, pages=sso))


def server_options(config: LoadedConfig) -> dict[str, Any]:
    """uvicorn settings for this config: the HTTP protocol with its header, time and connection bounds
    (and no WebSocket upgrades: nothing here speaks WebSocket, so nothing should accept one)."""
    http = config.spec.http
    return {"http": edge_protocol(http.max_header_bytes, parse_duration(http.header_timeout), http.max_connections),
            "ws": "none"}


def _connection_shares(config: LoadedConfig, auth: Authenticator, gateway: Gateway,
                       open_routes: list[BaseRoute], challenge: Challenge, bodies: RefusalBodies) -> Middleware:
    """Each key's share of the connections, and those reserved for approvers and admins, from `http:`."""
    http = config.spec.http
    reserved = http.reserved()
    shares = Shares(http.max_connections - reserved, reserved, http.connection_share())

    def open_route(scope: Scope) -> bool:  # served without a key, answered at once: holds no share
        return any(route.matches(scope)[0] is Match.FULL for route in open_routes)

    return Middleware(ConnectionShares, auth=auth, shares=shares, open_route=open_route,
                      refused=gateway.observer.share_refused, challenge=challenge, bodies=bodies)


def _edge_middleware(config: LoadedConfig) -> list[Middleware]:
    """Host/Origin checks, JSON-only bodies and the body limit, from `http:` (and refuse unsafe anonymous access)."""
    spec, where = config.spec, str(config.file)
    listen, http, public = spec.listen.host, spec.http, spec.approvals.public_url
    resource = spec.auth.resource_metadata.resource if spec.auth.resource_metadata is not None else None
    if spec.auth.anonymous is not None and not is_loopback(listen) and not spec.auth.anonymous_beyond_loopback:
        raise ConfigError([Diagnostic(
            "anonymous-beyond-loopback", f"auth.anonymous is set and listen.host {listen!r} is not a loopback address",
            where, hint="listen on 127.0.0.1, remove auth.anonymous, or set auth.anonymous_beyond_loopback: true")])
    max_body = http.max_body_bytes or max(DEFAULT_MAX_BODY_BYTES, spec.limits.max_argument_bytes + BODY_OVERHEAD_BYTES)
    if max_body < spec.limits.max_argument_bytes:
        raise ConfigError([Diagnostic(
            "body-limit", f"http.max_body_bytes ({max_body}) is smaller than limits.max_argument_bytes"
            f" ({spec.limits.max_argument_bytes})", where, hint="raise http.max_body_bytes")])
    # the public URL is where approvers and webhooks reach the gateway, the resource where MCP clients do:
    # their hosts and origins are served
    own = [urlsplit(url) for url in (public, resource) if url]
    hosts = [*(u.netloc for u in own), *(http.allowed_hosts if http.allowed_hosts is not None else
                                        [*LOOPBACK_NAMES, *([] if is_loopback(listen) else [listen])])]
    # without a list: names nobody can point elsewhere (IP literals, localhost), plus the ones above
    rules = HostRules.build(hosts, ip_literals=http.allowed_hosts is None)
    origins = frozenset([*http.allowed_origins, *(f"{u.scheme}://{u.netloc}".lower() for u in own)])
    return [Middleware(HostOriginGuard, hosts=rules, origins=origins), Middleware(JsonOnly),
            Middleware(BodyLimit, max_bytes=max_body, timeout=parse_duration(http.body_timeout))]


async def _start_upstreams(gateway: Gateway, supervisor: Supervisor, config: LoadedConfig) -> None:
    # Each upstream is tried once before serving; one that is down is retried in the background
    # and does not keep the others from serving.
    problems = await supervisor.start()
    if problems:
        await supervisor.close()
        raise ConfigError([Diagnostic("tool-names", p, str(config.file)) for p in problems])
    log.info("serving %d tools from %d upstreams; policy revision %s", len(gateway.registry.all()),
             len(gateway.registry.upstreams), gateway.policies.current.revision)


