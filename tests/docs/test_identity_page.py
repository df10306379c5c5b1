"""The examples of docs/identity.md do what the page says, with the gateway's own JWT authenticators.

Each ``auth.jwt`` entry of the page's YAML blocks is loaded as the gateway loads it (every expression
compiled). The Okta, Entra ID and Keycloak entries are then pointed at the test IdP (only ``issuer``
changes) and fed tokens shaped like that IdP's real access tokens — its claim names, its header ``typ``,
its scope format — signed with the test IdP's keys: the principal, groups and roles come out as the page
says, and the hostile cases the page names (Entra ID's group overage, an unverified Keycloak email, an
Okta token that names neither a user nor its client) are refused with the page's message.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from idp_support import Idp

from gateway.app.credentials import build_jwt
from gateway.auth.jwt import JwtAuthenticators
from gateway.auth.keys import Identity
from gateway.config.identity import JwtSpec
from gateway.core.errors import TokenRefused

PAGE = Path(__file__).resolve().parents[2] / "docs" / "identity.md"
_FENCE = re.compile(r"```yaml\n(.*?)```", re.S)


def blocks() -> list[dict[str, Any]]:
    """Every YAML block of the page, parsed (each must be valid YAML)."""
    return [yaml.safe_load(block) or {} for block in _FENCE.findall(PAGE.read_text(encoding="utf-8"))]


def entries() -> list[dict[str, Any]]:
    """Every ``auth.jwt`` entry in the page's YAML blocks; a bare ``principal``/``rules`` fragment as an entry."""
    found = []
    for block in blocks():
        found.extend((block.get("auth") or {}).get("jwt") or [])
        if "principal" in block or "rules" in block:
            found.append({"issuer": "https://idp.example.com", "audiences": ["https://gateway.example.com/mcp"],
                          **block})
    return found


def example(host: str) -> dict[str, Any]:
    """The first entry whose issuer is at ``host``: the one of that IdP's own section."""
    return next(e for e in entries() if host in e["issuer"])


def test_every_entry_on_the_page_loads() -> None:
    found = entries()
    assert len(found) >= 7, "the reference, the CEL patterns, Okta, Entra ID, Keycloak and two issuers side by side"
    for entry in found:
        assert build_jwt([JwtSpec.model_validate(entry)]) is not None  # compiles every expression


@pytest.fixture
async def as_at(idp: Idp) -> AsyncIterator[Any]:
    """``as_at(host)``: the page's entry for ``host``, served by the test IdP's keys (its issuer swapped)."""
    made: list[JwtAuthenticators] = []

    async def build(host: str) -> tuple[JwtAuthenticators, dict[str, Any]]:
        entry = {**example(host), "issuer": idp.issuer}
        authenticators = build_jwt([JwtSpec.model_validate(entry)])
        assert authenticators is not None
        authenticators.start()
        made.append(authenticators)
        return authenticators, entry

    yield build
    for authenticators in made:
        await authenticators.aclose()


async def identify(authenticators: JwtAuthenticators, token: str) -> Identity:
    """The identity of ``token``, which must look like a JWT to the authenticators."""
    assert authenticators.handles(token)
    return await authenticators.identify(token)


async def test_okta_people_groups_and_service_apps(idp: Idp, as_at: Any) -> None:
    okta, entry = await as_at("okta.com")
    audience = entry["audiences"][0]
    person = idp.sign({"ver": 1, "jti": "AT.1", "aud": audience, "sub": "alice@example.com", "uid": "00u1",
                       "cid": "0oa-agent", "scp": ["mcp", "openid"], "groups": ["mcp-approvers", "eng"]},
                      header={"typ": None})  # Okta's access tokens carry no typ
    alice = await identify(okta, person)
    assert (alice.principal.id, alice.principal.groups, alice.approver, alice.admin) == \
        ("alice@example.com", ("mcp-approvers", "eng"), True, False)
    assert alice.principal.claims == {"okta_user_id": "00u1", "client": "0oa-agent"}
    service = await identify(okta, idp.sign({"aud": audience, "sub": "0oa-ci", "cid": "0oa-ci", "scp": ["mcp"]},
                                            header={"typ": None}))
    assert (service.principal.id, service.principal.groups, service.approver) == ("0oa-ci", (), False)
    with pytest.raises(TokenRefused) as refused:  # the rule: a user, or the client as itself
        await identify(okta, idp.sign({"aud": audience, "sub": "mallory", "cid": "0oa-ci", "scp": ["mcp"]}))
    assert (refused.value.reason, str(refused.value)) == ("rule-failed", entry["rules"][0]["message"])
    with pytest.raises(TokenRefused) as scope:
        await identify(okta, idp.sign({"aud": audience, "sub": "0oa-ci", "cid": "0oa-ci", "scp": ["openid"]}))
    assert (scope.value.reason, scope.value.status) == ("insufficient-scope", 403)


def entra_claims(audience: str, **more: Any) -> dict[str, Any]:
    """A v2.0 Entra ID access token's payload for a user of the gateway's app."""
    return {"aud": audience, "sub": "pairwise-AbC", "oid": "8d0c1e7a-0000-4000-8000-00000000a11c",
            "tid": "11111111-2222-3333-4444-555555555555", "azp": "c0ffee00-0000-4000-8000-000000000001",
            "preferred_username": "alice@contoso.example", "scp": "mcp", "ver": "2.0", **more}


async def test_entra_app_roles_groups_and_the_overage(idp: Idp, as_at: Any) -> None:
    entra, entry = await as_at("microsoftonline.com")
    audience = entry["audiences"][0]
    jwt_typ = {"typ": "JWT"}  # what Entra ID writes
    alice = await identify(entra, idp.sign(entra_claims(audience, roles=["Approver"]), header=jwt_typ))
    assert (alice.principal.id, alice.principal.groups, alice.approver) == \
        ("8d0c1e7a-0000-4000-8000-00000000a11c", ("Approver",), True)
    assert alice.principal.claims == {"tenant": "11111111-2222-3333-4444-555555555555",
                                      "username": "alice@contoso.example",
                                      "app": "c0ffee00-0000-4000-8000-000000000001"}
    group_ids = ["0b9a6f5e-0000-4000-8000-000000000001"]
    by_group = await identify(entra, idp.sign(entra_claims(audience, groups=group_ids), header=jwt_typ))
    assert (by_group.principal.groups, by_group.approver) == (tuple(group_ids), False)
    overage = entra_claims(audience, _claim_names={"groups": "src1"},
                           _claim_sources={"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}})
    with pytest.raises(TokenRefused) as refused:
        await identify(entra, idp.sign(overage, header=jwt_typ))
    assert refused.value.reason == "rule-failed" and "too many groups" in str(refused.value)
    with pytest.raises(TokenRefused) as other_app:  # a token for another app of the tenant
        await identify(entra, idp.sign(entra_claims(str(uuid.uuid4())), header=jwt_typ))
    assert other_app.value.reason == "bad-audience"


async def test_keycloak_realm_roles_groups_and_verified_email(idp: Idp, as_at: Any) -> None:
    keycloak, entry = await as_at("keycloak")
    audience = entry["audiences"][0]

    def token(**more: Any) -> str:
        claims = {"aud": [audience, "account"], "sub": "6f1c2b0e-0000-4000-8000-0000000000b0", "typ": "Bearer",
                  "azp": "mcp-client", "preferred_username": "bob", "email": "bob@acme.example",
                  "scope": "openid mcp email", "realm_access": {"roles": ["approver", "offline_access"]}, **more}
        return idp.sign(claims, header={"typ": "JWT"})

    bob = await identify(keycloak, token(email_verified=True, groups=["eng"]))
    assert (bob.principal.id, bob.principal.groups, bob.approver) == \
        ("bob", ("approver", "offline_access", "eng"), True)
    assert bob.principal.claims == {"email": "bob@acme.example", "client": "mcp-client"}
    assert bob.principal.subject == "6f1c2b0e-0000-4000-8000-0000000000b0"  # bound to sub, not the username
    bare = await identify(keycloak, token(email_verified=True, realm_access={}))
    assert bare.principal.groups == () and not bare.approver
    with pytest.raises(TokenRefused) as refused:
        await identify(keycloak, token(email_verified=False))
    assert (refused.value.reason, str(refused.value)) == ("rule-failed", entry["rules"][0]["message"])
