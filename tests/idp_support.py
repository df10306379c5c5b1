"""A real OpenID Provider for the identity tests: npm ``oidc-provider`` on 127.0.0.1 (tests/idp/provider.mjs).

One provider per test process (``idp_server``, session scope) on a free port; its issuer is
``http://127.0.0.1:PORT``. The ``idp`` fixture (function scope) hands out the same provider with its test state
put back first (users' claims, keys, JWKS behaviour, token lifetime, counts); fixtures of a wider scope take
``idp_server``. What it offers (all of it real OAuth over HTTP; nothing of ours is mocked):

- clients: ``idp.service`` (confidential, ``client_secret_basic``: client credentials and token exchange),
  ``idp.service_post`` (the same with ``client_secret_post``), ``idp.public`` (public, PKCE, a native app whose
  loopback redirect URI ``http://127.0.0.1/callback`` may use any port), ``await idp.web_client(redirect_uri)``
  (a confidential web client registered for one test) and open dynamic client registration;
- access tokens for any resource indicator (RFC 8707): JWTs with ``typ: at+jwt`` and ``aud`` = the resource,
  ``groups`` and ``email`` of users, ``scope``, ``client_id``; ID tokens carry ``groups`` too;
- users: any login name and password; ``groups`` from ``USERS`` (alice: leads, eng; bob: eng; mallory: none),
  or what a test sets for its login (``groups=``, ``extra_claims=``);
- ``await idp.user_token("alice", resource=...)``: the authorization code flow with PKCE, driven over HTTP
  through the provider's own dev login and consent pages (``idp.login(authorize_url, user)`` is that driver,
  for flows other clients start: it returns the redirect URL carrying the code);
- ``await idp.client_credentials_token(resource=...)`` and ``await idp.exchange(token, resource=...)`` (RFC 8693);
- keys: RS256 ``rsa-1`` signs ID and access tokens; ``ec-1`` (ES256), ``ps-1`` (PS256), ``ed-1`` (EdDSA) are
  published too; ``rsa-2`` and ``ec-2`` exist but are not published. ``await idp.set_keys(published=..., sign=...)``
  rotates (``async with idp.signing(kid="rsa-2")`` for one block); ``idp.sign(claims)`` signs any payload with a
  real key of the provider (hostile tokens: expired, wrong type, ...); ``await idp.set_jwks(...)`` makes the
  JWKS fail (a status, garbage, huge, slow, a redirect); ``await idp.set_token_ttl(2)`` issues short-lived tokens;
  ``await idp.state()`` counts JWKS fetches and grants by type (caches are tested by what the IdP saw).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import html
import json
import re
import secrets
import select
import subprocess
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2
import pytest
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, KeySet, OKPKey, RSAKey
from thirdparty import oidc_provider

__all__ = ["USERS", "Client", "Idp", "IdpError", "check_jwt", "idp", "idp_server", "running_idp"]

SCRIPT = Path(__file__).resolve().parent / "idp" / "provider.mjs"
USERS: dict[str, dict[str, Any]] = {"alice": {"groups": ["leads", "eng"]}, "bob": {"groups": ["eng"]},
                                    "mallory": {"groups": []}}
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
ALGORITHMS = ["RS256", "PS256", "ES256", "EdDSA"]
PUBLISHED = ["rsa-1", "ec-1", "ps-1", "ed-1"]
STARTUP = 60.0  # seconds for node to listen (the first run also installs oidc-provider, outside this wait)
REQUEST_TIMEOUT = 15.0


class IdpError(RuntimeError):
    """The provider refused or failed; the message carries its answer and the tail of its stderr."""


@dataclass(frozen=True)
class Client:
    """A client registered at the provider."""

    client_id: str
    client_secret: str | None = None
    redirect_uris: tuple[str, ...] = ()
    auth_method: str = "client_secret_basic"

    def auth(self) -> tuple[dict[str, str], httpx2.BasicAuth | None]:
        """The form fields and HTTP auth with which this client authenticates at the token endpoint."""
        if self.auth_method == "client_secret_basic" and self.client_secret is not None:
            return {}, httpx2.BasicAuth(self.client_id, self.client_secret)
        if self.auth_method == "client_secret_post":
            return {"client_id": self.client_id, "client_secret": self.client_secret or ""}, None
        return {"client_id": self.client_id}, None


def _keys() -> dict[str, Any]:
    """The provider's signing keys, private, made here so tests can sign tokens of their own with them."""
    kinds = {"rsa-1": (RSAKey, 2048, "RS256"), "rsa-2": (RSAKey, 2048, "RS256"), "ps-1": (RSAKey, 2048, "PS256"),
             "ec-1": (ECKey, "P-256", "ES256"), "ec-2": (ECKey, "P-256", "ES256"), "ed-1": (OKPKey, "Ed25519", "EdDSA")}
    return {kid: kind.generate_key(size, {"alg": alg, "kid": kid, "use": "sig"})  # type: ignore[attr-defined]
            for kid, (kind, size, alg) in kinds.items()}


def check_jwt(token: str, jwks: Mapping[str, Any], *, issuer: str, audience: str) -> dict[str, Any]:
    """The claims of ``token`` once its signature (a key of ``jwks``), ``iss``, ``aud``, ``exp`` and ``sub`` hold.

    joserfc warns that RFC 9864 deprecates the name ``EdDSA`` (for ``Ed25519``); IdPs still publish it, and
    the issue's allow-list names it, so that one warning is silenced here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "EdDSA is deprecated", SecurityWarning)
        decoded = jwt.decode(token, KeySet.import_key_set(jwks), algorithms=ALGORITHMS)  # type: ignore[arg-type]
    jwt.JWTClaimsRegistry(iss={"essential": True, "value": issuer}, aud={"essential": True, "value": audience},
                          exp={"essential": True}, sub={"essential": True}).validate(decoded.claims)
    return dict(decoded.claims)


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


def _form(page: str) -> tuple[str, dict[str, str]] | None:
    """The action and hidden fields of the first form of a dev interaction page (login or consent)."""
    found = _FORM.search(page)
    if found is None:
        return None
    fields = {html.unescape(k): html.unescape(v) for k, v in _HIDDEN.findall(found.group(2))}
    return html.unescape(found.group(1)), fields


@dataclass
class Idp:
    """A running provider: its endpoints, clients, keys and the helpers that get tokens from it."""

    issuer: str
    discovery: dict[str, Any]
    keys: dict[str, Any]
    service: Client
    service_post: Client
    public: Client
    process: subprocess.Popen[bytes]
    stderr_path: Path
    clients: dict[str, Client] = field(default_factory=dict)
    published: list[str] = field(default_factory=lambda: list(PUBLISHED))

    @property
    def jwks_uri(self) -> str:
        return str(self.discovery["jwks_uri"])

    @property
    def token_endpoint(self) -> str:
        return str(self.discovery["token_endpoint"])

    @property
    def authorization_endpoint(self) -> str:
        return str(self.discovery["authorization_endpoint"])

    @property
    def registration_endpoint(self) -> str:
        return str(self.discovery["registration_endpoint"])

    def reset(self) -> None:
        """Put the provider's test state back as it started (blocking: fixtures call it)."""
        response = httpx2.put(f"{self.issuer}/_test/reset", json={}, timeout=REQUEST_TIMEOUT)
        if response.status_code != 200:
            raise self._fail("PUT /_test/reset", response)
        self.published = list(PUBLISHED)

    def stderr(self) -> str:
        """What node wrote to stderr so far (its warnings and errors)."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def _fail(self, what: str, response: httpx2.Response | None = None) -> IdpError:
        answer = f" -> {response.status_code} {response.text[:2000]}" if response is not None else ""
        return IdpError(f"{what}{answer}\n--- oidc-provider stderr (tail) ---\n{self.stderr()[-4000:]}")

    # -- tokens ---------------------------------------------------------------------------------------------

    async def token_request(self, client: Client, form: Mapping[str, str]) -> dict[str, Any]:
        """POST ``form`` to the token endpoint as ``client``; the JSON answer, or IdpError."""
        fields, auth = client.auth()
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            response = await http.post(self.token_endpoint, data={**form, **fields}, auth=auth)
        if response.status_code != 200:
            raise self._fail(f"token request ({form.get('grant_type')})", response)
        return dict(response.json())

    async def client_credentials_token(self, client_id: str | None = None, resource: str = "", scope: str = "") -> str:
        """An access token for ``client_id`` (default: the service client) itself, ``aud`` = ``resource``."""
        client = self.clients[client_id] if client_id else self.service
        form = {"grant_type": "client_credentials", **({"resource": resource} if resource else {}),
                **({"scope": scope} if scope else {})}
        return str((await self.token_request(client, form))["access_token"])

    async def exchange(self, subject_token: str, *, resource: str = "", audience: str = "", scope: str = "",
                       client: Client | None = None) -> dict[str, Any]:
        """RFC 8693: ``subject_token`` exchanged by ``client`` (the service client) for one for ``resource``."""
        form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token, "subject_token_type": ACCESS_TOKEN_TYPE,
                **({"resource": resource} if resource else {}), **({"audience": audience} if audience else {}),
                **({"scope": scope} if scope else {})}
        return await self.token_request(client or self.service, form)

    async def user_tokens(self, sub: str, *, resource: str | None = None, scope: str = "",
                          groups: Sequence[str] | None = None, extra_claims: Mapping[str, Any] | None = None,
                          client: Client | None = None) -> dict[str, Any]:
        """The token response (access_token, id_token, ...) of ``sub`` signing in through the code flow with PKCE."""
        client = client or self.public
        redirect_uri = client.redirect_uris[0].replace("127.0.0.1/", "127.0.0.1:9/")
        verifier, challenge = _pkce()
        query = {"client_id": client.client_id, "response_type": "code", "redirect_uri": redirect_uri,
                 "scope": " ".join(["openid", *scope.split()]), "state": secrets.token_urlsafe(8),
                 "code_challenge": challenge, "code_challenge_method": "S256",
                 **({"resource": resource} if resource else {})}
        back = await self.login(f"{self.authorization_endpoint}?{urlencode(query)}", sub, groups=groups,
                                extra_claims=extra_claims)
        answer = parse_qs(urlsplit(back).query)
        if "code" not in answer:
            raise self._fail(f"sign-in of {sub} returned no code: {back}")
        form = {"grant_type": "authorization_code", "code": answer["code"][0], "redirect_uri": redirect_uri,
                "code_verifier": verifier, **({"resource": resource} if resource else {})}
        return await self.token_request(client, form)

    async def user_token(self, sub: str, *, resource: str, scope: str = "", groups: Sequence[str] | None = None,
                         extra_claims: Mapping[str, Any] | None = None) -> str:
        """A JWT access token of user ``sub`` for ``resource`` (``aud``), through the code flow with PKCE."""
        tokens = await self.user_tokens(sub, resource=resource, scope=scope, groups=groups, extra_claims=extra_claims)
        return str(tokens["access_token"])

    # -- the browser part, over HTTP ------------------------------------------------------------------------

    async def login(self, authorize_url: str, user: str, *, password: str = "any",
                    groups: Sequence[str] | None = None, extra_claims: Mapping[str, Any] | None = None) -> str:
        """Follow ``authorize_url`` through the dev login (as ``user``) and consent pages, as a browser would;
        return the URL the provider redirects to when it is done (the client's redirect URI with code and state).

        The user's claims are set first: ``USERS``' groups unless ``groups`` is given, plus ``extra_claims``.
        """
        await self.set_user(user, groups=groups, **(extra_claims or {}))
        url = authorize_url
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT, follow_redirects=False) as http:
            for _ in range(16):
                if not url.startswith(f"{self.issuer}/"):
                    return url
                response = await http.get(url)
                form = _form(response.text) if response.status_code == 200 else None
                if form is not None:
                    action, fields = form
                    if fields.get("prompt") == "login":
                        fields.update(login=user, password=password)
                    response = await http.post(urljoin(url, action), data=fields)
                if not response.is_redirect:
                    raise self._fail(f"sign-in of {user} at {url}", response)
                url = urljoin(url, response.headers["location"])
        raise self._fail(f"sign-in of {user} did not finish: last at {url}")

    # -- clients --------------------------------------------------------------------------------------------

    async def register_client(self, **metadata: Any) -> Client:
        """Dynamic client registration (RFC 7591) with ``metadata``; the client the provider made."""
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            response = await http.post(self.registration_endpoint, json=metadata)
        if response.status_code != 201:
            raise self._fail("client registration", response)
        made = response.json()
        client = Client(made["client_id"], made.get("client_secret"), tuple(made.get("redirect_uris", ())),
                        made.get("token_endpoint_auth_method", "client_secret_basic"))
        self.clients[client.client_id] = client
        return client

    async def web_client(self, redirect_uri: str, *, auth_method: str = "client_secret_basic") -> Client:
        """A confidential web client (code flow) registered for ``redirect_uri`` (single sign-on tests)."""
        return await self.register_client(redirect_uris=[redirect_uri], grant_types=["authorization_code"],
                                          response_types=["code"], token_endpoint_auth_method=auth_method,
                                          post_logout_redirect_uris=[redirect_uri])

    # -- state ----------------------------------------------------------------------------------------------

    async def _control(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            response = await http.put(f"{self.issuer}/_test/{path}", json=dict(body))
        if response.status_code != 200:
            raise self._fail(f"PUT /_test/{path}", response)
        return dict(response.json())

    async def set_user(self, sub: str, *, groups: Sequence[str] | Any | None = None, **claims: Any) -> None:
        """The claims of ``sub``'s next tokens: ``groups`` (default: USERS) and any others (``email``, ``tid``)."""
        chosen = list(USERS.get(sub, {}).get("groups", [])) if groups is None else groups
        await self._control(f"users/{sub}", {"groups": chosen, **claims})

    async def set_keys(self, *, published: Sequence[str] | None = None, alg: str | None = None,
                       kid: str | None = None) -> None:
        """Which keys the JWKS lists, and which key (``kid``, its ``alg``) signs the next access tokens."""
        body: dict[str, Any] = {}
        if published is not None:
            body["published"] = self.published = list(published)
        if kid is not None:
            body["sign"] = {"alg": alg or self.keys[kid].alg, "kid": kid}
        await self._control("keys", body)

    @contextlib.asynccontextmanager
    async def signing(self, *, kid: str, published: Sequence[str] | None = None) -> AsyncIterator[None]:
        """Within the block, access tokens are signed with ``kid`` (and the JWKS lists ``published``)."""
        await self.set_keys(published=published, kid=kid)
        try:
            yield
        finally:
            await self.set_keys(published=PUBLISHED, kid="rsa-1")

    async def set_jwks(self, *, status: int | None = None, body: str | None = None, pad: int = 0,
                       delay: float = 0.0, location: str | None = None) -> None:
        """How ``/jwks`` misbehaves from now on: another ``status``, a ``body`` of its own (garbage), the keys
        after ``pad`` spaces (huge), answered ``delay`` seconds late (slow), or a redirect to ``location``.
        ``set_jwks()`` with no arguments serves the keys normally again."""
        wanted = {"status": status, "body": body, "pad": pad, "delay_ms": int(delay * 1000), "location": location}
        await self._control("jwks", {k: v for k, v in wanted.items() if v})

    async def set_jwks_status(self, status: int) -> None:
        """The JWKS answers ``status`` (200 serves the keys again): an IdP that is down."""
        await self.set_jwks(status=None if status == 200 else status)

    async def set_token_ttl(self, seconds: int | None = None) -> None:
        """The lifetime of the next access tokens (None: back to 600 s); short ones test caches until expiry."""
        await self._control("tokens", {"ttl": seconds} if seconds else {})

    async def state(self) -> dict[str, Any]:
        """The provider's test state, with ``counts``: ``jwks`` fetches and successful ``grants`` by grant type."""
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            return dict((await http.get(f"{self.issuer}/_test/state")).json())

    # -- local keys -----------------------------------------------------------------------------------------

    def jwks(self, kids: Sequence[str] = PUBLISHED) -> dict[str, Any]:
        """The public JWKS of ``kids`` (what the provider publishes, by default)."""
        return {"keys": [self.keys[kid].as_dict(private=False) for kid in kids]}

    def sign(self, claims: Mapping[str, Any], *, kid: str = "rsa-1", header: Mapping[str, Any] | None = None,
             defaults: bool = True) -> str:
        """A JWS of ``claims`` signed with the provider's own key ``kid`` (tokens the provider would not issue).

        With ``defaults``, ``iss``/``iat``/``exp`` (10 min) are filled in when absent; ``header`` adds to or
        replaces ``{"alg", "kid", "typ": "at+jwt"}`` (a value None leaves that parameter out: ``{"typ": None}``).
        """
        key = self.keys[kid]
        now = int(time.time())
        payload = {"iss": self.issuer, "iat": now, "exp": now + 600, **claims} if defaults else dict(claims)
        head = {k: v for k, v in {"alg": key.alg, "kid": kid, "typ": "at+jwt", **(header or {})}.items()
                if v is not None}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "EdDSA is deprecated", SecurityWarning)
            return jwt.encode(head, payload, key, algorithms=ALGORITHMS)

    def verify(self, token: str, *, audience: str) -> dict[str, Any]:
        """The claims of ``token`` checked with the keys the JWKS publishes now (``check_jwt``), without HTTP."""
        return check_jwt(token, self.jwks(self.published), issuer=self.issuer, audience=audience)


def _config(keys: Mapping[str, Any], clients: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"keys": [key.as_dict(private=True) for key in keys.values()], "published": PUBLISHED,
            "sign": {"alg": "RS256", "kid": "rsa-1"}, "clients": list(clients), "users": dict(USERS),
            "cookie_key": secrets.token_urlsafe(32), "access_token_ttl": 600,
            "resource_scopes": ["mcp", "tools:read", "tools:write", "approvals", "admin", "read", "write"]}


def _clients() -> tuple[Client, Client, Client, list[dict[str, Any]]]:
    service = Client("gateway-service", secrets.token_urlsafe(24))
    post = Client("gateway-service-post", secrets.token_urlsafe(24), auth_method="client_secret_post")
    public = Client("test-public", None, ("http://127.0.0.1/callback",), "none")
    confidential = {"grant_types": ["client_credentials", TOKEN_EXCHANGE], "response_types": [], "redirect_uris": []}
    metadata = [
        {"client_id": service.client_id, "client_secret": service.client_secret, **confidential},
        {"client_id": post.client_id, "client_secret": post.client_secret, "token_endpoint_auth_method":
         "client_secret_post", **confidential},
        {"client_id": public.client_id, "token_endpoint_auth_method": "none", "application_type": "native",
         "redirect_uris": list(public.redirect_uris), "grant_types": ["authorization_code", "refresh_token"],
         "response_types": ["code"]},
    ]
    return service, post, public, metadata


def _await_issuer(process: subprocess.Popen[bytes], stderr_path: Path) -> str:
    """The issuer node prints once it listens; IdpError with its stderr if it exits or takes too long first."""
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP
    while (left := deadline - time.monotonic()) > 0:
        if process.poll() is not None:
            break
        ready, _, _ = select.select([process.stdout], [], [], min(left, 0.5))
        if ready:
            line = process.stdout.readline()
            if line:
                return str(json.loads(line)["issuer"])
    raise IdpError(f"oidc-provider did not start (exit {process.poll()})\n{stderr_path.read_text(errors='replace')}")


@contextlib.contextmanager
def running_idp(folder: Path) -> Iterator[Idp]:
    """Start the provider with its files in ``folder``; stop it when the block ends."""
    node, package = oidc_provider()
    keys = _keys()
    service, post, public, metadata = _clients()
    config_path, stderr_path = folder / "idp-config.json", folder / "idp-stderr.log"
    config_path.write_text(json.dumps(_config(keys, metadata)), encoding="utf-8")
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([node, str(SCRIPT), str(package), str(config_path)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=stderr)
    try:
        issuer = _await_issuer(process, stderr_path)
        discovery = httpx2.get(f"{issuer}/.well-known/openid-configuration", timeout=REQUEST_TIMEOUT).json()
        idp = Idp(issuer, discovery, keys, service, post, public, process, stderr_path,
                  {c.client_id: c for c in (service, post, public)})
        yield idp
        if process.poll() is not None:
            raise IdpError(f"oidc-provider exited during the tests ({process.returncode})\n{idp.stderr()}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="session")
def idp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Idp]:
    """The real OpenID Provider of this test process, for fixtures of any scope (state as the last test left it)."""
    with running_idp(tmp_path_factory.mktemp("idp")) as provider:
        yield provider


@pytest.fixture
def idp(idp_server: Idp) -> Idp:
    """The same provider, its state put back first: users, keys, JWKS, token lifetime, counts."""
    idp_server.reset()
    return idp_server


def run(coro: Any) -> Any:
    """Run one helper coroutine from synchronous code (a sync fixture): ``run(idp.user_token(...))``."""
    return asyncio.run(coro)
