"""Bad input gets a clear answer, never a 500, and every call that was made is audited.

NaN, Infinity, 1e400, a 5,000-digit integer, nesting 990 levels deep, lone surrogates and U+0000
in arguments; a list or null as a path argument; call ids that are not strings; `?offset=1e30`.
Over REST each gets a 400 (or a refusal the model reads) with an audit event; over MCP a refusal
the model reads with an audit event, or a JSON-RPC error when the SDK refuses the message itself.
"""

from __future__ import annotations

import json
import uuid

import httpx2
import pytest
import pytest_asyncio
from raw_mcp import RawMcp, message_of

from gateway.core.values import loads

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

DEEP = 990
BIG_INT = "9" * 5000

# (id, arguments as raw JSON text, what the refusal must mention)
BAD_ARGUMENTS = [
    ("nan", '{"q": "x", "limit": NaN}', "NaN"),
    ("infinity", '{"q": "x", "limit": Infinity}', "Infinity"),
    ("minus-infinity", '{"q": "x", "limit": -Infinity}', "Infinity"),
    ("1e400", '{"q": "x", "limit": 1e400}', "1e400"),
    ("5000-digits", '{"q": "x", "limit": ' + BIG_INT + "}", "digits"),
    ("nested-990", '{"q": ' + "[" * DEEP + "]" * DEEP + "}", "nested"),
    ("nested-100", '{"q": ' + "[" * 100 + "]" * 100 + "}", "nested"),
    ("lone-surrogate", '{"q": "a\\ud800b"}', "surrogate"),
    ("lone-surrogate-key", '{"a\\udc00": 1}', "surrogate"),
    ("nul", '{"q": "http://example.com\\u0000@10.0.0.1/"}', "U+0000"),
    ("nul-key", '{"q\\u0000x": 1}', "U+0000"),
    ("int64-overflow", '{"q": "x", "limit": 9223372036854775808}', "2^63"),
]


def _invoke_body(arguments_json: str, call_id: str) -> bytes:
    return ('{"call_id": ' + json.dumps(call_id) + ', "arguments": ' + arguments_json + "}").encode()


@pytest.fixture
def marker() -> str:
    return f"bad-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize(("arguments", "mentions"), [b[1:] for b in BAD_ARGUMENTS], ids=[b[0] for b in BAD_ARGUMENTS])
async def test_bad_values_over_rest_get_a_400_and_an_audit_event(shared_gateway, rest, http_api, call_id,
                                                                 arguments, mentions):
    client = rest(shared_gateway)
    seen_before = len(http_api.requests)

    response = await client.post("/v1/tools/web_search/invoke", content=_invoke_body(arguments, call_id()),
                                 headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"]["code"] == "invalid-input"
    assert mentions in body["error"]["message"]
    assert (body["decision"], body["is_error"]) == ("invalid_input", True)
    event = shared_gateway.audit_event(body["call_id"])
    assert (event["verdict"], event["tool"], event["principal"]["id"]) == ("invalid_input", "web_search", "alice")
    assert event["upstream_outcome"] == {"status": "not_called"}
    assert mentions in event["message"]
    assert len(http_api.requests) == seen_before  # nothing reached the upstream


# Python's JSON reader decodes the bytes of a surrogate (not UTF-8) into one: the gateway still refuses it.
@pytest.mark.parametrize(("raw", "mentions"), [(b"\xed\xa0\x80", "lone surrogate"), (b"\xff", "UTF-8")],
                         ids=["surrogate-bytes", "not-utf8"])
async def test_a_body_that_is_not_utf8_is_refused_and_audited(shared_gateway, rest, raw, mentions):
    client = rest(shared_gateway)

    response = await client.post("/v1/tools/web_search/invoke", content=b'{"arguments": {"q": "' + raw + b'"}}',
                                 headers={"Content-Type": "application/json"})

    assert response.status_code == 400
    assert mentions in response.json()["error"]["message"]
    assert shared_gateway.audit_event(response.json()["call_id"])["verdict"] == "invalid_input"


async def test_the_audit_log_stays_valid_json_when_a_call_id_holds_a_lone_surrogate(shared_gateway, rest):
    client = rest(shared_gateway)
    call_id = f"c-{uuid.uuid4().hex}"

    response = await client.post("/v1/tools/web_search/invoke", content=_invoke_body('{"q": "x"}', call_id)
                                 .replace(call_id.encode(), f"{call_id}\\ud800".encode()),
                                 headers={"Content-Type": "application/json"})

    assert response.status_code == 400
    assert "call id" in response.json()["error"]["message"]
    assert response.json()["call_id"] == call_id + "\\ud800"  # made printable: JSON can carry it
    event = shared_gateway.audit_event(call_id + "\\ud800")  # and every line of the log still parses
    assert event["verdict"] == "invalid_input"
    _strict_json_lines(shared_gateway.audit_path.read_bytes())


async def test_non_string_call_and_session_ids_become_json_text(shared_gateway, rest):
    client = rest(shared_gateway)
    marker = uuid.uuid4().hex

    response = await client.post("/v1/tools/web_search/invoke", json={
        "call_id": {"a": marker}, "session_id": [1, None], "arguments": {"q": "x"}})

    assert response.status_code == 200
    assert response.json()["call_id"] == f'{{"a":"{marker}"}}'  # not {'a': '...'}
    event = shared_gateway.audit_event(f'{{"a":"{marker}"}}')
    assert event["session"] == "[1,null]"  # not [1, None]


@pytest.mark.parametrize("iteration", ["1e400", 1e300, -1, True, "12x", [1]])
async def test_odd_iterations_read_as_zero(shared_gateway, rest, call_id, iteration):
    client = rest(shared_gateway)
    cid = call_id()

    response = await client.post("/v1/tools/web_search/invoke",
                                 json={"call_id": cid, "iteration": iteration, "arguments": {"q": "x"}})

    assert response.status_code == 200
    assert shared_gateway.audit_event(cid)["iteration"] == 0


# What the SDK parses and hands on: the gateway refuses it (1e400 arrives as inf, so "finite" is the word).
OVER_MCP = {b[0]: (b[1], "finite" if b[0] == "1e400" else b[2]) for b in BAD_ARGUMENTS
            if b[0] in {"nan", "infinity", "minus-infinity", "1e400", "nested-100", "nul", "nul-key", "int64-overflow"}}


@pytest.mark.parametrize(("arguments", "mentions"), list(OVER_MCP.values()), ids=list(OVER_MCP))
async def test_bad_values_over_mcp_are_refused_for_the_model_and_audited(shared_gateway, keys, http_api,
                                                                          arguments, mentions):
    cid = f"c-{uuid.uuid4().hex}"
    seen_before = len(http_api.requests)
    async with RawMcp.open(shared_gateway.url, keys["alice"]) as mcp:
        response = await mcp.call_tool("web_search", arguments, cid)

    assert response.status_code == 200
    result = message_of(response)["result"]
    assert result["isError"] is True
    assert result["_meta"]["gateway/decision"] == "invalid_input"
    assert mentions in result["content"][0]["text"]
    event = shared_gateway.audit_event(cid)
    assert (event["verdict"], event["frontend"]) == ("invalid_input", "mcp")
    assert len(http_api.requests) == seen_before


UNPARSEABLE = {b[0]: b[1] for b in BAD_ARGUMENTS if b[0] in ("5000-digits", "nested-990", "lone-surrogate")}


@pytest.mark.parametrize("arguments", list(UNPARSEABLE.values()), ids=list(UNPARSEABLE))
async def test_what_the_mcp_sdk_cannot_parse_is_a_json_rpc_error(shared_gateway, keys, arguments):
    async with RawMcp.open(shared_gateway.url, keys["alice"]) as mcp:
        response = await mcp.call_tool("web_search", arguments, "c-unparsed")
        after = await mcp.call_tool("web_search", '{"q": "still fine"}', f"c-{uuid.uuid4().hex}")

    assert response.status_code == 400
    assert message_of(response)["error"]["code"] == -32700  # parse error
    assert message_of(after)["result"]["isError"] is False  # the session survives it


# --- path and query arguments become text the way JSON writes it ---------------------------------

ANY_ITEM = [{"name": "get_any", "method": "GET", "path": "/items/{item_id}", "query": ["verbose"]}]
NO_RULES = {"none.yaml": "policy: none\nrules: []\n"}


@pytest_asyncio.fixture(loop_scope="session")
async def loose_api(start_gateway, configs, http_api):
    """A gateway whose tool has no input schema, so only the HTTP upstream stands between a value and the URL."""
    return await start_gateway(configs.base(configs.http_upstream("api", http_api.url, ANY_ITEM)), NO_RULES)


@pytest.mark.parametrize(("item_id", "mentions"), [(["a", "b"], "not a list"), (None, "not null"),
                                                   ({"a": 1}, "not an object")])
async def test_a_path_argument_that_is_not_a_scalar_is_refused_clearly(loose_api, rest, http_api, call_id,
                                                                        item_id, mentions):
    client = rest(loose_api)
    cid = call_id()

    response = await client.post("/v1/tools/api_get_any/invoke", json={"call_id": cid,
                                                                        "arguments": {"item_id": item_id}})

    assert response.status_code == 200
    body = response.json()
    assert (body["decision"], body["is_error"]) == ("invalid_arguments", True)
    assert f"path argument 'item_id' must be a string or a number, {mentions}" in body["content"][0]["text"]
    assert loose_api.audit_event(cid)["upstream_outcome"]["status"] == "not_called"
    assert not [r for r in http_api.requests if r["path"] in ("/items/None", "/items/null")]


async def test_scalars_in_the_path_and_query_are_written_as_json_writes_them(loose_api, rest, http_api):
    client = rest(loose_api)
    marker = uuid.uuid4().hex

    await client.post("/v1/tools/api_get_any/invoke", json={"arguments": {"item_id": True, "verbose": None,
                                                                          "tag": marker}})
    await client.post("/v1/tools/api_get_any/invoke", json={"arguments": {"item_id": 2.5, "verbose": {"a": [1, None]},
                                                                          "tag": marker}})

    seen = http_api.seen(marker)
    assert [r["path"] for r in seen] == ["/items/true", "/items/2.5"]
    assert "verbose" not in seen[0]["query"]  # null leaves the parameter out rather than sending "None"
    assert seen[1]["query"]["verbose"] == '{"a":[1,null]}'


# --- the approvals list ---------------------------------------------------------------------------

@pytest.mark.parametrize("offset", ["1e30", str(10**30), "-1", "NaN"])
async def test_an_absurd_approvals_offset_is_a_400(start_gateway, configs, http_api, keys, offset):
    config = configs.base(configs.http_upstream("api", http_api.url))
    config["auth"]["api_keys"][0]["approver"] = True
    gateway = await start_gateway(config, NO_RULES)
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as http:
        response = await http.get("/v1/approvals", params={"offset": offset})
        control = await http.get("/v1/approvals", params={"offset": "0"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-page"
    assert control.status_code == 200


@pytest.mark.parametrize("field", ["call_id", "session_id"])
async def test_an_overlong_id_is_refused_and_audited(shared_gateway, rest, field):
    client = rest(shared_gateway)

    response = await client.post("/v1/tools/web_search/invoke", json={field: "x" * 257, "arguments": {"q": "x"}})

    assert response.status_code == 400
    assert "longer than 256 characters" in response.json()["error"]["message"]
    events = [e for e in shared_gateway.audit_events() if e["call_id"] == response.json()["call_id"]]
    assert [e["verdict"] for e in events] == ["invalid_input"]


COMPUTED = """
policy: computed
rules:
  - id: divide-by-zero
    tools: [api_nap]
    when: args.tag == "divide"
    action: rewrite
    rewrite:
      set: {seconds: '1.0 / 0.0'}
  - id: skip-with-nan
    tools: [api_search]
    when: args.q == "skip"
    action: skip
    resultExpression: '{"v": double("NaN")}'
  - id: response-inf
    tools: [api_search]
    stage: response
    when: args.q == "respond"
    action: rewrite
    rewrite:
      set: {structured: '{"v": -1.0 / 0.0}'}
"""


@pytest.mark.parametrize(("tool", "arguments", "decision"), [
    ("api_nap", {"tag": "divide"}, "invalid_arguments"),
    ("api_search", {"q": "skip"}, "invalid_result"),
    ("api_search", {"q": "respond"}, "invalid_result")], ids=["rewrite", "skip", "response-rewrite"])
async def test_a_value_a_policy_computes_that_json_cannot_carry_is_refused_not_a_500(
        start_gateway, configs, http_api, rest, call_id, tool, arguments, decision):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), {"c.yaml": COMPUTED})
    cid = call_id()

    response = await rest(gateway).post(f"/v1/tools/{tool}/invoke", json={"call_id": cid, "arguments": arguments})

    assert response.status_code == 200
    assert (response.json()["decision"], response.json()["is_error"]) == (decision, True)
    assert "finite" in response.json()["content"][0]["text"]
    assert gateway.audit_event(cid)["verdict"] == decision
    _strict_json_lines(gateway.audit_path.read_bytes())


def _strict_json_lines(log: bytes) -> None:
    """Every line parses as JSON proper: Python's own reader would also take NaN and Infinity."""
    for line in log.splitlines():
        loads(line)


HOLD_EVERYTHING = """
policy: hold
rules:
  - id: needs-a-human
    tools: [api_search]
    action: approve
    message: A human looks first.
    approval: {approvers: ["alice"], timeout: 30s, on_timeout: reject, via: page}
"""


async def test_a_nan_never_reaches_a_held_call_so_the_approvals_list_keeps_working(start_gateway, configs, http_api,
                                                                                   keys, rest, call_id):
    config = configs.base(configs.http_upstream("api", http_api.url))
    config["auth"]["api_keys"][0]["approver"] = True
    gateway = await start_gateway(config, {"hold.yaml": HOLD_EVERYTHING})
    cid = call_id()

    held = await rest(gateway, who="bob").post("/v1/tools/api_search/invoke", content=_invoke_body(
        '{"q": "x", "limit": NaN}', cid), headers={"Content-Type": "application/json"})
    async with httpx2.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {keys['alice']}"}) as http:
        listing = await http.get("/v1/approvals")

    assert (held.status_code, held.json()["decision"]) == (400, "invalid_input")
    assert listing.status_code == 200 and listing.json()["total"] == 0


async def test_a_list_as_a_path_argument_over_mcp_is_refused_for_the_model(loose_api, connect_mcp, call_id):
    cid = call_id()
    async with connect_mcp(loose_api, "alice") as mcp:
        result = await mcp.call("api_get_any", {"item_id": ["a", "b"]}, call_id=cid)

    assert result.is_error and result.meta["gateway/decision"] == "invalid_arguments"
    assert "not a list" in result.content[0].text
    assert loose_api.audit_event(cid)["upstream_outcome"]["status"] == "not_called"
