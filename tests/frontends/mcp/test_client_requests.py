"""What an upstream asks of the client (sampling, elicitation, roots) and the log messages it sends reach the
client whose call caused them, and only that client, when it declared the capability or asked for the level.

Driven with the SDK's client through the gateway in both protocol eras, against our stdio test server, whose
tools ask the client whatever it declared (so the gateway's checks are what stands in the way).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from gateway_harness import RunningGateway, base_config, eventually, mcp_upstream, run_gateway, write_gateway
from mcp import MCPError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

ALLOW = """
policy: open
rules:
  - id: everything-goes
    tools: ["*"]
    action: allow
"""

MODES = ["legacy", "2026-07-28"]


class User:
    """A client's side: its model, its user and its roots, recording what it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.prompts: list[str] = []
        self.questions: list[str] = []
        self.roots_asked = 0
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.hold: asyncio.Event | None = None  # when set, the model answers only once this is set

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.prompts.append(params.messages[0].content.text)  # type: ignore[union-attr]
        if self.hold is not None:
            await self.hold.wait()
        return types.CreateMessageResult(role="assistant", model="test-model",
                                         content=types.TextContent(type="text", text=f"{self.name}'s model answers"))

    async def elicitation(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": f"{self.name} says yes"})

    async def roots(self, ctx: Any) -> types.ListRootsResult:
        self.roots_asked += 1
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///home/{self.name}", name=self.name)])

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    def options(self) -> dict[str, Any]:
        """Every client capability the SDK can declare."""
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation,
                "list_roots_callback": self.roots, "logging_callback": self.logging}

    @property
    def asked(self) -> int:
        return len(self.prompts) + len(self.questions) + self.roots_asked


def text(result: types.CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningGateway]:
    """One gateway for the module: each start launches the stdio server (seconds of CPU), and what a test asks
    for lives in its own MCP sessions."""
    root = tmp_path_factory.mktemp("client-requests")
    async with run_gateway(write_gateway(root, base_config(mcp_upstream("up")), {"p.yaml": ALLOW})) as running:
        yield running


@pytest.mark.parametrize("mode", MODES)
async def test_sampling_reaches_the_calling_client_and_its_answer_returns(gateway: Any, connect_mcp: Any,
                                                                          mode: str) -> None:
    """Handshake era: a request on the call's stream; 2026-07-28: InputRequiredResult and the client's retry."""
    alice = User("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("up_ask_model", {"prompt": "what is 2+2?"})
    assert not result.is_error
    assert text(result) == "model said: alice's model answers"
    assert alice.prompts == ["what is 2+2?"]


@pytest.mark.parametrize("mode", MODES)
async def test_elicitation_reaches_the_calling_client_and_its_answer_returns(gateway: Any, connect_mcp: Any,
                                                                             mode: str) -> None:
    alice = User("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("up_ask_user", {"question": "proceed?"})
    assert text(result) == "user accept: alice says yes"
    assert alice.questions == ["proceed?"]


@pytest.mark.parametrize("mode", MODES)
async def test_roots_come_from_the_calling_client(gateway: Any, connect_mcp: Any, mode: str) -> None:
    alice = User("alice")
    async with connect_mcp(gateway, mode=mode, **alice.options()) as conn:
        result = await conn.client.call_tool("up_ask_roots", {})
    assert text(result) == "roots: file:///home/alice"
    assert alice.roots_asked == 1


async def test_a_2026_call_asks_through_input_required_and_its_state_is_good_once_for_its_caller(
        gateway: Any, connect_mcp: Any) -> None:
    alice, bob = User("alice"), User("bob")
    async with connect_mcp(gateway, "alice", mode="2026-07-28", **alice.options()) as a, \
            connect_mcp(gateway, "bob", mode="2026-07-28", **bob.options()) as b:
        args = {"prompt": "alice's secret"}
        first = await a.client.session.call_tool("up_ask_model", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.request_state and first.input_requests
        [(key, asked)] = first.input_requests.items()
        assert isinstance(asked, types.CreateMessageRequest)
        assert asked.params.messages[0].content.text == "alice's secret"  # type: ignore[union-attr]
        answer = {key: types.CreateMessageResult(role="assistant", model="m",
                                                 content=types.TextContent(type="text", text="forty-two"))}
        # Someone else's state, other arguments, a made-up state: refused, and the call still waits for alice.
        for client, arguments, state in ((b.client, args, first.request_state),
                                         (a.client, {"prompt": "other"}, first.request_state),
                                         (a.client, args, "made-up")):
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("up_ask_model", arguments, input_responses=answer,
                                               request_state=state)
            assert refused.value.code == types.INVALID_PARAMS
        final = await a.client.session.call_tool("up_ask_model", args, input_responses=answer,
                                                 request_state=first.request_state)
        assert text(final) == "model said: forty-two"  # type: ignore[arg-type]
        with pytest.raises(MCPError):  # good once
            await a.client.session.call_tool("up_ask_model", args, input_responses=answer,
                                             request_state=first.request_state)
    assert alice.asked == 0 and bob.asked == 0  # driven by hand here, not through the callbacks


async def test_a_2026_call_that_ends_while_its_client_is_asked_gives_the_clients_next_request_its_result(
        gateway: Any, connect_mcp: Any) -> None:
    """The upstream gives up on its question and finishes before the client answers: the client's request with the
    answers (and the state it was given) gets the call's result, not "expired"."""
    alice = User("alice")
    async with connect_mcp(gateway, "alice", mode="2026-07-28", **alice.options()) as a:
        args = {"seconds": 0.2}
        first = await a.client.session.call_tool("up_ask_roots_briefly", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        [key] = first.input_requests

        def over() -> list[Any]:  # the call is over on the gateway: the upstream answered without the roots
            return [e for e in gateway.audit_events()
                    if e["event"] == "call.outcome" and e["tool"] == "up_ask_roots_briefly"]

        assert await eventually(lambda: _async(over()))
        answer = {key: types.ListRootsResult(roots=[types.Root(uri="file:///home/alice")])}
        result = await a.client.session.call_tool("up_ask_roots_briefly", args, input_responses=answer,
                                                  request_state=first.request_state, allow_input_required=True)
        assert isinstance(result, types.CallToolResult), result
        assert text(result) == "no roots in time"
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # good once
            await a.client.session.call_tool("up_ask_roots_briefly", args, input_responses=answer,
                                             request_state=first.request_state, allow_input_required=True)


async def _async(value: Any) -> Any:
    return value


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_the_capability_is_not_asked_and_the_upstream_gets_an_error(
        gateway: Any, connect_mcp: Any, mode: str) -> None:
    alice = User("alice")
    # Only logging: no sampling, elicitation or roots declared.
    async with connect_mcp(gateway, mode=mode, logging_callback=alice.logging) as conn:
        for tool, args in (("up_ask_model", {"prompt": "hi"}), ("up_ask_user", {"question": "hi"}),
                           ("up_ask_roots", {})):
            result = await conn.client.call_tool(tool, args)
            assert not result.is_error
            assert text(result).startswith(f"refused: {types.INVALID_REQUEST} ")
            assert "did not declare" in text(result) or "cannot be asked" in text(result)
        # The connection to the upstream is still good.
        assert text(await conn.client.call_tool("up_echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize("mode", MODES)
async def test_sampling_with_tools_needs_the_clients_sampling_tools_capability(gateway: Any, connect_mcp: Any,
                                                                               mode: str) -> None:
    plain, tooled = User("plain"), User("tooled")
    with_tools = types.SamplingCapability(tools=types.SamplingToolsCapability())
    async with connect_mcp(gateway, mode=mode, **plain.options()) as a, \
            connect_mcp(gateway, mode=mode, sampling_capabilities=with_tools, **tooled.options()) as b:
        refused = await a.client.call_tool("up_ask_model", {"prompt": "use the calculator", "with_tools": True})
        relayed = await b.client.call_tool("up_ask_model", {"prompt": "use the calculator", "with_tools": True})
    assert text(refused).startswith(f"refused: {types.INVALID_REQUEST} ")
    assert plain.asked == 0
    assert text(relayed) == "model said: tooled's model answers"
    assert tooled.prompts == ["use the calculator"]


async def test_a_url_elicitation_needs_the_url_capability(gateway: Any, connect_mcp: Any) -> None:
    """Sub-capabilities count: a client that declared only form elicitation is not sent a url one."""
    # Checked through the channel's declares(), which the router consults before asking.
    from gateway.frontends.mcp.client_channel import McpClientChannel

    class Session:
        can_send_request = True
        client_capabilities = types.ClientCapabilities(
            elicitation=types.ElicitationCapability(form=types.FormElicitationCapability()),
            sampling=types.SamplingCapability())

    class Ctx:
        session = Session()
        request_id = 1

    channel = McpClientChannel(Ctx(), frozenset())  # type: ignore[arg-type]
    url = types.ElicitRequestURLParams(message="sign in", url="https://example.com/x", elicitation_id="e1")
    form = types.ElicitRequestFormParams(message="name?", requested_schema={"type": "object", "properties": {}})
    assert channel.declares("elicitation", form)
    assert not channel.declares("elicitation", url)
    tool = types.Tool(name="t", input_schema={"type": "object"})
    plain = types.CreateMessageRequestParams(messages=[], max_tokens=1)
    assert channel.declares("sampling", plain)
    assert not channel.declares("sampling", plain.model_copy(update={"tools": [tool]}))
    assert not channel.declares("sampling", plain.model_copy(update={"include_context": "allServers"}))
    assert not channel.declares("roots", None)


async def test_config_denies_a_kind_per_upstream(start_gateway: Any, configs: Any, connect_mcp: Any) -> None:
    gateway = await start_gateway(
        configs.base(configs.mcp_upstream("up", client_requests={"sampling": "deny", "roots": "deny"})),
        {"p.yaml": ALLOW})
    alice = User("alice")
    async with connect_mcp(gateway, **alice.options()) as conn:
        sampled = await conn.client.call_tool("up_ask_model", {"prompt": "secret plans"})
        rooted = await conn.client.call_tool("up_ask_roots", {})
        elicited = await conn.client.call_tool("up_ask_user", {"question": "still allowed?"})
    assert text(sampled).startswith(f"refused: {types.INVALID_REQUEST} ")
    assert text(rooted).startswith(f"refused: {types.INVALID_REQUEST} ")
    assert alice.prompts == [] and alice.roots_asked == 0
    assert text(elicited) == "user accept: alice says yes"  # the kind left allowed still works


def test_config_refuses_an_unknown_word(tmp_path: Path, configs: Any) -> None:
    from gateway.config.model import McpUpstreamSpec

    with pytest.raises(ValueError, match="client_requests"):
        McpUpstreamSpec.model_validate({"command": "x", "client_requests": {"sampling": "sometimes"}})
    with pytest.raises(ValueError, match="client_requests"):
        McpUpstreamSpec.model_validate({"command": "x", "client_requests": {"telepathy": "allow"}})


@pytest.mark.parametrize("mode", MODES)
async def test_two_concurrent_callers_never_get_each_others_requests(gateway: Any, connect_mcp: Any,
                                                                     mode: str) -> None:
    """While alice's call waits on her model, bob's call runs on the same upstream connection: the upstream's
    request for bob cannot be told apart by the wire, so it is refused; alice gets only her own."""
    alice, bob = User("alice"), User("bob")
    alice.hold = asyncio.Event()
    async with connect_mcp(gateway, "alice", mode=mode, **alice.options()) as a, \
            connect_mcp(gateway, "bob", mode=mode, **bob.options()) as b:
        alices = asyncio.ensure_future(a.client.call_tool("up_ask_model", {"prompt": "alice's secret"}))
        while not alice.prompts:  # alice's request reached her client; her call is still in flight
            await asyncio.sleep(0.01)
        bobs = await b.client.call_tool("up_ask_model", {"prompt": "bob's secret"})
        alice.hold.set()
        alices_result = await alices
    assert text(alices_result) == "model said: alice's model answers"
    assert alice.prompts == ["alice's secret"]
    assert "several calls are in flight" in text(bobs)
    assert bob.asked == 0


async def test_a_request_outside_any_call_reaches_nobody(gateway: Any, connect_mcp: Any, tmp_path: Path) -> None:
    alice = User("alice")
    marker = tmp_path / "later.txt"
    async with connect_mcp(gateway, **alice.options()) as conn:
        assert text(await conn.client.call_tool("up_ask_model_later", {"prompt": "psst", "marker": str(marker)})) \
            == "will ask"
        for _ in range(600):  # up to 30 s on a loaded machine
            if marker.exists() and marker.read_text():
                break
            await asyncio.sleep(0.05)
    assert "no call is in flight" in marker.read_text()
    assert alice.asked == 0


def _levels(user: User) -> list[str]:
    return [str(entry.level) for entry in user.logs if entry.logger == "chatter"]


async def _set_level(client: Any, level: str) -> None:
    with warnings.catch_warnings():  # logging/setLevel is deprecated at 2026-07-28, current in the handshake era
        warnings.simplefilter("ignore")
        await client.set_logging_level(level)


async def test_log_messages_at_or_above_the_level_a_legacy_session_set(gateway: Any, connect_mcp: Any) -> None:
    alice, quiet = User("alice"), User("quiet")
    async with connect_mcp(gateway, logging_callback=alice.logging) as conn, \
            connect_mcp(gateway, logging_callback=quiet.logging) as other:
        await _set_level(conn.client, "warning")
        assert text(await conn.client.call_tool("up_chatter", {})) == "chattered"
        assert text(await other.client.call_tool("up_chatter", {})) == "chattered"  # this session set no level
        for _ in range(1000):  # up to 20 s on a loaded machine
            if len(_levels(alice)) >= 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    assert _levels(alice) == ["warning", "error"]
    assert [e.data for e in alice.logs] == ["chatter at warning", "chatter at error"]
    assert quiet.logs == []


async def test_log_messages_at_or_above_the_level_a_2026_request_asked_for(gateway: Any, connect_mcp: Any) -> None:
    alice, quiet = User("alice"), User("quiet")
    async with connect_mcp(gateway, mode="2026-07-28", logging_callback=alice.logging, log_level="error") as conn, \
            connect_mcp(gateway, mode="2026-07-28", logging_callback=quiet.logging) as other:
        assert text(await conn.client.call_tool("up_chatter", {})) == "chattered"
        assert text(await other.client.call_tool("up_chatter", {})) == "chattered"  # no level asked: none sent
        for _ in range(1000):  # up to 20 s on a loaded machine
            if _levels(alice):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    assert _levels(alice) == ["error"]
    assert quiet.logs == []


async def test_log_messages_go_only_to_the_caller(gateway: Any, connect_mcp: Any) -> None:
    """bob asked for every level but made no call: alice's call's messages are not his."""
    alice, bob = User("alice"), User("bob")
    async with connect_mcp(gateway, "alice", logging_callback=alice.logging) as a, \
            connect_mcp(gateway, "bob", logging_callback=bob.logging) as b:
        await _set_level(a.client, "debug")
        await _set_level(b.client, "debug")
        await a.client.call_tool("up_chatter", {})
        for _ in range(1000):  # up to 20 s on a loaded machine
            if len(_levels(alice)) >= 4:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    assert _levels(alice) == ["debug", "info", "warning", "error"]
    assert bob.logs == []
