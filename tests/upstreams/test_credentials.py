"""Upstream credentials against a loopback token endpoint of ours (every answer controlled) and the real IdP:
cached until they expire (an injected clock), one fetch per key however many callers wait, one exchanged token
per caller, and fail closed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from idp_support import Idp
from starlette.types import ASGIApp
from token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpointApp
from upstream_identity_support import AUDIENCE, parts

from gateway.core.errors import UpstreamCredentialsError
from gateway.upstreams.base import needs_caller_token
from gateway.upstreams.credentials import (
    ACCESS_TOKEN_TYPE,
    TOKEN_EXCHANGE_GRANT,
    ClientCredentials,
    TokenCache,
    TokenExchange,
    acting_for,
)
from gateway.upstreams.http import HttpUpstream
from gateway.upstreams.mcp.upstream import McpUpstream
from gateway.upstreams.token_client import IssuedToken, TokenClient, TokenEndpoint

Serve = Callable[[ASGIApp], Awaitable[str]]
ALICE = "eyJhbGciOiJSUzI1NiJ9.alice-token-payload.sig-a1"
BOB = "eyJhbGciOiJSUzI1NiJ9.bob-token-payload.sig-b2"


class Clock:
    """Monotonic seconds the test moves forward."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def idp_client(serve: Serve, idp: TokenEndpointApp) -> TokenClient:
    url = await serve(idp.app())
    return TokenClient(TokenEndpoint(CLIENT_ID, CLIENT_SECRET, f"{url}/token"), "billing")


async def test_client_credentials_fetch_once_until_the_token_nears_expiry(serve):
    idp, clock = TokenEndpointApp(expires_in=300), Clock()
    credentials = ClientCredentials(await idp_client(serve, idp), resource="https://billing.example.com",
                                    scopes=("read", "write"), cache=TokenCache(1, clock))
    first = await credentials.authorization()
    assert first == await credentials.authorization() and first.startswith("Bearer issued-1")
    assert idp.requests == [{"grant_type": "client_credentials", "resource": "https://billing.example.com",
                             "scope": "read write", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}]
    clock.now += 269  # 300 s minus the 30 s margin: still fresh
    assert await credentials.authorization() == first and len(idp.requests) == 1
    clock.now += 2
    assert (await credentials.authorization()).startswith("Bearer issued-2")
    await credentials.aclose()


async def test_a_short_lived_token_keeps_a_quarter_of_its_life_as_margin(serve):
    idp, clock = TokenEndpointApp(expires_in=8), Clock()
    credentials = ClientCredentials(await idp_client(serve, idp), cache=TokenCache(1, clock))
    await credentials.authorization()
    clock.now += 5.9
    await credentials.authorization()
    clock.now += 0.2  # past 8 - 2
    await credentials.authorization()
    assert len(idp.requests) == 2
    await credentials.aclose()


async def test_a_token_of_unknown_lifetime_is_used_once(serve):
    idp = TokenEndpointApp(expires_in=None)
    credentials = ClientCredentials(await idp_client(serve, idp))
    await credentials.authorization()
    await credentials.authorization()
    assert len(idp.requests) == 2
    await credentials.aclose()


async def test_concurrent_callers_share_one_fetch(serve):
    gate = asyncio.Event()
    idp = TokenEndpointApp(gate=gate)
    credentials = ClientCredentials(await idp_client(serve, idp))
    waiting = [asyncio.create_task(credentials.authorization()) for _ in range(8)]
    deadline = asyncio.get_running_loop().time() + 10
    while not idp.requests:  # the one request is at the endpoint, held there
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    waiting[0].cancel()  # a caller that gives up does not cancel the others' fetch
    gate.set()
    answers = await asyncio.gather(*waiting[1:])
    assert len(set(answers)) == 1 and len(idp.requests) == 1
    await credentials.aclose()


async def test_a_failed_fetch_is_not_kept(serve):
    idp = TokenEndpointApp(refuse="temporarily_unavailable")
    credentials = ClientCredentials(await idp_client(serve, idp))
    with pytest.raises(UpstreamCredentialsError, match="temporarily_unavailable"):
        await credentials.authorization()
    idp.refuse = None
    assert (await credentials.authorization()).startswith("Bearer ")
    assert len(idp.requests) == 2
    await credentials.aclose()


async def test_a_token_the_upstream_rejected_is_fetched_anew(serve):
    idp = TokenEndpointApp()
    credentials = ClientCredentials(await idp_client(serve, idp))
    first = await credentials.authorization()
    credentials.rejected(first)
    assert await credentials.authorization() != first
    await credentials.aclose()


async def test_token_exchange_sends_the_callers_token_as_the_subject(serve):
    idp = TokenEndpointApp()
    credentials = TokenExchange(await idp_client(serve, idp), "billing", audience="billing-api", scopes=("read",))
    with acting_for(ALICE):
        value = await credentials.authorization()
    assert ALICE not in value
    assert idp.requests == [{"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token_type": ACCESS_TOKEN_TYPE,
                             "requested_token_type": ACCESS_TOKEN_TYPE, "audience": "billing-api", "scope": "read",
                             "subject_token": ALICE, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}]
    await credentials.aclose()


async def test_each_caller_gets_its_own_exchanged_token_and_keeps_it(serve):
    idp = TokenEndpointApp()
    credentials = TokenExchange(await idp_client(serve, idp), "billing", resource="https://billing.example.com")
    with acting_for(ALICE):
        alice = await credentials.authorization()
        assert await credentials.authorization() == alice
    with acting_for(BOB):
        bob = await credentials.authorization()
    assert alice != bob and alice.endswith(ALICE[-12:]) and bob.endswith(BOB[-12:])
    assert [r["subject_token"] for r in idp.requests] == [ALICE, BOB]
    assert len(credentials.cache) == 2
    await credentials.aclose()


async def test_a_caller_without_a_token_is_refused_and_the_idp_is_not_asked(serve):
    idp = TokenEndpointApp()
    credentials = TokenExchange(await idp_client(serve, idp), "billing", audience="billing")
    with pytest.raises(UpstreamCredentialsError, match=r"acts on behalf of the caller.*API key"):
        await credentials.authorization()
    with acting_for(None), pytest.raises(UpstreamCredentialsError):
        await credentials.authorization()
    assert idp.requests == []
    await credentials.aclose()


async def test_the_upstream_says_whether_it_needs_the_callers_token(serve):
    """What the pipeline asks before the policies (gateway.upstreams.base.needs_caller_token): only an upstream
    whose credential is exchanged from the caller's token needs one; its own token, a static one or none do not."""
    idp = TokenEndpointApp()
    exchange = TokenExchange(await idp_client(serve, idp), "billing", audience="billing")
    own = ClientCredentials(await idp_client(serve, idp))
    made = {name: HttpUpstream(name, "http://127.0.0.1:9", [], credentials=credentials)
            for name, credentials in (("exchange", exchange), ("own", own), ("static", None))}
    assert {name: needs_caller_token(u) for name, u in made.items()} == {"exchange": True, "own": False,
                                                                         "static": False}
    assert needs_caller_token(McpUpstream("mcp", url="http://127.0.0.1:9/mcp", credentials=own)) is False
    assert idp.requests == []  # asking sends nothing
    for credentials in (exchange, own):
        await credentials.aclose()


async def test_the_cache_is_bounded_least_recently_used_first():
    clock = Clock()
    cache = TokenCache(max_entries=2, clock=clock)

    def issue(token: str) -> Callable[[], Awaitable[IssuedToken]]:
        async def fetch() -> IssuedToken:
            return IssuedToken(token, 100)
        return fetch

    assert await cache.get("a", issue("A")) == "A"
    assert await cache.get("b", issue("B")) == "B"
    assert await cache.get("a", issue("A2")) == "A"  # a used again: b is now the oldest
    assert await cache.get("c", issue("C")) == "C"
    assert len(cache) == 2
    assert await cache.get("a", issue("A3")) == "A"
    assert await cache.get("b", issue("B2")) == "B2"  # b was dropped



# --- against the real IdP (tests/idp_support.py), its requests counted by a proxy of ours ------------------


async def test_real_idp_tokens_are_kept_until_they_near_expiry_then_fetched_anew(idp: Idp) -> None:
    clock = Clock()
    async with parts(idp) as (_, proxy, _api, token_url):
        assert idp.service.client_secret is not None
        endpoint = TokenEndpoint(idp.service.client_id, idp.service.client_secret, token_url)
        own = ClientCredentials(TokenClient(endpoint, "who"), resource=AUDIENCE, cache=TokenCache(1, clock))
        exchange = TokenExchange(TokenClient(endpoint, "who"), "who", resource=AUDIENCE, cache=TokenCache(10, clock))
        alice = await idp.user_token("alice", resource="https://gateway.test/mcp")
        first = await own.authorization()
        with acting_for(alice):
            exchanged = await exchange.authorization()
            assert await exchange.authorization() == exchanged
        assert await own.authorization() == first
        assert len(proxy.grants) == 2  # one of each grant
        clock.now += 600 - 30  # the IdP's tokens live 600 s; the last 30 are not used
        second = await own.authorization()
        with acting_for(alice):
            renewed = await exchange.authorization()
        await own.aclose()
        await exchange.aclose()
    assert len(proxy.grants) == 4 and second != first and renewed != exchanged
    for value, sub in [(first, idp.service.client_id), (second, idp.service.client_id), (exchanged, "alice"),
                       (renewed, "alice")]:
        assert idp.verify(value.removeprefix("Bearer "), audience=AUDIENCE)["sub"] == sub
