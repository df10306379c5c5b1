"""Tell other systems about approval requests: signed JSON POSTs, retried, never in the caller's way.

Each event is one POST per subscribed webhook::

    POST <url>
    Content-Type: application/json
    X-Gateway-Event: approval.created
    X-Gateway-Delivery: <uuid, the same on every retry of this delivery>
    X-Gateway-Signature: sha256=<hex HMAC-SHA256 of the body with the webhook's secret>  (only with a secret)

    {"type": "approval.created", "approval": {...}, "text": ":hourglass: Approval needed: ..."}

``text`` is one line a Slack incoming webhook shows as is. A receiver checks the signature with
``verify_signature`` (or the same HMAC) over the exact body bytes it received.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import httpx2

from gateway.approvals.model import Approval, ApprovalState
from gateway.config.load import resolve_secret
from gateway.config.model import WebhookSpec
from gateway.limits import WEBHOOK_ATTEMPTS, WEBHOOK_FIRST_RETRY_SECONDS, WEBHOOK_TIMEOUT_SECONDS

__all__ = ["Webhook", "WebhookNotifier", "signature", "verify_signature"]

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


def signature(secret: str, body: bytes) -> str:
    """The ``X-Gateway-Signature`` value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str) -> bool:
    """Whether ``header`` is the signature of ``body`` with ``secret`` (compared in constant time)."""
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode())


class WebhookNotifier:
    """A ``Notifier`` that POSTs each event to every webhook subscribed to it, in the background."""

    def __init__(self, webhooks: Sequence[Webhook | tuple[str, str | None, Iterable[str]]],
                 page_url: str = "/approvals", *, attempts: int = WEBHOOK_ATTEMPTS,
                 first_retry: float = WEBHOOK_FIRST_RETRY_SECONDS,
                 timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> None:
        self.webhooks = [Webhook(url, secret, frozenset(events)) for url, secret, events in webhooks]
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

    @classmethod
    def from_specs(cls, specs: list[WebhookSpec], base: Path, page_url: str = "/approvals") -> WebhookNotifier:
        """A notifier for the config's ``approvals.webhooks``; secrets are read now, failing loudly."""
        webhooks = []
        for i, spec in enumerate(specs):
            try:
                secret = None if spec.secret is None else resolve_secret(spec.secret, base)
            except ValueError as exc:
                raise ValueError(f"approvals.webhooks[{i}].secret ({spec.url}): {exc}") from None
            webhooks.append(Webhook(spec.url, secret, spec.events))
        return cls(webhooks, page_url)

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
                task = loop.create_task(self._deliver(webhook, event, body, str(uuid.uuid4())),
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
                   "X-Gateway-Event": event, "X-Gateway-Delivery": delivery}
        if webhook.secret is not None:
            headers["X-Gateway-Signature"] = signature(webhook.secret, body)
        delay = self._first_retry
        problem = ""
        for attempt in range(1, self._attempts + 1):
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
