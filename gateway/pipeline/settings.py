"""The plain settings of the call pipeline, built once by the composition root (gateway/app/root.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.policy.policyset import env_revision

__all__ = ["CallSettings"]


@dataclass(frozen=True, slots=True)
class CallSettings:
    """What every call of one gateway shares: the policies' ``env``, the call timeout, the argument bound."""

    env: dict[str, Any] = field(default_factory=dict)  # CEL's `env` (a copy: the caller's dict may change)
    call_timeout: float = 30.0  # seconds an upstream call may take (an upstream's own timeout always holds)
    max_argument_bytes: int = 1_000_000  # the arguments' JSON, above which a call is refused
    env_revision: str = field(init=False, default="")  # the digest of ``env`` each call's replay context names

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "env_revision", env_revision(self.env))
