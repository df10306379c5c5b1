"""The contract of gateway/frontends/http/_sdk.py: what the edge relies on of uvicorn's httptools protocol, pinned.

The names are looked up in uvicorn first (a rename fails here, naming the ``_sdk.py`` member that relies on
it); then a real ``UvicornHttpProtocol`` serves a real request on a socket pair, and its hooks and questions
are checked at each step of the request's life.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

SDK = "gateway/frontends/http/_sdk.py"
IMPL = "uvicorn.protocols.http.httptools_impl"


def _protocol_class() -> Any:
    try:
        module = __import__(IMPL, fromlist=["HttpToolsProtocol"])
        return module.HttpToolsProtocol
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{SDK}: UvicornHttpProtocol subclasses {IMPL}.HttpToolsProtocol, which is gone ({exc})")


@pytest.mark.parametrize(("user", "callback"), [("request_began", "on_message_begin"),
                                                 ("headers_arrived", "on_headers_complete"),
                                                 ("response_sent", "on_response_complete")])
def test_each_parser_callback_hooked_is_there(user: str, callback: str) -> None:
    method = getattr(_protocol_class(), callback, None)
    assert callable(method), f"{SDK}: UvicornHttpProtocol.{user} hooks HttpToolsProtocol.{callback}, which is gone"
    assert list(inspect.signature(method).parameters) == ["self"], f"{SDK}: {callback} takes more now"


def test_the_constructor_takes_what_uvicorn_passes() -> None:
    found = list(inspect.signature(_protocol_class().__init__).parameters)
    assert found[:4] == ["self", "config", "server_state", "app_state"], f"{SDK}: HttpToolsProtocol() is now {found}"


class _Watched:
    """Builds the ``_sdk`` protocol subclass lazily (an import error should fail one test, not collection)."""

    @staticmethod
    def build(events: list[str], seen: dict[str, Any]) -> type[Any]:
        from gateway.frontends.http._sdk import UvicornHttpProtocol

        class Watched(UvicornHttpProtocol):
            def request_began(self) -> None:
                events.append("began")
                seen["scope_set"] = isinstance(getattr(self, "scope", None), dict)  # after uvicorn's own

            def headers_arrived(self) -> None:
                events.append("headers")
                seen["serving_at_headers"] = self.serving()  # before uvicorn starts the request's cycle

            def response_sent(self) -> None:
                events.append("sent")
                seen["serving_at_end"] = self.serving()

        return Watched


async def test_a_real_request_passes_each_hook_and_question_in_order() -> None:
    events: list[str] = []
    seen: dict[str, Any] = {}
    in_app = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen["unread_in_app"] = protocol.body_unread()  # the body has not been read yet
        seen["serving_in_app"] = protocol.serving()
        in_app.set()  # only now does the client send the body
        while (await receive()).get("more_body"):
            pass
        seen["unread_after_read"] = protocol.body_unread()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(app, http="httptools", lifespan="off", log_level="warning")
    state = ServerState()
    loop = asyncio.get_running_loop()
    protocol = _Watched.build(events, seen)(config, state, {}, _loop=loop)
    assert protocol.loop is loop, f"{SDK}: now/call_later rely on HttpToolsProtocol.loop"
    assert protocol.cycle is None, f"{SDK}: serving/body_unread rely on HttpToolsProtocol.cycle (None at first)"
    assert not protocol.serving() and not protocol.body_unread()
    assert abs(protocol.now() - loop.time()) < 1.0, f"{SDK}: now"
    fired = asyncio.Event()
    protocol.call_later(0, fired.set)
    await asyncio.wait_for(fired.wait(), 5)

    ours, theirs = socket.socketpair()
    try:
        await loop.connect_accepted_socket(lambda: protocol, ours)
        assert protocol in protocol.open_connections(), f"{SDK}: open_connections relies on .connections"
        assert protocol.open_connections() is state.connections, f"{SDK}: open_connections is the server's"
        theirs.setblocking(False)
        await loop.sock_sendall(theirs, b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\n")
        await asyncio.wait_for(in_app.wait(), 5)
        await loop.sock_sendall(theirs, b"body")
        answer = b""
        while not answer.endswith(b"ok"):
            chunk = await asyncio.wait_for(loop.sock_recv(theirs, 4096), 5)
            assert chunk, answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        theirs.close()
    for _ in range(1000):  # up to 10 s on a loaded machine
        if protocol not in state.connections:
            break
        await asyncio.sleep(0.01)
    assert events == ["began", "headers", "sent"], f"{SDK}: the hooks fire once each, in order: {events}"
    assert seen["scope_set"], f"{SDK}: request_began runs after uvicorn's on_message_begin"
    assert seen["serving_at_headers"] is False, f"{SDK}: headers_arrived runs before uvicorn's cycle starts"
    assert seen["serving_in_app"] is True, f"{SDK}: serving, while the app answers"
    assert seen["unread_in_app"] is True and seen["unread_after_read"] is False, f"{SDK}: body_unread (more_body)"
    assert seen["serving_at_end"] is False, f"{SDK}: response_sent runs once the response is complete"
    assert protocol not in state.connections, f"{SDK}: a lost connection leaves open_connections"
