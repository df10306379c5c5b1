"""The egress functions cannot be fooled, and both engines give the same answers.

url() must read a URL as WHATWG parsers (browsers, Node, curl) do, isPrivateIP must not depend on
the Python patch version, cidrContains must refuse malformed blocks, and glob() must do what the
docs say. Every hostile string goes through a real engine: bound as an argument (what a tool call
does) and, where the engine may not carry it faithfully, as a literal too.
"""

# The look-alike characters below (full-width digits and letters) are the point of these tests.
# ruff: noqa: RUF001

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.core.errors import CelEvaluationError
from gateway.policy import check_policies
from gateway.policy.cel import ExprType, get_engine
from gateway.policy.cel.functions import url
from gateway.policy.cel.netaddr import IPV4_NOT_PUBLIC, IPV6_NOT_PUBLIC

pytestmark = pytest.mark.both_engines  # each engine implements the egress functions

EGRESS_SUITE = Path(__file__).parents[3] / "policies" / "egress" / "egress_test.yaml"
FAILS = CelEvaluationError


def evaluate(engine: str, expression: str, **args: Any) -> Any:
    """Compile ``expression`` on ``engine`` and evaluate it with ``args`` bound."""
    cel = get_engine(engine)
    return cel.compile(expression, ExprType.ANY).evaluate(cel.activation({"args": args}))


def outcome(engine: str, expression: str, **args: Any) -> Any:
    """The value, or ``FAILS`` when evaluation fails (a rule then fails closed)."""
    try:
        return evaluate(engine, expression, **args)
    except CelEvaluationError:
        return FAILS


# --- the issue's bypasses ---------------------------------------------------------------------

BYPASSES = [
    ("http://10.0.0.%31/", "10.0.0.1"),
    ("http://169.254.169.%32%35%34/", "169.254.169.254"),
    ("http://%6c%6f%63%61%6c%68%6f%73%74/", "localhost"),
    ("http://127。0。0。1/", "127.0.0.1"),
    ("http://１２７.０.０.１/", "127.0.0.1"),
    ("http://0x7f.1/", "127.0.0.1"),
    ("http://2130706433/", "127.0.0.1"),
    ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://example.com%00@10.0.0.1/", "10.0.0.1"),
    ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
]


@pytest.mark.parametrize("value, host", BYPASSES)
def test_url_reads_the_host_a_client_connects_to(engine: str, value: str, host: str) -> None:
    assert evaluate(engine, "url(args.u).host", u=value) == host
    assert evaluate(engine, "isPrivateIP(url(args.u).host)", u=value) is True


def test_the_issue_bypasses_are_all_private(engine: str) -> None:
    urls = [value for value, _ in BYPASSES]
    assert evaluate(engine, "args.us.filter(u, !isPrivateIP(url(u).host))", us=urls) == []


NUL_URL = "http://example.com\u0000@10.0.0.1/"


def test_a_raw_nul_in_the_userinfo_is_read_as_whatwg_does() -> None:
    # WHATWG percent-encodes U+0000 into the userinfo; the client connects to 10.0.0.1.
    parts = url(NUL_URL)
    assert (parts["host"], parts["username"]) == ("10.0.0.1", "example.com%00")


def test_a_raw_nul_in_a_literal_is_read_as_whatwg_does(engine: str) -> None:
    assert evaluate(engine, r'url("http://example.com\u0000@10.0.0.1/").host') == "10.0.0.1"
    assert outcome(engine, r'url("http://exa\u0000mple.com/").host') is FAILS


def test_a_raw_nul_in_an_argument_never_reads_as_a_public_host(engine: str, request: pytest.FixtureRequest) -> None:
    if engine == "cel-expr-python":
        # cel-expr-python cuts bound strings at U+0000 (issue 7 item 7, fixed at admission by
        # another branch); this pins it so the fix is noticed when it lands.
        request.applymarker(pytest.mark.xfail(strict=True, reason="cel-expr-python cuts strings at U+0000"))
    assert outcome(engine, "isPrivateIP(url(args.u).host)", u=NUL_URL) in (True, FAILS)


# --- url() ------------------------------------------------------------------------------------


def test_url_gives_every_documented_field(engine: str) -> None:
    got = evaluate(engine, "url(args.u)", u="HTTPS://User:Pw@Example.COM:8443/a/../b/%7e?x=1&y=a+b&x=2#Frag")
    assert got == {
        "scheme": "https", "host": "example.com", "hostType": "name", "port": 8443, "path": "/b/%7e",
        "query": {"x": "2", "y": "a b"}, "username": "User", "password": "Pw", "fragment": "Frag",
        "href": "https://User:Pw@example.com:8443/b/%7e?x=1&y=a+b&x=2#Frag",
    }


@pytest.mark.parametrize("value, host, host_type, port", [
    ("http://example.com", "example.com", "name", 80),
    ("https://example.com:443/", "example.com", "name", 443),
    ("ws://example.com/", "example.com", "name", 80),
    ("http://[0:0::1]:8080/", "::1", "ipv6", 8080),
    ("http://1.2.3.4/", "1.2.3.4", "ipv4", 80),
    ("http://bücher.de/", "xn--bcher-kva.de", "name", 80),
    ("http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", "localhost", "name", 80),
    ("http://evil.example\\@good.example/", "evil.example", "name", 80),
    ("gopher://Example.com:70/x", "example.com", "name", 70),
    ("foo://h/", "h", "name", 0),
])
def test_url_hosts_types_and_ports(engine: str, value: str, host: str, host_type: str, port: int) -> None:
    assert evaluate(engine, "[url(args.u).host, url(args.u).hostType, url(args.u).port]", u=value) == [
        host, host_type, port]


@pytest.mark.parametrize("value", [
    "nope", "", "/relative/path", "example.com/x", "file:///etc/passwd", "mailto:a@example.com",
    "data:text/plain,hi", "http://[1:2:3]/", "http://08.0.0.1/", "http://1.2.3.4.5/", "http://256.0.0.1/",
    "http://a b/", "http://example.com:99999/", "http://%2561.example/", "http://10.0.0.1%00.example.com/",
    "http://127.0.0.1%2f.example/", "http://[fe80::1%25eth0]/",
])
def test_an_unparseable_url_is_an_evaluation_error(engine: str, value: str) -> None:
    assert outcome(engine, "url(args.u).host", u=value) is FAILS


def test_a_lone_surrogate_is_an_evaluation_error() -> None:
    with pytest.raises(ValueError, match="invalid URL"):
        url("http://a\ud800.example/")


def test_a_huge_url_is_parsed_and_its_error_message_stays_short(engine: str) -> None:
    assert evaluate(engine, "url(args.u).host", u="http://example.com/" + "a" * 100_000) == "example.com"
    with pytest.raises(CelEvaluationError) as caught:
        evaluate(engine, "url(args.u)", u="http://[" + "1" * 100_000)
    assert len(str(caught.value)) < 300


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_url_agrees_with_node_on_every_url_of_the_egress_suite() -> None:
    values = sorted({case["call"]["args"]["url"] for case in yaml.safe_load(EGRESS_SUITE.read_text("utf-8"))["cases"]
                     if isinstance(case["call"]["args"].get("url"), str)})
    assert len(values) >= 50
    script = ("const u = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(u.map(s => { try { const x = new URL(s);"
              " return [x.hostname.replace(/^\\[|\\]$/g, ''), x.username]; } catch { return null; } })));")
    node = json.loads(subprocess.run(["node", "-e", script], input=json.dumps(values), capture_output=True,
                                     text=True, check=True, timeout=30).stdout)
    for value, expected in zip(values, node, strict=True):
        try:
            parts = url(value)
            ours = [parts["host"], parts["username"]]
        except ValueError:
            ours = None
        if expected is not None and expected[0] == "":
            expected = None  # Node accepts host-less URLs (data:, file:///); url() refuses them
        assert ours == expected, value


# --- isPrivateIP ------------------------------------------------------------------------------

PRIVATE = [
    "localhost", "LOCALHOST", "localhost.", "api.localhost", "127.0.0.1", "127.255.255.254", "0.0.0.0",
    "0.1.2.3", "10.0.0.1", "100.64.0.1", "100.127.255.255", "169.254.169.254", "172.16.0.1", "172.31.255.255",
    "192.0.0.8", "192.0.2.1", "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.51.100.1", "203.0.113.1",
    "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
    "::", "::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "::ffff:a9fe:a9fe", "::ffff:0:a00:1",
    "::127.0.0.1", "::10.0.0.1", "64:ff9b::a00:1", "64:ff9b::169.254.169.254", "64:ff9b:1::808:808",
    "2002:a9fe:a9fe::1", "2002:c0a8:0101::", "2001:0:4136:e378:8000:63bf:3f57:fefe",
    "2001:0:a00:1::", "100::1", "2001:2::1", "2001:db8::1", "3fff::1", "5f00::1", "fc00::1",
    "fd00:ec2::254", "fe80::1", "febf::1", "fec0::1", "feff::1", "ff02::1", "4000::1", "::2:3:4:5",
    "0x7f.1", "2130706433", "0177.0.0.1", "127.1", "10.0.0.%31", "127。0。0。1", "１２７.０.０.１",
    "%6c%6f%63%61%6c%68%6f%73%74", "ｌｏｃａｌｈｏｓｔ",
    # hosts-file and resolver aliases of loopback and the IPv6 special addresses, in any case or absolute form
    "localhost.localdomain", "LOCALHOST.LOCALDOMAIN", "localhost.localdomain.", "api.localhost.localdomain",
    "localhost4", "localhost4.localdomain4", "localhost6", "localhost6.localdomain6", "ip6-localhost",
    "Ip6-LocalHost", "ip6-loopback", "ip6-loopback.", "ip6-localnet", "ip6-allnodes", "ip6-allrouters",
    "broadcasthost", "_gateway", "_outbound", "ｉｐ６-ｌｏｏｐｂａｃｋ",
]
PUBLIC = [
    "example.com", "localhost.example.com", "localhost6.example.com", "ip6-loopback.example.com",
    "localhost.localdomain.example.com", "my-localhost", "xn--bcher-kva.de", "1.1.1.1", "8.8.8.8", "93.184.216.34",
    "100.63.255.255", "100.128.0.0", "172.32.0.1", "192.0.1.1", "192.31.196.1", "192.52.193.1",
    "192.175.48.1", "198.20.0.1", "223.255.255.255", "::ffff:8.8.8.8", "64:ff9b::808:808",
    "2002:808:808::1", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "2606:4700:4700::1111",
    "2001:4860:4860::8888", "2620:4f:8000::1",
]


@pytest.mark.parametrize("host", PRIVATE)
def test_private_hosts(engine: str, host: str) -> None:
    assert evaluate(engine, "isPrivateIP(args.h)", h=host) is True


@pytest.mark.parametrize("host", PUBLIC)
def test_public_hosts(engine: str, host: str) -> None:
    assert evaluate(engine, "isPrivateIP(args.h)", h=host) is False


@pytest.mark.parametrize("host", ["", " ", "127.0.0.1:80", "[::1]:80", "10.0.0.1/8", "a@10.0.0.1", "a b",
                                  "x#y", "1.2.3.4.5", "08.0.0.1", "[1:2:3]", "::1]"])
def test_a_string_that_is_not_a_host_is_an_evaluation_error(engine: str, host: str) -> None:
    assert outcome(engine, "isPrivateIP(args.h)", h=host) is FAILS


def test_every_local_name_is_private_in_any_case_and_absolute_form() -> None:
    from gateway.policy.cel.functions import is_private_ip
    from gateway.policy.cel.netaddr import LOCAL_NAMES, LOCAL_SUFFIXES

    for name in [*LOCAL_NAMES, *(f"x{suffix}" for suffix in LOCAL_SUFFIXES)]:
        for form in (name, name.upper(), f"{name}.", name.title()):
            assert is_private_ip(form), form


def test_every_table_block_is_private_at_both_ends() -> None:
    from gateway.policy.cel.functions import is_private_ip

    for network, _name in (*IPV4_NOT_PUBLIC, *IPV6_NOT_PUBLIC):
        for address in (network.network_address, network.broadcast_address):
            assert is_private_ip(str(address)), (network, address)


def test_answers_do_not_come_from_the_standard_library_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    # ipaddress.is_private/is_global changed between patch versions; the answers must not move.
    from gateway.policy.cel.functions import is_private_ip

    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in ("is_private", "is_global", "is_reserved", "is_loopback", "is_link_local", "is_multicast",
                     "is_unspecified", "is_site_local", "ipv4_mapped", "sixtofour", "teredo"):
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, property(lambda self: pytest.fail("stdlib table used")))
    assert all(is_private_ip(h) for h in PRIVATE)
    assert not any(is_private_ip(h) for h in PUBLIC)


# --- cidrContains -----------------------------------------------------------------------------


@pytest.mark.parametrize("cidr", [
    "10.0.0.1/8", "10.0.0.0/255.0.0.0", "10.0.0.0/0.255.255.255", "10.0.0.0", "10.0.0.0/", "10.0.0.0/33",
    "10.0.0.0/08", "10.0.0.0/+8", " 10.0.0.0/8", "10.0.0.0/8 ", "010.0.0.0/8", "10.0.0/8", "0x0a.0.0.0/8",
    "::1/129", "fe80::/10%eth0", "fe80::%eth0/10", "fe80::1/10", "bad", "", "/8", "10.0.0.0//8",
])
def test_a_malformed_block_is_an_evaluation_error(engine: str, cidr: str) -> None:
    assert outcome(engine, 'cidrContains(args.c, "10.1.2.3")', c=cidr) is FAILS


@pytest.mark.parametrize("cidr, ip, inside", [
    ("10.0.0.0/8", "10.1.2.3", True),
    ("10.0.0.0/8", "11.0.0.0", False),
    ("10.0.0.0/8", "0x0a.1", True),
    ("10.0.0.0/8", "10.0.0.%31", True),
    ("0.0.0.0/0", "8.8.8.8", True),
    ("10.0.0.0/8", "::ffff:10.0.0.1", True),
    ("10.0.0.0/8", "64:ff9b::a00:1", True),
    ("10.0.0.0/8", "2002:a00:1::", True),
    ("10.0.0.0/8", "::10.0.0.1", True),
    ("10.0.0.0/8", "2606:4700::1", False),
    ("169.254.169.254/32", "[::ffff:a9fe:a9fe]", True),
    ("::ffff:0:0/96", "1.2.3.4", True),
    ("fc00::/7", "fd00:ec2::254", True),
    ("fc00::/7", "10.0.0.1", False),
    ("2001:db8::/32", "2001:DB8::1", True),
])
def test_containment(engine: str, cidr: str, ip: str, inside: bool) -> None:
    assert evaluate(engine, "cidrContains(args.c, args.ip)", c=cidr, ip=ip) is inside


@pytest.mark.parametrize("ip", ["example.com", "", "10.0.0.1/32", "1.2.3.4.5"])
def test_a_host_that_is_not_an_address_is_an_evaluation_error(engine: str, ip: str) -> None:
    assert outcome(engine, 'cidrContains("10.0.0.0/8", args.ip)', ip=ip) is FAILS


# --- glob() -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, pattern, matches", [
    ("/etc/passwd", "/etc/*", True),
    ("/etc/ssl/key.pem", "/etc/*", False),  # * stays inside one segment
    ("/etc/ssl/key.pem", "/etc/**", True),  # ** crosses "/"
    ("/etc/ssl/key.pem", "/etc/**.pem", True),
    ("/etc/ssl/key.pem", "/**/key.pem", True),
    ("a/b", "a?b", False),
    ("a-b", "a?b", True),
    ("b", "[^a]", True),
    ("a", "[^a]", False),  # [^...] is a negation
    ("a", "[!a]", False),
    ("/", "[!a]", False),  # a negated set never matches "/"
    ("c", "[a-c]", True),
    ("]", "[]]", True),
    ("x", "[!]]", True),
    ("*", "[*]", True),
    ("ab", "[*]b", False),
    ("a[b", "a[b", True),  # an unclosed [ is literal
    ("fs_read", "fs_*", True),
    ("FS_read", "fs_*", False),  # case-sensitive
    ("api.example.com", "*.example.com", True),
    ("a.b.example.com", "*.example.com", True),
    ("example.com", "*.example.com", False),
    ("a\nb", "a*b", True),
    ("x.md", "*.md", True),
    ("a.txt", "*.md", False),
    ("", "*", True),
    ("", "?", False),
])
def test_glob_semantics(engine: str, value: str, pattern: str, matches: bool) -> None:
    assert evaluate(engine, "glob(args.v, args.p)", v=value, p=pattern) is matches


def test_a_malformed_glob_is_an_evaluation_error(engine: str) -> None:
    assert outcome(engine, 'glob("b", "[z-a]")') is FAILS


def test_a_hostile_value_cannot_make_a_glob_backtrack(engine: str) -> None:
    started = time.thread_time()  # CPU time of this thread: other processes cannot inflate it
    assert evaluate(engine, "glob(args.v, args.p)", v="a" * 200_000, p="*a*a*a*a*a*a*a*a*b") is False
    assert evaluate(engine, "glob(args.v, args.p)", v="a" * 200_000, p="**a**a**a**a**a**a**b") is False
    assert time.thread_time() - started < 2.0


def test_a_malformed_tools_glob_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("policy: a\nrules:\n  - id: r\n    tools: [fs_*, '[z-a]']\n"
                                     "    action: reject\n", encoding="utf-8")
    policy_set, diagnostics = check_policies([tmp_path], "cel-python")
    assert policy_set is None
    assert [(d.code, d.line, d.rule) for d in diagnostics] == [("invalid-value", 4, "a/r")]
    assert "invalid glob pattern '[z-a]'" in diagnostics[0].message


def test_a_malformed_openapi_include_glob_is_a_config_error() -> None:
    from pydantic import ValidationError

    from gateway.config.model import OpenApiUpstreamSpec

    assert OpenApiUpstreamSpec(spec="api.yaml", include=["*Pet", "get[!s]*"]).include == ["*Pet", "get[!s]*"]
    with pytest.raises(ValidationError, match=r"invalid glob pattern '\[z-a\]'"):
        OpenApiUpstreamSpec(spec="api.yaml", exclude=["[z-a]"])
