"""Credentials that are presented but unusable are refused, even where anonymous access is on (issue 7,
item 6); anonymous access stays on loopback unless the config says otherwise (item 2)."""

from __future__ import annotations

import asyncio
import logging
import uuid

import httpx2
import pytest
import pytest_asyncio

from gateway.app import build_app
from gateway.core.errors import ConfigError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ANON = {"id": "guest"}


@pytest_asyncio.fixture(loop_scope="session")
async def anonymous_gateway(start_gateway, configs, http_api):
    """A gateway where requests without a key act as ``guest``, on the recording HTTP API."""
    config = configs.base(configs.http_upstream("api", http_api.url, prefix="web"),
                          auth={"api_keys": configs.api_keys("alice"), "anonymous": ANON})
    return await start_gateway(config, {"p.yaml": "policy: p\nrules: []\n"})


def refused_credentials(keys: dict[str, str]) -> list[tuple[str, list[tuple[str, str]], int]]:
    alice = keys["alice"]
    return [
        ("basic", [("Authorization", "Basic YWxpY2U6cHc=")], 401),
        ("basic-with-the-key", [("Authorization", f"Basic {alice}")], 401),
        ("bare-bearer", [("Authorization", "Bearer")], 401),
        ("empty-authorization", [("Authorization", "")], 401),
        ("empty-x-api-key", [("X-API-Key", "")], 401),
        ("unknown-scheme", [("Authorization", f"Token {alice}")], 401),
        ("two-authorization-headers", [("Authorization", f"Bearer {alice}"), ("Authorization", "Bearer x")], 400),
        ("the-same-key-twice", [("Authorization", f"Bearer {alice}"), ("Authorization", f"Bearer {alice}")], 400),
        ("two-x-api-keys", [("X-API-Key", alice), ("X-API-Key", "other")], 400),
        ("bearer-and-x-api-key", [("Authorization", f"Bearer {alice}"), ("X-API-Key", "other")], 400),
    ]


async def test_unusable_credentials_are_refused_not_anonymous(anonymous_gateway, http_api, keys):
    async with httpx2.AsyncClient(base_url=anonymous_gateway.url) as http:
        assert (await http.get("/v1/tools")).status_code == 200  # no credential at all: the anonymous guest
        for name, headers, status in refused_credentials(keys):
            mark = f"m-{uuid.uuid4().hex}"
            response = await http.post("/v1/tools/web_create_item/invoke", json={"arguments": {"name": mark}},
                                       headers=httpx2.Headers(headers))
            assert response.status_code == status, name
            assert response.json()["error"]["code"] == ("unauthorized" if status == 401 else "ambiguous-credentials")
            assert http_api.seen(mark) == [], name
            listing = await http.get("/v1/tools", headers=httpx2.Headers(headers))
            assert listing.status_code == status, name


async def test_a_repeated_authorization_header_cannot_smuggle_a_second_identity(shared_gateway, keys):
    # whichever copy a proxy in front checks, the gateway must not act on the other
    headers = httpx2.Headers([("Authorization", f"Bearer {keys['bob']}"), ("Authorization", f"Bearer {keys['alice']}")])
    async with httpx2.AsyncClient(base_url=shared_gateway.url) as http:
        response = await http.get("/v1/tools", headers=headers)
    assert response.status_code == 400
    assert "exactly one credential" in response.json()["error"]["message"]


async def test_an_empty_bearer_token_on_the_wire_is_refused_not_anonymous(anonymous_gateway, http_api):
    # sent by hand: HTTP clients refuse to send a header value with trailing space
    mark = f"m-{uuid.uuid4().hex}"
    body = f'{{"arguments": {{"name": "{mark}"}}}}'.encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", int(anonymous_gateway.url.rsplit(":", 1)[1]))
    writer.write(b"POST /v1/tools/web_create_item/invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \r\n"
                 b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert response.startswith(b"HTTP/1.1 401 ")
    assert http_api.seen(mark) == []


def _anonymous_config(configs, tmp_path, host: str, **auth: object):
    config = configs.base(auth={"api_keys": configs.api_keys("alice"), "anonymous": ANON, **auth},
                          listen={"host": host, "port": 8080})
    return configs.load(configs.write(tmp_path, config, {"p.yaml": "policy: p\nrules: []\n"}))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "gateway.internal"])
def test_anonymous_access_beyond_loopback_needs_an_explicit_yes(configs, tmp_path, host):
    with pytest.raises(ConfigError) as caught:
        build_app(_anonymous_config(configs, tmp_path, host))
    message = str(caught.value)
    assert "anonymous-beyond-loopback" in message
    assert "auth.anonymous" in message and "auth.anonymous_beyond_loopback" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_anonymous_access_on_loopback_needs_nothing_more(configs, tmp_path, host):
    build_app(_anonymous_config(configs, tmp_path, host))


async def test_anonymous_access_beyond_loopback_when_asked_for_logs_a_warning(configs, tmp_path, caplog):
    config = _anonymous_config(configs, tmp_path, "0.0.0.0", anonymous_beyond_loopback=True)
    with caplog.at_level(logging.WARNING, logger="gateway"):
        async with configs.serve(config) as running:
            async with httpx2.AsyncClient(base_url=running.url) as http:
                assert (await http.get("/v1/tools")).status_code == 200
    assert any("anonymous access is on" in r.getMessage() and "guest" in r.getMessage() for r in caplog.records)
