"""A model upstream's answers read as untrusted (docs/model-proxy.md, "Errors" and "What the policies see").

Each test sends what a broken or hostile model server sends, through the gateway on loopback: a legacy
``function_call``, a ``tool_calls`` that is not a list, its own key echoed in an error, an endless or
oversized stream, NaN and lone surrogates. The gateway must decide every call, relay no credential, cut
what has no end, and answer a clear 502, never a 500 or a reset connection, and keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agent_stage import STEP_SECONDS, Stage
from approval_support import PEOPLE
from fake_model import ScriptedCall, script
from loopback import serve_app
from model_proxy_drivers import gateway_model_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

POLICY = """
policy: model
rules:
  - id: no-prod
    tools: [deploy]
    when: args.service == "prod"
    action: reject
    message: Deploying to prod is not allowed from an agent.
  - id: api-goes-canary
    tools: [deploy]
    when: args.service == "api"
    action: rewrite
    rewrite:
      set: {service: '"api-canary"'}
"""

KEY = "sk-gateway-0123456789abcdefghij"  # the model key the gateway is configured with
OTHER_KEY = "sk-proj-ZYXWVUTSRQPONMLK98765"  # a key the gateway never knew, echoed by a proxy
TOOLS: list[Any] = [{"type": "function", "function": {"name": "deploy", "parameters": {"type": "object"}}}]
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
Handler = Callable[[dict[str, Any]], Response]


def completion(message: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion carrying ``message``."""
    return {"id": "chatcmpl-h", "object": "chat.completion", "created": 1, "model": "h",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}]}


def events(*chunks: dict[str, Any] | str) -> bytes:
    """Server-Sent Events: each chunk's delta (a str is sent as it is, for JSON Python cannot write), then [DONE]."""
    out = []
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(
            {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1, "model": "h",
             "choices": [{"index": 0, "delta": chunk, "finish_reason": None}]})
        out.append(f"data: {data}\n\n")
    return ("".join(out) + "data: [DONE]\n\n").encode()


def sse(data: bytes) -> Response:
    return Response(data, media_type="text/event-stream")


@contextlib.asynccontextmanager
async def hostile(stage: Stage, handler: Handler, **model: Any) -> AsyncIterator[None]:
    """A model server answering every request with ``handler(body)``, and a gateway in front of it with
    ``KEY`` as the model's key; a second entry ``good`` serves the well-behaved fake model."""
    async def answer(request: Request) -> Response:
        return handler(await request.json())

    app = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    key_file = stage.root / "model.key"
    key_file.write_text(KEY)
    async with serve_app(app, lifespan="off", startup=STEP_SECONDS) as url:
        await stage.start(POLICY, models=[
            {"name": "good", "base_url": f"{stage.model_url}/v1", "model": "fake-model"},
            {"name": "*", "base_url": f"{url}/v1", "api_key": {"file": str(key_file)}, **model}])
        yield


async def still_serving(stage: Stage) -> None:
    """The gateway answers a normal request after the hostile one."""
    fine = await stage.api("POST", "/v1/chat/completions", who="alice",
                           json={"model": "good", "messages": [{"role": "user", "content": script()}]})
    assert fine.status_code == 200, fine.text


def error_event(text: str) -> dict[str, Any]:
    """The error event that ends a stream."""
    found = [json.loads(line[5:]) for line in text.splitlines()
             if line.startswith("data:") and line[5:].strip() != "[DONE]" and '"error"' in line]
    assert found, text[-2000:]
    error: dict[str, Any] = found[-1]["error"]
    return error


# -- 5: every tool call is decided ----------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_legacy_function_call_is_decided_like_any_tool_call(stage: Stage, stream: bool) -> None:
    await stage.start(POLICY, models=[{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model"}])
    prompt = script(ScriptedCall("deploy", {"service": "prod"}, legacy=True),
                    ScriptedCall("deploy", {"service": "api"}, legacy=True))
    messages: list[Any] = [{"role": "user", "content": prompt}]
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], None) as client:
        if stream:
            chunks = [c async for c in await client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, stream=True)]
            deltas = [ch.delta for c in chunks for ch in c.choices]
            assert not any(d.function_call for d in deltas)  # today the refused prod call streamed straight through
            calls = [(tc.function.name, tc.function.arguments) for d in deltas for tc in d.tool_calls or []
                     if tc.function is not None]
            extension = (chunks[-1].model_extra or {})["gateway"]
        else:
            response = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            assert response.choices[0].message.function_call is None  # today: {"service": "prod"}, undecided
            calls = [(tc.function.name, tc.function.arguments) for tc in response.choices[0].message.tool_calls or []
                     if tc.type == "function"]
            extension = (response.model_extra or {})["gateway"]
    [(name, arguments)] = calls
    assert name == "deploy"
    assert json.loads(arguments or "") == {"service": "api-canary"}  # rewritten, as any tool call
    assert [(c["status"], c["decision"]) for c in extension["calls"]] == [("answered", "reject"),
                                                                          ("returned", "allow")]


BAD_TOOL_CALLS = {"id": "call_1", "type": "function", "function": {"name": "deploy",
                                                                     "arguments": '{"service": "prod"}'}}


async def test_tool_calls_that_is_not_a_list_is_a_bad_upstream_answer(stage: Stage) -> None:
    def answer(body: dict[str, Any]) -> Response:
        if body.get("stream"):
            return sse(events({"role": "assistant", "content": ""}, {"tool_calls": BAD_TOOL_CALLS}))
        return JSONResponse(completion({"content": None, "tool_calls": BAD_TOOL_CALLS}))

    async with hostile(stage, answer):
        whole = await stage.api("POST", "/v1/chat/completions", who="alice", json=BODY)
        assert whole.status_code == 502, whole.text  # today 200, the undecided call passed on as it was
        assert whole.json()["error"]["code"] == "model-upstream"
        assert "'tool_calls' is a dict, not a list" in whole.json()["error"]["message"]
        streamed = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": True})
        assert '"tool_calls"' not in streamed.text
        assert "not a list" in error_event(streamed.text)["message"]  # today the stream ended as if all was well


# -- 6: no credential relayed -------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_gets_a_fixed_message(stage: Stage, status: int) -> None:
    echoed = {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}}
    async with hostile(stage, lambda body: JSONResponse(echoed, status_code=status)):
        for stream in (False, True):
            answer = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": stream})
            assert answer.status_code == 502, answer.text
            message = answer.json()["error"]["message"]
            assert KEY not in answer.text and "Incorrect" not in message  # today relayed verbatim
            assert f"({status})" in message and "api_key" in message


LEAKY = (f"context too long (sent with key {KEY}; upstream said: Authorization: Bearer {OTHER_KEY}, "
         "and Authorization: Bearer abcdefgh12345678zz)")


@pytest.mark.parametrize("where", ["status", "event"])
async def test_credentials_are_taken_out_of_a_relayed_error(stage: Stage, where: str) -> None:
    error = {"error": {"message": LEAKY, "type": "invalid_request_error"}}

    def answer(body: dict[str, Any]) -> Response:
        if where == "event" and body.get("stream"):
            return sse(events({"role": "assistant", "content": ""}, json.dumps(error)))
        return JSONResponse(error, status_code=400 if where == "status" else 200)

    async with hostile(stage, answer):
        for stream in (False, True):
            answer_ = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": stream})
            message = error_event(answer_.text)["message"] if answer_.status_code == 200 else \
                answer_.json()["error"]["message"]
            assert "context too long" in message, message  # what the agent may read is still relayed
            for secret in (KEY, OTHER_KEY, "abcdefgh12345678zz"):
                assert secret not in answer_.text, (stream, answer_.text)  # today all three
            assert "[redacted]" in message


async def test_the_configured_key_is_taken_out_of_an_answer(stage: Stage) -> None:
    def answer(body: dict[str, Any]) -> Response:
        if body.get("stream"):
            return sse(events({"role": "assistant", "content": f"your key is {KEY}"}, {"content": "."}))
        return JSONResponse(completion({"content": f"your key is {KEY}"}))

    async with hostile(stage, answer):
        for stream in (False, True):
            answered = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": stream})
            assert answered.status_code == 200, answered.text
            assert KEY not in answered.text and "your key is [redacted]" in answered.text


# -- 7: a stream is bounded in size and in time ----------------------------------------------------------------

async def test_a_stream_of_tiny_argument_deltas_is_cut_at_the_size_cap(stage: Stage) -> None:
    piece = events({"tool_calls": [{"index": 0, "function": {"arguments": "aaaaaaaaaaaaaaaa"}}]})
    piece = piece[:-len(b"data: [DONE]\n\n")]
    block = piece * (64 * 1024 // len(piece))  # many events per write, so the server is not the bottleneck

    async def endless() -> AsyncIterator[bytes]:
        yield events({"role": "assistant", "content": ""},
                     {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "deploy", "arguments": ""}}]})[:-len(b"data: [DONE]\n\n")]
        for _ in range(40 * 1024 * 1024 // len(block)):  # 40 MB: more than twice the cap, in 16-byte deltas
            yield block
        yield b"data: [DONE]\n\n"

    async with hostile(stage, lambda body: StreamingResponse(endless(), media_type="text/event-stream")):
        async with asyncio.timeout(120):  # generous: today the 40 MB are assembled (quadratically), then decided
            cut = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": True},
                                  timeout=120)
        assert cut.status_code == 200 and '"tool_calls"' not in cut.text
        assert "grew past 16777216 bytes" in error_event(cut.text)["message"]
        await still_serving(stage)


async def test_a_stream_that_goes_on_is_cut_at_the_models_timeout(stage: Stage) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        yield events({"role": "assistant", "content": ""})[:-len(b"data: [DONE]\n\n")]
        for _ in range(1200):  # a minute of text, each delta well within the per-read timeout
            await asyncio.sleep(0.05)
            yield events({"content": "."})[:-len(b"data: [DONE]\n\n")]
        yield b"data: [DONE]\n\n"

    async with hostile(stage, lambda body: StreamingResponse(trickle(), media_type="text/event-stream"),
                       timeout="1s"):
        async with asyncio.timeout(STEP_SECONDS):  # today the stream runs for the whole minute
            cut = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": True})
        assert "took longer than the 1 s" in error_event(cut.text)["message"]


# -- 11: JSON the gateway cannot write on is a bad answer ---------------------------------------------------------

HOSTILE_VALUES = {"nan": "NaN", "infinity": "-Infinity", "surrogate": '"\\ud800"', "surrogate-key": '{"\\udfff": 1}'}


@pytest.mark.parametrize("value", list(HOSTILE_VALUES.values()), ids=list(HOSTILE_VALUES))
async def test_nan_or_a_lone_surrogate_is_a_bad_upstream_answer(stage: Stage, value: str) -> None:
    whole = json.dumps(completion({"content": "@"})).replace('"@"', value)
    chunk = events({"content": "@"}).decode().split("\n\n")[0][len("data: "):].replace('"@"', value)

    def answer(body: dict[str, Any]) -> Response:
        if body.get("stream"):
            return sse(events({"role": "assistant", "content": ""}, chunk))
        return Response(whole, media_type="application/json")

    async with hostile(stage, answer):
        refused = await stage.api("POST", "/v1/chat/completions", who="alice", json=BODY)
        assert refused.status_code == 502, refused.text  # today 500 (or a reset connection)
        assert refused.json()["error"]["code"] == "model-upstream"
        assert "not valid JSON" in refused.json()["error"]["message"]
        streamed = await stage.api("POST", "/v1/chat/completions", who="alice", json={**BODY, "stream": True})
        assert streamed.status_code == 200
        assert "not valid JSON" in error_event(streamed.text)["message"]
        await still_serving(stage)
