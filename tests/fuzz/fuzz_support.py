"""A real gateway for the fuzzers: uvicorn on 127.0.0.1 in a thread of its own, with a real HTTP upstream.

    upstream     a small Starlette app (``echo`` answers with the JSON body it got; ``items/{id}``)
    gateway      gateway.yaml + a policy written into a tmp dir, ``load_config`` → ``build_app`` → uvicorn
    keys         ``asker`` calls tools; ``approver`` may also decide approval requests

The gateway runs in its own thread and event loop because the fuzzers are synchronous: hypothesis
drives plain functions and schemathesis sends with ``requests``. A synchronous request from the
test thread would block a server living in the test's own loop. One gateway serves all the
examples of a test (``fuzz_gateway``) or a whole module (``module_fuzz_gateway``), and each example
ends with a health check, so a crash or poisoned state one example causes fails that example.

conftest.py hands the running gateway out as a fixture; this module is imported by name
(``from fuzz_support import ...``), which is unambiguous: there is one ``fuzz_support``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.auth.keys import hash_key
from gateway.config.load import load_config

Json = dict[str, Any]

KEYS = {"asker": "fuzz-asker-key-9b1e", "approver": "fuzz-approver-key-5c7d"}

STARTUP_SECONDS = 30.0  # building the app and binding two ports; seconds at worst on a busy machine
REQUEST_SECONDS = 10.0  # any one fuzz request; the gateway's own call timeout is shorter

# Tools over the upstream below. `echo` takes anything (its schema is just "an object"), so hostile
# values reach the policies, the upstream request and the audit log; `typed` has a schema with one
# field of each JSON type, so the fuzzers also hit validation; `get_item` puts an argument in the
# URL path; `held` needs an approval, so requests with hostile arguments land in the approvals API.
TOOLS: list[Json] = [
    {"name": "echo", "method": "POST", "path": "/echo", "input_schema": {"type": "object"}},
    {"name": "typed", "method": "POST", "path": "/echo",
     "input_schema": {"type": "object", "required": ["text"], "properties": {
         "text": {"type": "string"}, "n": {"type": "integer"}, "x": {"type": "number"},
         "flag": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
         "nested": {"type": "object"}}}},
    {"name": "get_item", "method": "GET", "path": "/items/{item_id}", "query": ["verbose"],
     "input_schema": {"type": "object", "required": ["item_id"], "properties": {"item_id": {"type": "string"}}}},
    {"name": "held", "method": "POST", "path": "/echo", "input_schema": {"type": "object"}},
]
TOOL_NAMES = [f"fz_{t['name']}" for t in TOOLS]

# Rules that read the arguments the fuzzers send, in each stage and with each action that
# transforms a call, so hostile values go through CEL, rewrites and redaction.
POLICY = """
policy: fuzz
rules:
  - id: no-forbidden
    tools: [fz_echo, fz_typed]
    when: has(args.text) && args.text == "forbidden"
    action: reject
    message: That text is not allowed.
  - id: rewrite-prefix
    tools: [fz_echo]
    when: has(args.text) && type(args.text) == string && args.text.startsWith("rw:")
    action: rewrite
    rewrite:
      set: {text: '"rewritten " + args.text'}
  - id: big-numbers
    tools: [fz_typed]
    when: has(args.n) && args.n > 1000
    action: reject
    message: Numbers over 1000 are not allowed.
  - id: hold
    tools: [fz_held]
    action: approve
    message: A person looks at this first.
    approval: {approvers: ["group:approvers"], timeout: 10m}
  - id: redact-keys
    tools: [fz_echo, fz_typed]
    stage: response
    action: rewrite
    rewrite:
      redact: ['AKIA[0-9A-Z]{16}']
"""


def upstream_app() -> Starlette:
    """The HTTP service behind the gateway: echoes JSON bodies back, and answers item lookups."""

    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({"got": body.decode("utf-8", "replace")})

    async def item(request: Request) -> JSONResponse:
        return JSONResponse({"id": request.path_params["item_id"], "query": dict(request.query_params)})

    return Starlette(routes=[Route("/echo", echo, methods=["POST"]), Route("/items/{item_id}", item)])


def gateway_config(upstream_url: str) -> Json:
    """gateway.yaml for the fuzzed gateway (as a dict)."""
    return {
        "policies": ["policies"],
        "store": {"sqlite": "data/gateway.sqlite3"},
        "audit": {"file": "data/audit.jsonl"},
        "auth": {"api_keys": [
            {"principal": {"id": "asker", "groups": ["staff"]}, "sha256": hash_key(KEYS["asker"])},
            {"principal": {"id": "approver", "groups": ["approvers"]}, "sha256": hash_key(KEYS["approver"]),
             "approver": True}]},
        "limits": {"call_timeout": 5},
        "upstreams": [{"name": "fz", "http": {"base_url": upstream_url, "tools": TOOLS}}],
    }


@dataclass
class FuzzGateway:
    """The running gateway: its URL and a synchronous client with the asker's key."""

    url: str
    root: Path
    client: httpx2.Client

    def headers(self, who: str = "asker") -> dict[str, str]:
        """The Authorization header of one of ``KEYS``."""
        return {"Authorization": f"Bearer {KEYS[who]}"}

    def assert_healthy(self) -> None:
        """The gateway still serves: /healthz is 200, and the approver can still list every request
        (one poisoned approval once made the whole list answer 500)."""
        response = self.client.get("/healthz")
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "ok"
        listing = self.client.get("/v1/approvals", headers=self.headers("approver"))
        assert listing.status_code == 200, listing.text
        assert isinstance(listing.json()["approvals"], list)


@contextlib.contextmanager
def gateway_in_thread(root: Path) -> Iterator[str]:
    """Serve the upstream and the gateway on loopback from a thread with its own loop; yields the URL."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
        async with serve_app(upstream_app(), lifespan="off") as upstream_url:
            (root / "policies").mkdir(parents=True, exist_ok=True)
            (root / "policies" / "fuzz.yaml").write_text(textwrap.dedent(POLICY).lstrip(), encoding="utf-8")
            path = root / "gateway.yaml"
            path.write_text(yaml.safe_dump(gateway_config(upstream_url), sort_keys=False), encoding="utf-8")
            async with serve_app(build_app(load_config(path)), startup=STARTUP_SECONDS) as url:
                box["url"] = url
                ready.set()
                await box["stop"].wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # handed to the test thread below
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="fuzz-gateway", daemon=True)
    thread.start()
    ready.wait(STARTUP_SECONDS + 5)
    if "url" not in box:
        thread.join(5)
        raise RuntimeError("the fuzz gateway did not start") from box.get("error")
    try:
        yield box["url"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(STARTUP_SECONDS)
        if "error" in box:
            raise box["error"]




# --- hypothesis: settings and hostile JSON ---------------------------------------------------------

# Every fuzz test runs with these. derandomize=True: each test's examples are a fixed function of
# its source, so CI runs the same cases on every run and a failure in CI fails the same way on a
# laptop (no flaky red runs, no example database to carry between machines: database=None). The
# price is that CI never explores beyond that corpus; run `pytest tests/fuzz --hypothesis-seed=N`
# (with derandomize off) to explore more. The deadline is per example, generous for a loaded
# 2-core machine, and catches a request that wedges; max_examples bounds each test's time.
FUZZ = settings(max_examples=40, deadline=timedelta(seconds=5), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# Finite JSON values of every type, nested a little: the ordinary wrong values.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# Marks where a raw literal (one json.dumps would never write) is spliced into a body.
RAW = "__raw_value__"

# Tool arguments with one RAW in them: a top-level value, a nested one, a path argument, a list item.
ARGUMENT_SHAPES: list[Json] = [
    {"text": RAW}, {"n": RAW, "text": "x"}, {"text": "x", "nested": {"a": [1, RAW]}},
    {"item_id": RAW}, {"tags": [RAW]}, {"x": RAW, "text": "x"},
]


def spliced(templates: st.SearchStrategy[Any], raw: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """JSON text of a template with its one ``RAW`` string replaced by a literal drawn from ``raw``."""
    return st.tuples(templates, raw).map(lambda pair: json.dumps(pair[0]).replace(f'"{RAW}"', pair[1], 1))


# The number literals Python's json reads but no JSON parser should let through: non-finite
# values, and numbers too big for a float.
non_finite = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E999", "123e45678"])
# Integers longer than Python's int/str conversion limit (4,300 digits).
huge_integers = st.integers(4_301, 20_000).map(lambda n: "-" * (n % 2) + "9" * n)
# Arrays and objects nested far deeper than any real argument.
deep_nesting = st.tuples(st.integers(200, 5_000), st.booleans()).map(
    lambda p: "[" * p[0] + "]" * p[0] if p[1] else '{"a":' * p[0] + "1" + "}" * p[0])
# Strings holding UTF-16 surrogate halves on their own (valid JSON escapes, invalid Unicode).
lone_surrogates = st.text(st.characters(categories=["Cs"]) | st.sampled_from("ab/ "), min_size=1, max_size=6).filter(
    lambda s: any(0xD800 <= ord(c) <= 0xDFFF for c in s))
