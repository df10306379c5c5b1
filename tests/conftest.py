"""Shared fixtures: write policy files into tmp_path, load them on a named CEL engine, decide calls;
serve ASGI apps on loopback; keep approval requests behind the real approver API.

Helpers are handed out as fixtures rather than imported from here: several ``conftest.py`` files
live in this tree and pytest re-imports each under the same module name, so ``from conftest
import ...`` would pick whichever was loaded last.
"""

from __future__ import annotations

import os
import socket
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from loopback import HOST, serve_app
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import ASGIApp

from gateway.approvals.model import Approval, Requirement, args_digest
from gateway.approvals.service import ApprovalService
from gateway.approvals.store import ApprovalStore
from gateway.auth.keys import Authenticator, Identity, hash_key
from gateway.core.clock import now_rfc3339
from gateway.frontends.approvals_api import approval_routes
from gateway.frontends.approvals_page import approvals_page_routes
from gateway.frontends.identity import RequireIdentity
from gateway.policy import Decision, PolicySet, ToolCall, load_policy_set
from gateway.policy.call import Principal
from gateway.policy.callspec import CallSpec
from gateway.store.sqlite import SqliteStore

# The running-gateway harness (shared servers, start_gateway, mcp_alice, ...) and the real OpenID Provider
# (the ``idp`` fixture of idp_support.py) for tests in every folder.
pytest_plugins = ["gateway_harness", "idp_support", "two_issuers_support"]

# Both CEL engines behind gateway.policy.cel. An engine-dependent test (one taking ``engine``) runs on
# the engine ``--engine`` names (default: the gateway's default engine, or $GATEWAY_TEST_ENGINE);
# ``--engine both`` runs it on each. Tests marked ``both_engines`` (the differential corpus, and the
# tests that pin where the engines differ) run on each engine whatever ``--engine`` says.
ENGINES = ("cel-expr-python", "cel-python")

Write = Callable[[str, str], Path]
Load = Callable[..., PolicySet]
MakeCall = Callable[..., ToolCall]
Decide = Callable[..., Decision]


def write_file(root: Path, name: str, text: str) -> Path:
    """Write dedented ``text`` to ``root/name`` (creating folders) and return the path."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def make_call(tool: str, args: dict[str, Any] | None = None, **fields: Any) -> ToolCall:
    """A ToolCall built through the same shape test suites and `gateway explain --call` use."""
    return CallSpec.model_validate({"tool": tool, "args": args or {}, **fields}).to_call()


def decide_call(policy_set: PolicySet, tool: str, args: dict[str, Any] | None = None, **fields: Any) -> Decision:
    """Decide one call; ``fields`` are CallSpec keys (principal, session, env, stage, result, ...)."""
    return policy_set.decide(make_call(tool, args, **fields))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--engine", choices=(*ENGINES, "both"), default=os.environ.get("GATEWAY_TEST_ENGINE", ENGINES[0]),
                     help="the CEL engine engine-dependent tests run on (default: %(default)s; $GATEWAY_TEST_ENGINE); "
                          "'both' runs them on each. Tests marked both_engines always run on each.")


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The CEL engine name, once per engine (``pytest_collection_modifyitems`` keeps the ones ``--engine`` asks for)."""
    return str(request.param)


def engines_to_run(item: pytest.Item, chosen: str) -> tuple[str, ...]:
    """The engines ``item`` is kept for: each engine when marked ``both_engines`` or ``--engine both``."""
    return ENGINES if chosen == "both" or item.get_closest_marker("both_engines") else (chosen,)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the engine-parametrised items of the engines this run does not ask for."""
    chosen = str(config.getoption("engine"))
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        value = callspec.params.get("engine") if callspec is not None else None
        wanted = not isinstance(value, str) or value not in ENGINES or value in engines_to_run(item, chosen)
        (keep if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """``write(name, text)``: a file under this test's tmp_path."""
    return lambda name, text: write_file(tmp_path, name, text)


@pytest.fixture
def load(tmp_path: Path, engine: str) -> Load:
    """``load(text)`` or ``load({"a.yaml": text, ...})``: write into a fresh folder and load it."""
    counter = iter(range(1_000_000))

    def _load(files: str | Mapping[str, str]) -> PolicySet:
        root = tmp_path / f"policies-{next(counter)}"
        root.mkdir()
        for name, text in ({"policy.yaml": files} if isinstance(files, str) else files).items():
            write_file(root, name, text)
        return load_policy_set([root], engine=engine)

    return _load


@pytest.fixture
def call() -> MakeCall:
    """``call(tool, args, **fields)``: a ToolCall."""
    return make_call


@pytest.fixture
def decide() -> Decide:
    """``decide(policy_set, tool, args, **fields)``: the Decision for one call."""
    return decide_call


# -- real servers on loopback: an ASGI app under uvicorn, and a port that refuses ----------------
#
#     async def test_x(serve):
#         base_url = await serve(app)      # http://127.0.0.1:PORT, stopped when the test ends

Serve = Callable[[ASGIApp], Awaitable[str]]

STARTUP_TIMEOUT = 10.0  # seconds for uvicorn to bind; it normally takes milliseconds
# Requests still running at shutdown (a deliberately slow handler) are cancelled after this long.
SHUTDOWN_GRACE = 1


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(app)``: the base URL of ``app`` served on loopback until the test ends."""
    async with AsyncExitStack() as stack:

        async def start(app: ASGIApp) -> str:
            return await stack.enter_async_context(serve_app(app, lifespan="off", startup=STARTUP_TIMEOUT,
                                                                 grace=SHUTDOWN_GRACE))

        yield start


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback URL whose port is bound but not listening, so connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))  # held for the whole test, so no other process can take the port
        yield f"http://{HOST}:{sock.getsockname()[1]}"


# -- approval requests behind the approver API ---------------------------------------------------

# API key -> (principal id, groups, approver?). alice asks; bob approves; carol may not approve.
APPROVER_KEYS = {
    "alice-key": ("alice", ["support"], True),
    "bob-key": ("bob", ["managers"], True),
    "carol-key": ("carol", [], False),
}


class ApprovalDesk:
    """A real ApprovalService on a real SQLite store, with the approver API and page as the gateway mounts them."""

    def __init__(self, db: Path) -> None:
        self.sqlite = SqliteStore(db)
        self.service = ApprovalService(ApprovalStore(self.sqlite))
        self.auth = Authenticator([(hash_key(key), Identity(Principal(who, tuple(groups)), approver))
                                   for key, (who, groups, approver) in APPROVER_KEYS.items()])

    def add(self, tool: str = "payments_refund", args: dict[str, Any] | None = None,
            final_args: dict[str, Any] | None = None, principal: str = "alice",
            requirements: list[Requirement] | None = None, seconds: float = 600.0, upstream: str = "payments",
            session: str = "session-1") -> Approval:
        """Store a pending request, as ``ApprovalService.hold`` would for a held call."""
        args = {"order": "A-1001", "amount": 250} if args is None else args
        final = dict(args) if final_args is None else final_args
        now = time.time()
        approval = Approval(
            id=uuid.uuid4().hex[:16], call_id=f"call-{uuid.uuid4().hex[:8]}", digest=args_digest(final),
            principal=Principal(principal, ("support",)), session_id=session, tool=tool,
            original_args=args, final_args=final,
            requirements=requirements or [Requirement("big-refund", "Refunds over 100 need a manager",
                                                      ["group:managers", "alice"])],
            created_at=now_rfc3339(), expires_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + seconds)),
            expires_ts=now + seconds, on_timeout="reject", upstream=upstream)
        return self.service.store.insert(approval)

    def app(self) -> Starlette:
        """The page (no auth) and the approver API (behind RequireIdentity), as gateway/app/root.py mounts them."""
        protected = Starlette(routes=approval_routes(self.service, self.sqlite),
                              middleware=[Middleware(RequireIdentity, auth=self.auth)])
        return Starlette(routes=[*approvals_page_routes(), Mount("/", app=protected)])


@pytest.fixture
def approval_desk(tmp_path: Path) -> Iterator[ApprovalDesk]:
    """An ``ApprovalDesk`` on a fresh database; keys are in ``APPROVER_KEYS``."""
    desk = ApprovalDesk(tmp_path / "gateway.sqlite3")
    yield desk
    desk.sqlite.close()
