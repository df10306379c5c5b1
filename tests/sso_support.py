"""Helpers for the approvals page's single sign-on tests: the gateway's client at the real IdP, and an approver
who signs in over HTTP (httpx2 with a cookie jar, following the IdP's dev login the way a browser would).

    register_client(idp)     the gateway as a confidential client of the IdP (dynamic registration): a loopback
                             redirect URI, so any port of 127.0.0.1 may be the gateway's
    HttpApprover             ``await approver.sign_in("alice")``: /approvals/sso/login → the IdP's login →
                             /approvals/sso/callback, keeping the cookies; then ``decide`` with the CSRF token

Imported by name (``from sso_support import ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2
from idp_support import Client, Idp

Json = dict[str, Any]

CALLBACK = "http://127.0.0.1/approvals/sso/callback"
PAGE = "http://127.0.0.1/approvals"
STEP = 15.0  # seconds any one request may take on a loaded machine


async def register_client(idp: Idp, auth_method: str = "client_secret_basic") -> Client:
    """The gateway's client at the IdP. A native client, only so that its loopback redirect URIs match any port
    (RFC 8252 section 7.3); it authenticates with its secret like a web app."""
    return await idp.register_client(
        application_type="native", redirect_uris=[CALLBACK], post_logout_redirect_uris=[PAGE],
        grant_types=["authorization_code"], response_types=["code"], token_endpoint_auth_method=auth_method)


def jwt_auth(idp: Idp, audience: str = "https://gateway.test/mcp") -> Json:
    """An ``auth.jwt`` entry for the IdP: leads approve, security sees everything."""
    return {"issuer": idp.issuer, "audiences": [audience],
            "principal": {"id": "claims.sub", "groups": "has(claims.groups) ? claims.groups : []"},
            "roles": {"approver": '"leads" in principal.groups', "admin": '"security" in principal.groups'}}


class HttpApprover:
    """One browser's worth of cookies against a gateway, signing in through the IdP over HTTP."""

    def __init__(self, base: str, idp: Idp) -> None:
        self.base = base
        self.idp = idp
        self.http = httpx2.AsyncClient(base_url=base, follow_redirects=False, timeout=STEP)
        self.csrf: str | None = None

    async def aclose(self) -> None:
        """Close the client."""
        await self.http.aclose()

    async def start(self, next_path: str = "/approvals") -> str:
        """Start a sign-in; the IdP URL the gateway sends the browser to."""
        response = await self.http.get("/approvals/sso/login", params={"next": next_path})
        assert response.status_code == 303, response.text
        return str(response.headers["location"])

    async def at_idp(self, authorize_url: str, user: str, **claims: Any) -> str:
        """The user signs in at the IdP; the callback URL it sends the browser back to."""
        back = await self.idp.login(authorize_url, user, **claims)
        assert back.startswith(f"{self.base}/approvals/sso/callback?"), back
        return back

    async def back(self, callback_url: str) -> httpx2.Response:
        """The browser arrives at the callback."""
        return await self.http.get(callback_url)

    async def sign_in(self, user: str, next_path: str = "/approvals", **claims: Any) -> httpx2.Response:
        """The whole sign-in; the callback's answer (a 303 to the page when it worked)."""
        answer = await self.back(await self.at_idp(await self.start(next_path), user, **claims))
        if answer.status_code == 303:
            await self.session()
        return answer

    async def session(self) -> Json | None:
        """What /approvals/sso/session says of this browser (and keep its CSRF token)."""
        response = await self.http.get("/approvals/sso/session")
        assert response.status_code == 200, response.text
        about: Json | None = response.json()["session"]
        self.csrf = about["csrf"] if about else None
        return about

    def page_headers(self, **extra: str) -> dict[str, str]:
        """The headers the page's own fetch sends with a change."""
        headers = {"Origin": self.base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
        if self.csrf:
            headers["X-CSRF-Token"] = self.csrf
        return {**headers, **extra}

    async def decide(self, approval_id: str, approve: bool = True, comment: str = "",
                     headers: Mapping[str, str] | None = None) -> httpx2.Response:
        """POST a decision with the session cookie (and, unless ``headers`` says otherwise, the page's headers)."""
        sent = self.page_headers() if headers is None else dict(headers)
        return await self.http.post(f"/v1/approvals/{approval_id}/decision", headers=sent,
                                    json={"approve": approve, "comment": comment})

    async def sign_out(self) -> httpx2.Response:
        """POST /approvals/sso/logout as the page does."""
        return await self.http.post("/approvals/sso/logout", headers=self.page_headers(), json={})
