"""Issuers' keys: fetched from the real IdP, cached, refetched at most once per 30 s, refused when too old.

The cache's clock is injected (a plain counter the test moves), so nothing here sleeps for time; what the
IdP saw is read from its own counts. A JWKS that is garbage, huge, slow or redirects comes from the IdP's
misbehaviour switches; the redirect's target is a loopback server of this test, which must see nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt import PyJWK
from jwt.algorithms import RSAAlgorithm
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from test_jwt import RESOURCE, Clock, jwt_entry, jwt_gateway, refusals, search

from gateway.auth.jwks import IssuerKeys, JwksClient, KeysUnavailable, usable_keys
from gateway.auth.jwt import TOKEN_REFUSALS, TokenRefused
from gateway.core.limits import JWKS_MIN_REFETCH_SECONDS, MAX_JWKS_BYTES

pytestmark = pytest.mark.session_loop


async def jwks_fetches(idp: Any) -> int:
    return int((await idp.state())["counts"]["jwks"])


@pytest_asyncio.fixture(loop_scope="session")
async def client() -> AsyncIterator[JwksClient]:
    made = JwksClient()
    yield made
    await made.aclose()


# --- the cache, on its own clock ---------------------------------------------------------------------------


async def test_an_unknown_kid_refetches_at_most_once_per_30_seconds(idp, client):
    clock = Clock()
    keys = IssuerKeys(idp.issuer, None, ["RS256", "ES256"], 86_400, client, clock)
    start = await jwks_fetches(idp)

    assert len(await keys.keys_for("rsa-1", "RS256")) == 1  # the first use fetches
    assert await jwks_fetches(idp) == start + 1
    for kid in ("forged-1", "forged-2", "forged-3"):  # a flood of kids within 30 s: no fetch
        clock.now += 1
        with pytest.raises(TokenRefused) as refused:
            await keys.keys_for(kid, "RS256")
        assert refused.value.reason == "unknown-key"
    assert await jwks_fetches(idp) == start + 1

    clock.now += JWKS_MIN_REFETCH_SECONDS  # 30 s after the last fetch: one more, shared by concurrent callers
    results = await asyncio.gather(*(keys.keys_for(f"forged-{i}", "RS256") for i in range(20)),
                                   return_exceptions=True)
    assert all(isinstance(r, TokenRefused) and r.reason == "unknown-key" for r in results)
    assert await jwks_fetches(idp) == start + 2
    clock.now += 1
    with pytest.raises(TokenRefused):
        await keys.keys_for("forged-again", "RS256")
    assert await jwks_fetches(idp) == start + 2


async def test_a_rotated_key_is_found_by_the_refetch_its_kid_causes(idp, client):
    clock = Clock()
    keys = IssuerKeys(idp.issuer, None, ["RS256"], 86_400, client, clock)
    await keys.keys_for("rsa-1", "RS256")
    generation = keys.generation

    await idp.set_keys(published=["rsa-1", "rsa-2"])  # the IdP rotates in a new key
    clock.now += JWKS_MIN_REFETCH_SECONDS
    [found] = await keys.keys_for("rsa-2", "RS256")

    assert found.key_id == "rsa-2"
    assert keys.generation == generation + 1  # remembered tokens are checked again


async def test_keys_serve_while_the_idp_is_down_until_max_age_then_fail_closed(idp, client):
    clock = Clock()
    keys = IssuerKeys(idp.issuer, None, ["RS256"], 3_600, client, clock)
    await keys.keys_for("rsa-1", "RS256")
    await idp.set_jwks_status(503)

    clock.now += 1_000  # past the refresh time: a background refresh fails, the keys still serve
    assert len(await keys.keys_for("rsa-1", "RS256")) == 1
    await _settled(keys)
    assert (keys.status().state, keys.status().last_error) == ("stale", "jwks: HTTP 503")

    clock.now += 2_700  # past jwks_max_age since the last good fetch: refused, whatever the cache holds
    with pytest.raises(TokenRefused) as refused:
        await keys.keys_for("rsa-1", "RS256")
    assert refused.value.reason == "keys-unavailable"
    status = keys.status()
    assert (status.state, status.keys, status.ready) == ("down", 0, False)
    assert status.last_error == "keys older than jwks_max_age; last fetch: jwks: HTTP 503"

    await idp.set_jwks_status(200)  # back: the next use past the rate limit fetches again
    clock.now += JWKS_MIN_REFETCH_SECONDS
    assert len(await keys.keys_for("rsa-1", "RS256")) == 1
    assert keys.status().state == "up"


async def test_keys_missing_at_start_are_fetched_again_soon_in_the_background(idp, client):
    """An IdP that is down when the gateway starts: its tokens work within seconds of it answering, with no
    token needed to ask again (retries 1 s apart, doubling up to 30 s)."""
    keys = IssuerKeys(idp.issuer, None, ["RS256"], 3_600, client)  # the real clock: the retry is a real timer
    await idp.set_jwks_status(503)
    try:
        task = keys.refresh()
        assert task is not None
        await task
        assert not keys.usable() and keys.status().state == "down"
    finally:
        await idp.set_jwks_status(200)
    deadline = asyncio.get_running_loop().time() + 30
    while not keys.usable():  # usable() starts nothing: only the planned retry can fetch the keys
        assert asyncio.get_running_loop().time() < deadline, "the keys were never fetched again"
        await asyncio.sleep(0.05)
    assert keys.status().state == "up"
    await keys.aclose()


async def _settled(keys: IssuerKeys) -> None:
    task = keys.refresh()  # None when no fetch runs now (the rate limit holds one back)
    if task is not None:
        await task
    for _ in range(100):  # the background task ends after its last await; let it
        if keys.status().last_error is not None:
            return
        await asyncio.sleep(0)


# --- what a key set may hold -----------------------------------------------------------------------------------


def _rsa_jwk(bits: int, **extra: Any) -> dict[str, Any]:
    public = rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key()
    return {**RSAAlgorithm.to_jwk(public, as_dict=True), **extra}


def test_only_public_signing_keys_an_allowed_algorithm_can_use_are_kept():
    good = _rsa_jwk(2048, kid="good")
    doc = {"keys": [
        good,
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},  # a shared secret in a JWKS: never a verification key
        _rsa_jwk(1024, kid="short"),  # too short to trust
        _rsa_jwk(2048, kid="enc", use="enc"),  # for encryption, not signatures
        _rsa_jwk(2048, kid="pinned-ps", alg="PS256"),  # the key says which algorithm it is for
        "not a key",
    ]}

    found = usable_keys(doc, ["RS256", "ES256"])

    assert [(kid, key.algorithm_name) for kid, key in found] == [("good", "RS256")]
    assert isinstance(found[0][1], PyJWK)
    with pytest.raises(KeysUnavailable, match="no usable signing key"):
        usable_keys({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, ["RS256"])
    with pytest.raises(KeysUnavailable, match="no 'keys' list"):
        usable_keys({"keys": "rsa"}, ["RS256"])


DISCOVERY = {
    "another-issuer": ({"issuer": "https://idp.evil.example", "jwks_uri": "JWKS"},
                       "discovery: the document names another issuer"),
    "http-jwks": ({"issuer": "ISSUER", "jwks_uri": "http://keys.example.com/jwks"},
                  "discovery: jwks_uri missing or not https"),
    "no-jwks": ({"issuer": "ISSUER"}, "discovery: jwks_uri missing or not https"),
}


@pytest.mark.parametrize("kind", sorted(DISCOVERY))
async def test_a_discovery_document_that_cannot_be_trusted_gives_no_keys(kind, client):
    document, error = DISCOVERY[kind]
    served: list[str] = []

    async def answer(request: Request) -> JSONResponse:
        served.append(request.url.path)
        if request.url.path == "/jwks":
            return JSONResponse({"keys": [_rsa_jwk(2048, kid="k")]})
        base = str(request.base_url).rstrip("/")
        return JSONResponse({k: {"ISSUER": base, "JWKS": f"{base}/jwks"}.get(v, v) for k, v in document.items()})

    routes = [Route("/.well-known/openid-configuration", answer), Route("/jwks", answer)]
    async with serve_app(Starlette(routes=routes)) as url:
        keys = IssuerKeys(url, None, ["RS256"], 3600, client, Clock())
        with pytest.raises(TokenRefused) as refused:
            await keys.keys_for("k", "RS256")

    assert refused.value.reason == "keys-unavailable"
    assert keys.status().last_error == error
    assert served == ["/.well-known/openid-configuration"]  # the keys it points at are never fetched


# --- hostile key sets, through the gateway ------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def elsewhere() -> AsyncIterator[tuple[str, list[str]]]:
    """Another host's server that would hand out a key set; it records every request it gets."""
    seen: list[str] = []

    async def keys(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        return JSONResponse({"keys": []})

    async with serve_app(Starlette(routes=[Route("/jwks", keys)])) as url:
        yield url.replace("127.0.0.1", "localhost"), seen


HOSTILE = {
    "garbage": ({"body": "<html>not a key set</html>", "status": 200}, "jwks: not JSON"),
    "huge": ({"pad": MAX_JWKS_BYTES + 1}, f"jwks: larger than {MAX_JWKS_BYTES} bytes"),
    "slow": ({"delay": 6.0}, "no answer within 5s"),
    "redirect": ({"location": "ELSEWHERE", "status": 302}, "jwks: redirects are not followed (HTTP 302)"),
    "down": ({"status": 503}, "jwks: HTTP 503"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_a_hostile_jwks_refuses_every_token_and_readyz_says_why(kind, idp, start_gateway, configs, http_api,
                                                                     elsewhere, until):
    where, seen = elsewhere
    misbehaviour, error = HOSTILE[kind]
    await idp.set_jwks(**{k: (f"{where}/jwks" if v == "ELSEWHERE" else v) for k, v in misbehaviour.items()})
    token = idp.sign({"sub": "alice", "aud": RESOURCE, "groups": ["leads"], "email": "alice@example.test"})
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp))
    marker = uuid.uuid4().hex

    answer = await search(gateway, token, marker)

    assert answer.status_code == 401
    assert answer.json() == {"error": {"code": "invalid-token", "message": TOKEN_REFUSALS["keys-unavailable"]}}
    assert http_api.seen(marker) == []
    assert (await refusals(gateway)) == {"keys-unavailable": 1}
    assert seen == []  # the redirect was not followed to the other host
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30) as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["status"] == "not_ready"
    assert ready.json()["issuers"] == [{"issuer": idp.issuer, "state": "down", "keys": 0, "last_error": error}]


async def test_the_gateway_serves_cached_keys_while_the_idp_is_down_then_refuses_and_readyz_says_why(
        idp, start_gateway, configs, http_api, until):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp, jwks_max_age="1h"))
    keys = gateway.app.state.auth.jwt.keys(idp.issuer)
    clock = Clock()
    keys.clock = clock  # the cache's clock from here on is the test's
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    fresh = idp.sign({"sub": "alice", "aud": RESOURCE, "groups": ["leads"], "email": "alice@example.test",
                      "client_id": "test"})
    marker = uuid.uuid4().hex
    assert (await search(gateway, token, marker)).status_code == 200

    await idp.set_jwks_status(503)
    clock.now += 1_000  # due for a refresh, which fails: the cached keys still check new tokens
    answer = await search(gateway, fresh, marker)
    assert answer.status_code == 200, answer.text

    async def readyz() -> Any:
        async with httpx2.AsyncClient(base_url=gateway.url, timeout=30) as http:
            answer = await http.get("/readyz")
        return answer.status_code, answer.json()["issuers"][0]

    assert await until(lambda: _state(readyz, "stale")) == (200, {"issuer": idp.issuer, "state": "stale", "keys": 4,
                                                                  "last_error": "jwks: HTTP 503"})
    clock.now += 3_600  # past jwks_max_age: the token that worked a moment ago is refused
    refused = await search(gateway, token, marker + "-late")
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == TOKEN_REFUSALS["keys-unavailable"]
    assert http_api.seen(marker + "-late") == []
    status, issuer = await readyz()
    assert status == 503
    assert issuer["state"] == "down"
    assert issuer["last_error"] == "keys older than jwks_max_age; last fetch: jwks: HTTP 503"

    await idp.set_jwks_status(200)
    clock.now += JWKS_MIN_REFETCH_SECONDS
    assert (await search(gateway, token, marker + "-back")).status_code == 200
    assert (await readyz())[0] == 200


async def _state(readyz: Any, wanted: str) -> Any:
    status, issuer = await readyz()
    return (status, issuer) if issuer["state"] == wanted else None
