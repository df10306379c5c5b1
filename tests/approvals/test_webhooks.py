"""WebhookNotifier against a real Starlette receiver on loopback: signed, retried, filtered, never in the way."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway.app import build_notifier
from gateway.approvals.model import Approval, ApprovalState, Vote
from gateway.approvals.webhooks import Webhook, WebhookNotifier, verify
from gateway.config.load import load_config

SECRET = "s3cret-for-tests"
PAGE = "https://gw.example/approvals"
WAIT = 30.0  # seconds a test waits for a delivery that should arrive in milliseconds (a loaded machine is slow)


class Receiver:
    """A webhook receiver that records every request and answers with queued statuses (then 200)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.received: asyncio.Queue[tuple[str, dict[str, str], bytes, int]] = asyncio.Queue()
        self.release = asyncio.Event()
        self.parked = asyncio.Event()  # a request to /slow came and waits for ``release``

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            if request.url.path == "/slow":
                self.parked.set()
                await self.release.wait()
            status = self.statuses.pop(0) if self.statuses else 200
            await self.received.put((request.url.path, dict(request.headers), await request.body(), status))
            return PlainTextResponse("ok" if status < 300 else "nope", status_code=status)

        return Starlette(routes=[Route("/{name}", hook, methods=["POST"])])

    async def next(self) -> tuple[str, dict[str, str], bytes, int]:
        return await asyncio.wait_for(self.received.get(), WAIT)


@pytest.fixture
def approval(approval_desk: Any) -> Approval:
    return approval_desk.add(args={"order": "A-1", "amount": 900}, final_args={"order": "A-1", "amount": 100})


async def test_delivered_with_a_signature_that_verifies(serve: Any, approval: Approval) -> None:
    receiver = Receiver()
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/hook", SECRET, ["approval.created"])], PAGE)
    notifier.notify("approval.created", approval)
    path, headers, body, _ = await receiver.next()
    await notifier.aclose()

    assert path == "/hook"
    assert headers["content-type"] == "application/json"
    assert headers["x-gateway-event"] == "approval.created"
    assert headers["webhook-id"].startswith("msg_")
    assert verify(SECRET, body, headers) == json.loads(body)
    payload = json.loads(body)
    assert payload["type"] == "approval.created"
    assert payload["approval"] == approval.to_dict()
    assert payload["text"] == (":hourglass: Approval needed: payments_refund requested by alice"
                               f" — Refunds over 100 need a manager — {PAGE}/{approval.id}")


async def test_a_webhook_without_a_secret_is_sent_unsigned(serve: Any, approval: Approval) -> None:
    receiver = Receiver()
    base = await serve(receiver.app())
    notifier = WebhookNotifier([Webhook(f"{base}/hook", None)], PAGE)
    notifier.notify("approval.created", approval)
    _, headers, _, _ = await receiver.next()
    await notifier.aclose()
    assert "webhook-signature" not in headers
    assert headers["webhook-id"].startswith("msg_") and headers["webhook-timestamp"].isdigit()


async def test_retried_after_a_500_then_delivered(serve: Any, approval: Approval) -> None:
    receiver = Receiver(statuses=[500, 503])
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/hook", SECRET, ["approval.created"])], PAGE, first_retry=0.05)
    notifier.notify("approval.created", approval)
    tries = [await receiver.next() for _ in range(3)]
    await notifier.aclose()

    assert [status for *_, status in tries] == [500, 503, 200]
    deliveries = {headers["webhook-id"] for _, headers, _, _ in tries}
    assert len(deliveries) == 1, "a retry is the same delivery, so receivers can drop duplicates"
    assert len({body for _, _, body, _ in tries}) == 1
    assert receiver.received.empty()


async def test_a_dead_url_never_raises_never_delays_notify_and_is_given_up(
        refused_url: str, approval: Approval, caplog: pytest.LogCaptureFixture) -> None:
    notifier = WebhookNotifier([(f"{refused_url}/hook", SECRET, ["approval.created"])], PAGE,
                               attempts=3, first_retry=0.01)
    with caplog.at_level(logging.INFO, logger="gateway.approvals.webhooks"):
        for _ in range(20):
            notifier.notify("approval.created", approval)
        # notify only queued them: no attempt was made before the loop got control back (counted, not timed)
        assert not [r for r in caplog.records if "retrying" in r.message or "gave up" in r.message]
        async with asyncio.timeout(WAIT):
            while len([r for r in caplog.records if "gave up" in r.message]) < 20:
                await asyncio.sleep(0.01)
    await notifier.aclose()
    given_up = [r for r in caplog.records if "gave up" in r.message]
    assert "after 3 attempts" in given_up[0].message and "ConnectError" in given_up[0].message
    assert len([r for r in caplog.records if "retrying" in r.message]) == 40


async def test_events_filter_is_respected(serve: Any, approval: Approval) -> None:
    receiver = Receiver()
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/decisions", None, ["approval.decided"]),
                                (f"{base}/everything", None, ["approval.created", "approval.decided",
                                                              "approval.expired"])], PAGE)
    notifier.notify("approval.created", approval)
    assert (await receiver.next())[0] == "/everything"

    approval.state = ApprovalState.DENIED
    approval.votes.append(Vote("bob", ["managers"], False, "too <big> & risky", "2026-01-01T00:00:00Z"))
    notifier.notify("approval.decided", approval)
    got = sorted([await receiver.next(), await receiver.next()])
    await notifier.aclose()
    assert [path for path, *_ in got] == ["/decisions", "/everything"]
    assert json.loads(got[0][2])["text"] == (
        ":no_entry: Denied by bob: “too &lt;big&gt; &amp; risky” — payments_refund requested by alice"
        f" — {PAGE}/{approval.id}")
    assert receiver.received.empty()


async def test_aclose_cancels_deliveries_still_waiting(serve: Any, approval: Approval) -> None:
    receiver = Receiver()
    base = await serve(receiver.app())
    notifier = WebhookNotifier([(f"{base}/slow", None, ["approval.created"])], PAGE)
    notifier.notify("approval.created", approval)
    await asyncio.wait_for(receiver.parked.wait(), WAIT)  # the request is now parked in the receiver
    await asyncio.wait_for(notifier.aclose(grace=0.1), WAIT)  # the receiver never answers: only a cancel ends it
    notifier.notify("approval.created", approval)  # after close: dropped, not raised
    receiver.release.set()


def test_notify_without_a_running_loop_does_not_raise(approval: Approval,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    notifier = WebhookNotifier([("http://127.0.0.1:9/hook", None, ["approval.created"])], PAGE)
    notifier.notify("approval.created", approval)
    assert "not queued" in caplog.text


def test_summaries_of_decisions_and_timeouts(approval: Approval) -> None:
    notifier = WebhookNotifier([], "https://gw.example/approvals/")
    approval.state = ApprovalState.APPROVED
    approval.votes.append(Vote("bob", ["managers"], True, "", "2026-01-01T00:00:00Z"))
    assert notifier.summary("approval.decided", approval) == (
        f":white_check_mark: Approved by bob — payments_refund requested by alice — {PAGE}/{approval.id}")
    approval.state = ApprovalState.EXPIRED
    assert notifier.summary("approval.expired", approval).startswith(":alarm_clock: Approval timed out (refused)")


def test_the_config_webhooks_read_their_secrets_and_name_a_missing_one(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hook.secret").write_text("from-file\n")
    monkeypatch.setenv("HOOK_SECRET", "from-env")
    file = tmp_path / "gateway.yaml"
    (tmp_path / "policies").mkdir()
    file.write_text(textwrap.dedent("""
        policies: [policies]
        approvals:
          webhooks:
            - {url: "https://a.example/hook", secret: {env: HOOK_SECRET}, events: [approval.created]}
            - {url: "https://b.example/hook", secret: {file: hook.secret}}
            - {url: "https://c.example/hook"}
        """))
    config = load_config(file)
    notifier = build_notifier(config, PAGE)
    assert [(w.secret, sorted(w.events)) for w in notifier.webhooks] == [
        ("from-env", ["approval.created"]),
        ("from-file", ["approval.created", "approval.decided", "approval.expired"]),
        (None, ["approval.created", "approval.decided", "approval.expired"]),
    ]
    monkeypatch.delenv("HOOK_SECRET")  # gone between the config's check and the build
    with pytest.raises(ValueError, match=r"approvals.webhooks\[0\].secret .*HOOK_SECRET is not set"):
        build_notifier(config, PAGE)


def test_unknown_events_are_refused() -> None:
    with pytest.raises(ValueError, match=r"approval\.craeted"):
        WebhookNotifier([("https://a.example/hook", None, ["approval.craeted"])])
