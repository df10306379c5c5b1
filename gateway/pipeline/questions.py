"""What the frontends and the model proxy ask the gateway, each a narrow question.

They never reach into its parts (its store, policies, registry, audit log): what a tool list shows, which
run a request belongs to, whether a run has ended, the policy status, and an event to put on the record.
``Gateway`` (gateway/pipeline/lifecycle.py) has these methods; its parts are set there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.audit_head import audit_head
from gateway.core.clock import now_rfc3339
from gateway.observe.tracing import current_trace_id
from gateway.pipeline.approvals import EditAsk, EditedCall
from gateway.pipeline.audit import AuditLog
from gateway.pipeline.edits import judge_edit
from gateway.pipeline.run_end import terminated_text
from gateway.pipeline.runs import Run, resolve_run
from gateway.pipeline.settings import CallSettings
from gateway.policy.call import Principal, ToolCall
from gateway.reload.holder import PolicyHolder
from gateway.store.base import SessionStore
from gateway.upstreams.base import needs_caller_token
from gateway.upstreams.client_requests import Declares, undeclared
from gateway.upstreams.items import ItemCatalog
from gateway.upstreams.registry import ExposedTool, ToolRegistry

__all__ = ["Questions"]


class Questions:
    """The questions a frontend may ask; every answer is computed from the gateway's parts, none handed out."""

    policies: PolicyHolder
    registry: ToolRegistry
    store: SessionStore
    audit: AuditLog
    settings: CallSettings

    # --- tools ----------------------------------------------------------------------------------------

    def visible_tools(self, principal: Principal) -> list[ExposedTool]:
        """Tools this principal may see: those the policies do not refuse whatever the arguments."""
        policy_set, env = self.policies.current, self.settings.env
        return [t for t in self.registry.all()
                if policy_set.admits_tool(ToolCall(t.info, principal=principal, env=env))]

    def usable_tools(self, principal: Principal, declares: Declares | None) -> list[ExposedTool]:
        """The visible tools a client can use: those whose requests to it (``needs_client``) it declared.

        ``declares`` is the client's ``ClientChannel.declares``; None for a caller that cannot be asked (REST,
        the model proxy)."""
        return [t for t in self.visible_tools(principal) if not undeclared(declares, t.spec.needs_client)]

    def tool(self, name: str) -> ExposedTool | None:
        """The exposed tool of that name, whoever asks (None when there is none)."""
        return self.registry.get(name)

    def tool_visible(self, principal: Principal, name: str) -> ExposedTool | None:
        """The tool of that name when this principal may see it, else None (one lookup, not the whole list)."""
        tool = self.registry.get(name)
        if tool is None or not self.policies.current.admits_tool(
                ToolCall(tool.info, principal=principal, env=self.settings.env)):
            return None
        return tool

    def acts_for_caller(self, tool: ExposedTool) -> bool:
        """Whether the tool's upstream runs a call only on behalf of a caller with a verified token (its credential
        is exchanged from the caller's token): a caller with an API key, or anonymous, cannot use it."""
        return needs_caller_token(tool.upstream)

    def item_catalog(self) -> ItemCatalog:
        """The resources and prompts of the upstreams, for the pipeline's item gate (gateway/pipeline/items.py)."""
        return ItemCatalog(self.registry)

    def on_tools_changed(self, callback: Callable[[], None]) -> None:
        """Be told after an upstream's tool list changed."""
        self.registry.on_change(callback)

    def on_policies_swapped(self, callback: Callable[[], None]) -> None:
        """Be told after a reload swapped the policy set (what each principal may see can change)."""
        self.policies.swap_listeners.append(callback)

    # --- runs ---------------------------------------------------------------------------------------------

    async def resolve_run(self, principal: str, explicit: str | None, client: str, session: str | None = None) -> Run:
        """The run a request belongs to (gateway/pipeline/runs.py): the one it named, else the implicit one."""
        return await resolve_run(self.store, principal, explicit, client, session)

    async def run_ended(self, principal: str, run: Run, default: str) -> str | None:
        """What a call of ``run`` reads when the run was terminated (``default`` when no rule said), else None."""
        session = await self.store.session(principal, run.id, run.client)
        if not session.terminated:
            return None
        return terminated_text(session, session.terminate_message or default, self.store.implicit_runs.idle_timeout)

    # --- policies and the record -----------------------------------------------------------------------

    @property
    def revision(self) -> str:
        """The revision of the policy set in force."""
        return self.policies.current.revision

    async def judge_edit(self, ask: EditAsk) -> EditedCall:
        """An approver's edit of a held call decided by the request-stage policies in force, for the call's own
        principal and run (gateway/pipeline/edits.py); nothing is counted or run."""
        return await judge_edit(self.policies, self.registry, self.store, self.settings, ask)

    def policy_status(self) -> dict[str, object]:
        """What ``GET /v1/policies`` shows."""
        return self.policies.status()

    def record(self, kind: str, **fields: Any) -> None:
        """Write an event of ``kind`` to the audit log, after its head (gateway/core/audit_head.py); raises
        ``AuditWriteError`` when it cannot be written."""
        self.audit.write({**audit_head(kind, now_rfc3339(), current_trace_id()), **fields})
