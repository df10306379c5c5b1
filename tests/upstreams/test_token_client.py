"""The gateway's token requests to a real loopback token endpoint: what is sent, and every way the IdP can
fail, each a clear ``UpstreamCredentialsError`` that names no secret."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from starlette.types import ASGIApp
from token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpointApp

from gateway.core.errors import UpstreamCredentialsError
from gateway.upstreams.token_client import TokenClient, TokenEndpoint

Serve = Callable[[ASGIApp], Awaitable[str]]
GRANT = {"grant_type": "client_credentials", "resource": "https://api.example.com"}


async def served(serve: Serve, idp: TokenEndpointApp | None = None) -> tuple[TokenEndpointApp, str]:
    idp = idp or TokenEndpointApp()
    idp.issuer = await serve(idp.app())
    return idp, idp.issuer


def client(url: str, path: str = "/token", *, secret: str = CLIENT_SECRET, **options: object) -> TokenClient:
    return TokenClient(TokenEndpoint(CLIENT_ID, secret, f"{url}{path}", None, **options), "billing")  # type: ignore[arg-type]


async def refused(token_client: TokenClient) -> str:
    with pytest.raises(UpstreamCredentialsError) as caught:
        await token_client.request(GRANT)
    await token_client.aclose()
    message = str(caught.value)
    assert CLIENT_SECRET not in message and "billing" in message
    return message


async def test_a_grant_is_posted_with_the_client_authenticated_by_basic_auth(serve):
    idp, url = await served(serve)
    token_client = client(url)
    issued = await token_client.request(GRANT)
    await token_client.aclose()
    assert issued.access_token.startswith("issued-1") and issued.expires_in == 300
    assert idp.requests == [{**GRANT, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}]
    assert issued.access_token not in repr(issued)


async def test_client_secret_post_sends_the_secret_in_the_form(serve):
    idp, url = await served(serve)
    token_client = client(url, auth_method="client_secret_post")
    assert (await token_client.request(GRANT)).access_token
    await token_client.aclose()
    assert idp.requests[0]["client_secret"] == CLIENT_SECRET


async def test_the_token_endpoint_is_found_by_discovery_once(serve):
    idp, url = await served(serve)
    token_client = TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, None, url), "billing")
    await token_client.request(GRANT)
    await token_client.request(GRANT)
    await token_client.aclose()
    assert len(idp.requests) == 2


async def test_a_discovered_endpoint_that_is_not_https_is_never_sent_the_secret(serve):
    _, url = await served(serve)
    token_client = TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, None, f"{url}/bad"), "billing")
    assert "no usable https token endpoint" in await refused(token_client)


async def test_a_discovery_document_of_another_issuer_is_refused(serve):
    _, url = await served(serve)
    token_client = TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, None, f"{url}/other"), "billing")
    assert "discovery document could not be used" in await refused(token_client)


async def test_the_idp_error_code_is_named_and_its_text_is_not(serve):
    idp, url = await served(serve)
    idp.refuse = "invalid_scope"
    message = await refused(client(url))
    assert "(invalid_scope)" in message and "on purpose" not in message


async def test_a_wrong_secret_is_refused_without_being_repeated(serve):
    _, url = await served(serve)
    message = await refused(client(url, secret="wrong-secret-123"))
    assert "invalid_client" in message and "wrong-secret-123" not in message


async def test_an_error_that_echoes_the_secret_is_not_repeated(serve):
    _, url = await served(serve)
    message = await refused(client(url, "/echo-secret"))
    assert "HTTP 400" in message


async def test_a_redirect_is_not_followed(serve):
    idp, url = await served(serve)
    assert "redirect" in await refused(client(url, "/redirect"))
    assert idp.requests == []  # the endpoint it pointed to never saw the secret


async def test_a_huge_answer_is_cut_off(serve):
    _, url = await served(serve)
    assert "too large" in await refused(TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, f"{url}/huge"),
                                                    "billing", max_bytes=10_000))


async def test_a_token_that_is_not_a_bearer_token_is_refused(serve):
    _, url = await served(serve)
    assert "not a bearer token" in await refused(client(url, "/not-bearer"))


async def test_a_slow_idp_times_out(serve):
    gate = asyncio.Event()  # never set before the client gives up
    _, url = await served(serve, TokenEndpointApp(gate=gate))
    try:
        message = await refused(TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, f"{url}/token"), "billing",
                                            timeout=0.3))
    finally:
        gate.set()
    assert "did not answer within 0.3s" in message


async def test_an_idp_that_is_down_is_a_clear_refusal(refused_url):
    message = await refused(client(refused_url))
    assert "could not be reached" in message


@pytest.mark.parametrize("lifetime, expected", [(60, 60.0), ("120", 120.0), (None, None), (-5, None), (True, None)])
async def test_the_lifetime_is_read_when_it_is_usable(serve, lifetime, expected):
    _, url = await served(serve, TokenEndpointApp(expires_in=lifetime))
    token_client = client(url)
    assert (await token_client.request(GRANT)).expires_in == expected
    await token_client.aclose()
