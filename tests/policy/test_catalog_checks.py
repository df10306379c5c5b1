"""Policies checked against the tool catalog: the mistakes that load cleanly but silently change
enforcement (a tool pattern nothing matches, a rule that can never fire, an argument no tool has)
are reported at the offending spot, with a did-you-mean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.diagnostics import Severity
from gateway.policy import check_policies
from gateway.policy.catalog import Catalog, CatalogTool
from gateway.policy.catalog_checks import check_against_catalog
from gateway.policy.cel import get_engine

Found = tuple[str, int, int, str | None, str, str | None]  # (code, line, column, rule, severity, hint)


def _object(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


CLOSED = {"additionalProperties": False}
CATALOG = Catalog.of([
    CatalogTool("github_list_issues", "github", input_schema=_object({"repo": {"type": "string"}}, **CLOSED)),
    CatalogTool("github_list_pulls", "github", input_schema=_object({"repo": {"type": "string"}}, **CLOSED)),
    CatalogTool("github_create_branch", "github", input_schema=_object(
        {"repo": {"type": "string"}, "branch": {"type": "string"}, "from": {"type": "string"}}, **CLOSED)),
    CatalogTool("github_create_issue", "github", input_schema={
        "type": "object", "additionalProperties": False, "$defs": {"Body": _object({"title": {}, "body": {}})},
        "allOf": [{"$ref": "#/$defs/Body"}, _object({"repo": {}})]}),
    CatalogTool("slack_post", "slack", input_schema=_object({"channel": {}, "text": {}})),  # open by default
    CatalogTool("shell_run", "shell", input_schema={"type": "object"}),  # any argument
])


@pytest.fixture
def findings(write, engine):
    """``findings(policy_text)`` → [(code, line, column, rule, severity, hint)] for policy.yaml."""
    def _findings(text: str, catalog: Catalog | None = CATALOG) -> list[Found]:
        path = write("policies/policy.yaml", text)
        policy_set, problems = check_policies([path.parent], engine)
        assert policy_set is not None, [d.format() for d in problems]  # each of these mistakes loads cleanly
        return [(d.code, d.line, d.column, d.rule, str(d.severity), d.hint)
                for d in check_against_catalog([path.parent], catalog, get_engine(engine))]
    return _findings


# --- tools: patterns that match no tool ----------------------------------------------------------


def test_a_misspelled_glob_is_an_error_at_the_pattern_with_a_did_you_mean(findings):
    assert findings("""
        policy: gh
        rules:
          - id: read
            tools: [github_lsit_*]
            action: allow
        """) == [("unknown-tool", 4, 13, "gh/read", "error", "did you mean 'github_list_*'?")]


def test_an_unclosed_bracket_is_a_literal_that_no_tool_name_has(findings, write, engine):
    found = findings("""
        policy: gh
        rules:
          - id: read
            tools: [slack_post, "github_list_[*"]
            action: allow
        """)
    assert found == [("unknown-tool", 4, 25, "gh/read", "error", "did you mean 'github_list_*'?")]
    [d] = check_against_catalog([write("policies/policy.yaml", "policy: gh\nrules:\n  - id: read\n"
                                       "    tools: ['github_list_[*']\n    action: allow\n").parent],
                                CATALOG, get_engine(engine))
    assert d.message == ("no tool matches 'github_list_[*' (its '[' is never closed, so it is a literal '[',"
                         " which no tool name has); the rule never applies")


def test_a_misspelled_name_gets_the_closest_names(findings):
    assert findings("""
        policy: gh
        rules:
          - id: branch
            tools: [github_create_brnch, github_list_issues]
            action: reject
        """) == [("unknown-tool", 4, 13, "gh/branch", "error", "did you mean 'github_create_branch'?")]


def test_nothing_close_says_where_the_names_are(findings):
    [(code, *_, hint)] = findings("policy: p\nrules:\n  - id: r\n    tools: [payments_*]\n    action: allow\n")
    assert code == "unknown-tool"
    assert hint == "none of the 6 tools in the catalog is close; `gateway tools` lists them"


def test_patterns_that_match_are_not_reported(findings):
    assert findings("""
        policy: gh
        rules:
          - id: all-github
            tools: ["github_*", "github_list_[ip]*", "github_create_issue", "**"]
            action: allow
          - id: everything
            action: allow
        """) == []


def test_a_malformed_glob_stays_a_load_error_and_is_not_reported_twice(write, engine):
    path = write("policies/policy.yaml", "policy: p\nrules:\n  - id: r\n    tools: ['github_[z-a]*']\n"
                                         "    action: allow\n")
    policy_set, problems = check_policies([path.parent], engine)
    assert policy_set is None
    assert [(d.code, d.line, d.column) for d in problems] == [("invalid-value", 4, 13)]
    assert "invalid glob pattern 'github_[z-a]*'" in problems[0].message
    assert check_against_catalog([path.parent], CATALOG, get_engine(engine)) == []


# --- rules that can never fire --------------------------------------------------------------------


@pytest.mark.parametrize("when", ["'false'", "1 > 2", "|\n      // off for now\n      false", "'\"a\" == \"b\"'",
                                  "'size([1, 2]) == 3 && true'"])
def test_a_when_that_reads_nothing_and_is_false_never_fires(findings, when):
    [found] = findings(f"policy: p\nrules:\n  - id: r\n    when: {when}\n    action: reject\n", catalog=None)
    assert found[:5] == ("rule-never-fires", 4, 11, "p/r", "warning")


@pytest.mark.parametrize("when", ["'true'", "args.x == 1", "'[1].exists(a, a > 5) || tool.name == \"x\"'",
                                  "size(args) > 100", "'[1].exists(args, args > 5)'"])
def test_a_when_that_can_be_true_is_not_reported(findings, when):
    assert findings(f"policy: p\nrules:\n  - id: r\n    when: {when}\n    action: reject\n", catalog=None) == []


# --- arguments no covered tool has ----------------------------------------------------------------


def test_a_misspelled_argument_of_closed_schemas_is_an_error_with_a_did_you_mean(findings):
    assert findings("""
        policy: gh
        rules:
          - id: protect-main
            tools: [github_create_branch]
            when: args.brnach == "main"
            action: reject
        """) == [("unknown-argument", 5, 16, "gh/protect-main", "error", "did you mean args.branch?")]


def test_references_come_from_the_parse_not_from_text(findings):
    # an apostrophe in a comment, a string that looks like a reference, a macro variable called args
    assert findings("""
        policy: gh
        rules:
          - id: protect-main
            tools: [github_create_branch]
            when: |
              // don't let anyone write "args.nope" here
              ["main"].exists(args, args == "x") || args["brnach"] == "main" || has(args.form)
            action: reject
        """) == [("unknown-argument", 7, 51, "gh/protect-main", "error", "did you mean args.branch?"),
                 ("unknown-argument", 7, 82, "gh/protect-main", "error", "did you mean args.from?")]


def test_an_argument_read_through_a_variable_is_reported_in_the_variable(findings):
    assert findings("""
        policy: gh
        variables:
          - name: target
            expression: original_args.branh
        rules:
          - id: protect-main
            tools: [github_create_branch]
            when: variables.target == "main"
            action: reject
          - id: log-main
            tools: [github_create_*]
            when: variables.target == "main"
            action: allow
        """) == [("unknown-argument", 4, 31, "gh/protect-main", "error", "did you mean original_args.branch?")]


def test_every_covered_tool_counts_and_refs_follow_the_schema(findings):
    # repo is on every tool; title only on github_create_issue, whose schema is built with $ref and allOf
    assert findings("""
        policy: gh
        rules:
          - id: r
            tools: ["github_*"]
            when: args.repo == "x" && args.title == "y" && args.nothing == 1
            action: reject
        """) == [("unknown-argument", 5, 57, "gh/r", "error",
                  "the arguments are: body, branch, from, repo, title")]


def test_a_plain_read_is_an_error_even_where_the_schema_does_not_forbid_other_arguments(findings):
    # the read fails on every call without the argument: the rule errors, and on_error decides
    [found] = findings("policy: p\nrules:\n  - id: r\n    tools: [slack_post]\n    when: args.chanel == 'x'\n"
                       "    action: reject\n")
    assert found == ("unknown-argument", 5, 16, "p/r", "error", "did you mean args.channel?")


def test_a_read_guarded_by_has_where_other_arguments_may_come_is_a_warning(findings):
    assert findings("policy: p\nrules:\n  - id: r\n    tools: [slack_post]\n"
                    "    when: has(args.chanel) && args.chanel == 'x'\n    action: reject\n") == [
        ("unknown-argument", 5, 20, "p/r", "warning", "did you mean args.channel?"),
        ("unknown-argument", 5, 36, "p/r", "warning", "did you mean args.channel?")]
    # closed schemas: the guard is always false, so it is an error still
    assert [f[4] for f in findings("policy: p\nrules:\n  - id: r\n    tools: [github_list_*]\n"
                                   "    when: has(args.rpo)\n    action: reject\n")] == ["error"]


def test_a_tool_that_takes_any_argument_is_never_reported(findings):
    assert findings("policy: p\nrules:\n  - id: r\n    tools: [shell_run, slack_post]\n    when: args.cmd == 'x'\n"
                    "    action: reject\n") == []
    assert findings("policy: p\nrules:\n  - id: r\n    when: args.cmd == 'x'\n    action: reject\n") == []


def test_rewrite_and_message_expressions_are_checked_too(findings):
    assert [f[:3] for f in findings("""
        policy: p
        rules:
          - id: r
            tools: [github_create_issue]
            action: rewrite
            messageExpression: '"for " + args.repository'
            rewrite:
              set: {title: 'args.tilte + "!"'}
        """)] == [("unknown-argument", 6, 39), ("unknown-argument", 8, 26)]


def test_diagnostics_point_into_the_file(findings, tmp_path: Path):
    [found] = findings("policy: p\nrules:\n  - id: r\n    tools: [slack_post]\n    when: args.chanel == 'x'\n"
                       "    action: reject\n")
    line = (tmp_path / "policies" / "policy.yaml").read_text().splitlines()[found[1] - 1]
    assert line[found[2] - 1:].startswith("chanel")
    assert Severity(found[4]) is Severity.ERROR


# --- rules that a stricter unconditional rule always outweighs ------------------------------------


SHADOWS = """
    policy: gh
    rules:
      - id: no-branches
        tools: [github_create_*]
        action: reject
      - id: allow-branch
        tools: [github_create_branch]
        action: allow
      - id: approve-branch
        tools: [github_create_branch]
        when: args.branch == "main"
        action: approve
      - id: allow-github
        tools: ["github_*"]
        action: allow
      - id: terminate-in-audit
        tools: [github_create_branch]
        action: terminate
        mode: audit
"""


def test_a_rule_an_unconditional_stricter_rule_always_outweighs_is_reported(findings):
    assert [f[:5] for f in findings(SHADOWS)] == [
        ("rule-shadowed", 6, 5, "gh/allow-branch", "warning"),
        ("rule-shadowed", 9, 5, "gh/approve-branch", "warning"),
    ]


def test_a_rule_whose_failure_would_be_stricter_is_not_shadowed(findings):
    # when its 'when' fails, approve-branch rejects (on_error: deny), which outweighs the skip
    assert findings("""
        policy: gh
        rules:
          - id: skip-creates
            tools: [github_create_*]
            action: skip
          - id: approve-branch
            tools: [github_create_branch]
            when: args.branch == "main"
            action: approve
          - id: allow-branch
            tools: [github_create_branch]
            action: allow
        """) == [("rule-shadowed", 10, 5, "gh/allow-branch", "warning",
                  "narrow gh/skip-creates with 'when' or 'tools', or remove this rule")]


def test_without_a_catalog_only_a_rule_for_every_tool_is_known_to_shadow(findings):
    assert findings(SHADOWS, catalog=None) == []
    found = findings("policy: p\nrules:\n  - id: stop\n    action: terminate\n  - id: go\n    tools: [x]\n"
                     "    action: reject\n  - id: later\n    stage: response\n    action: reject\n", catalog=None)
    assert [f[:4] for f in found] == [("rule-shadowed", 5, 5, "p/go")]


# --- tallies (issue 21) ----------------------------------------------------------------------------


def test_a_tally_whose_tools_match_nothing_is_an_error_at_the_pattern(findings):
    assert findings("""
        policy: gh
        tallies:
          - id: branches
            tools: [github_create_brnch, github_create_issue]
            distinct: '"x"'
          - id: gone
            tools: [jira_*]
            sum: '1'
        """) == [
        ("unknown-tool", 4, 13, "tally gh/branches", "error", "did you mean 'github_create_branch'?"),
        ("unknown-tool", 7, 13, "tally gh/gone", "error",
         "none of the 6 tools in the catalog is close; `gateway tools` lists them")]


def test_a_tally_that_counts_known_tools_is_fine(findings):
    assert findings("""
        policy: gh
        tallies:
          - id: branches
            tools: [github_*]
            distinct: '"x"'
        """) == []


def test_a_labels_expression_reading_an_argument_no_tool_has_is_reported(findings):
    found = findings("""
        policy: gh
        rules:
          - id: tag
            tools: [github_list_issues]
            action: label
            labelsExpression: '[args.rpo]'
        """)
    assert [(code, line, rule, severity) for code, line, _, rule, severity, _ in found] == [
        ("unknown-argument", 6, "gh/tag", "error")]
