"""Rules for resource reads and prompt gets, on both CEL engines: which rules decide them, what CEL sees
(``request``, ``resource``, ``prompt``), visibility, and the load-time checks of such rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.diagnostics import Severity
from gateway.policy import PolicySet, Verdict, check_policies
from gateway.policy.call import ItemInfo, Principal, ToolCall, ToolInfo
from gateway.policy.catalog import Catalog, CatalogTool

NOTES = ItemInfo("resource", "gateway://up/notes://secret", "up", "notes://secret", "Secret notes", "", "text/plain")
GREET = ItemInfo("prompt", "up_greet", "up", "greet", "Greeting")

POLICY = """
    policy: p
    rules:
      - id: tools-everywhere
        action: reject
        message: untargeted
        when: principal.id == "mallory"
      - id: tool-glob
        tools: ["*"]
        when: principal.id == "eve"
        action: reject
      - id: secret-notes
        resources: ["gateway://up/notes://*"]
        when: resource.upstream_uri == "notes://secret" && principal.id != "alice"
        action: reject
        message: only alice
      - id: kinds
        tools: [up_echo]
        prompts: ["up_*"]
        when: request.kind == "prompt" && args.name == "Mallory" && prompt.upstream_name == "greet"
        action: reject
        messageExpression: '"no " + request.method + " for " + args.name'
"""


def _item(item: ItemInfo, who: str, args: dict[str, str] | None = None) -> ToolCall:
    return ToolCall(ToolInfo(name=""), args=dict(args or {}), principal=Principal(who), item=item)


def test_reads_are_decided_by_their_own_rules_only(load) -> None:
    ps: PolicySet = load(POLICY)
    assert ps.decide(_item(NOTES, "bob")).decided_by == "p/secret-notes"
    assert ps.decide(_item(NOTES, "bob")).message == "only alice"
    assert ps.decide(_item(NOTES, "alice")).verdict is Verdict.ALLOW
    # The untargeted rule and the tools glob decide tool calls, never reads
    assert ps.decide(_item(NOTES, "mallory")).verdict is Verdict.REJECT  # (mallory is not alice)
    assert ps.decide(_item(GREET, "mallory", {"name": "Ann"})).verdict is Verdict.ALLOW
    assert ps.decide(_item(GREET, "eve", {"name": "Ann"})).verdict is Verdict.ALLOW
    assert ps.decide(ToolCall(ToolInfo("up_echo"), principal=Principal("eve"))).decided_by == "p/tool-glob"
    assert ps.decide(ToolCall(ToolInfo("up_echo"), principal=Principal("mallory"))).decided_by == "p/tools-everywhere"


def test_request_kind_and_prompt_fields_are_what_cel_sees(load) -> None:
    ps: PolicySet = load(POLICY)
    refused = ps.decide(_item(GREET, "alice", {"name": "Mallory"}))
    assert (refused.verdict, refused.message) == (Verdict.REJECT, "no prompts/get for Mallory")
    # The same rule names the tool up_echo: there request.kind is "tool", so it does not fire
    assert ps.decide(ToolCall(ToolInfo("up_echo"), args={"name": "Mallory"})).verdict is Verdict.ALLOW


def test_a_refusal_that_reads_only_the_item_and_principal_hides_it(load) -> None:
    ps: PolicySet = load(POLICY)
    assert not ps.admits_tool(_item(NOTES, "bob"))
    assert ps.admits_tool(_item(NOTES, "alice"))
    assert ps.admits_tool(_item(GREET, "bob"))  # its refusal reads args: it may go either way


def test_default_reject_hides_items_no_rule_admits(load) -> None:
    ps: PolicySet = load("""
        policy: p
        default: reject
        rules:
          - id: greet
            prompts: [up_greet]
            action: allow
    """)
    assert ps.admits_tool(_item(GREET, "bob")) and not ps.admits_tool(_item(NOTES, "bob"))
    d = ps.decide(_item(NOTES, "bob"))
    assert (d.verdict, d.decided_by) == (Verdict.REJECT, "default")


@pytest.mark.parametrize(("rule", "code"), [
    ("resources: ['gateway://x/**']\n    action: approve", "invalid-item-action"),
    ("prompts: [x]\n    action: skip", "invalid-item-action"),
    ("prompts: [x]\n    stage: response\n    action: reject", "invalid-item-action"),
    ("resources: []\n    action: reject", "invalid-value"),
    ("resources: ['gateway://[z-a]']\n    action: reject", "invalid-value"),
    ("resources: ['**']\n    when: resource.urii == 'x'\n    action: reject", "cel-field"),
    ("prompts: ['*']\n    when: request.kind == 1\n    action: reject", "cel-compile"),  # string == int
])
def test_item_rules_are_checked_at_load(tmp_path: Path, engine: str, rule: str, code: str) -> None:
    root = tmp_path / "policies"
    root.mkdir()
    (root / "p.yaml").write_text(f"policy: p\nrules:\n  - id: r\n    {rule}\n", encoding="utf-8")
    policy_set, diagnostics = check_policies([root], engine)
    assert policy_set is None
    assert code in [d.code for d in diagnostics if d.severity is Severity.ERROR]


def test_catalog_checks_leave_resource_and_prompt_rules_alone(tmp_path: Path, engine: str) -> None:
    catalog = Catalog.of([CatalogTool("up_echo", input_schema={"type": "object", "properties": {
        "text": {"type": "string"}}, "required": ["text"]})])
    root = tmp_path / "policies"
    root.mkdir()
    (root / "p.yaml").write_text("""
policy: p
rules:
  - id: all-resources-refused
    resources: ["**"]
    action: reject
  - id: echo-allowed
    tools: [up_echo]
    action: allow
  - id: prompt-args-are-not-echo-args
    prompts: [up_greet]
    when: args.name == "x"
    action: reject
""", encoding="utf-8")
    policy_set, diagnostics = check_policies([root], engine, catalog=catalog)
    assert policy_set is not None
    assert [(d.code, d.rule) for d in diagnostics] == []  # no unknown-tool, rule-shadowed or cel-field
