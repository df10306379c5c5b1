"""JWT access tokens through the running gateway: the real IdP's tokens are accepted and mapped; bad ones are refused.

Every refusal is a 401 (403 for a missing scope) with the JSON error body, counted in /metrics by reason, and
nothing else happens: the upstream HTTP API sees no request. Hostile tokens are signed with the IdP's own
keys (``idp.sign``) or with PyJWT and keys made here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import httpx2
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth.claims import ClaimMapping
from gateway.auth.jwks import IssuerKeys, JwksClient
from gateway.auth.jwt import TOKEN_REFUSALS, JwtAuthenticator, JwtAuthenticators, TokenRefused
from gateway.auth.keys import hash_key
from gateway.observe.metrics import families
from gateway.policy.call import Principal

pytestmark = pytest.mark.session_loop

RESOURCE = "https://gateway.test/mcp"
SCRAPER_KEY = "scraper-key-5e0d1b"

# The policy sees the mapped principal: only leads may search, and only with an example.test email.
POLICY = """
policy: jwt
rules:
  - id: leads-only
    tools: [web_search]
    when: '!("leads" in principal.groups) || principal.claims.email != principal.id + "@example.test"'
    action: reject
    message: Only leads may search.
"""


def jwt_entry(idp: Any, **extra: Any) -> dict[str, Any]:
    """An ``auth.jwt`` entry for the test IdP."""
    return {"issuer": idp.issuer, "audiences": [RESOURCE],
            "principal": {"claims": '{"email": claims.email, "client": claims.client_id}'},
            "roles": {"approver": '"leads" in principal.groups'}, **extra}


async def jwt_gateway(start_gateway: Any, configs: Any, http_api: Any, *entries: dict[str, Any]) -> Any:
    """A gateway with alice's API key, a scraper's and ``entries`` as ``auth.jwt``, the HTTP API under ``web``."""
    scraper = {"principal": {"id": "scraper"}, "sha256": hash_key(SCRAPER_KEY), "metrics": True}
    config = configs.base(configs.http_upstream("api", http_api.url, prefix="web"),
                          auth={"api_keys": [*configs.api_keys("alice"), scraper], "jwt": list(entries)},
                          metrics={"enabled": True})
    return await start_gateway(config, {"jwt.yaml": POLICY})


async def search(gateway: Any, token: str, marker: str) -> httpx2.Response:
    """POST a ``web_search`` call with ``token`` as the bearer."""
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30) as client:
        return await client.post("/v1/tools/web_search/invoke", json={"arguments": {"q": marker}},
                                 headers={"Authorization": f"Bearer {token}"})


async def refusals(gateway: Any) -> dict[str, float]:
    """gateway_auth_refusals_total by reason, scraped with an API key (so scraping counts nothing)."""
    async with httpx2.AsyncClient(base_url=gateway.url, timeout=30) as client:
        answer = await client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER_KEY}"})
    assert answer.status_code == 200, answer.text
    text = answer.content
    return {labels["reason"]: value for name, labels, value in families(text) if name == "gateway_auth_refusals_total"}


# --- the real IdP's tokens ------------------------------------------------------------------------------------


async def test_a_real_idp_token_calls_a_tool_and_the_policy_sees_the_mapped_principal(
        idp, start_gateway, configs, http_api):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp))
    alice = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    bob = await idp.user_token("bob", resource=RESOURCE, scope="mcp")
    marker = uuid.uuid4().hex

    allowed = await search(gateway, alice, marker)
    refused = await search(gateway, bob, marker + "-bob")

    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["decision"] == "allow"
    assert allowed.json()["structured"] == {"query": {"q": marker}}
    assert len(http_api.seen(marker)) == 1
    # bob's token is valid, but he is not in leads: the policy decided on the mapped groups
    assert refused.json()["decision"] == "reject"
    assert refused.json()["content"] == [{"type": "text", "text": "Only leads may search."}]
    assert http_api.seen(marker + "-bob") == []
    events = [e for e in gateway.audit_events() if e.get("tool") == "web_search" and e["event"] != "call.intent"]
    assert [e["principal"]["id"] for e in events] == ["alice", "bob"]
    assert events[0]["principal"]["groups"] == ["leads", "eng"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_real_idp_token_calls_a_tool_over_mcp_in_both_eras(mode, idp, start_gateway, configs, http_api,
                                                                  connect_mcp):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp))
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    marker = uuid.uuid4().hex

    async with connect_mcp(gateway, None, headers={"Authorization": f"Bearer {token}"}, mode=mode) as conn:
        result = await conn.call("web_search", {"q": marker})

    assert result.is_error is False
    assert result.structured_content == {"query": {"q": marker}}
    assert len(http_api.seen(marker)) == 1


async def test_api_keys_keep_working_beside_tokens(idp, start_gateway, configs, http_api, rest, rest_call):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp))
    marker = uuid.uuid4().hex
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")

    by_key = await rest_call(rest(gateway, "alice"), "web_get_item", {"item_id": marker})
    by_token = await search(gateway, token, marker)

    assert (by_key["_status"], by_key["structured"]) == (200, {"id": marker, "query": {}})
    assert by_token.status_code == 200
    assert len(http_api.seen(marker)) == 2


async def test_readyz_names_each_issuer_and_its_keys(idp, start_gateway, configs, http_api, until):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp))

    async def ready() -> Any:
        async with httpx2.AsyncClient(base_url=gateway.url, timeout=30) as client:
            answer = await client.get("/readyz")
        return answer.json() if answer.status_code == 200 else None

    body = await until(ready)
    assert body["issuers"] == [{"issuer": idp.issuer, "state": "up", "keys": 4, "last_error": None}]


# --- bad tokens: each a 401 with the error body, counted, and no upstream call ---------------------------------


class Clock:
    """Monotonic seconds that start at the real clock's reading and then move only when the test says."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def _now() -> int:
    return int(time.time())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    return ".".join([_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()), _b64(signature)])


def _claims(idp: Any, **extra: Any) -> dict[str, Any]:
    now = _now()
    return {"iss": idp.issuer, "sub": "alice", "aud": RESOURCE, "iat": now, "exp": now + 600, "scope": "mcp",
            "groups": ["leads"], "email": "alice@example.test", **extra}


def _hmac_with_public_key(idp: Any) -> str:
    """HS256 over the token with the issuer's RSA public key (PEM) as the secret: the classic confusion attack."""
    pem = pyjwt.PyJWK(idp.keys["rsa-1"].as_dict(private=False)).key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    head = {"alg": "HS256", "kid": "rsa-1", "typ": "at+jwt"}
    signing_input = ".".join([_b64(json.dumps(head).encode()), _b64(json.dumps(_claims(idp)).encode())])
    return signing_input + "." + _b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())


def _signed(idp: Any, claims: dict[str, Any], headers: dict[str, Any]) -> str:
    """Signed by PyJWT with the IdP's own rsa-1 key, with header fields the IdP would never write."""
    key = pyjwt.PyJWK(idp.keys["rsa-1"].as_dict(private=True)).key
    return pyjwt.encode(claims, key, algorithm="RS256", headers={"kid": "rsa-1", "typ": "at+jwt", **headers})


def _raw_signed(idp: Any, header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A header no library would write, signed RS256 by hand with the IdP's own rsa-1 key."""
    key = pyjwt.PyJWK(idp.keys["rsa-1"].as_dict(private=True)).key
    signing_input = ".".join([_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode())])
    return signing_input + "." + _b64(RSAAlgorithm(RSAAlgorithm.SHA256).sign(signing_input.encode(), key))


def _embedded_key(idp: Any) -> str:
    """Signed with a key made here that the header itself carries (``jwk``) under the IdP's kid: never trusted."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    embedded = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    return pyjwt.encode(_claims(idp), private, algorithm="RS256",
                        headers={"kid": "rsa-1", "typ": "at+jwt", "jwk": embedded, "jku": f"{idp.issuer}/evil"})


def _tampered(idp: Any) -> str:
    head, _, signature = idp.sign(_claims(idp, groups=["eng"])).split(".")
    return ".".join([head, _b64(json.dumps(_claims(idp, groups=["leads", "admins"])).encode()), signature])


def _foreign_key(idp: Any) -> str:
    """Signed with an RSA key made here under the IdP's own kid: the signature cannot verify."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return pyjwt.encode(_claims(idp), private, algorithm="RS256", headers={"kid": "rsa-1", "typ": "at+jwt"})


BAD_TOKENS: dict[str, Any] = {
    "expired": lambda idp: idp.sign(_claims(idp, iat=_now() - 3600, exp=_now() - 120)),
    "not-yet-valid": lambda idp: idp.sign(_claims(idp, nbf=_now() + 600, exp=_now() + 1200)),
    "issued-in-the-future": lambda idp: idp.sign(_claims(idp, iat=_now() + 600, exp=_now() + 1200)),
    "wrong-issuer": lambda idp: idp.sign(_claims(idp, iss=idp.issuer + "/other")),
    "wrong-audience": lambda idp: idp.sign(_claims(idp, aud="https://another.test/mcp")),
    "no-audience": lambda idp: idp.sign({k: v for k, v in _claims(idp).items() if k != "aud"}, defaults=False),
    "alg-none": lambda idp: _unsigned({"alg": "none", "typ": "at+jwt"}, _claims(idp)),
    "hmac-with-the-public-key": _hmac_with_public_key,
    "unknown-kid": lambda idp: idp.sign(_claims(idp), kid="rsa-2"),
    "tampered-payload": _tampered,
    "signed-by-another-key": _foreign_key,
    "unconfigured-issuer": lambda idp: _unsigned({"alg": "RS256", "kid": "rsa-1"},
                                                 _claims(idp, iss="https://idp.elsewhere.test"), b"x" * 256),
    "missing-sub": lambda idp: idp.sign({k: v for k, v in _claims(idp).items() if k != "sub"}),
    "groups-of-the-wrong-type": lambda idp: idp.sign(_claims(idp, groups="leads")),
    "over-the-header-limit": lambda idp: _signed(idp, _claims(idp), {"x-pad": "p" * 4096}),
    "over-the-token-limit": lambda idp: idp.sign(_claims(idp, pad="p" * 20_000)),
    "not-an-access-token": lambda idp: idp.sign(_claims(idp), header={"typ": "logout+jwt"}),
    "no-expiry": lambda idp: idp.sign({k: v for k, v in _claims(idp).items() if k != "exp"}, defaults=False),
    "garbage-header": lambda idp: "eyJhbGciOi.e30.c2ln",  # '{"alg":"' and no more
    "rule-fails": lambda idp: idp.sign(_claims(idp, scope="other")),
    "issuer-not-a-string": lambda idp: idp.sign(_claims(idp, iss=[idp.issuer])),
    "key-in-the-header": _embedded_key,
    "kid-not-a-string": lambda idp: _raw_signed(idp, {"alg": "RS256", "kid": 7}, _claims(idp)),
    "typ-not-a-string": lambda idp: _raw_signed(idp, {"alg": "RS256", "kid": "rsa-1", "typ": ["at+jwt"]},
                                                _claims(idp)),
}

# token → the reason it is refused for (the label of gateway_auth_refusals_total), and what the caller reads
# when it is not the reason's own message (TOKEN_REFUSALS)
EXPECTED = {
    "expired": "expired", "not-yet-valid": "not-yet-valid", "issued-in-the-future": "not-yet-valid",
    "wrong-issuer": "unknown-issuer", "wrong-audience": "bad-audience", "no-audience": "bad-audience",
    "alg-none": "bad-algorithm", "hmac-with-the-public-key": "bad-algorithm", "unknown-kid": "unknown-key",
    "tampered-payload": "bad-signature", "signed-by-another-key": "bad-signature",
    "unconfigured-issuer": "unknown-issuer", "missing-sub": "missing-subject",
    "groups-of-the-wrong-type": "bad-claims", "over-the-header-limit": "too-large",
    "over-the-token-limit": "too-large", "not-an-access-token": "bad-type", "no-expiry": "bad-claims",
    "garbage-header": "malformed", "rule-fails": "rule-failed", "issuer-not-a-string": "unknown-issuer",
    "kid-not-a-string": "malformed", "typ-not-a-string": "bad-type", "key-in-the-header": "bad-signature",
}
MESSAGES = {
    "groups-of-the-wrong-type": "The token's claims do not map to a principal: principal.groups must be a list of"
                                " strings.",
    "over-the-header-limit": "The token's header is larger than 2048 bytes.",
    "over-the-token-limit": "The token is larger than 16384 bytes.",
    "no-expiry": "The token has no 'exp' claim.",
    "rule-fails": "the token lacks the mcp scope",
}

RULES = [{"expression": 'has(claims.scope) && claims.scope.split(" ").exists(s, s == "mcp")',
          "message": "the token lacks the mcp scope"}]


@pytest.mark.parametrize("kind", sorted(BAD_TOKENS))
async def test_a_bad_token_is_refused_with_401_and_nothing_else_happens(kind, idp, start_gateway, configs, http_api):
    gateway = await jwt_gateway(start_gateway, configs, http_api, jwt_entry(idp, rules=RULES))
    token = BAD_TOKENS[kind](idp)
    marker = uuid.uuid4().hex
    before = await refusals(gateway)

    answer = await search(gateway, token, marker)

    reason = EXPECTED[kind]
    assert answer.status_code == 401, answer.text
    assert answer.json() == {"error": {"code": "invalid-token", "message": MESSAGES.get(kind, TOKEN_REFUSALS[reason])}}
    assert http_api.seen(marker) == []
    assert [e for e in gateway.audit_events() if e.get("tool") == "web_search"] == []
    after = await refusals(gateway)
    assert after.get(reason, 0) == before.get(reason, 0) + 1
    assert sum(after.values()) == sum(before.values()) + 1  # counted once, under one reason


async def test_a_token_without_a_required_scope_gets_403_insufficient_scope(idp, start_gateway, configs, http_api):
    entry = jwt_entry(idp, required_scopes=["mcp", "tools:write"])
    gateway = await jwt_gateway(start_gateway, configs, http_api, entry)
    token = await idp.user_token("alice", resource=RESOURCE, scope="mcp")
    marker = uuid.uuid4().hex

    answer = await search(gateway, token, marker)

    assert answer.status_code == 403
    assert answer.json()["error"] == {"code": "insufficient-scope", "message": "The token lacks the scope tools:write."}
    assert http_api.seen(marker) == []
    assert (await refusals(gateway)).get("insufficient-scope") == 1


# --- remembered tokens ---------------------------------------------------------------------------------------


async def test_a_remembered_token_is_refused_once_its_key_is_withdrawn(idp):
    clock = Clock()
    client = JwksClient()
    keys = IssuerKeys(idp.issuer, None, ["RS256"], 86_400, client, clock)
    mapping = ClaimMapping(id="claims.sub", groups="claims.groups", claims="{}")
    authenticators = JwtAuthenticators([JwtAuthenticator(idp.issuer, [RESOURCE], ["RS256"], 30, keys, mapping)],
                                       client)
    token = idp.sign(_claims(idp))
    try:
        first = await authenticators.identify(token)
        again = await authenticators.identify(token)  # remembered: the same identity, no second check
        assert first is again
        assert (first.principal.kind, first.principal.issuer, first.principal.subject) == ("jwt", idp.issuer, "alice")

        await idp.set_keys(published=["rsa-2"], kid="rsa-2")  # rsa-1 withdrawn (compromised, say)
        clock.now += 30
        await authenticators.identify(idp.sign(_claims(idp), kid="rsa-2"))  # its new kid fetches the new set

        with pytest.raises(TokenRefused) as refused:
            await authenticators.identify(token)
        assert refused.value.reason == "unknown-key"
    finally:
        await authenticators.aclose()


async def test_the_principal_carries_issuer_subject_and_a_hash_of_the_token_id(idp):
    jti = uuid.uuid4().hex
    token = idp.sign(_claims(idp, jti=jti, client_id="c"))
    mapping = ClaimMapping(id='claims.email', groups="claims.groups", claims='{"client": claims.client_id}',
                           roles={"approver": '"leads" in principal.groups', "metrics": "false"})

    identity = mapping.identity(idp.issuer, pyjwt.decode(token, options={"verify_signature": False}), token)

    assert identity.principal == Principal("alice@example.test", ("leads",), {"client": "c"}, kind="jwt",
                                           issuer=idp.issuer, subject="alice",
                                           token_id_hash=hashlib.sha256(jti.encode()).hexdigest())
    assert (identity.approver, identity.admin, identity.metrics, identity.token) == (True, False, False, token)
    assert token not in repr(identity)


async def test_each_token_goes_only_to_the_authenticator_of_its_own_issuer(idp):
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**RSAAlgorithm.to_jwk(other_key.public_key(), as_dict=True), "kid": "other-1"}
    fetched: list[str] = []

    async def jwks(request: Request) -> JSONResponse:
        fetched.append(request.url.path)
        return JSONResponse({"keys": [jwk]})

    async with serve_app(Starlette(routes=[Route("/keys", jwks)])) as url:
        client = JwksClient()
        mapping = ClaimMapping(id="claims.sub", groups="[]", claims="{}")
        other = "https://other.example"
        authenticators = JwtAuthenticators([
            JwtAuthenticator(idp.issuer, [RESOURCE], ["RS256"], 30, IssuerKeys(idp.issuer, None, ["RS256"], 3600,
                                                                               client), mapping),
            JwtAuthenticator(other, [RESOURCE], ["RS256"], 30, IssuerKeys(other, f"{url}/keys", ["RS256"], 3600,
                                                                          client), mapping)], client)
        try:
            mine = await authenticators.identify(idp.sign(_claims(idp, sub="alice")))
            assert fetched == []  # the IdP's token never made the other issuer's keys load
            theirs = await authenticators.identify(pyjwt.encode(
                _claims(idp, iss=other, sub="alice"), other_key, algorithm="RS256", headers={"kid": "other-1"}))
            assert fetched == ["/keys"]
            # the same sub at two issuers: two principals (sessions and budgets bind to issuer and subject)
            assert (mine.principal.issuer, theirs.principal.issuer) == (idp.issuer, other)
            with pytest.raises(TokenRefused) as refused:  # the IdP's key does not speak for the other issuer
                await authenticators.identify(idp.sign(_claims(idp, iss=other)))
            assert refused.value.reason == "unknown-key"
        finally:
            await authenticators.aclose()


async def test_verify_checks_an_id_token_for_its_client_and_refuses_an_access_token(idp):
    client = JwksClient()
    keys = IssuerKeys(idp.issuer, None, ["RS256"], 3600, client)
    mapping = ClaimMapping(id="claims.sub", groups="has(claims.groups) ? claims.groups : []", claims="{}",
                           roles={"approver": '"leads" in principal.groups'})
    authenticators = JwtAuthenticators([JwtAuthenticator(idp.issuer, [RESOURCE], ["RS256"], 30, keys, mapping)],
                                       client)
    tokens = await idp.user_tokens("alice", resource=RESOURCE, scope="mcp")
    try:
        claims = await authenticators.verify(tokens["id_token"], issuer=idp.issuer, audiences=[idp.public.client_id])
        identity = authenticators.identity_for_claims(idp.issuer, claims)

        assert (claims["sub"], claims["aud"]) == ("alice", idp.public.client_id)
        assert (identity.principal.id, identity.approver, identity.token) == ("alice", True, None)
        with pytest.raises(TokenRefused) as refused:  # the access token is for the gateway, not for the client
            await authenticators.verify(tokens["access_token"], issuer=idp.issuer, audiences=[idp.public.client_id])
        assert refused.value.reason == "bad-audience"
        with pytest.raises(TokenRefused) as refused:
            await authenticators.verify(tokens["id_token"], issuer="https://another.example", audiences=["x"])
        assert refused.value.reason == "unknown-issuer"
    finally:
        await authenticators.aclose()
