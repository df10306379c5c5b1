"""Tell other systems about approval requests: signed JSON POSTs, retried, never in the caller's way.

Each event is one POST per subscribed webhook, signed per the Standard Webhooks spec
(https://www.standardwebhooks.com)::

    POST <url>
    Content-Type: application/json
    X-Gateway-Event: approval.created
    webhook-id: msg_<32 hex>            (the same on every retry of this delivery: receivers dedupe on it)
    webhook-timestamp: <unix seconds>   (of this attempt)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">   (only with a secret)

    {"type": "approval.created", "approval": {...}, "text": ":hourglass: Approval needed: ..."}

``text`` is one line a Slack incoming webhook shows as is. A receiver checks a delivery with any
Standard Webhooks library, e.g. ``standardwebhooks.Webhook(secret).verify(body, headers)``, which
also refuses a timestamp more than five minutes off: a captured delivery cannot be replayed later,
and one replayed sooner carries a ``webhook-id`` already seen.

The secret: ``whsec_<base64>`` (the spec's form) is used as the spec says, the key being the
decoded bytes; any other text is itself the key (its UTF-8 bytes), which a receiver passes to the
library as bytes, ``Webhook(secret.encode())``, or as ``"whsec_" + base64(secret)``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import httpx2
import standardwebhooks

from gateway.approvals.model import Approval, ApprovalState
from gateway.core.limits import WEBHOOK_ATTEMPTS, WEBHOOK_FIRST_RETRY_SECONDS, WEBHOOK_TIMEOUT_SECONDS

__all__ = ["Webhook", "WebhookNotifier", "sign", "signing_key", "verify"]

log = logging.getLogger("gateway.approvals.webhooks")

EVENTS = ("approval.created", "approval.decided", "approval.expired")

# How long ``aclose`` lets deliveries in flight finish before cancelling them: shutdown should
# not wait out a whole retry schedule for a receiver that is down.
CLOSE_GRACE_SECONDS = 2.0

# Untrusted text (messages, comments, ids) is cut to this many characters in the summary line.
MAX_TEXT_FIELD_CHARS = 300


class Webhook(NamedTuple):
    """One receiver: its URL, its signing secret (None: unsigned) and the events it wants."""

    url: str
    secret: str | None
    events: Iterable[str] = EVENTS


# The spec's prefix for a base64 secret.
SECRET_PREFIX = "whsec_"


def signing_key(secret: str) -> bytes:
    """The HMAC key of a configured secret (see the module docstring); raises ValueError if unusable."""
    if secret.startswith(SECRET_PREFIX):
        encoded = secret[len(SECRET_PREFIX):]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"a secret starting with {SECRET_PREFIX!r} must be base64 after it") from None
    else:
        key = secret.encode()
    if not key:
        raise ValueError("a webhook secret must not be empty")
    return key


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt."""
    return standardwebhooks.Webhook(signing_key(secret)).sign(
        message_id, datetime.fromtimestamp(timestamp, UTC), body.decode())


def verify(secret: str, body: bytes, headers: Mapping[str, str]) -> Any:
    """The parsed body if ``headers`` sign it with ``secret`` within the spec's tolerance; else raises
    ``standardwebhooks.WebhookVerificationError``."""
    return standardwebhooks.Webhook(signing_key(secret)).verify(body, dict(headers))


class WebhookNotifier:
    """A ``Notifier`` that POSTs each event to every webhook subscribed to it, in the background."""

    def __init__(self, webhooks: Sequence[Webhook | tuple[str, str | None, Iterable[str]]],
                 page_url: str = "/approvals", *, attempts: int = WEBHOOK_ATTEMPTS,
                 first_retry: float = WEBHOOK_FIRST_RETRY_SECONDS,
                 timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> None:
        self.webhooks = [Webhook(url, secret, frozenset(events)) for url, secret, events in webhooks]
        for webhook in self.webhooks:
            if webhook.secret is not None:
                signing_key(webhook.secret)  # an unusable secret fails now, not at the first delivery
        unknown = {e for w in self.webhooks for e in w.events} - set(EVENTS)
        if unknown:
            raise ValueError(f"unknown webhook events {sorted(unknown)}; known: {', '.join(EVENTS)}")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.page_url = page_url.rstrip("/")
        self._attempts = attempts
        self._first_retry = first_retry
        self._client = httpx2.AsyncClient(timeout=timeout, follow_redirects=False)
        self._tasks: set[asyncio.Task[None]] = set()  # held so deliveries are not garbage-collected
        self._closed = False

    def notify(self, event: str, approval: Approval) -> None:
        """Queue delivery of ``event`` to its subscribers; returns at once and never raises."""
        try:
            targets = [w for w in self.webhooks if event in w.events]
            if not targets or self._closed:
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                log.warning("webhook %s for approval %s not queued: no running event loop", event, approval.id)
                return
            body = json.dumps({"type": event, "approval": approval.to_dict(), "text": self.summary(event, approval)},
                              ensure_ascii=False, default=str).encode()
            for webhook in targets:
                task = loop.create_task(self._deliver(webhook, event, body, f"msg_{uuid.uuid4().hex}"),
                                        name=f"webhook {event} {approval.id}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:  # the approval itself must go on whatever happens to its announcement
            log.exception("webhook %s for approval %s not queued", event, approval.id)

    def summary(self, event: str, approval: Approval) -> str:
        """The one-line, Slack-compatible text of an event."""
        who = _text(approval.principal.id)
        head = f"{_text(approval.tool)} requested by {who}"
        link = f"{self.page_url}/{approval.id}"
        if event == "approval.created":
            why = "; ".join(_text(r.message or r.rule) for r in approval.requirements) or "policy requires approval"
            return f":hourglass: Approval needed: {head} — {why} — {link}"
        if event == "approval.expired":
            outcome = "allowed" if approval.state is ApprovalState.APPROVED else "refused"
            return f":alarm_clock: Approval timed out ({outcome}): {head} — {link}"
        last = approval.votes[-1] if approval.votes else None
        by = f" by {_text(last.approver)}" if last else ""
        comment = f": “{_text(last.comment)}”" if last and last.comment else ""
        if approval.state is ApprovalState.DENIED:
            return f":no_entry: Denied{by}{comment} — {head} — {link}"
        return f":white_check_mark: Approved{by}{comment} — {head} — {link}"

    async def _deliver(self, webhook: Webhook, event: str, body: bytes, delivery: str) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": "agent-policy-gateway",
                   "X-Gateway-Event": event, "webhook-id": delivery}
        delay = self._first_retry
        problem = ""
        for attempt in range(1, self._attempts + 1):
            # Signed afresh for each attempt: a retry after a long outage must still be "recent".
            timestamp = int(time.time())
            headers["webhook-timestamp"] = str(timestamp)
            if webhook.secret is not None:
                headers["webhook-signature"] = sign(webhook.secret, delivery, timestamp, body)
            try:
                response = await self._client.post(webhook.url, content=body, headers=headers)
            except (httpx2.HTTPError, httpx2.InvalidURL) as exc:  # refused, timed out, reset, bad URL
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.is_success:
                    log.debug("webhook %s delivered %s (%s)", webhook.url, event, delivery)
                    return
                problem = f"HTTP {response.status_code}"
            if attempt < self._attempts:
                log.info("webhook %s: %s delivery %s attempt %d failed (%s); retrying in %.1fs",
                         webhook.url, event, delivery, attempt, problem, delay)
                await asyncio.sleep(delay)
                delay *= 2
        log.warning("webhook %s: gave up on %s delivery %s after %d attempts: %s",
                    webhook.url, event, delivery, self._attempts, problem)

    async def aclose(self, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Stop taking events, give deliveries in flight ``grace`` seconds, cancel the rest."""
        self._closed = True
        pending = set(self._tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("webhooks: %d deliveries cancelled at shutdown", len(pending))
            await asyncio.gather(*pending, return_exceptions=True)
        await self._client.aclose()


def _text(value: str) -> str:
    """Untrusted text for the summary: one line, bounded, with Slack's control characters escaped."""
    line = " ".join(str(value).split())
    if len(line) > MAX_TEXT_FIELD_CHARS:
        line = line[: MAX_TEXT_FIELD_CHARS - 1] + "…"
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
