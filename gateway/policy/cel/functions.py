"""The gateway's own CEL functions, as plain Python shared by both engines.

    glob(s, pattern)       shell-style match: * ? [abc]; case-sensitive
    url(s)                 {scheme, host, port, path, query}; port is the explicit or default port
    cidrContains(cidr, ip) whether the IP address lies inside the CIDR block
    isPrivateIP(host)      loopback, private, link-local, reserved, unspecified or "localhost"

None of them does I/O: isPrivateIP never resolves a name, so a policy that must stop DNS-based
SSRF should also restrict hosts to an allow-list.
"""

from __future__ import annotations

import fnmatch
import functools
import ipaddress
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = ["FUNCTIONS", "cidr_contains", "glob", "is_private_ip", "url"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


def glob(value: str, pattern: str) -> bool:
    """Shell-style, case-sensitive match of the whole string."""
    return _glob_regex(pattern).match(value) is not None


def url(value: str) -> dict[str, Any]:
    """Split a URL into parts; a string that is not an absolute URL is an evaluation error."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid URL {value!r}: {exc}") from None
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"invalid URL {value!r}: an absolute URL needs a scheme and a host")
    scheme = parts.scheme.lower()
    return {
        "scheme": scheme,
        "host": (parts.hostname or "").lower(),
        "port": port if port is not None else _DEFAULT_PORTS.get(scheme, 0),
        "path": parts.path or "/",
        "query": dict(parse_qsl(parts.query, keep_blank_values=True)),
    }


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    host = value.strip().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"not an IP address: {value!r}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def cidr_contains(cidr: str, ip: str) -> bool:
    """Whether ``ip`` is inside the ``cidr`` block; malformed input is an evaluation error."""
    try:
        network = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        raise ValueError(f"not a CIDR block: {cidr!r}") from None
    address = _address(ip)
    return address.version == network.version and address in network


def is_private_ip(host: str) -> bool:
    """True for loopback, private, link-local, reserved and unspecified addresses and "localhost".

    A host name other than localhost is not an IP address and gives false (no DNS lookup).
    """
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = _address(name)
    except ValueError:
        return False
    return bool(
        address.is_private or address.is_loopback or address.is_link_local
        or address.is_reserved or address.is_unspecified or address.is_multicast
    )


# name -> (python implementation, parameter kinds, result kind); engines declare these.
FUNCTIONS: dict[str, tuple[Any, tuple[str, ...], str]] = {
    "glob": (glob, ("string", "string"), "bool"),
    "url": (url, ("string",), "map"),
    "cidrContains": (cidr_contains, ("string", "string"), "bool"),
    "isPrivateIP": (is_private_ip, ("string",), "bool"),
}
