"""What ``/readyz`` says: whether the gateway can serve calls now, and the state of each part it needs."""

from __future__ import annotations

from typing import Any

from gateway.auth.keys import Authenticator
from gateway.pipeline import Gateway
from gateway.upstreams.supervise import Supervisor

__all__ = ["readiness"]


async def readiness(gateway: Gateway, supervisor: Supervisor, auth: Authenticator) -> tuple[bool, dict[str, Any]]:
    """Whether the gateway is ready, and ``/readyz``'s body.

    Open like /healthz, so it says only names, states and short reasons: no URL, path or secret. Not ready while
    the store cannot be read (every call would be refused `store_unavailable`), nor while an identity provider's
    keys are missing or past jwks_max_age (its tokens are refused). Drifted tools are not an outage: they are listed.
    """
    unreachable = await gateway.store.unreachable()
    issuers = auth.jwt.status() if auth.jwt is not None else []
    ready = supervisor.ready and unreachable is None and all(i.ready for i in issuers)
    body: dict[str, Any] = {"status": "ready" if ready else "not_ready",
                            "revision": gateway.policies.current.revision, "upstreams": supervisor.statuses(),
                            "store": {"state": "down" if unreachable else "up", "last_error": unreachable}}
    if issuers:  # the issuer is public (MCP clients discover it from the gateway), so it is named
        body["issuers"] = [i.to_dict() for i in issuers]
    if gateway.registry.pins is not None:
        body["tools_lock"] = gateway.registry.pins.status()
    return ready, body
