"""The HTTP edge under attack (issue 7, items 2 and 6): DNS rebinding, foreign origins, non-JSON bodies,
huge and slow requests, connection floods. A real gateway under uvicorn with `gateway serve`'s settings,
an anonymous principal (the quick start's setup, the one a web page would attack), the recording HTTP
API upstream, httpx2 for well-behaved clients and raw sockets for the rest; 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import pytest_asyncio

from gateway.app import build_app
from gateway.auth.keys import hash_key
from gateway.core.errors import ConfigError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MAX_CONNECTIONS = 24
# How long a test waits for a timed-out connection to be answered and closed. A per-read timer never fires on a
# client that drips (it only stops dripping once answered), so being answered at all, within this generous
# deadline, proves the timeout is one deadline for the whole request; no clock is read, so load cannot fail it.
ANSWERED_WITHIN = 30.0
APPROVER_KEY = "carol-approver-key-91"

APPROVE_POLICY = """
policy: p
rules:
  - id: deletes-need-a-human
    tools: [web_delete_item]
    action: approve
    message: Deletes need a human.
    approval: {approvers: [carol], timeout: 60s, on_timeout: reject}
"""


@pytest_asyncio.fixture(loop_scope="session")
async def edge(start_gateway, configs, http_api) -> Any:
    """An anonymous gateway on the HTTP API (prefix ``web``) with short edge timeouts and a small connection cap."""
    config = configs.base(
        configs.http_upstream("api", http_api.url, prefix="web"),
        auth={"api_keys": [*configs.api_keys("alice"),
                           {"principal": {"id": "carol"}, "sha256": hash_key(APPROVER_KEY), "approver": True}],
              "anonymous": {"id": "guest"}},
        http={"header_timeout": HEADER_TIMEOUT, "body_timeout": BODY_TIMEOUT, "max_connections": MAX_CONNECTIONS,
              "allowed_origins": ["http://tools.example.test:8443"]})
    return await start_gateway(config, {"p.yaml": APPROVE_POLICY})


def marker() -> str:
    return f"m-{uuid.uuid4().hex}"


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


async def raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP connection to the gateway, for clients that misbehave on purpose."""
    return await asyncio.open_connection("127.0.0.1", port_of(url))


async def read_response(reader: asyncio.StreamReader, timeout: float = 10.0) -> tuple[int, bytes]:
    """Everything the server sends until it closes the connection: (status, raw bytes); status 0 for nothing."""
    data = b""
    async with asyncio.timeout(timeout):
        while chunk := await reader.read(65536):
            data += chunk
    return (int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0), data


def head(url: str, path: str = "/v1/tools/web_create_item/invoke", **headers: str | int) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port_of(url)}", "Content-Type: application/json",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


ENDPOINTS = [("GET", "/healthz"), ("GET", "/approvals"), ("GET", "/v1/tools"), ("GET", "/v1/approvals"),
             ("POST", "/mcp"), ("POST", "/v1/tools/web_create_item/invoke")]


# --- Host and Origin ----------------------------------------------------------------------------------


async def test_a_rebound_host_name_is_refused_on_every_endpoint(edge, http_api):
    # DNS rebinding: evil.example now resolves to 127.0.0.1, so the browser sends Host: evil.example
    mark = marker()
    async with httpx2.AsyncClient(base_url=edge.url) as http:
        for method, path in ENDPOINTS:
            body = {"arguments": {"name": mark}} if method == "POST" else None
            response = await http.request(method, path, json=body,
                                          headers={"Host": f"evil.example:{port_of(edge.url)}"})
            assert response.status_code == 421, (method, path)
            assert response.json()["error"]["code"] == "host-not-allowed"
        for host in ("localhost", "127.0.0.1", "[::1]"):  # the loopback names are served, on any port
            response = await http.get("/healthz", headers={"Host": f"{host}:{port_of(edge.url)}"})
            assert response.status_code == 200, host
    assert http_api.seen(mark) == []


async def test_a_foreign_browser_origin_is_refused_and_the_own_origin_accepted(edge, http_api):
    mark = marker()
    own = f"http://127.0.0.1:{port_of(edge.url)}"
    async with httpx2.AsyncClient(base_url=edge.url) as http:
        for origin in ("http://127.0.0.1:1", "http://evil.example", "null", f"https://127.0.0.1:{port_of(edge.url)}x"):
            for method, path in ENDPOINTS:
                body = {"arguments": {"name": mark}} if method == "POST" else None
                response = await http.request(method, path, json=body, headers={"Origin": origin})
                assert response.status_code == 403, (origin, method, path)
                assert response.json()["error"]["code"] == "origin-not-allowed"
        assert http_api.seen(mark) == []

        for origin in (own, "http://tools.example.test:8443", None):  # own, configured, none (not a browser)
            headers = {"Origin": origin} if origin else {}
            response = await http.post("/v1/tools/web_create_item/invoke", json={"arguments": {"name": mark}},
                                       headers=headers)
            assert response.status_code == 200, origin
    assert len(http_api.seen(mark)) == 3


async def test_two_host_or_origin_headers_are_refused(edge):
    reader, writer = await raw(edge.url)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n")
    assert (await read_response(reader))[0] == 421
    writer.close()
    reader, writer = await raw(edge.url)
    writer.write(head(edge.url, "/healthz", Origin="http://evil.example").replace(
        b"\r\n\r\n", f"\r\nOrigin: http://127.0.0.1:{port_of(edge.url)}\r\n\r\n".encode()))
    assert (await read_response(reader))[0] == 403
    writer.close()


# --- JSON only ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "application/json; charset=latin-1", "application/jsonx"])
async def test_invoke_accepts_only_json_bodies(edge, http_api, content_type):
    mark = marker()
    headers = {"Content-Type": content_type} if content_type else {}
    async with httpx2.AsyncClient(base_url=edge.url) as http:
        response = await http.post("/v1/tools/web_create_item/invoke", headers=headers,
                                   content=f'{{"arguments": {{"name": "{mark}"}}}}')
    assert response.status_code == 415
    assert response.json() == {"error": {"code": "unsupported-media-type",
                                         "message": "Send the body as JSON with 'Content-Type: application/json'."}}
    assert http_api.seen(mark) == []


async def test_json_with_a_utf8_charset_is_accepted(edge, http_api):
    mark = marker()
    async with httpx2.AsyncClient(base_url=edge.url) as http:
        response = await http.post("/v1/tools/web_create_item/invoke",
                                   headers={"Content-Type": "Application/JSON; charset=utf-8"},
                                   content=f'{{"arguments": {{"name": "{mark}"}}}}')
    assert response.status_code == 200
    assert len(http_api.seen(mark)) == 1


async def test_an_approval_decision_accepts_only_json_with_the_key_in_a_header(edge, http_api):
    mark = marker()
    async with httpx2.AsyncClient(base_url=edge.url) as http:
        held = await http.post("/v1/tools/web_delete_item/invoke", json={"arguments": {"item_id": mark}})
        assert held.status_code == 202
        decision = f"/v1/approvals/{held.json()['approval_id']}/decision"
        bearer = {"Authorization": f"Bearer {APPROVER_KEY}"}

        refused = await http.post(decision, content='{"approve": true}',
                                  headers={**bearer, "Content-Type": "text/plain"})
        assert refused.status_code == 415
        # a key in a cookie (what a browser would attach cross-site) is no credential: only the header counts
        as_cookie = await http.post(decision, json={"approve": True}, headers={"Cookie": f"key={APPROVER_KEY}"})
        assert as_cookie.status_code == 403  # the anonymous guest, who is no approver
        status = await http.get(f"/v1/approvals/{held.json()['approval_id']}", headers=bearer)
        assert status.json()["state"] == "pending"

        approved = await http.post(decision, json={"approve": True}, headers=bearer)
        assert approved.status_code == 200
    assert http_api.seen(mark) == []  # approving releases the call; it runs when the caller retries


# --- bodies: size and time ------------------------------------------------------------------------------


async def test_a_declared_100_mb_body_is_refused_before_it_is_sent(edge, http_api):
    reader, writer = await raw(edge.url)
    writer.write(head(edge.url, Content_Length=100 * 1024 * 1024))
    status, data = await read_response(reader)
    writer.close()
    assert status == 413
    assert b'"body-too-large"' in data


async def test_a_streamed_100_mb_body_is_cut_off_after_the_limit(edge, http_api):
    # chunked, so the server cannot know the size in advance: it must count while reading
    total = 100 * 1024 * 1024
    chunk = b"x" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    reader, writer = await raw(edge.url)
    writer.write(head(edge.url, Transfer_Encoding="chunked") + b'18\r\n{"arguments": {"name": "\r\n')
    answer = asyncio.create_task(read_response(reader, timeout=30))
    sent = 0
    try:
        while sent < total and not answer.done():
            writer.write(frame)
            await writer.drain()
            sent += len(chunk)
    except ConnectionError:
        pass  # the server closed the connection after answering
    status, data = await answer
    writer.close()
    assert status == 413, data[:200]
    assert sent < 16 * 1024 * 1024  # the answer came long before the body ended (the limit is 2 MiB)
    assert http_api.requests == [r for r in http_api.requests if "x" * 1000 not in str(r.get("body"))]


async def test_a_dripping_body_gets_408_and_is_disconnected_in_time(edge):
    reader, writer = await raw(edge.url)
    writer.write(head(edge.url, Content_Length=1000) + b'{"arguments": ')
    answer = asyncio.create_task(read_response(reader, timeout=ANSWERED_WITHIN))
    while not answer.done():  # one byte every 100 ms: alive, but never done
        writer.write(b" ")
        await asyncio.sleep(0.1)
    status, data = await answer
    assert status == 408
    assert b"connection: close" in data.lower()
    writer.close()


async def test_a_body_that_stops_halfway_gets_408(edge):
    reader, writer = await raw(edge.url)
    writer.write(head(edge.url, Content_Length=1000) + b'{"arguments": {')
    status, data = await read_response(reader, timeout=ANSWERED_WITHIN)  # read to EOF: the server closed it
    assert status == 408
    assert b'"request-timeout"' in data
    writer.close()


# --- headers: size and time -------------------------------------------------------------------------------


async def test_dripping_headers_get_408_and_are_disconnected_in_time(edge):
    reader, writer = await raw(edge.url)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    answer = asyncio.create_task(read_response(reader, timeout=ANSWERED_WITHIN))
    n = 0
    while not answer.done():  # a new header line every 100 ms, never the blank line that ends them
        writer.write(f"X-Slow-{n}: 1\r\n".encode())
        n += 1
        await asyncio.sleep(0.1)
    status, _ = await answer
    assert status == 408
    writer.close()


async def test_a_silent_connection_is_closed_after_the_header_timeout(edge):
    reader, writer = await raw(edge.url)
    started = time.monotonic()
    status, data = await read_response(reader, timeout=ANSWERED_WITHIN)
    assert (status, data) == (0, b"")  # closed without a word: it never asked anything
    assert time.monotonic() - started > HEADER_TIMEOUT - 0.2  # not before its timeout (load only adds to it)
    writer.close()


async def test_oversized_headers_get_431_after_at_most_the_limit(edge):
    reader, writer = await raw(edge.url)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    answer = asyncio.create_task(read_response(reader))
    sent = 0
    try:
        while not answer.done() and sent < 50 * 1024 * 1024:  # a 50 MB header value, if nothing stops it
            writer.write(b"a" * 16384)
            await writer.drain()
            sent += 16384
            await asyncio.sleep(0)
    except ConnectionError:
        pass
    status, _ = await answer
    writer.close()
    assert status == 431
    assert sent < 2 * 1024 * 1024


# --- connections ------------------------------------------------------------------------------------------


async def test_slow_connections_beyond_the_cap_do_not_starve_legitimate_requests(edge):
    slow = []
    for _ in range(MAX_CONNECTIONS * 3):  # three times the cap, each stuck in its headers
        reader, writer = await raw(edge.url)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow.append((reader, writer))
    await writer.drain()
    try:
        async with httpx2.AsyncClient(base_url=edge.url) as http:
            for _ in range(5):
                response = await http.get("/healthz", headers={"Connection": "close"})
                assert response.status_code == 200
        # the oldest slow ones were closed to make room, with nothing sent (at EOF with an empty buffer)
        async with asyncio.timeout(ANSWERED_WITHIN):
            while sum(reader.at_eof() for reader, _ in slow) < MAX_CONNECTIONS * 2:
                await asyncio.sleep(0.05)
    finally:
        for _, writer in slow:
            writer.close()


async def test_one_key_gets_its_share_of_the_connections_and_the_rest_stay_free(edge, keys, until):
    # Issue 18 item 4: one key could fill every connection, and then every other key got 503. Now the
    # anonymous principal gets its share (max_connections / 8 = 3 requests at once) and 429 past it.
    share = MAX_CONNECTIONS // 8
    async with httpx2.AsyncClient(base_url=edge.url, limits=httpx2.Limits(max_connections=100),
                                  timeout=60) as http:
        held = [asyncio.create_task(http.post("/v1/tools/web_delete_item/invoke", params={"wait": "60s"},
                                              json={"arguments": {"item_id": f"share-{i}"}}))
                for i in range(MAX_CONNECTIONS)]  # each waits for carol, who never decides
        try:
            await until(lambda: _settled(held, MAX_CONNECTIONS - share))
            reader, writer = await raw(edge.url)  # a new connection finds room
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            status, _ = await read_response(reader)
            writer.close()
            alice = await http.post("/v1/tools/web_search/invoke", json={"arguments": {"q": "room"}},
                                    headers={"Authorization": f"Bearer {keys['alice']}"})
            refused = [t.result() for t in held if t.done()]
            still_held = sum(not t.done() for t in held)
        finally:
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
    assert (status, alice.status_code, still_held) == (200, 200, share)
    assert [r.status_code for r in refused] == [429] * (MAX_CONNECTIONS - share)
    assert refused[0].headers["retry-after"] == "1"
    assert refused[0].json()["error"]["code"] == "connection-share"
    assert f"{share} requests open at once" in refused[0].json()["error"]["message"]


async def _settled(tasks: list[asyncio.Task[Any]], count: int) -> bool:
    return sum(t.done() for t in tasks) >= count


async def test_1100_slow_connections_with_the_default_settings_do_not_starve_anyone(start_gateway, configs, http_api,
                                                                                   keys):
    # what made every legitimate request fail before: 1,100 clients that never finish their headers
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url, prefix="web")),
                                  {"p.yaml": "policy: p\nrules: []\n"})
    slow = []
    try:
        for _ in range(1100):
            reader, writer = await raw(gateway.url)
            writer.write(b"POST /v1/tools/web_search/invoke HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append((reader, writer))
        async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys['alice']}"},
                                      timeout=5) as http:
            for _ in range(10):
                response = await http.post("/v1/tools/web_search/invoke", json={"arguments": {"q": "ok"}},
                                           headers={"Connection": "close"})
                assert response.status_code == 200
        # the server holds at most its cap (512 by default); the oldest slow clients were let go
        async with asyncio.timeout(ANSWERED_WITHIN):
            while sum(reader.at_eof() for reader, _ in slow) < 1100 - 512:
                await asyncio.sleep(0.05)
    finally:
        for _, writer in slow:
            writer.close()


# --- configuration -----------------------------------------------------------------------------------------


async def test_hosts_served_by_default_beyond_loopback_and_when_listed(configs, tmp_path):
    async def statuses(http_section: dict[str, Any] | None, listen_host: str, hosts: list[str]) -> list[int]:
        extra = {"http": http_section} if http_section is not None else {}
        root = tmp_path / uuid.uuid4().hex
        config = configs.load(configs.write(root, configs.base(listen={"host": listen_host}, **extra,
                                                               approvals={"public_url": "https://gw.example.com/x"}),
                                            {"p.yaml": "policy: p\nrules: []\n"}))
        async with configs.serve(config) as running, httpx2.AsyncClient(base_url=running.url) as http:
            return [(await http.get("/healthz", headers={"Host": host})).status_code for host in hosts]

    hosts = ["localhost:9", "192.0.2.7:8080", "[2001:db8::1]", "gw.lan:8080", "gw.example.com", "other.example"]
    # default: loopback names, IP literals, the listen name and public_url's host; nothing else
    assert await statuses(None, "gw.lan", hosts) == [200, 200, 200, 200, 200, 421]
    # a list: exactly it (plus public_url's host), names with a port only on that port
    assert await statuses({"allowed_hosts": ["other.example:8080"]}, "0.0.0.0",
                          [*hosts, "other.example:8080"]) == [421, 421, 421, 421, 200, 421, 200]
    assert await statuses({"allowed_hosts": ["*"]}, "0.0.0.0", hosts) == [200] * 6


def test_a_body_limit_below_the_argument_limit_is_a_config_error(configs, tmp_path):
    config = configs.load(configs.write(tmp_path, configs.base(http={"max_body_bytes": 1000},
                                                               limits={"max_argument_bytes": 5000}),
                                        {"p.yaml": "policy: p\nrules: []\n"}))
    with pytest.raises(ConfigError, match=r"http.max_body_bytes \(1000\) is smaller than limits.max_argument_bytes"):
        build_app(config)
