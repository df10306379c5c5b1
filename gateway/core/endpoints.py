"""Where the gateway may send a credential: an https URL, or plain http to a loopback host only."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["insecure_url_problem", "loopback_host"]


def loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's hostname: no brackets, no port) names this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_url_problem(url: str) -> str | None:
    """Why a credential must not be sent to ``url``, or None: https, or http to a loopback host."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return f"{url!r} is not a URL"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and loopback_host(host):
        return None
    return f"{url!r} is not an https URL (plain http is allowed only to a loopback host)"
