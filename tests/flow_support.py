"""The run-aware ("flows") policies of issue 21 and the tools they name, for every test that exercises them.

A test builds its policy from these parts (each a rule or tally as a YAML mapping) with ``policy``, so the
transfer tally, the spend cap, the untrusted-content label and the egress-after-untrusted approval read the
same everywhere, and a test says only what its own policy changes (a tool pattern, a cap, the approvers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

Json = dict[str, Any]

TRANSFER = "payments_transfer"
SPEND_CAP = "This run may move at most 1000 USD."
UNTRUSTED_EGRESS = "This run read untrusted content; sending data out needs a person."
AFTER_UNTRUSTED = '"untrusted" in session.labels'
# Egress by its annotations: a tool that reaches the world and is not read-only (the rule).
EGRESS_AFTER_UNTRUSTED = f"{AFTER_UNTRUSTED} && tool.annotations.openWorldHint && !tool.annotations.readOnlyHint"


def policy(name: str, *, tallies: Iterable[Json] = (), rules: Iterable[Json] = ()) -> str:
    """A policy file's text: its name, its tallies and its rules, in order."""
    document: Json = {"policy": name}
    if tallies := list(tallies):
        document["tallies"] = tallies
    document["rules"] = list(rules)
    return yaml.dump(document, Dumper=_Indented, sort_keys=False, width=1000)


class _Indented(yaml.SafeDumper):
    """Lists indented under their key (``tallies:\n  - id: ...``), as the policies in docs/ are written."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _present(**fields: Any) -> Json:
    """``fields`` without the ones left out (None)."""
    return {k: v for k, v in fields.items() if v is not None}


def sum_tally(id: str = "transferred", tools: Sequence[str] = (TRANSFER,), expression: str = "double(args.amount)",
              description: str | None = None) -> Json:
    """A sum tally: by default the money the run's transfers move."""
    return _present(id=id, description=description, tools=list(tools), sum=expression)


def distinct_tally(id: str = "recipients", tools: Sequence[str] = ("mail_*",), expression: str = "args.to") -> Json:
    """A distinct tally: by default the people the run's mails go to."""
    return {"id": id, "tools": list(tools), "distinct": expression}


def label_rule(id: str = "web-content-is-untrusted", tools: Sequence[str] = ("web_*",),
               labels: Sequence[str] = ("untrusted",)) -> Json:
    """A response-stage rule that labels the run when these tools' results come back."""
    return {"id": id, "tools": list(tools), "stage": "response", "action": "label", "labels": list(labels)}


def cap_rule(cap: float = 1000.0, *, id: str = "spend-cap", tally: str = "transferred",
             tools: Sequence[str] = (TRANSFER,), window: str | None = None, message: str | None = SPEND_CAP) -> Json:
    """Reject the transfer that would take the run's total (or a usage ``window``'s) past ``cap``."""
    reads = f"usage.{window}" if window else "session"
    return _present(id=id, tools=list(tools), when=f"{reads}.tallies.{tally} + double(args.amount) > {float(cap)}",
                    action="reject", message=message)


def recipient_cap_rule(cap: int = 3, *, id: str = "recipient-cap", tools: Sequence[str] = ("mail_*",),
                       message: str | None = None) -> Json:
    """Reject a mail to a new person once the run has written to ``cap`` different people."""
    return _present(id=id, tools=list(tools),
                    when=f"session.tallies.recipients >= {cap} && !(args.to in session.seen.recipients)",
                    action="reject", message=message)


def approve_rule(id: str, when: str | None, *, tools: Sequence[str] | None = None, message: str | None = None,
                 approval: Mapping[str, Any] | None = None) -> Json:
    """A call these tools make (when ``when`` holds) needs a person."""
    return _present(id=id, tools=list(tools) if tools is not None else None, when=when, action="approve",
                    message=message, approval=dict(approval) if approval is not None else None)


def egress_rule(id: str = "egress-after-untrusted", *, tools: Sequence[str] | None = ("mail_send",),
                when: str = AFTER_UNTRUSTED, message: str | None = UNTRUSTED_EGRESS,
                approval: Mapping[str, Any] | None = None) -> Json:
    """Sending data out after the run read untrusted content needs a person."""
    return approve_rule(id, when, tools=tools, message=message, approval=approval)


def function_tools(*names: str, **properties: Mapping[str, str | Json]) -> list[Json]:
    """Tools as a model API declares them (``{"type": "function", ...}``), each an object of the ``properties``
    given for it (see ``object_schema``), else of anything."""
    return [{"type": "function", "function": {"name": name, "parameters": object_schema(**properties.get(name, {}))}}
            for name in names]


def object_schema(**properties: str | Json) -> Json:
    """An input schema: an object of these properties (name to a JSON type, or to its schema), or of anything."""
    if not properties:
        return {"type": "object"}
    return {"type": "object", "properties": {k: v if isinstance(v, dict) else {"type": v}
                                             for k, v in properties.items()}}
