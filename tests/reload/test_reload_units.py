"""The parts of a safe reload on their own: fingerprints, the settle clock, the manifest, the diff, and
the holder refusing sets that move while it reads them."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from gateway.policy import load_policy_set
from gateway.policy.load import discover
from gateway.reload.diff import diff_sets
from gateway.reload.fileset import Settler, display_path, fingerprint
from gateway.reload.holder import RELOAD_EVENT, PolicyHolder
from gateway.reload.manifest import build_manifest, render_manifest, verify_manifest, write_manifest

ONE = "policy: one\nrules:\n  - id: a\n    action: allow\n"
TWO = "policy: two\nrules:\n  - id: b\n    tools: [x]\n    action: reject\n"


def configmap(root: Path, versions: dict[str, dict[str, str]], current: str) -> None:
    """A Kubernetes ConfigMap mount: ``..<version>`` dirs, ``..data`` -> the current one, files via ``..data``."""
    root.mkdir(parents=True, exist_ok=True)
    for version, files in versions.items():
        (root / version).mkdir()
        for name, text in files.items():
            (root / version / name).write_text(text)
    (root / "..data").symlink_to(current)
    for name in versions[current]:
        (root / name).symlink_to(f"..data/{name}")


def swap(root: Path, version: str) -> None:
    """Point ``..data`` at ``version`` in one rename."""
    tmp = root / f"..data_tmp_{version}"
    tmp.symlink_to(version)
    os.replace(tmp, root / "..data")


# --- discovery and fingerprints --------------------------------------------------------------------


def test_hidden_entries_are_not_policies(tmp_path):
    configmap(tmp_path / "p", {"..v1": {"one.yaml": ONE}}, "..v1")
    (tmp_path / "p" / ".#one.yaml").symlink_to("alice@host.1234")  # an editor's lock file (dangling)
    (tmp_path / "p" / ".one.yaml.tmp").write_text("policy: half")
    files, problems = discover([tmp_path / "p"])
    assert (files, problems) == ([tmp_path / "p" / "one.yaml"], [])
    assert load_policy_set([tmp_path / "p"]).summary()["rules"] == 1


def test_a_configmap_swap_changes_every_stamp_at_once(tmp_path):
    root = tmp_path / "p"
    configmap(root, {"..v1": {"one.yaml": ONE, "two.yaml": TWO}, "..v2": {"one.yaml": ONE, "two.yaml": TWO}},
              "..v1")
    before = fingerprint([root])
    assert [Path(s.path).name for s in before.files] == ["one.yaml", "two.yaml"]
    assert all("..v1" in s.real for s in before.files)
    swap(root, "..v2")
    after = fingerprint([root])
    # same names, same sizes, same text: only where they resolve to tells the swap apart
    assert [s.size for s in after.files] == [s.size for s in before.files]
    assert all("..v2" in s.real for s in after.files) and after != before


def test_fingerprints_see_size_time_inode_and_missing_files(tmp_path):
    (tmp_path / "one.yaml").write_text(ONE)
    first = fingerprint([tmp_path])
    assert fingerprint([tmp_path]) == first
    os.truncate(tmp_path / "one.yaml", 10)
    assert fingerprint([tmp_path]) != first
    (tmp_path / "one.yaml").unlink()
    (tmp_path / "one.yaml").write_text(ONE)  # same text, a new inode
    assert fingerprint([tmp_path]) != first
    gone = fingerprint([tmp_path / "nowhere"])
    assert gone.files == () and gone.missing == (str(tmp_path / "nowhere"),)


def test_the_settler_waits_for_a_quiet_interval_and_starts_over_on_each_change(tmp_path):
    (tmp_path / "one.yaml").write_text(ONE)
    loaded = fingerprint([tmp_path])
    settler = Settler(1.0, loaded)
    assert not settler.ready(loaded, 0.0) and not settler.pending
    (tmp_path / "one.yaml").write_text(ONE + "# edited\n")
    edited = fingerprint([tmp_path])
    assert not settler.ready(edited, 10.0) and settler.pending  # first seen: the clock starts
    assert not settler.ready(edited, 10.9)
    (tmp_path / "one.yaml").write_text(ONE + "# edited again\n")
    again = fingerprint([tmp_path])
    assert not settler.ready(again, 11.0)  # changed again: the clock starts over
    assert not settler.ready(again, 11.9)
    assert settler.ready(again, 12.0)
    settler.done(again)
    assert not settler.ready(again, 20.0) and not settler.pending
    # a change undone before it settled is no change at all
    assert not settler.ready(edited, 21.0) and settler.pending
    assert not settler.ready(again, 30.0) and not settler.pending


def test_display_paths_are_never_absolute(tmp_path):
    base, elsewhere = tmp_path / "cfg", tmp_path / "etc" / "policies"
    roots = [base / "policies", elsewhere]
    assert display_path(str(base / "policies" / "a.yaml"), base, roots) == "policies/a.yaml"
    assert display_path(str(elsewhere / "sub" / "b.yaml"), base, roots) == "policies/sub/b.yaml"
    assert display_path(str(elsewhere), base, roots) == "policies"
    assert display_path("/somewhere/else/c.yaml", base, roots) == "c.yaml"
    assert display_path("relative/d.yaml", base, roots) == "relative/d.yaml"


# --- the manifest ----------------------------------------------------------------------------------


def test_a_manifest_is_deterministic_relative_and_sorted(tmp_path):
    (tmp_path / "p" / "sub").mkdir(parents=True)
    (tmp_path / "p" / "z.yaml").write_text(TWO)
    (tmp_path / "p" / "sub" / "a.yaml").write_text(ONE)
    files, _ = discover([tmp_path / "p"])
    manifest = tmp_path / "p" / "policies.manifest.json"
    text = render_manifest(build_manifest(files, manifest))
    assert text == render_manifest(build_manifest(list(reversed(files)), manifest))
    data = json.loads(text)
    assert list(data) == ["files", "version"] and data["version"] == 1
    assert list(data["files"]) == ["sub/a.yaml", "z.yaml"]
    assert str(tmp_path) not in text and text.endswith("}\n")
    write_manifest(manifest, text)
    assert manifest.read_text() == text and [p.name for p in manifest.parent.iterdir() if p.name.startswith(".")] == []
    assert verify_manifest(manifest, {f: f.read_bytes() for f in files}) == []


@pytest.mark.parametrize("damage, code, message", [
    ("truncate", "manifest-mismatch", "z.yaml does not match its SHA-256 in the manifest"),
    ("delete", "manifest-mismatch", "z.yaml is in the manifest but not among the policy files"),
    ("add", "manifest-mismatch", "extra.yaml is not in the manifest"),
    ("garble", "manifest-invalid", "the manifest is not valid JSON"),
    ("half", "manifest-invalid", "the manifest is not valid JSON"),
    ("digest", "manifest-invalid", "the manifest's 'files' must map relative paths to SHA-256 hex digests"),
    ("version", "manifest-invalid", "the manifest is not a version 1 manifest"),
    ("missing", "manifest-invalid", "cannot read the manifest"),
])
def test_any_difference_from_the_manifest_is_a_mismatch(tmp_path, damage, code, message):
    root = tmp_path / "p"
    root.mkdir()
    (root / "one.yaml").write_text(ONE)
    (root / "z.yaml").write_text(TWO)
    manifest = root / "policies.manifest.json"
    text = render_manifest(build_manifest(discover([root])[0], manifest))
    manifest.write_text(text)
    if damage == "truncate":
        os.truncate(root / "z.yaml", 12)
    elif damage == "delete":
        (root / "z.yaml").unlink()
    elif damage == "add":
        (root / "extra.yaml").write_text(TWO.replace("two", "extra"))
    elif damage == "garble":
        manifest.write_text("{nope")
    elif damage == "half":
        manifest.write_text(text[: len(text) // 2])
    elif damage == "digest":
        manifest.write_text(text.replace('"' + json.loads(text)["files"]["z.yaml"], '"' + "0" * 63 + "X"))
    elif damage == "version":
        manifest.write_text(text.replace('"version": 1', '"version": 2'))
    else:
        manifest.unlink()
    problems = verify_manifest(manifest, {f: f.read_bytes() for f in discover([root])[0]})
    assert [d.code for d in problems] == [code]
    assert problems[0].message.startswith(message)


# --- the diff --------------------------------------------------------------------------------------


def test_the_diff_names_rules_added_removed_and_changed_but_not_moved(tmp_path):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "one.yaml").write_text(ONE + "  - id: c\n    action: reject\n  - id: d\n    action: allow\n")
    (old_dir / "two.yaml").write_text(TWO)
    # in the new set: c changes its action, d moves above a (no change), b's file is gone, e is new
    (new_dir / "one.yaml").write_text("policy: one\nrules:\n  - id: d\n    action: allow\n  - id: a\n"
                                      "    action: allow\n  - id: c\n    action: allow\n  - id: e\n    action: allow\n")
    (new_dir / "three.yaml").write_text("policy: three\nrules: []\n")
    old, new = load_policy_set([old_dir]), load_policy_set([new_dir])
    diff = diff_sets(old, new, lambda f: Path(f).name)
    assert diff == {"old_revision": old.revision, "revision": new.revision, "rules": 4, "rules_added": ["one/e"],
                    "rules_removed": ["two/b"], "rules_changed": ["one/c"], "files_added": ["three.yaml"],
                    "files_removed": ["two.yaml"]}


def test_a_changed_variable_changes_the_rules_that_read_it(tmp_path):
    text = ("policy: one\nvariables:\n  - {{name: limit, expression: '{limit}'}}\n"
            "rules:\n  - id: big\n    when: args.n > variables.limit\n"
            "    action: reject\n  - id: other\n    action: allow\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one.yaml").write_text(text.format(limit=10))
    (tmp_path / "b" / "one.yaml").write_text(text.format(limit=1000))
    diff = diff_sets(load_policy_set([tmp_path / "a"]), load_policy_set([tmp_path / "b"]))
    assert (diff["rules_changed"], diff["rules_added"], diff["rules_removed"]) == (["one/big"], [], [])



def test_a_reload_that_changes_only_labels_or_tallies_names_them(tmp_path):
    text = ("policy: flows\ntallies:\n  - {{id: spent, tools: [pay], sum: '{amount}'}}\n"
            "rules:\n  - id: taint\n    stage: response\n    action: label\n    labels: [{label}]\n")
    versions = (("a", "double(args.amount)", "untrusted"), ("b", "double(args.amount) * 2.0", "secret"))
    for name, amount, label in versions:
        (tmp_path / name).mkdir()
        (tmp_path / name / "flows.yaml").write_text(text.format(amount=amount, label=label))
    diff = diff_sets(load_policy_set([tmp_path / "a"]), load_policy_set([tmp_path / "b"]))
    assert diff["rules_changed"] == ["flows/taint"]
    assert (diff["tallies_changed"], diff["tallies_added"], diff["tallies_removed"]) == (["spent"], [], [])
    same = diff_sets(load_policy_set([tmp_path / "a"]), load_policy_set([tmp_path / "a"]))
    assert same["rules_changed"] == [] and "tallies_changed" not in same


# --- the holder ------------------------------------------------------------------------------------


def test_a_set_read_while_a_configmap_swaps_is_never_loaded_mixed(tmp_path):
    # v1 has rules a and b, v2 has a2 and b2, one in each file: a mix of the two has a with b2, or a2 with b.
    root = tmp_path / "p"
    v1 = {"one.yaml": ONE, "two.yaml": TWO}
    v2 = {"one.yaml": ONE.replace("id: a", "id: a2"), "two.yaml": TWO.replace("id: b", "id: b2")}
    configmap(root, {"..v1": v1, "..v2": v2}, "..v1")
    events: list[dict[str, object]] = []
    holder = PolicyHolder([root], settle=0.01, on_reload=events.append)
    allowed = {frozenset(["one/a", "two/b"]), frozenset(["one/a2", "two/b2"])}
    assert frozenset(r.id for r in holder.current.rules) in allowed
    stop = threading.Event()

    def swapper() -> None:
        version = "..v2"
        while not stop.is_set():
            swap(root, version)
            version = "..v1" if version == "..v2" else "..v2"
            time.sleep(0.0005)

    thread = threading.Thread(target=swapper)
    thread.start()
    seen: set[frozenset[str]] = set()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            holder.reload()
            seen.add(frozenset(r.id for r in holder.current.rules))
    finally:
        stop.set()
        thread.join()
    assert seen <= allowed, f"a mixed set was loaded: {seen - allowed}"
    assert all(e["event"] == RELOAD_EVENT for e in events)
