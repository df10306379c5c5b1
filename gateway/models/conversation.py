"""What the model proxy serves with: its routes (`models:` entries), who asks, and one agent request being served."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.models.dialects.base import AgentRequest, Answered, Dialect, Json, ModelAnswer, Reply, ToolCall
from gateway.models.upstream import ModelUpstream
from gateway.pipeline.runs import Run
from gateway.policy.call import Principal
from gateway.upstreams.registry import ExposedTool

__all__ = ["Caller", "Conversation", "ModelRoute", "UnknownModel", "WrongApi"]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """One `models:` entry, as plain values."""

    name: str  # a glob over the model names agents ask for
    upstream: ModelUpstream
    model: str | None = None
    gateway_tools: tuple[str, ...] = ()
    tool_concurrency: int = 4
    max_turns: int = 8
    approval_wait: float = 300.0  # 0: answer "awaits approval" at once
    client_tools: tuple[str, ...] | None = None  # the agent tools the model may be offered (globs); None: any
    api: str = "chat"  # the model API the upstream speaks (gateway/models/dialects/registry.py)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, in which run, and how the run's client is named."""

    principal: Principal
    run: Run
    token: str | None = field(default=None, repr=False, compare=False)  # Identity.token, for token exchange


class UnknownModel(LookupError):
    """No `models:` entry serves the model the agent asked for (a 404)."""


class WrongApi(LookupError):
    """The entry serving the model speaks another API than the endpoint asked (a 400)."""

    def __init__(self, entry: str, api: str) -> None:
        super().__init__(entry, api)
        self.entry = entry
        self.api = api


@dataclass(slots=True)
class Conversation:
    """One agent request being served."""

    caller: Caller
    route: ModelRoute
    dialect: Dialect
    request: AgentRequest
    base: Json  # what every model request starts from (model name mapped, gateway tools added)
    items: list[Json]  # the conversation as the model gets it (splices put back, results screened, exchanges)
    gateway: dict[str, ExposedTool]
    report: list[Json] = field(default_factory=list)
    results: list[Json] = field(default_factory=list)  # what became of the agent's results the rules read
    resolved: list[Json] = field(default_factory=list)  # this request's exchanges the agent does not see
    model_requests: int = 0
    last: ModelAnswer | None = None  # this request's last answer the gateway answered itself
    new: list[Json] = field(default_factory=list)  # the items appended since ``last``
    usage: Json | None = None

    @property
    def client(self) -> dict[str, ExposedTool]:
        """The agent's own tools."""
        return self.request.tools

    def next_request(self) -> Json:
        """The body of the next model request."""
        return self.dialect.model_request(self.base, self.items, self.last, self.new)

    def extension(self) -> Json:
        """The response's extension field."""
        return {"run": self.caller.run.id, "model_requests": self.model_requests, "calls": self.report,
                **({"results": self.results} if self.results else {})}

    def reply(self, answer: ModelAnswer | None, returned: list[tuple[ToolCall, Json]] | None = None,
              text: str | None = None, answered: list[Answered] | None = None) -> Reply:
        """What the agent gets (``answered``: the answer's calls resolved here, which it does not see)."""
        return Reply(self.request.model, answer, returned or [], text, self.usage, self.extension(), answered or [])
