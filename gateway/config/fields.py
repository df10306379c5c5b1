"""What the sections of the config file share: secret references, checks of durations and globs, name patterns."""

from __future__ import annotations

from pydantic import model_validator

from gateway.core.durations import parse_duration
from gateway.core.globs import glob_problem
from gateway.core.strict import StrictModel

__all__ = ["ENV_NAME_PATTERN", "TOOL_NAME_PATTERN", "SecretRef", "check_duration", "check_glob", "check_globs"]

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"

# `env_passthrough` entries: a variable name, or a prefix ending in `*` (e.g. `AWS_*`).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\*?$"


def check_duration(value: str | int | float) -> str | int | float:
    """A duration as written (``30s``, ``1h30m`` or seconds), checked; a validator of duration fields."""
    parse_duration(value)
    return value


def check_globs(patterns: list[str]) -> list[str]:
    """Glob patterns, each checked; a validator of glob-list fields."""
    for pattern in patterns:
        problem = glob_problem(pattern)
        if problem is not None:
            raise ValueError(problem)
    return patterns


def check_glob(pattern: str) -> str:
    """One glob pattern, checked."""
    return check_globs([pattern])[0]


class SecretRef(StrictModel):
    """A secret read from an environment variable or a file, never written in the config."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' or 'file'")
        return self

