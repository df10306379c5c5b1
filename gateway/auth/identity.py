"""Who a caller is once recognised: the principal policies see, its roles, and (for a token) the token."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.policy.call import Principal

__all__ = ["Identity"]


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller."""

    principal: Principal
    approver: bool = False
    admin: bool = False  # sees every approval request (still decides only what qualifies them)
    metrics: bool = False  # scrape-only: /metrics and nothing else (admins may scrape too)
    # The caller's verified bearer token (kind "jwt" only), kept for token exchange with upstreams; never
    # logged, never printed, never passed through to an upstream as it is.
    token: str | None = field(default=None, repr=False, compare=False)
