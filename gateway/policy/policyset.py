"""A loaded, compiled policy set: the one object the rest of the gateway asks for decisions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import CelEvaluationError
from gateway.core.limits import MAX_INDEXED_TOOL_NAMES
from gateway.policy.call import SESSION_FIELDS, ToolCall, ToolInfo
from gateway.policy.cel import VARIABLES, Engine
from gateway.policy.cel.syntax import may_read, parse
from gateway.policy.compile import CompiledPolicy, CompiledRule
from gateway.policy.compiled import CompiledTally
from gateway.policy.decision import Action, Decision, Mode, Stage, Verdict
from gateway.policy.evaluate import condition_of, evaluate_call, evaluate_counted
from gateway.policy.flow import Tallies, TallyChange
from gateway.policy.fused import Fused, fuse
from gateway.policy.match import MatchedRules, RuleIndex
from gateway.policy.tallies import TallyError, TallyIndex, tally_change

__all__ = ["PolicySet", "env_revision"]

# How each CEL input map is built from a call (``args``, ``original_args`` and ``result`` are always built).
_INPUTS: dict[str, Callable[[ToolCall], Any]] = {
    "tool": lambda call: call.tool.to_cel(),
    "principal": lambda call: call.principal.to_cel(),
    "session": lambda call: call.session.to_cel(),
    "usage": lambda call: call.usage_cel(),
    "call": lambda call: call.call.to_cel(),
    "env": lambda call: call.env,
    "variables": lambda call: {},
    "request": lambda call: call.item_cel()["request"],
    "resource": lambda call: call.item_cel()["resource"],
    "prompt": lambda call: call.item_cel()["prompt"],
}

# Variables whose value is known before any argument is: rules reading only these can be
# decided for a tool listing.
_STATIC = frozenset({"tool", "principal", "env", "request", "resource", "prompt"})
_FILE_VARIABLES = frozenset({"variables"})
_ADMITTING = frozenset({Action.ALLOW, Action.APPROVE, Action.SKIP})
_REFUSING = frozenset({Action.REJECT, Action.TERMINATE})
_Counted = tuple[tuple[CompiledRule, ...], frozenset[str], tuple[CompiledTally, ...], Fused | None]


@dataclass
class PolicySet:
    """Compiled policies in load order, with their rule index and content revision."""

    engine: Engine
    policies: tuple[CompiledPolicy, ...]
    default: Verdict
    revision: str
    files: tuple[str, ...]
    warnings: list[Diagnostic] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rules: tuple[CompiledRule, ...] = tuple(r for p in self.policies for r in p.rules)
        self.index = RuleIndex(self.rules, fuse=partial(fuse, self.engine))  # no cycle through self
        self.item_indexes = {
            "resource": RuleIndex([r for r in self.rules if r.resources is not None], lambda r: r.resources),
            "prompt": RuleIndex([r for r in self.rules if r.prompts is not None], lambda r: r.prompts),
        }
        self.tallies: tuple[CompiledTally, ...] = tuple(t for p in self.policies for t in p.tallies)
        self._tally_index = TallyIndex(self.tallies)
        # per tool a tally counts: its request rules, what they and its tallies read, the tallies, the listed program
        self._counted: dict[str, _Counted] = {}
        self._kinds: dict[str, type] = {t.id: float if t.kind == "sum" else int for t in self.tallies}
        self._distinct = tuple(t.id for t in self.tallies if t.kind == "distinct")
        # Every declared tally at 0 and no value seen: what a new run (or an empty window) reads. Shared: copy it
        # (``Tallies.copy``, ``Tallies.added``) before changing it.
        self.zero = Tallies({t.id: 0.0 if t.kind == "sum" else 0 for t in self.tallies},
                            {t.id: [] for t in self.tallies if t.kind == "distinct"})
        # Whether a call may change what its run carries: the pipeline records flow only then.
        self.uses_flow = bool(self.tallies) or any(r.action is Action.LABEL for r in self.rules)
        # The fields of ``session`` any expression may read: only those are bound, since the engine converts every
        # field it is given on the first read of ``session`` (64 history entries cost more than the rest of a
        # decision; the counters and labels of a run a rule reads for its tally alone cost a third of one).
        # Policies read exactly the same values either way; a set reading ``session`` whole binds every field.
        fields = {f for f in SESSION_FIELDS if _may_read(self, "session", f)}
        if fields & {"tallies", "seen"}:
            fields |= {"tallies", "seen"}  # filled in together (``_fill_tallies``)
        self.session_fields = SESSION_FIELDS if fields == SESSION_FIELDS else frozenset(fields)
        self.reads_history = "history" in self.session_fields

    def tallies_for(self, tool_name: str) -> tuple[CompiledTally, ...]:
        """The tallies that count calls of ``tool_name``, in load order (cached per name)."""
        return self._tally_index.lookup(tool_name)[0]

    def tally_change(self, call: ToolCall) -> TallyChange:
        """What admitting ``call`` adds to its tallies, from ``call.args`` (the caller gives the FINAL arguments).

        ``TallyError`` (a ``CelEvaluationError`` naming the tally) when one cannot be computed or gives a value
        it may not count: the caller refuses the call (fail closed).
        """
        if call.item is not None:
            return TallyChange()
        tallies, reads = self._tally_index.lookup(call.tool.name)
        if not tallies:
            return TallyChange()
        return tally_change(self.engine, tallies, self.cel_input(call, reads))

    def decide_counted(self, call: ToolCall, counts: frozenset[Verdict]
                       ) -> tuple[Decision, TallyChange | TallyError | None]:
        """The request-stage decision for ``call`` and, when its verdict is one of ``counts``, what admitting it
        adds to its tallies on the decision's final arguments (a ``TallyError`` when one cannot be computed: the
        caller refuses the call). One activation serves both: the same answers as ``decide`` then ``tally_change``.
        """
        counted = self._counted.get(call.tool.name) if call.item is None else None
        if counted is None:
            counted = self._counted_for(call)
            if counted is None:
                return self.decide(call), None
        rules, reads, tallies, fused = counted
        return evaluate_counted(self.engine, self.policies, rules, self.cel_input(call, reads), self.default,
                                call.tool.name, self.revision, tallies, counts, fused)

    def _counted_for(self, call: ToolCall) -> _Counted | None:
        """What ``decide_counted`` needs for ``call``'s tool, made at its first call (None: nothing to count)."""
        tallies, tally_reads = self._tally_index.lookup(call.tool.name)
        if call.item is not None or call.stage is not Stage.REQUEST or not tallies:
            return None
        if len(self._counted) >= MAX_INDEXED_TOOL_NAMES:
            self._counted.clear()
        matched = self.index.lookup(call.tool.name)
        fused = fuse(self.engine, matched.request, tallies)
        found = self._counted[call.tool.name] = (matched.request, matched.request_reads | tally_reads, tallies, fused)
        return found

    def matched(self, call: ToolCall) -> MatchedRules:
        """The rules that apply to ``call``: by tool name, or by resource URI or prompt name."""
        if call.item is None:
            return self.index.lookup(call.tool.name)
        return self.item_indexes[call.item.kind].lookup(call.item.name)

    def decide(self, call: ToolCall) -> Decision:
        """The decision for one call at its stage."""
        matched = self.matched(call)
        if call.stage is Stage.REQUEST:
            rules, reads, fused = matched.request, matched.request_reads, matched.request_fused
        else:
            rules, reads, fused = matched.response, matched.response_reads, matched.response_fused
        subject = call.tool.name if call.item is None else call.item.name
        return evaluate_call(self.engine, self.policies, rules, call.stage, self.cel_input(call, reads),
                             self.default, subject, self.revision, fused)

    def cel_input(self, call: ToolCall, reads: Iterable[str] = VARIABLES) -> dict[str, Any]:
        """The CEL variables' values for ``call`` (``variables`` still empty).

        Only the maps named in ``reads`` are built (a rule never sees one it does not read);
        ``args``, ``original_args`` and ``result`` are always there, since the decision carries them.
        With tallies, the run's and every usage window's show each declared one (0 when it has none yet).
        """
        base = {"args": call.args,
                "original_args": call.original_args if call.original_args is not None else call.args,
                "result": call.result.to_cel() if call.result is not None else {}}
        for name in reads:
            if name not in base:
                base[name] = _INPUTS[name](call) if name != "session" else call.session.to_cel(self.session_fields)
        if self.tallies:
            if "tallies" in base.get("session", ()):
                self._fill_tallies(base["session"])
            for window in base.get("usage", {}).values():
                self._fill_tallies(window)
        return base

    def _fill_tallies(self, owner: dict[str, Any]) -> None:
        """``owner``'s (a session or usage window map) tallies and seen values: every declared tally, typed as
        declared (a sum a double, a count an int), so ``session.tallies.ID`` always reads. Per call: kept cheap."""
        values = self.zero.values.copy()
        kinds = self._kinds
        for key, value in owner["tallies"].items():
            kind = kinds.get(key)
            if kind is None or type(value) is kind:
                if kind is not None:
                    values[key] = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[key] = kind(value)
        owner["tallies"] = values
        if self._distinct:
            seen = owner["seen"]
            owner["seen"] = {key: seen.get(key) or [] for key in self._distinct}
        else:
            owner["seen"] = {}

    def admits_tool(self, call: ToolCall) -> bool:
        """False when the policies refuse this tool for this principal whatever the arguments.

        Only rules that read nothing but ``tool``, ``principal`` and ``env``, themselves or through the file
        variables they read, are evaluated; any other rule might go either way, so it keeps the tool visible.
        """
        base = {"tool": call.tool.to_cel(), "principal": call.principal.to_cel(), "env": call.env,
                "args": {}, "original_args": {}, "session": {}, "usage": {}, "call": {}, "variables": {},
                "result": {}, **call.item_cel()}
        holds = None
        might_admit = False
        for rule in self.matched(call).request:
            if rule.mode is not Mode.ENFORCE or rule.action not in _ADMITTING | _REFUSING:
                continue
            static = rule.references - _FILE_VARIABLES <= _STATIC  # references hold those of its variables
            if not static:
                might_admit = might_admit or rule.action in _ADMITTING
                continue
            try:
                if holds is None:
                    holds = condition_of(self.engine, self.policies, base)
                fires = holds(rule)
            except CelEvaluationError:
                fires = True  # the call itself will fail closed; listing it tells the model why
                if rule.action in _REFUSING:
                    continue
            if fires and rule.action in _REFUSING:
                return False
            might_admit = might_admit or (fires and rule.action in _ADMITTING)
        return might_admit or self.default is Verdict.ALLOW

    def summary(self) -> dict[str, Any]:
        """Revision, files and counts, for `/v1/policies` and `gateway check`."""
        return {"revision": self.revision, "engine": self.engine.name, "default": str(self.default),
                "files": list(self.files), "policies": len(self.policies), "rules": len(self.rules)}

    @staticmethod
    def tool(name: str) -> ToolInfo:
        """A bare tool description, for callers that know only a name."""
        return ToolInfo(name=name)


def _may_read(policy_set: PolicySet, root: str, name: str) -> bool:
    """Whether any expression of the set (rules, file variables, tallies) may read ``root.name``."""
    sources = [e.source for r in policy_set.rules for e in r.expressions]
    sources += [v.expression.source for p in policy_set.policies for v in p.variables]
    sources += [t.expression.source for t in policy_set.tallies]
    return any(may_read(parse(source), root, name) for source in set(sources))


def env_revision(env: dict[str, Any]) -> str:
    """A short digest of the ``env`` values policies see, so a replay can tell it runs under another env."""
    text = json.dumps(env, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]
