"""An approved agent-run call is handed out exactly once (docs/model-proxy.md, "Approvals").

For a tool the agent runs itself, the tool call the gateway hands out *is* the execution: a second copy
is a second run. Thirty identical chat requests of one run, sent at once through the official ``openai``
client, must get the approved call once; every other one gets the outcome as text.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agent_stage import STEP_SECONDS, Stage
from approval_support import PEOPLE
from fake_model import script
from model_proxy_drivers import gateway_model_client
from openai.types.chat import ChatCompletion

POLICY = """
policy: model
rules:
  - id: mail-needs-a-human
    tools: [send_email]
    action: approve
    message: Sending mail needs someone from ops.
    approval: {approvers: ["group:ops"], timeout: 60s}
"""

CONCURRENT = 30
HANDED_OUT = "already approved and handed out at "
PENDING = "Approval pending"
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "send_email", "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]
MESSAGES: list[Any] = [{"role": "user", "content": script(("send_email", {"to": "cfo@example.com"}))}]


def models(stage: Stage, approval: str) -> list[dict[str, Any]]:
    """`models:` serving every model name from the fake."""
    return [{"name": "*", "base_url": f"{stage.model_url}/v1", "model": "fake-model", "approval": approval}]


async def ask_at_once(stage: Stage, run_id: str, n: int) -> list[ChatCompletion]:
    """``n`` identical chat requests of one run, all in flight together."""
    async with gateway_model_client(stage.url, PEOPLE["alice"][0], run_id) as client:
        return list(await asyncio.gather(*(client.chat.completions.create(
            model="any", messages=MESSAGES, tools=TOOLS, timeout=STEP_SECONDS * 2) for _ in range(n))))


def handed(responses: list[ChatCompletion]) -> list[ChatCompletion]:
    """The responses that carry the tool call."""
    return [r for r in responses if r.choices[0].message.tool_calls]


def texts(responses: list[ChatCompletion]) -> list[str]:
    """The text of every response that carries no tool call."""
    return [r.choices[0].message.content or "" for r in responses if not r.choices[0].message.tool_calls]


async def test_held_requests_waiting_on_one_approval_get_the_approved_call_once(stage: Stage) -> None:
    # every waiter holds its connection: the key's held-call share (16 by default) must fit them all
    await stage.start(POLICY, models=models(stage, "hold"),
                      limits={"per_principal": {"max_held_calls": CONCURRENT}})
    run_id = f"run-{uuid.uuid4().hex}"
    waiting = asyncio.create_task(ask_at_once(stage, run_id, CONCURRENT))
    request = await stage.wait_pending("send_email")
    await stage.decide(request["id"], True, who="dave")
    responses = await waiting
    assert len(handed(responses)) == 1  # today every waiter got the call
    others = texts(responses)
    assert len(others) == CONCURRENT - 1
    # every waiter was bound to the one request, so each gets its outcome: handed out once, at a time
    assert all(HANDED_OUT in text and request["id"] in text for text in others), others[:3]
    [call] = (handed(responses)[0].model_extra or {})["gateway"]["calls"]
    assert call["status"] == "returned"
    notice = next(r for r in responses if not r.choices[0].message.tool_calls)
    [told] = (notice.model_extra or {})["gateway"]["calls"]
    assert told["status"] == "handed_out" and HANDED_OUT in told["message"]


async def test_concurrent_retries_after_the_approval_get_the_approved_call_once(stage: Stage) -> None:
    await stage.start(POLICY, models=models(stage, "answer"))
    run_id = f"run-{uuid.uuid4().hex}"
    [first] = await ask_at_once(stage, run_id, 1)
    assert PENDING in (first.choices[0].message.content or "")
    [request] = await stage.approvals("pending")
    await stage.decide(request["id"], True, who="dave")
    responses = await ask_at_once(stage, run_id, CONCURRENT)
    assert len(handed(responses)) == 1  # today 1 + the retries that came in before the claim was settled
    # the others were either bound to the used approval (told it was handed out) or came after it was used
    # up, and are a new request for approval: never the call again
    for text in texts(responses):
        assert (HANDED_OUT in text and request["id"] in text) or PENDING in text, text
    assert all(a["id"] != request["id"] for a in await stage.approvals("pending"))
