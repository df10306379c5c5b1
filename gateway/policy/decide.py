"""From rule results to one verdict: strictest fired wins, then the set's default."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.policy.decision import STRICTNESS, RuleResult, Verdict

__all__ = ["DEFAULT_MESSAGES", "choose_verdict"]

DEFAULT_MESSAGES: dict[Verdict, str] = {
    Verdict.REJECT: "This call was rejected by policy.",
    Verdict.APPROVE: "This call needs approval before it runs.",
    Verdict.SKIP: "This call was skipped by policy.",
    Verdict.TERMINATE: "This agent run was terminated by policy.",
}


def choose_verdict(
    results: Sequence[RuleResult], default: Verdict, tool: str
) -> tuple[Verdict, str | None, str | None]:
    """(verdict, decided_by, message) from the rules' effects.

    terminate > reject > skip > approve > allow; among equals the first in load order speaks.
    When no rule with a verdict fired, the set's default applies (rewrite carries no verdict).
    """
    best: RuleResult | None = None
    for result in results:
        if result.effect is None:
            continue
        if best is None or STRICTNESS[result.effect] > STRICTNESS[best.effect]:  # type: ignore[index]
            best = result
    if best is None or best.effect is None:
        if default is Verdict.REJECT:
            return Verdict.REJECT, "default", f"No policy allows calling the tool {tool!r}."
        return Verdict.ALLOW, None, None
    verdict = best.effect
    message = best.message or DEFAULT_MESSAGES.get(verdict)
    return verdict, best.rule, message
