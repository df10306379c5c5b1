"""The gateway's own CEL functions, as plain Python shared by both engines.

    glob(s, pattern)       glob match of the whole string: * ** ? [abc] [!abc]; case-sensitive
    url(s)                 the URL as a WHATWG parser (browsers, Node, curl) reads it
    cidrContains(cidr, ip) whether the IP address lies inside the CIDR block
    isPrivateIP(host)      anything but a public unicast address, or a local name ("localhost", "ip6-loopback")
    hiddenChars(s)         the invisible and format characters in the string, as "U+200B" (text_checks.py)
    foldText(s)            the string as phrase rules read it: no hidden characters or accents, Latin, lower case

hiddenChars and foldText may also be called on their string: ``tool.description.hiddenChars()``.

None of them does I/O: isPrivateIP never resolves a name, so a policy that must stop DNS-based
SSRF should also restrict hosts to an allow-list. Every malformed input is an evaluation error,
so a rule that meets one fails closed.
"""

from __future__ import annotations

import functools
from ipaddress import IPv4Address, IPv6Address
from typing import Any
from urllib.parse import parse_qsl

import ada_url

from gateway.core.globs import glob_match
from gateway.policy.cel import text_checks
from gateway.policy.cel.netaddr import (
    Address,
    canonical_host,
    embedded_ipv4,
    is_local_name,
    is_private_address,
    parse_address,
    parse_cidr,
    quoted,
)

__all__ = ["FUNCTIONS", "RECEIVER_FUNCTIONS", "cidr_contains", "glob", "is_private_ip", "url"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_HOST_TYPES = {ada_url.HostType.IPV4: "ipv4", ada_url.HostType.IPV6: "ipv6"}
_URL_PARTS = ("href", "protocol", "username", "password", "hostname", "host_type", "port", "pathname",
              "search", "hash")
# Only short strings are remembered, so a flood of huge values cannot grow memory.
_CACHED_CHARS = 2048


def glob(value: str, pattern: str) -> bool:
    """Glob match of the whole string (see ``gateway/core/globs.py``); a malformed pattern is an error."""
    return glob_match(value, pattern)


def url(value: str) -> dict[str, Any]:
    """The URL's parts as a WHATWG parser reads them; anything else is an evaluation error."""
    parts = _parse_url(value) if len(value) <= _CACHED_CHARS else _parse_url.__wrapped__(value)
    href, scheme, username, password, host, host_type, port, path, query, fragment = parts
    return {
        "scheme": scheme,
        "host": host,
        "hostType": host_type,
        "port": port,
        "path": path,
        "query": dict(parse_qsl(query, keep_blank_values=True)),
        "username": username,
        "password": password,
        "fragment": fragment,
        "href": href,
    }


@functools.lru_cache(maxsize=1024)
def _parse_url(value: str) -> tuple[Any, ...]:
    try:
        parts = ada_url.parse_url(value, _URL_PARTS)
    except ValueError:
        raise ValueError(f"invalid URL {quoted(value)}: not a URL a WHATWG parser accepts") from None
    host = parts["hostname"]
    if not host:
        raise ValueError(f"invalid URL {quoted(value)}: an absolute URL needs a host")
    scheme = parts["protocol"].removesuffix(":")
    port = int(parts["port"]) if parts["port"] else _DEFAULT_PORTS.get(scheme, 0)
    return (
        parts["href"],
        scheme,
        parts["username"],
        parts["password"],
        host.removeprefix("[").removesuffix("]").lower(),  # IPv6 without brackets; opaque hosts too
        _HOST_TYPES.get(parts["host_type"], "name"),
        port,
        parts["pathname"] or "/",
        parts["search"].removeprefix("?"),
        parts["hash"].removeprefix("#"),
    )


def cidr_contains(cidr: str, ip: str) -> bool:
    """Whether ``ip`` lies in the ``cidr`` block; a malformed block or a non-IP is an evaluation error.

    Against an IPv4 block, an IPv6 address is judged by the IPv4 address it embeds (mapped,
    compatible, NAT64, 6to4, Teredo); against an IPv6 block, an IPv4 address by its mapped form.
    """
    network = parse_cidr(cidr)
    address = parse_address(ip)
    return _within(address, network)


def _within(address: Address, network: Any) -> bool:
    if address.version == network.version:
        return address in network
    if isinstance(address, IPv4Address):
        return IPv6Address(0xFFFF00000000 | int(address)) in network
    return any(v4 in network for v4 in embedded_ipv4(address) or ())


def is_private_ip(host: str) -> bool:
    """True for "localhost", "*.localhost", the hosts-file aliases of loopback (``LOCAL_NAMES``) and every
    address that is not public unicast.

    The host is read as a WHATWG parser reads it (``10.0.0.%31``, ``127。0。0。1`` and ``0x7f.1``
    are addresses); another host name is false (no DNS lookup); a string that is not a host at
    all is an evaluation error.
    """
    canonical = canonical_host(host)
    if isinstance(canonical, str):
        return is_local_name(canonical)
    return is_private_address(canonical)


# name -> (python implementation, parameter kinds, result kind); engines declare these.
FUNCTIONS: dict[str, tuple[Any, tuple[str, ...], str]] = {
    "glob": (glob, ("string", "string"), "bool"),
    "url": (url, ("string",), "map"),
    "cidrContains": (cidr_contains, ("string", "string"), "bool"),
    "isPrivateIP": (is_private_ip, ("string",), "bool"),
    "hiddenChars": (text_checks.hidden_chars, ("string",), "list"),
    "foldText": (text_checks.fold_text, ("string",), "string"),
}
# The functions also callable on their first argument, as ``s.name(...)`` (the strings extension's style).
RECEIVER_FUNCTIONS = frozenset({"hiddenChars", "foldText"})
