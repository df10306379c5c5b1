"""The model proxy's ``POST /v1/responses`` (docs/model-proxy.md): OpenAI Responses agents, their calls decided.

Real parts only: the OpenAI Agents SDK on its default model class, MAF's Responses client, LangChain's
``ChatOpenAI(use_responses_api=True)`` and the ``openai`` client itself against the gateway on uvicorn, in front
of the scripted Responses model (tests/agents/fake_responses.py), which keeps responses as the API does,
refuses unanswered calls and validates every answer and event with the SDK's types. What the model read is
its final answer (every function_call_output it got).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio
from agent_stage import STEP_SECONDS, Stage
from api_matrix import POLICY, SECRET
from approval_support import PEOPLE
from fake_model import ScriptedCall, script, tool_results_of
from fake_responses import MODEL, FakeResponses
from loopback import serve_app
from matrix_responses import TOOLS, read_turn, streamed
from model_proxy_drivers import gateway_model_client
from responses_clients import langchain_run, maf_run, openai_agents_by_name_run, openai_agents_run
from test_model_proxy import REFUSAL

Json = dict[str, Any]

ALICE = PEOPLE["alice"][0]
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
CLIENTS = {"openai-agents": openai_agents_run, "openai-agents-by-name": openai_agents_by_name_run, "maf": maf_run,
           "langchain": langchain_run}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served() -> AsyncIterator[tuple[FakeResponses, str]]:
    fake = FakeResponses()
    async with serve_app(fake.app(), lifespan="off", startup=STEP_SECONDS) as url:
        yield fake, url


@pytest.fixture
def fake(served: tuple[FakeResponses, str]) -> FakeResponses:
    served[0].__init__()  # type: ignore[misc]
    return served[0]


async def start(stage: Stage, served: tuple[FakeResponses, str], **entry: Any) -> str:
    model = {"name": "*", "base_url": f"{served[1]}/v1", "model": MODEL, "api": "responses", **entry}
    return await stage.start(POLICY, models=[model])


def new_run() -> str:
    return f"run-{uuid.uuid4().hex}"


async def ask(url: str, stream: bool, run_id: str | None = None, **request: Any) -> Any:
    async with gateway_model_client(url, ALICE, run_id) as client:
        request = {"model": "any", "tools": TOOLS, **request}
        return await (streamed(client, **request) if stream else client.responses.create(**request))


@STREAMS
@pytest.mark.parametrize("client", list(CLIENTS))
async def test_frameworks_on_responses_get_every_call_decided(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], client: str, stream: bool) -> None:
    url = await start(stage, served)
    prompt = script(("deploy", {"service": "web"}), ("deploy", {"service": "prod"}), ("deploy", {"service": "api"}))
    run = await CLIENTS[client](url, ALICE, new_run(), prompt, stream)
    assert run.ran == ["web", "api-canary"]  # prod was refused, api rewritten
    assert tool_results_of(run.output) == ["deployed web", REFUSAL, "deployed api-canary"]
    assert all(r["model"] == MODEL for r in fake.requests)


@STREAMS
@pytest.mark.parametrize("client", ["openai-agents", "langchain"])
async def test_an_approved_call_reaches_the_frameworks_tool(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], client: str, stream: bool) -> None:
    url = await start(stage, served)

    async def approve() -> None:
        pending = await stage.wait_pending("deploy")
        await stage.decide(pending["id"], True, who="dave")

    deciding = asyncio.create_task(approve())
    run = await CLIENTS[client](url, ALICE, new_run(), script(("deploy", {"service": "payments"})), stream)
    await deciding
    assert run.ran == ["payments"] and tool_results_of(run.output) == ["deployed payments"]


@STREAMS
async def test_turns_the_gateway_answered_are_chained_on_a_storing_upstream(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], stream: bool) -> None:
    url = await start(stage, served)
    fake.preamble = "Let me deploy."  # a message item before the call: re-indexed in the agent's stream
    prompt = script(("deploy", {"service": "prod"}), ("deploy", {"service": "web"}))
    turn = read_turn(await ask(url, stream, input=prompt, instructions="Follow the script.",
                               tool_choice="auto", parallel_tool_calls=False))
    assert [c[1:] for c in turn.calls] == [("deploy", {"service": "web"})]
    first, second = fake.requests
    assert (first["instructions"], first["tool_choice"], first["parallel_tool_calls"]) == \
        ("Follow the script.", "auto", False)
    assert second["previous_response_id"] == fake.ids[0]
    assert [i["type"] for i in second["input"]] == ["function_call_output"]  # the answer's items are upstream
    assert second["input"][0]["output"] == REFUSAL
    assert turn.usage == {"input": 2, "output": 2}


@STREAMS
async def test_an_agent_that_does_not_store_sends_the_whole_conversation(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], stream: bool) -> None:
    url = await start(stage, served)
    prompt = script(("deploy", {"service": "prod"}), ("deploy", {"service": "web"}))
    await ask(url, stream, input=prompt, store=False)
    second = fake.requests[1]
    assert "previous_response_id" not in second and second["store"] is False
    assert [i.get("type") for i in second["input"]] == ["message", "function_call", "function_call_output"]
    assert not fake.stored


@STREAMS
async def test_an_agent_chained_by_previous_response_id_gets_its_results_screened(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], stream: bool) -> None:
    url = await start(stage, served)
    run_id = new_run()
    response = await ask(url, stream, run_id, input=script(("deploy", {"service": f"key {SECRET}"})))
    [(call_id, _, args)] = read_turn(response).calls
    output = {"type": "function_call_output", "call_id": call_id, "output": f"deployed {args['service']}"}
    final = read_turn(await ask(url, stream, run_id, input=[output], previous_response_id=response.id))
    # the call is upstream, not in the agent's input: the gateway knows it as one it handed out
    assert tool_results_of(final.text) == ["deployed key [REDACTED]"]
    [result] = final.extension["results"]
    assert (result["tool"], result["rewritten"]) == ("deploy", True)


@STREAMS
async def test_a_chain_on_a_turn_with_admitted_and_refused_calls_carries_the_gateways_answers_first(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], stream: bool) -> None:
    url = await start(stage, served)
    run_id = new_run()
    both = script(ScriptedCall("deploy", {"service": "prod"}, with_next=True), ("deploy", {"service": "web"}))
    response = await ask(url, stream, run_id, input=both)
    [(call_id, _, args)] = read_turn(response).calls  # prod was refused in the same turn: the agent gets web only
    output = {"type": "function_call_output", "call_id": call_id, "output": f"deployed {args['service']}"}
    final = read_turn(await ask(url, stream, run_id, input=[output], previous_response_id=response.id))
    chained = fake.requests[-1]
    # the upstream holds both calls: the refusal goes first, so none is unanswered (it would be a 400)
    assert [(i["type"], i["output"]) for i in chained["input"]] == [
        ("function_call_output", REFUSAL), ("function_call_output", "deployed web")]
    assert tool_results_of(final.text) == [REFUSAL, "deployed web"]


async def test_hosted_tools_pass_and_mcp_tools_are_refused(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str]) -> None:
    url = await start(stage, served)
    search = {"type": "web_search"}
    await ask(url, False, input=script(("deploy", {"service": "web"})), tools=[*TOOLS, search])
    assert fake.requests[-1]["tools"] == [*TOOLS, search]
    asked = len(fake.requests)
    mcp = {"type": "mcp", "server_label": "ops", "server_url": "http://127.0.0.1:9/mcp", "require_approval": "never"}
    with pytest.raises(openai.BadRequestError) as raised:
        await ask(url, False, input="hi", tools=[*TOOLS, mcp])
    assert "'mcp' tools are not served" in str(raised.value)
    assert len(fake.requests) == asked  # refused before the model was asked


@STREAMS
async def test_a_gateway_text_streams_as_a_message_item(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str], stream: bool) -> None:
    url = await start(stage, served)
    response = await ask(url, stream, new_run(), input=script(ScriptedCall("deploy", {"service": "stop"})))
    assert response.output_text == "This run is over; no more deploys."
    assert [i.type for i in response.output] == ["message"]
    assert response.model_extra["gateway"]["calls"][0]["decision"] == "terminate"


async def test_an_upstream_failing_midway_ends_the_agents_stream_with_an_error_event(
        stage: Stage, fake: FakeResponses, served: tuple[FakeResponses, str]) -> None:
    url = await start(stage, served)
    fake.broken = True
    async with gateway_model_client(url, ALICE, None) as client:
        async with client.responses.stream(model="any", input="hi", tools=TOOLS) as stream:
            seen = [event async for event in stream]
    assert [e.type for e in seen] == ["response.created", "response.in_progress", "error"]
    assert "the fake broke midway" in seen[-1].message and seen[-1].sequence_number == 2
