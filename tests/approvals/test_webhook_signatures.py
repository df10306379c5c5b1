"""Webhooks are signed per the Standard Webhooks spec, and a receiver using the reference library
(``standardwebhooks``) accepts real deliveries and refuses tampered, re-timed, old or foreign ones."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
import standardwebhooks
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway.approvals.model import Approval
from gateway.approvals.webhooks import WebhookNotifier, sign

PAGE = "https://gw.example/approvals"
WAIT = 5.0
PLAIN_SECRET = "plain-text-secret-for-tests"
WHSEC = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


class VerifyingReceiver:
    """A receiver that verifies each delivery with the reference library, as a real one would."""

    def __init__(self, verifier: standardwebhooks.Webhook, statuses: list[int] | None = None) -> None:
        self.verifier = verifier
        self.statuses = list(statuses or [])
        self.received: asyncio.Queue[tuple[dict[str, str], bytes, str]] = asyncio.Queue()

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = await request.body()
            headers = dict(request.headers)
            try:
                self.verifier.verify(body, headers)
                verdict = "verified"
            except standardwebhooks.WebhookVerificationError as exc:
                verdict = f"refused: {exc}"
            await self.received.put((headers, body, verdict))
            status = self.statuses.pop(0) if self.statuses else 200
            return PlainTextResponse(verdict, status_code=status)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    async def next(self) -> tuple[dict[str, str], bytes, str]:
        return await asyncio.wait_for(self.received.get(), WAIT)


@pytest.fixture
def approval(approval_desk: Any) -> Approval:
    return approval_desk.add(args={"order": "A-1", "amount": 900})


@pytest.mark.parametrize(("configured", "receiver_key"), [
    pytest.param(WHSEC, WHSEC, id="whsec-secret"),
    pytest.param(PLAIN_SECRET, PLAIN_SECRET.encode(), id="plain-secret-as-bytes"),
    pytest.param(PLAIN_SECRET, "whsec_" + base64.b64encode(PLAIN_SECRET.encode()).decode(), id="plain-as-whsec"),
])
async def test_a_standard_receiver_verifies_every_delivery(serve: Any, approval: Approval, configured: str,
                                                           receiver_key: str | bytes) -> None:
    receiver = VerifyingReceiver(standardwebhooks.Webhook(receiver_key))
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/hook", configured, ["approval.created"])], PAGE)
    notifier.notify("approval.created", approval)
    headers, body, verdict = await receiver.next()
    await notifier.aclose()

    assert verdict == "verified"
    assert headers["webhook-id"].startswith("msg_")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert headers["webhook-signature"].startswith("v1,")
    assert "x-gateway-signature" not in headers  # one scheme: the one that resists replays
    assert json.loads(body)["approval"]["id"] == approval.id


async def test_retries_keep_their_id_and_each_attempt_verifies(serve: Any, approval: Approval) -> None:
    receiver = VerifyingReceiver(standardwebhooks.Webhook(WHSEC), statuses=[500, 503])
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/hook", WHSEC, ["approval.created"])], PAGE, first_retry=0.05)
    notifier.notify("approval.created", approval)
    tries = [await receiver.next() for _ in range(3)]
    await notifier.aclose()
    assert [verdict for *_, verdict in tries] == ["verified"] * 3
    assert len({headers["webhook-id"] for headers, _, _ in tries}) == 1  # receivers drop duplicates by id


async def test_tampered_retimed_old_and_foreign_deliveries_are_refused(serve: Any, approval: Approval) -> None:
    receiver = VerifyingReceiver(standardwebhooks.Webhook(WHSEC))
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/hook", WHSEC, ["approval.created"])], PAGE)
    notifier.notify("approval.created", approval)
    headers, body, verdict = await receiver.next()
    await notifier.aclose()
    assert verdict == "verified"
    verifier = standardwebhooks.Webhook(WHSEC)

    tampered = body.replace(b'"amount": 900', b'"amount": 9000')
    assert tampered != body
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verifier.verify(tampered, headers)

    # A replayer cannot move the timestamp forward: it is part of what is signed.
    retimed = {**headers, "webhook-timestamp": str(int(time.time()) + 1)}
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verifier.verify(body, retimed)

    # A delivery signed ten minutes ago (a captured one, replayed now) is too old.
    then = int(time.time()) - 600
    old = {**headers, "webhook-timestamp": str(then),
           "webhook-signature": sign(WHSEC, headers["webhook-id"], then, body)}
    with pytest.raises(standardwebhooks.WebhookVerificationError, match="too old"):
        verifier.verify(body, old)

    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(b"some other secret").verify(body, headers)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not*base64!"])
def test_an_unusable_secret_is_refused_when_the_notifier_is_built(secret: str) -> None:
    with pytest.raises(ValueError, match="secret"):
        WebhookNotifier([("https://a.example/hook", secret, ["approval.created"])])
