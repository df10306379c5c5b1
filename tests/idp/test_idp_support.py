"""The test OpenID Provider (tests/idp_support.py) issues what the identity tests rely on, checked here the way
a resource server would: signatures against the JWKS fetched over HTTP, ``iss``, ``aud``, ``typ`` and claims."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx2
import pytest
from idp_support import TOKEN_EXCHANGE, Client, Idp, IdpError, check_jwt
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidClaimError, InvalidKeyIdError
from joserfc.jwk import RSAKey

RESOURCE = "https://gateway.test/mcp"
UPSTREAM = "https://upstream.test/api"


def header(token: str) -> dict[str, Any]:
    """The JOSE header of a compact JWS, unverified."""
    first = token.split(".")[0]
    return dict(json.loads(base64.urlsafe_b64decode(first + "=" * (-len(first) % 4))))


async def verified(idp: Idp, token: str, audience: str) -> dict[str, Any]:
    """The claims of ``token`` checked against the JWKS the provider serves now (not the keys we hold)."""
    async with httpx2.AsyncClient(timeout=10) as http:
        jwks = (await http.get(idp.jwks_uri)).json()
    return check_jwt(token, jwks, issuer=idp.issuer, audience=audience)


async def test_a_user_token_is_a_jwt_access_token_for_the_resource_with_groups(idp: Idp) -> None:
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    claims = await verified(idp, token, RESOURCE)
    assert header(token)["typ"] == "at+jwt"
    assert (claims["sub"], claims["aud"], claims["scope"]) == ("alice", RESOURCE, "mcp")
    assert claims["groups"] == ["leads", "eng"]
    with pytest.raises(InvalidClaimError):
        await verified(idp, token, "https://other.test/mcp")


async def test_groups_come_from_the_table_or_from_the_test(idp: Idp) -> None:
    bob = await verified(idp, await idp.user_token("bob", resource=RESOURCE), RESOURCE)
    stranger = await verified(idp, await idp.user_token("zed", resource=RESOURCE), RESOURCE)
    chosen = await idp.user_token("alice", resource=RESOURCE, groups=["ops"], extra_claims={"tid": "t-1"})
    assert (bob["groups"], stranger["groups"]) == (["eng"], [])
    assert {k: v for k, v in (await verified(idp, chosen, RESOURCE)).items() if k in ("groups", "tid")} == \
        {"groups": ["ops"], "tid": "t-1"}
    again = await verified(idp, await idp.user_token("alice", resource=RESOURCE), RESOURCE)
    assert again["groups"] == ["leads", "eng"] and "tid" not in again  # each sign-in sets the user afresh


async def test_the_id_token_names_the_client_and_carries_groups(idp: Idp) -> None:
    tokens = await idp.user_tokens("bob", resource=RESOURCE, scope="email")
    claims = await verified(idp, tokens["id_token"], idp.public.client_id)
    assert (claims["sub"], claims["groups"], claims["email"]) == ("bob", ["eng"], "bob@example.test")


async def test_token_exchange_keeps_the_subject_and_changes_the_audience(idp: Idp) -> None:
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    exchanged = await idp.exchange(token, resource=UPSTREAM)
    claims = await verified(idp, exchanged["access_token"], UPSTREAM)
    assert exchanged["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert (claims["sub"], claims["aud"], claims["act"]) == ("alice", UPSTREAM, {"sub": idp.service.client_id})
    by_audience = await idp.exchange(token, audience=UPSTREAM, client=idp.service_post)
    assert (await verified(idp, by_audience["access_token"], UPSTREAM))["sub"] == "alice"


async def test_token_exchange_refuses_a_token_the_provider_did_not_sign(idp: Idp) -> None:
    stranger = RSAKey.generate_key(2048, {"kid": "rsa-1", "alg": "RS256"})
    forged = jwt.encode({"alg": "RS256", "kid": "rsa-1", "typ": "at+jwt"},
                        {"iss": idp.issuer, "sub": "admin", "aud": RESOURCE, "exp": 4102444800}, stranger)
    with pytest.raises(IdpError, match="invalid_grant"):
        await idp.exchange(forged, resource=UPSTREAM)
    with pytest.raises(IdpError, match="not allowed for this client"):
        await idp.exchange(await idp.user_token("bob", resource=RESOURCE), resource=UPSTREAM, client=idp.public)


async def test_client_credentials_give_the_client_its_own_token(idp: Idp) -> None:
    token = await idp.client_credentials_token(resource=UPSTREAM, scope="read")
    claims = await verified(idp, token, UPSTREAM)
    assert (claims["sub"], claims["client_id"], claims["scope"]) == (idp.service.client_id,) * 2 + ("read",)
    with pytest.raises(IdpError, match="invalid_client"):
        await idp.token_request(Client(idp.service.client_id, "wrong"), {"grant_type": "client_credentials"})


async def test_a_dynamically_registered_client_signs_a_user_in(idp: Idp) -> None:
    # What the MCP SDKs' OAuth clients register: a localhost redirect, no secret, the resource's scopes.
    client = await idp.register_client(redirect_uris=["http://localhost:5555/cb"], token_endpoint_auth_method="none",
                                       grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                       scope="openid mcp", client_name="an MCP client")
    token = (await idp.user_tokens("mallory", resource=RESOURCE, client=client))["access_token"]
    claims = await verified(idp, token, RESOURCE)
    assert (claims["sub"], claims["groups"], claims["client_id"]) == ("mallory", [], client.client_id)
    web = await idp.web_client("http://127.0.0.1:5556/sso/callback")
    assert web.client_secret and (await idp.user_tokens("bob", client=web))["id_token"]


async def test_metadata_at_both_well_known_paths_and_dev_pages_load_nothing_remote(idp: Idp) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        oidc = (await http.get(f"{idp.issuer}/.well-known/openid-configuration")).json()
        oauth = (await http.get(f"{idp.issuer}/.well-known/oauth-authorization-server")).json()
        page = await http.get(f"{idp.authorization_endpoint}?client_id={idp.public.client_id}&response_type=code"
                              "&scope=openid&code_challenge=x" + "y" * 42 + "&code_challenge_method=S256"
                              "&redirect_uri=http://127.0.0.1:9/callback", follow_redirects=True)
    assert oidc == oauth and oidc["issuer"] == idp.issuer and "registration_endpoint" in oidc
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in oidc["grant_types_supported"]
    assert page.status_code == 200 and 'name="login"' in page.text and "https://" not in page.text


async def test_signing_keys_rotate_and_unpublished_keys_do_not_verify(idp: Idp) -> None:
    async with idp.signing(kid="ec-2"):
        hidden = await idp.user_token("bob", resource=RESOURCE)
    assert header(hidden) | {"typ": "at+jwt"} == {"alg": "ES256", "kid": "ec-2", "typ": "at+jwt"}
    with pytest.raises(InvalidKeyIdError):  # the JWKS does not list ec-2
        await verified(idp, hidden, RESOURCE)
    async with idp.signing(kid="ec-2", published=["rsa-1", "ec-2"]):
        assert (await verified(idp, hidden, RESOURCE))["sub"] == "bob"
        with pytest.raises(InvalidKeyIdError):  # ec-1 left the JWKS
            await verified(idp, idp.sign({"sub": "bob", "aud": RESOURCE}, kid="ec-1"), RESOURCE)
    assert header(await idp.user_token("bob", resource=RESOURCE))["kid"] == "rsa-1"


async def test_tokens_signed_here_verify_and_a_tampered_one_does_not(idp: Idp) -> None:
    for kid in ("rsa-1", "ps-1", "ec-1", "ed-1"):
        token = idp.sign({"sub": "alice", "aud": RESOURCE}, kid=kid)
        assert (await verified(idp, token, RESOURCE))["sub"] == "alice", kid
    head, body, signature = idp.sign({"sub": "alice", "aud": RESOURCE}).split(".")
    other = idp.sign({"sub": "admin", "aud": RESOURCE}).split(".")[1]
    with pytest.raises(BadSignatureError):
        await verified(idp, f"{head}.{other}.{signature}", RESOURCE)
    assert body != other


async def test_the_jwks_misbehaves_on_request_and_fetches_are_counted(idp: Idp) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        await idp.set_jwks_status(503)
        assert (await http.get(idp.jwks_uri)).status_code == 503
        await idp.set_jwks(body="<html>not json")
        assert (await http.get(idp.jwks_uri)).text == "<html>not json"
        await idp.set_jwks(pad=2_000_000)
        huge = await http.get(idp.jwks_uri)
        assert len(huge.content) > 2_000_000 and len(huge.json()["keys"]) == 4
        await idp.set_jwks(location="http://localhost:1/jwks")
        assert (await http.get(idp.jwks_uri)).headers["location"] == "http://localhost:1/jwks"
        await idp.set_jwks()
        assert [k["kid"] for k in (await http.get(idp.jwks_uri)).json()["keys"]] == ["rsa-1", "ps-1", "ec-1", "ed-1"]
    assert (await idp.state())["counts"]["jwks"] == 5


async def test_short_lived_tokens_and_grants_counted_by_type(idp: Idp) -> None:
    await idp.set_token_ttl(2)
    token = await idp.client_credentials_token(resource=UPSTREAM)
    claims = idp.verify(token, audience=UPSTREAM)
    assert claims["exp"] - claims["iat"] == 2
    await idp.exchange(await idp.user_token("bob", resource=RESOURCE), resource=UPSTREAM)
    assert (await idp.state())["counts"]["grants"] == {"client_credentials": 1, "authorization_code": 1,
                                                       TOKEN_EXCHANGE: 1}


def test_each_test_starts_from_the_same_state(idp: Idp) -> None:
    state = httpx2.get(f"{idp.issuer}/_test/state", timeout=10).json()
    assert (state["counts"], state["jwks"], state["ttl"]) == ({"jwks": 0, "grants": {}}, {}, 600)
    assert state["published"] == ["rsa-1", "ec-1", "ps-1", "ed-1"]
    assert state["users"]["alice"]["groups"] == ["leads", "eng"]
