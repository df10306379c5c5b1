"""Load policy files from paths: discover → parse YAML → validate → compile → one PolicySet.

Nothing here raises on a bad file; problems come back as diagnostics so that `gateway check`
can print all of them, and a reload can keep the last good set.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.core.diagnostics import Diagnostic, Severity
from gateway.core.errors import PolicyLoadError
from gateway.core.limits import MAX_POLICY_FILE_BYTES, MAX_RULES
from gateway.core.sourcemap import YamlDocument, load_yaml
from gateway.core.validation import validate_document
from gateway.policy.catalog import Catalog
from gateway.policy.cel import get_engine
from gateway.policy.compile import CompiledPolicy, compile_policy
from gateway.policy.decision import Verdict
from gateway.policy.model import PolicyFile
from gateway.policy.policyset import PolicySet
from gateway.policy.tallies import tally_rule_id
from gateway.policy.typed_env import TypeEnvironment

__all__ = ["TEST_SUFFIXES", "check_policies", "discover", "load_policy_set", "revision_name"]

TEST_SUFFIXES = ("_test.yaml", "_test.yml")
_YAML = ("*.yaml", "*.yml")


def discover(paths: Iterable[str | Path], *, tests: bool = False) -> tuple[list[Path], list[Diagnostic]]:
    """Policy files (or, with ``tests``, test suites) under ``paths``, in lexical order."""
    found: list[Path] = []
    problems: list[Diagnostic] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = sorted({p for pattern in _YAML for p in path.rglob(pattern) if not _hidden(p, path)},
                                key=lambda p: p.as_posix())
        elif path.is_file():
            candidates = [path]
        else:
            problems.append(Diagnostic("not-found", f"no such file or directory: {path}", str(path),
                                       hint="check the path"))
            continue
        for candidate in candidates:
            is_test = candidate.name.endswith(TEST_SUFFIXES)
            if is_test == tests and candidate not in found:
                found.append(candidate)
    return found, problems


def _hidden(path: Path, root: Path) -> bool:
    """Whether a name below ``root`` starts with a dot: Kubernetes' ``..data`` and ``..2026_…`` copies of a
    ConfigMap, editor lock and swap files, temp files of an atomic write, ``.git``: none is a policy."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read_document(path: Path, raw: bytes | None = None) -> tuple[YamlDocument | None, list[Diagnostic], bytes]:
    """Read (unless its bytes are given) and parse one file, never raising."""
    try:
        raw = path.read_bytes() if raw is None else raw
    except OSError as exc:
        return None, [Diagnostic("unreadable", f"cannot read {path}: {exc.strerror}", str(path))], b""
    if len(raw) > MAX_POLICY_FILE_BYTES:
        return None, [Diagnostic("too-large", f"file is larger than {MAX_POLICY_FILE_BYTES} bytes",
                                 str(path), hint="split it into several files")], raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Diagnostic("encoding", f"file is not UTF-8: {exc.reason}", str(path))], raw
    doc, problems = load_yaml(text, str(path))
    return doc, problems, raw


def check_policies(
    paths: Sequence[str | Path], engine: str = "auto", contents: Mapping[Path, bytes] | None = None, *,
    catalog: Catalog | None = None, env: Mapping[str, Any] | None = None,
    usage_windows: Sequence[str] | None = None,
) -> tuple[PolicySet | None, list[Diagnostic]]:
    """Load and compile; the set is None when any error was found. Warnings come back either way.

    ``contents`` is the set's files and bytes, read by the caller as one snapshot (a reload): then
    nothing is read from disk here, so the set compiled is exactly the set that was checked.
    The typed environment knows more with the tool ``catalog`` (``args`` typed from input schemas),
    the config's ``env`` values and its ``usage_windows`` names; without them those stay dynamic.
    """
    cel = get_engine(engine)
    files, diagnostics = discover(paths)
    if contents is not None:
        files = list(contents)
    if not files and not diagnostics:
        where = ", ".join(str(p) for p in paths) or "."
        diagnostics.append(Diagnostic("no-policies", f"no policy files found in {where}", where,
                                      hint="policy files are *.yaml files that do not end in _test.yaml"))
    names: dict[str, str] = {}
    digest = hashlib.sha256()
    # First every file is read and validated: the typed environment of every rule needs the whole set's tally ids.
    parsed: list[tuple[YamlDocument, PolicyFile, list[int] | None, list[int] | None]] = []
    for path in files:
        doc, problems, raw = read_document(path, None if contents is None else contents[path])
        digest.update(revision_name(path, paths).encode() + b"\0" + raw + b"\0")
        if doc is not None:
            problems = [_with_rule(doc, d) for d in problems]
        diagnostics.extend(problems)
        if doc is None or doc.data is None:
            if doc is not None and doc.data is None:
                # an error, not a warning: a file truncated mid-save must not reload as "no rules"
                diagnostics.append(Diagnostic("empty-file", "the file is empty", str(path),
                                              hint="add a policy, or delete the file"))
            continue
        spec, problems = validate_document(PolicyFile, doc, _rule_of(doc))
        diagnostics.extend(problems)
        rule_indices = tally_indices = None
        if spec is None:
            spec, rule_indices, tally_indices = _valid_parts_only(doc, problems)
            if spec is None:
                continue
        if spec.policy in names:
            pos = doc.position(("policy",))
            diagnostics.append(Diagnostic(
                "duplicate-policy", f"policy name {spec.policy!r} is already used in {names[spec.policy]}",
                str(path), pos.line, pos.column, hint="policy names must be unique across the set"))
            continue
        names[spec.policy] = str(path)
        parsed.append((doc, spec, rule_indices, tally_indices))
    tallies, problems = _tally_kinds(parsed)
    diagnostics.extend(problems)
    types = TypeEnvironment(env, usage_windows, catalog, tallies)
    policies: list[CompiledPolicy] = []
    ordinal = 0
    for doc, spec, rule_indices, tally_indices in parsed:
        compiled, problems = compile_policy(spec, doc, cel, len(policies), ordinal, rule_indices, types,
                                            tally_indices)
        diagnostics.extend(problems)
        ordinal += len(spec.rules)
        policies.append(compiled)
        if not spec.rules and not spec.tallies and not (isinstance(doc.data, dict) and doc.data.get("rules")):
            diagnostics.append(Diagnostic("empty-policy", f"policy {spec.policy!r} has no rules", doc.file,
                                          hint="add rules, or delete the file", severity=Severity.WARNING))
    if ordinal > MAX_RULES:
        diagnostics.append(Diagnostic("too-many-rules", f"{ordinal} rules is more than {MAX_RULES}",
                                      str(paths[0]) if paths else "."))
    diagnostics.sort(key=lambda d: (d.file, d.line, d.column))
    if any(d.severity is Severity.ERROR for d in diagnostics):
        return None, diagnostics
    default = Verdict.REJECT if any(p.default == "reject" for p in policies) else Verdict.ALLOW
    revision = digest.hexdigest()[:16]
    warnings = [d for d in diagnostics if d.severity is Severity.WARNING]
    return PolicySet(cel, tuple(policies), default, revision, tuple(str(f) for f in files), warnings), diagnostics


def revision_name(file: Path, roots: Sequence[str | Path]) -> str:
    """The name a file goes into the revision under: its path below the root it was found in.

    So the same files give the same revision however the roots are spelled (relative, absolute,
    ``./``, through a symlinked directory), and CI's `gateway check` matches `/healthz`.
    """
    for raw in roots:
        root = Path(raw)
        if root == file:
            return file.name
        try:
            return file.relative_to(root).as_posix()
        except ValueError:
            continue
    return file.name


def load_policy_set(paths: Sequence[str | Path], engine: str = "auto") -> PolicySet:
    """Load and compile, raising ``PolicyLoadError`` with every diagnostic if anything is wrong."""
    policy_set, diagnostics = check_policies(paths, engine)
    if policy_set is None:
        raise PolicyLoadError([d for d in diagnostics if d.severity is Severity.ERROR])
    return policy_set


def _tally_kinds(parsed: Sequence[tuple[YamlDocument, PolicyFile, Any, Any]]) -> tuple[dict[str, str],
                                                                                         list[Diagnostic]]:
    """Every tally id of the set with its kind ("sum" or "distinct"), and a ``duplicate-tally`` for each id
    given twice (ids are unique across the set: ``session.tallies.ID`` names one)."""
    kinds: dict[str, str] = {}
    where: dict[str, str] = {}
    problems = []
    for doc, spec, _, tally_indices in parsed:
        indices = tally_indices if tally_indices is not None else range(len(spec.tallies))
        for i, tally in zip(indices, spec.tallies, strict=True):
            if tally.id in kinds:
                pos = doc.position(("tallies", i, "id"))
                problems.append(Diagnostic(
                    "duplicate-tally", f"tally id {tally.id!r} is already used in {where[tally.id]}", doc.file,
                    pos.line, pos.column, tally_rule_id(spec.policy, tally.id),
                    "tally ids must be unique across the set: rename one, or count both tools in one tally"))
                continue
            kinds[tally.id] = "distinct" if tally.distinct is not None and tally.sum is None else "sum"
            where[tally.id] = doc.file
    return kinds, problems


_TRIMMED = ("rules", "variables", "tallies")


def _valid_parts_only(doc: YamlDocument, problems: list[Diagnostic]) -> tuple[PolicyFile | None, list[int],
                                                                                 list[int]]:
    """The file without the parts that failed validation, so the rest still gets compiled and
    every problem is reported in one run: bad rules, variables and tallies are left out, a bad top-level
    key falls back to its default. Nothing of this is ever loaded (the file has errors). Also the indices
    in the file of the rules and of the tallies kept."""
    data = doc.data
    if not isinstance(data, dict):
        return None, [], []
    bad: dict[str, set[int]] = {key: set() for key in _TRIMMED}
    trimmed = dict(data)
    for d in problems:
        path = _path_at(doc, d)
        if not path:
            return None, [], []
        head = path[0]
        if head in _TRIMMED and len(path) >= 2 and isinstance(path[1], int):
            bad[str(head)].add(path[1])
        elif head == "policy":
            return None, [], []
        else:
            trimmed.pop(head, None)
    keep: dict[str, list[int]] = {}
    for key in _TRIMMED:
        found = data.get(key)
        items: list[Any] = found if isinstance(found, list) else []
        keep[key] = [i for i in range(len(items)) if i not in bad[key]]
        if isinstance(found, list) or key == "rules":
            trimmed[key] = [items[i] for i in keep[key]]
    try:
        return PolicyFile.model_validate(trimmed), keep["rules"], keep["tallies"]
    except ValueError:
        return None, [], []


def _with_rule(doc: YamlDocument, d: Diagnostic) -> Diagnostic:
    """A YAML-level diagnostic (a duplicate key) with the rule it sits in, when it sits in one."""
    if d.rule is not None or not isinstance(doc.data, dict):
        return d
    path = _path_at(doc, d)
    rule = _rule_of(doc)(path) if path else None
    return dataclasses.replace(d, rule=rule) if rule else d


def _path_at(doc: YamlDocument, d: Diagnostic) -> tuple[str | int, ...] | None:
    # The diagnostic knows its position, not its path; find the deepest path at that position.
    best = None
    for table in (doc.positions, doc.key_positions):
        for path, pos in table.items():
            if (pos.line, pos.column) == (d.line, d.column) and (best is None or len(path) > len(best)):
                best = path
    return best


def _rule_of(doc: YamlDocument):  # type: ignore[no-untyped-def]
    def rule_of(loc: tuple[str | int, ...]) -> str | None:
        if len(loc) >= 2 and loc[0] in ("rules", "tallies") and isinstance(loc[1], int) and isinstance(doc.data, dict):
            items = doc.data.get(str(loc[0]))
            if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
                policy = doc.data.get("policy", "?")
                name = f"{policy}/{items[loc[1]].get('id', f'#{loc[1] + 1}')}"
                return name if loc[0] == "rules" else f"tally {name}"
        return None
    return rule_of
