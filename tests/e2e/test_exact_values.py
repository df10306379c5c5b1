"""Policies see exactly what the tool receives, on both CEL engines, end to end.

cel-expr-python cuts strings at U+0000: a rule reading `http://example.com\\u0000@10.0.0.1/` would
see `http://example.com`. The gateway refuses such values at the door, in arguments and in
results that response-stage rules read, so no rule can be shown one value while the tool gets
another. Results that JSON cannot carry (NaN, lone surrogates) are withheld with a clear message
rather than failing the response.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from loopback import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

EGRESS = """
policy: egress
rules:
  - id: only-example-com
    tools: [api_search]
    when: url(args.q).host != "example.com"
    action: reject
    message: Only example.com may be fetched.
  - id: no-secrets-out
    tools: [odd_nul]
    stage: response
    when: result.text.contains("secret")
    action: reject
    message: The result held a secret.
"""

# What the odd upstream answers, byte for byte: values a JSON reader in Python takes, but that
# JSON cannot carry (NaN, a lone surrogate) or that a policy cannot see exactly (NUL, > int64).
ODD_BODIES = {
    "nul": b'{"text": "public\\u0000secret"}',
    "nul_unread": b'{"text": "public\\u0000secret"}',
    "nan": b'{"v": NaN}',
    "surrogate": b'{"v": "\\ud800"}',
    "uint64": b'{"v": 18446744073709551615}',
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def odd_upstream() -> AsyncIterator[str]:
    async def answer(request: Request) -> Response:
        return Response(ODD_BODIES[request.path_params["kind"]], media_type="application/json")

    async with serve_app(Starlette(routes=[Route("/{kind}", answer)]), lifespan="off") as url:
        yield url


@pytest_asyncio.fixture(loop_scope="session")
async def egress_gateway(start_gateway, configs, http_api, odd_upstream, engine):
    odd_tools = [{"name": kind, "method": "GET", "path": f"/{kind}"} for kind in ODD_BODIES]
    config = configs.base(configs.http_upstream("api", http_api.url), configs.http_upstream("odd", odd_upstream,
                                                                                             odd_tools),
                          engine=engine)
    return await start_gateway(config, {"egress.yaml": EGRESS})


async def test_a_nul_in_a_url_cannot_show_the_policy_another_host(egress_gateway, rest, http_api, connect_mcp):
    client = rest(egress_gateway)
    marker = uuid.uuid4().hex[:8]
    trick = f"http://example.com\x00@10.0.0.1/{marker}"

    over_rest = await client.post("/v1/tools/api_search/invoke", json={"arguments": {"q": trick}})
    async with connect_mcp(egress_gateway, "alice") as mcp:
        over_mcp = await mcp.call("api_search", {"q": trick})
        allowed = await mcp.call("api_search", {"q": f"http://example.com/{marker}"})
        private = await mcp.call("api_search", {"q": f"http://10.0.0.1/{marker}"})

    assert over_rest.status_code == 400
    assert "U+0000" in over_rest.json()["error"]["message"]
    assert over_mcp.is_error and over_mcp.meta["gateway/decision"] == "invalid_input"
    # the rule itself works on this engine: the control calls are decided as written
    assert (allowed.is_error, private.meta["gateway/decision"]) == (False, "reject")
    assert [r["query"]["q"] for r in http_api.seen(marker)] == [f"http://example.com/{marker}"]
    outcomes = [e for e in egress_gateway.audit_events() if e.get("event") == "call.outcome"]
    verdicts = [e["verdict"] for e in outcomes if marker in str(e["original_args"])]
    assert verdicts == ["invalid_input", "invalid_input", "allow", "reject"]


async def test_a_result_a_response_rule_cannot_read_exactly_is_withheld(egress_gateway, rest):
    client = rest(egress_gateway)

    read = await client.post("/v1/tools/odd_nul/invoke", json={"arguments": {}})
    unread = await client.post("/v1/tools/odd_nul_unread/invoke", json={"arguments": {}})

    # A response rule reads this tool's result: on cel-expr-python it would see only "public".
    assert read.status_code == 200
    assert read.json()["decision"] == "invalid_result"
    assert "U+0000" in read.json()["content"][0]["text"]
    assert "secret" not in str(read.json()["content"]) and read.json()["structured"] is None
    # No rule reads the other tool's result, and JSON carries U+0000: it passes unchanged.
    assert unread.json()["structured"] == {"text": "public\x00secret"}


@pytest.mark.parametrize(("tool", "mentions"), [("odd_nan", "finite"), ("odd_surrogate", "surrogate")])
async def test_a_result_json_cannot_carry_is_withheld_not_a_500(egress_gateway, rest, connect_mcp, call_id,
                                                                 tool, mentions):
    client = rest(egress_gateway)
    cid = call_id()

    over_rest = await client.post(f"/v1/tools/{tool}/invoke", json={"call_id": cid, "arguments": {}})
    async with connect_mcp(egress_gateway, "alice") as mcp:
        over_mcp = await mcp.call(tool, {})

    assert over_rest.status_code == 200
    assert (over_rest.json()["decision"], over_rest.json()["is_error"]) == ("invalid_result", True)
    assert mentions in over_rest.json()["content"][0]["text"]
    assert over_mcp.is_error and over_mcp.meta["gateway/decision"] == "invalid_result"
    event = egress_gateway.audit_event(cid)
    assert event["upstream_outcome"]["status"] == "ok" and mentions in event["upstream_outcome"]["withheld"]


async def test_an_integer_beyond_int64_passes_when_no_rule_reads_it(egress_gateway, rest):
    response = await rest(egress_gateway).post("/v1/tools/odd_uint64/invoke", json={"arguments": {}})

    assert response.json()["structured"] == {"v": 2**64 - 1}
