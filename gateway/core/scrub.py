"""Credentials taken out of text the gateway relays from elsewhere (a model upstream's error message, ...).

Two kinds: the secrets the gateway itself was configured with (exact text, wherever they appear) and
the shapes of common credentials (``Bearer …``, OpenAI's ``sk-…``, and a few other well-known key
prefixes), which catch a key the gateway never knew, such as another tenant's, echoed back by a proxy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["REDACTED", "Scrubber"]

REDACTED = "[redacted]"

# Well-known credential shapes. Conservative: each needs its prefix and a run of key characters, so that
# ordinary prose ("a bearer of news", "sk-8") is left alone.
_SHAPES = re.compile(
    r"(?i:\b(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}"  # Authorization header values
    r"|\bsk-[A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic (sk-ant-…), DeepSeek and most OpenAI-compatible servers
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}"  # GitHub
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bAIza[A-Za-z0-9_-]{30,}"  # Google
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"  # AWS access key ids
)


class Scrubber:
    """Replaces the given secrets and every known credential shape with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._raw = [s.encode() for s in self._secrets]

    def text(self, value: str) -> str:
        """``value`` with the secrets and credential shapes replaced."""
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return _SHAPES.sub(REDACTED, value)

    def secrets_in(self, data: bytes, *, shortest: int = 0) -> bytes:
        """``data`` with the configured secrets of at least ``shortest`` characters replaced (shapes are kept:
        in a model's own answer they may be an example the user asked for)."""
        for secret in self._raw:
            if len(secret) >= shortest and secret in data:
                data = data.replace(secret, REDACTED.encode())
        return data
