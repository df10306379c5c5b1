"""Whether a host name reaches only this machine: listen addresses, and the http:// URLs allowed only there."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback", "secure_url_problem"]


def is_loopback(host: str) -> bool:
    """Whether a listen address (or a URL's host) reaches only this machine (wildcards like 0.0.0.0 do not)."""
    name = host.strip().lower().strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def secure_url_problem(url: str) -> str | None:
    """Why ``url`` may not be fetched for keys or tokens: https only, http only to a loopback host; None when fine."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return None
    if parts.scheme == "http":
        return "must use https (http only for a loopback host such as 127.0.0.1)"
    return "must be an https:// URL with a host"
