"""Hosts and IP addresses as HTTP clients read them, and which of them are not public.

Pure: no I/O, no DNS. A host is read by the WHATWG URL host parser (``ada-url``), exactly as
browsers, Node and curl read it: percent-decoding, IDNA/Unicode normalisation (U+3002 ``。`` is
a dot, full-width digits are digits) and the IPv4 number forms (``0x7f.1``, ``2130706433``,
``0177.0.0.1``).

Which addresses are "private" is an explicit table of the IANA special-purpose registries, so the
answer never depends on the Python patch version (``ipaddress.is_private`` changed in 3.11.x and
3.12.x). An IPv6 address that embeds an IPv4 address (IPv4-mapped, IPv4-compatible, SIIT, NAT64,
6to4, Teredo) is judged by the IPv4 address it carries, because that is where packets end up.
"""

from __future__ import annotations

import functools
import re
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import ada_url

__all__ = [
    "IPV4_NOT_PUBLIC",
    "IPV6_EMBEDDING",
    "IPV6_NOT_PUBLIC",
    "LOCAL_NAMES",
    "LOCAL_SUFFIXES",
    "Address",
    "Network",
    "canonical_host",
    "embedded_ipv4",
    "is_local_name",
    "is_private_address",
    "parse_address",
    "parse_cidr",
    "quoted",
]

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

# IANA IPv4 Special-Purpose Address Registry: every block that is not a public unicast
# destination. Blocks the registry marks globally reachable (192.31.196.0/24 AS112,
# 192.52.193.0/24 AMT, 192.175.48.0/24 AS112 delegation) are public and so absent.
IPV4_NOT_PUBLIC: tuple[tuple[IPv4Network, str], ...] = tuple((IPv4Network(block), name) for block, name in (
    ("0.0.0.0/8", "this network (0.0.0.0 reaches the local host on Linux)"),
    ("10.0.0.0/8", "private use (RFC 1918)"),
    ("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local, cloud metadata services"),
    ("172.16.0.0/12", "private use (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
    ("192.168.0.0/16", "private use (RFC 1918)"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, and the limited broadcast 255.255.255.255"),
))

# IPv6 blocks whose addresses carry an IPv4 address; the IPv4 address decides. Checked first.
IPV6_EMBEDDING: tuple[tuple[IPv6Network, str], ...] = tuple((IPv6Network(block), name) for block, name in (
    ("::ffff:0:0/96", "IPv4-mapped: the low 32 bits"),
    ("::ffff:0:0:0/96", "IPv4-translated (SIIT): the low 32 bits"),
    ("64:ff9b::/96", "NAT64 well-known prefix: the low 32 bits"),
    ("2002::/16", "6to4: bits 16-47"),
    ("2001::/32", "Teredo: the server (bits 32-63) and the client (low 32 bits, inverted)"),
    ("::/96", "IPv4-compatible (deprecated), including :: and ::1: the low 32 bits"),
))

# IANA IPv6 Special-Purpose Address Registry, less the embedding blocks above and the blocks it
# marks globally reachable. Anything outside 2000::/3 (global unicast) is not public either.
IPV6_NOT_PUBLIC: tuple[tuple[IPv6Network, str], ...] = tuple((IPv6Network(block), name) for block, name in (
    ("64:ff9b:1::/48", "NAT64 local-use prefix"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("2001::/23", "IETF protocol assignments (ORCHID, benchmarking ...)"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", "unique local (fd00:ec2::254 is the AWS metadata service)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
))

# Host names that mean this machine or its local network wherever they are resolved: RFC 6761's
# localhost, the aliases hosts files ship for loopback and the IPv6 special addresses (Debian,
# Ubuntu and Docker: ip6-*; RHEL and Fedora: localhost4/6 and .localdomain; macOS: broadcasthost),
# and the names systemd-resolved answers itself (_gateway is the default router, _outbound a local
# address). A DNS name that only resolves to loopback (127.0.0.1.nip.io) is not here: no DNS.
LOCAL_NAMES = frozenset({
    "localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4", "localhost6",
    "localhost6.localdomain6", "ip6-localhost", "ip6-loopback", "ip6-localnet", "ip6-mcastprefix",
    "ip6-allnodes", "ip6-allrouters", "ip6-allhosts", "broadcasthost", "_gateway", "_outbound",
})
# ... and every name under these (RFC 6761 for .localhost; systemd-resolved for .localhost.localdomain).
LOCAL_SUFFIXES = (".localhost", ".localhost.localdomain")

# The tables as integer ranges: a lookup per call is then a few comparisons.
_V4_RANGES = tuple((int(n.network_address), int(n.broadcast_address)) for n, _ in IPV4_NOT_PUBLIC)
_V6_RANGES = tuple((int(n.network_address), int(n.broadcast_address)) for n, _ in IPV6_NOT_PUBLIC)
_GLOBAL_UNICAST = IPv6Network("2000::/3")
_TEREDO = IPv6Network("2001::/32")
_SIX_TO_FOUR = IPv6Network("2002::/16")

# Characters that would change what a "host" means inside a URL (path, query, fragment,
# userinfo, escapes) or that no host may hold; refused before the host reaches the parser.
_NOT_IN_HOST = re.compile(r"[/?#@\\\x00-\x20\x7f]")
_BRACKETED = re.compile(r"\[[^\[\]]*\]")
# A CIDR block as people write it: an address, a slash and a decimal prefix length.
_CIDR = re.compile(r"([0-9A-Fa-f.:]+)/(0|[1-9][0-9]{0,2})")
# Only short strings are remembered, so a flood of huge values cannot grow memory.
_CACHED_CHARS = 512


def canonical_host(text: str) -> Address | str:
    """The host as a WHATWG parser reads it: an IP address, or a lower-case ASCII name.

    ``text`` is a bare host as ``url().host`` gives it (IPv6 with or without brackets); anything
    a client could not connect to, or that holds URL delimiters, raises ``ValueError``.
    """
    if len(text) <= _CACHED_CHARS:
        return _canonical_host_cached(text)
    return _canonical_host(text)


@functools.lru_cache(maxsize=4096)
def _canonical_host_cached(text: str) -> Address | str:
    return _canonical_host(text)


def _canonical_host(text: str) -> Address | str:
    if not text or _NOT_IN_HOST.search(text):
        raise ValueError(f"not a host: {quoted(text)}")
    if "[" in text or "]" in text:
        if not _BRACKETED.fullmatch(text):
            raise ValueError(f"not a host: {quoted(text)}")
    elif ":" in text:  # an IPv6 literal without brackets, as url().host gives it
        text = f"[{text}]"
    try:
        parts = ada_url.parse_url(f"http://{text}/", ("hostname", "host_type", "port", "pathname"))
    except ValueError:
        raise ValueError(f"not a host: {quoted(text)}") from None
    if parts["port"] or parts["pathname"] != "/":  # belt and braces: nothing but a host got in
        raise ValueError(f"not a host: {quoted(text)}")
    hostname = parts["hostname"]
    if parts["host_type"] == ada_url.HostType.IPV4:
        return IPv4Address(hostname)
    if parts["host_type"] == ada_url.HostType.IPV6:
        return IPv6Address(hostname[1:-1])
    return hostname


def parse_address(text: str) -> Address:
    """An IP address in any form a WHATWG parser accepts; a host name raises ``ValueError``."""
    host = canonical_host(text)
    if isinstance(host, str):
        raise ValueError(f"not an IP address: {quoted(text)}")
    return host


@functools.lru_cache(maxsize=1024)
def parse_cidr(text: str) -> Network:
    """A CIDR block ``address/length`` with no host bits set; anything else raises ``ValueError``.

    Netmask forms (``10.0.0.0/255.0.0.0``), a missing length, zone ids and non-canonical
    addresses (``010.0.0.0/8``) are refused, so a typo can never widen or empty a block unseen.
    """
    match = _CIDR.fullmatch(text)
    if match is None:
        raise ValueError(f"not a CIDR block (address/length): {quoted(text)}")
    try:
        network: Network = (IPv6Network if ":" in text else IPv4Network)(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"not a CIDR block: {quoted(text)}: {exc}") from None
    return network


def embedded_ipv4(address: IPv6Address) -> tuple[IPv4Address, ...] | None:
    """The IPv4 addresses an IPv6 address carries, or None when it is not an embedding form."""
    value = int(address)
    if address in _SIX_TO_FOUR:
        return (IPv4Address((value >> 80) & 0xFFFFFFFF),)
    if address in _TEREDO:
        return IPv4Address((value >> 64) & 0xFFFFFFFF), IPv4Address(~value & 0xFFFFFFFF)
    for network, _ in IPV6_EMBEDDING:
        if address in network:
            return (IPv4Address(value & 0xFFFFFFFF),)
    return None


def is_private_address(address: Address) -> bool:
    """Whether the address is anything but a public unicast destination (see the tables)."""
    value = int(address)
    if isinstance(address, IPv4Address):
        return any(low <= value <= high for low, high in _V4_RANGES)
    carried = embedded_ipv4(address)
    if carried is not None:
        return any(is_private_address(v4) for v4 in carried)
    if address not in _GLOBAL_UNICAST:
        return True
    return any(low <= value <= high for low, high in _V6_RANGES)


def quoted(text: str) -> str:
    """``text`` quoted for an error message, cut at 100 characters."""
    # error messages quote the value, but never a megabyte of it
    return repr(text if len(text) <= 100 else text[:100] + "...")


def is_local_name(name: str) -> bool:
    """Whether a lower-case host name (as ``canonical_host`` gives it) is one of ``LOCAL_NAMES`` or under
    ``LOCAL_SUFFIXES``; trailing dots (the absolute form of the same name) are ignored."""
    name = name.rstrip(".")
    return name in LOCAL_NAMES or name.endswith(LOCAL_SUFFIXES)
