"""A policy reload never loads a half-written set (issue 7, item 4), against the real gateway.

Each test holds creating items behind an approval (``api_create_item`` → 202), damages the policy
files the way an unlucky operator or a deploy would, and calls the tool in the gap: the call must
still be held (the old set governs) and never reach the upstream. The gateway polls every 0.05 s, so
a watcher without a settle interval would load the damaged set within a poll or two of the damage;
each gap lasts several polls and stays well inside the settle interval.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.app import build_gateway
from gateway.cli import main as gateway_cli
from gateway.core.errors import PolicyLoadError

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

POLL = 0.05
SETTLE = 2.0  # long against the gaps below (~0.4 s), so a busy machine does not let a damaged set settle
GAP = 0.4  # eight polls: a watcher that does not settle loads the damaged set well within this
# The two tests whose damaged set must never settle need the whole damage done within the settle interval: they
# settle for longer, so a machine under load (other CPU-bound processes) cannot stretch the damage past it.
LONG_SETTLE = 5.0

ALLOWS = """\
policy: guard
rules:
  - id: reading-is-fine
    tools: [api_get_item]
    action: allow
  - id: searching-is-fine
    tools: [api_search]
    action: allow
"""

APPROVE_CREATE = """\
  - id: creating-needs-approval
    tools: [api_create_item]
    action: approve
    message: Creating items needs an admin.
    approval: {approvers: ["group:admins"]}
"""

GUARD = ALLOWS + APPROVE_CREATE  # 13 lines; its first 8 are a valid policy that approves nothing

APPROVALS = "policy: approvals\nrules:\n" + APPROVE_CREATE

EXTRA = """\
  - id: deleting-is-refused
    tools: [api_delete_item]
    action: reject
    message: No deleting.
"""


def reload_config(configs: Any, http_api: Any, **reload: Any) -> dict[str, Any]:
    """A gateway on the HTTP API that polls every POLL seconds and settles for SETTLE (or ``reload``)."""
    return configs.base(configs.http_upstream("api", http_api.url), reload_interval=POLL,
                        reload={"settle": SETTLE, **reload})


def reload_events(gateway: Any, applied: bool | None = True) -> list[dict[str, Any]]:
    """The `policy.reload` audit events (only applied ones, refused ones, or with None both)."""
    return [e for e in gateway.audit_events() if e.get("event") == "policy.reload"
            and (applied is None or e["applied"] is applied)]


class Guarded:
    """Calls ``api_create_item`` as alice and checks that each is held, never run."""

    def __init__(self, client: Any, rest_call: Any, http_api: Any) -> None:
        self.client, self.rest_call, self.http_api = client, rest_call, http_api
        self.markers: list[str] = []

    async def held(self) -> dict[str, Any]:
        """One call; it must wait for approval and the upstream must not have seen it."""
        marker = f"guarded-{uuid.uuid4().hex}"
        self.markers.append(marker)
        body = await self.rest_call(self.client, "api_create_item", {"name": marker})
        assert body["_status"] == 202, f"the call was not held for approval: {body}"
        return body

    async def held_throughout(self, seconds: float) -> int:
        """Call repeatedly for ``seconds``; every call must be held. Returns how many were made."""
        deadline = time.monotonic() + seconds
        count = 0
        while time.monotonic() < deadline:
            await self.held()
            count += 1
        return count

    def none_ran(self) -> bool:
        """No guarded call reached the upstream."""
        return not any(self.http_api.seen(m) for m in self.markers)

    async def runs(self) -> bool:
        """A call now runs without approval (the upstream answers 201)."""
        body = await self.rest_call(self.client, "api_create_item", {"name": f"free-{uuid.uuid4().hex}"})
        return body["_status"] == 200 and not body["is_error"]


async def status(client: Any) -> dict[str, Any]:
    """`GET /v1/policies`."""
    response = await client.get("/v1/policies")
    assert response.status_code == 200
    data: dict[str, Any] = response.json()
    return data


async def revision_becomes(client: Any, until: Any, old: str) -> dict[str, Any]:
    """Wait until a revision other than ``old`` is in force; returns the status."""
    async def changed() -> dict[str, Any] | None:
        now = await status(client)
        return now if now["revision"] != old else None

    result: dict[str, Any] = await until(changed, timeout=SETTLE * 8)
    return result


async def test_a_file_truncated_to_a_valid_prefix_is_never_loaded(start_gateway, configs, http_api, rest, rest_call,
                                                                 until):
    gateway = await start_gateway(reload_config(configs, http_api, settle=LONG_SETTLE), {"guard.yaml": GUARD})
    client = rest(gateway)
    guarded = Guarded(client, rest_call, http_api)
    before = await status(client)
    await guarded.held()
    path = gateway.root / "policies" / "guard.yaml"

    prefix = "".join(GUARD.splitlines(keepends=True)[:8])  # policy + two allow rules: valid, approves nothing
    started = time.monotonic()
    os.truncate(path, len(prefix.encode()))
    made = await guarded.held_throughout(GAP)
    with path.open("a", encoding="utf-8") as f:  # the save completes, with one rule more than before
        f.write(GUARD[len(prefix):] + EXTRA)
    assert time.monotonic() - started < LONG_SETTLE, "the machine stalled longer than the settle interval"

    after = await revision_becomes(client, until, before["revision"])
    assert (after["rules"], after["errors"]) == (before["rules"] + 1, [])
    await guarded.held()
    assert made >= 3 and guarded.none_ran()
    [event] = reload_events(gateway)  # one reload: from the whole old file to the whole new one
    assert (event["old_revision"], event["revision"]) == (before["revision"], after["revision"])
    assert (event["rules_added"], event["rules_removed"], event["rules_changed"]) == (
        ["guard/deleting-is-refused"], [], [])
    assert reload_events(gateway, applied=False) == []


async def test_a_two_step_rewrite_loads_only_the_final_set(start_gateway, configs, http_api, rest, rest_call, until,
                                                         caplog):
    # The approval rule moves to its own file: first it leaves guard.yaml, then approvals.yaml appears.
    gateway = await start_gateway(reload_config(configs, http_api, settle=LONG_SETTLE), {"guard.yaml": GUARD})
    client = rest(gateway)
    guarded = Guarded(client, rest_call, http_api)
    before = await status(client)
    policies = gateway.root / "policies"

    started = time.monotonic()
    (policies / "guard.yaml").write_text(ALLOWS)  # step A: for now, nothing approves creating
    made = await guarded.held_throughout(GAP)  # the old set still governs the gap
    (policies / "approvals.yaml").write_text(APPROVALS)  # step B
    assert time.monotonic() - started < LONG_SETTLE, "the machine stalled longer than the settle interval"

    after = await revision_becomes(client, until, before["revision"])
    assert after["files"] == ["policies/approvals.yaml", "policies/guard.yaml"]
    await guarded.held()  # and the final set governs now
    assert made >= 3 and guarded.none_ran()
    [event] = reload_events(gateway)
    assert (event["old_revision"], event["revision"]) == (before["revision"], after["revision"])
    assert event["rules_added"] == ["approvals/creating-needs-approval"]
    assert event["rules_removed"] == ["guard/creating-needs-approval"]
    assert (event["files_added"], event["files_removed"]) == (["policies/approvals.yaml"], [])
    # it removed a rule: a warning, naming it
    assert any(r.levelno == logging.WARNING and "guard/creating-needs-approval" in r.getMessage()
               for r in caplog.records if r.name == "gateway.reload")


async def test_a_deleted_file_is_dropped_only_after_it_stays_deleted_with_a_warning_and_an_audit_event(
        start_gateway, configs, http_api, rest, rest_call, until, caplog):
    gateway = await start_gateway(reload_config(configs, http_api), {"guard.yaml": ALLOWS, "approvals.yaml": APPROVALS})
    client = rest(gateway)
    guarded = Guarded(client, rest_call, http_api)
    before = await status(client)
    approvals = gateway.root / "policies" / "approvals.yaml"

    # deleted and written back within the settle interval (an editor's save by delete + create): no change
    approvals.unlink()
    await guarded.held_throughout(GAP)
    approvals.write_text(APPROVALS)
    await guarded.held_throughout(SETTLE + 4 * POLL)
    assert (await status(client))["revision"] == before["revision"]

    # deleted for good: after the settle interval its rules go, loudly
    approvals.unlink()
    await guarded.held_throughout(GAP)
    after = await revision_becomes(client, until, before["revision"])
    assert guarded.none_ran()
    assert after["files"] == ["policies/guard.yaml"]
    assert await guarded.runs()
    [event] = reload_events(gateway)
    assert (event["files_removed"], event["rules_removed"]) == (["policies/approvals.yaml"],
                                                                ["approvals/creating-needs-approval"])
    warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.reload" and r.levelno == logging.WARNING]
    assert any("policies/approvals.yaml" in m and "approvals/creating-needs-approval" in m for m in warnings)


def configmap_version(policies: Path, name: str, files: dict[str, str]) -> Path:
    """A ``..<timestamp>`` directory as the kubelet writes it."""
    version = policies / name
    version.mkdir(parents=True)
    for file, text in files.items():
        (version / file).write_text(text)
    return version


def configmap_swap(policies: Path, version: Path) -> None:
    """Point ``..data`` at ``version`` atomically (a new symlink renamed over the old), as the kubelet does."""
    tmp = policies / "..data_tmp"
    tmp.symlink_to(version.name)
    os.replace(tmp, policies / "..data")


async def test_a_kubernetes_configmap_swap_is_one_change(start_gateway, configs, http_api, rest, rest_call, until,
                                                          tmp_path):
    # v1: approvals.yaml holds the approval rule. v2 moves it into guard.yaml. Old guard.yaml with new
    # approvals.yaml would approve nothing, so a mix of the two versions must never load.
    root = tmp_path / "k8s"
    policies = root / "policies"
    v1 = configmap_version(policies, "..2026_11_30_10_00_00.000000001", {"guard.yaml": ALLOWS,
                                                                         "approvals.yaml": APPROVALS})
    (policies / "..data").symlink_to(v1.name)
    for name in ("guard.yaml", "approvals.yaml"):
        (policies / name).symlink_to(f"..data/{name}")
    gateway = await start_gateway(reload_config(configs, http_api), {}, root=root)
    client = rest(gateway)
    guarded = Guarded(client, rest_call, http_api)
    before = await status(client)
    assert before["files"] == ["policies/approvals.yaml", "policies/guard.yaml"]  # the .. copies are not policies
    await guarded.held()

    v2 = configmap_version(policies, "..2026_11_30_10_05_00.000000002", {
        "guard.yaml": GUARD, "approvals.yaml": "policy: approvals\nrules:\n" + EXTRA})
    configmap_swap(policies, v2)
    for file in v1.iterdir():  # the kubelet then removes the old version
        file.unlink()
    v1.rmdir()
    await guarded.held_throughout(GAP)

    after = await revision_becomes(client, until, before["revision"])
    assert (after["files"], after["errors"]) == (["policies/approvals.yaml", "policies/guard.yaml"], [])
    await guarded.held()
    assert guarded.none_ran()
    [event] = reload_events(gateway)
    assert (event["rules_added"], event["rules_removed"]) == (
        ["approvals/deleting-is-refused", "guard/creating-needs-approval"], ["approvals/creating-needs-approval"])
    assert (event["files_added"], event["files_removed"]) == ([], [])
    assert not any(".." in f for f in after["files"])


def write_manifest(config_file: Path) -> None:
    """`gateway check --config gateway.yaml --write-manifest` (to the config's reload.manifest)."""
    assert gateway_cli(["check", "--config", str(config_file), "--write-manifest"]) == 0


async def test_a_set_that_does_not_match_the_manifest_is_not_loaded(start_gateway, configs, http_api, rest,
                                                                    rest_call, until, tmp_path):
    root = tmp_path / "signed"
    manifest = "policies/policies.manifest.json"
    config = reload_config(configs, http_api, settle=0.3, manifest=manifest)
    config_file = configs.write(root, config, {"guard.yaml": ALLOWS, "approvals.yaml": APPROVALS})
    write_manifest(config_file)
    gateway = await start_gateway(config, {}, root=root)
    client = rest(gateway)
    guarded = Guarded(client, rest_call, http_api)
    before = await status(client)
    assert before["manifest"] == manifest
    policies = root / "policies"

    # a deleted file is a mismatch: the last good set stays, and the reason is shown
    (policies / "approvals.yaml").unlink()

    async def errors() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await status(client))["errors"]
        return found

    [error] = await until(errors, timeout=10)
    assert (error["code"], error["file"]) == ("manifest-mismatch", manifest)
    assert "approvals.yaml is in the manifest but not among the policy files" in error["message"]
    assert (await status(client))["revision"] == before["revision"]
    await guarded.held()

    # a file written after the manifest (here, the deleted file back, truncated) is a mismatch too
    (policies / "approvals.yaml").write_text(APPROVALS.splitlines(keepends=True)[0] + "rules: []\n")

    async def differs() -> list[dict[str, Any]]:
        return [e for e in await errors() if e["file"] == "policies/approvals.yaml"]

    [error] = await until(differs, timeout=10)
    assert error["message"] == "approvals.yaml does not match its SHA-256 in the manifest"
    await guarded.held()
    assert guarded.none_ran()
    refused = reload_events(gateway, applied=False)
    assert refused and all(e["revision"] == before["revision"] for e in refused)
    assert reload_events(gateway) == []

    # writing the manifest last is the deploy: now the set loads
    write_manifest(config_file)
    after = await revision_becomes(client, until, before["revision"])
    assert after["errors"] == []
    assert await guarded.runs()
    [event] = reload_events(gateway)
    assert event["rules_removed"] == ["approvals/creating-needs-approval"]


def test_the_gateway_refuses_to_start_when_the_manifest_does_not_match(configs, tmp_path):
    config = configs.base(reload={"manifest": "policies.manifest.json"})
    config_file = configs.write(tmp_path, config, {"guard.yaml": GUARD})
    with pytest.raises(PolicyLoadError) as missing:
        build_gateway(configs.load(config_file))
    assert [d.code for d in missing.value.diagnostics] == ["manifest-invalid"]
    assert "cannot read the manifest" in str(missing.value)

    write_manifest(config_file)
    (tmp_path / "policies" / "guard.yaml").write_text(ALLOWS)  # truncated after the manifest was written
    with pytest.raises(PolicyLoadError) as mismatch:
        build_gateway(configs.load(config_file))
    assert [(d.code, d.message) for d in mismatch.value.diagnostics] == [
        ("manifest-mismatch", "policies/guard.yaml does not match its SHA-256 in the manifest")]

    (tmp_path / "policies" / "guard.yaml").write_text(GUARD)  # the reviewed file again: it starts
    started = build_gateway(configs.load(config_file))
    started.audit.close()
    started.store.close()


def test_policy_status_names_no_host_path(configs, tmp_path):
    # /v1/policies is open to every agent key: its files and errors must not map the host's folders
    config_file = configs.write(tmp_path, configs.base(), {"guard.yaml": GUARD})
    gateway = build_gateway(configs.load(config_file))
    try:
        policies = gateway.policies
        assert policies.status()["files"] == ["policies/guard.yaml"]
        (tmp_path / "policies" / "unreadable.yaml").symlink_to(tmp_path / "nowhere.yaml")
        assert not policies.reload()
        [error] = policies.status()["errors"]
        assert (error["code"], error["file"], error["message"]) == (
            "unreadable", "policies/unreadable.yaml", "cannot read policies/unreadable.yaml: No such file or directory")
        (tmp_path / "policies" / "unreadable.yaml").unlink()
        (tmp_path / "policies" / "copy.yaml").write_text(GUARD)  # the same policy name twice
        assert not policies.reload()
        [error] = policies.status()["errors"]
        assert error["message"] == "policy name 'guard' is already used in policies/copy.yaml"
        assert str(tmp_path) not in json.dumps(policies.status())
    finally:
        gateway.audit.close()
        gateway.store.close()


async def test_a_reload_that_cannot_be_audited_is_not_made_until_it_can_be(start_gateway, configs, http_api, rest,
                                                                            until):
    gateway = await start_gateway(reload_config(configs, http_api, settle=0.3), {"guard.yaml": GUARD})
    client = rest(gateway)
    before = await status(client)
    gateway.audit_path.mkdir(parents=True)  # a directory where the log file should be: every write fails
    (gateway.root / "policies" / "guard.yaml").write_text(ALLOWS)

    async def audit_failed() -> bool:
        return [e["code"] for e in (await status(client))["errors"]] == ["audit-failed"]

    await until(audit_failed, timeout=10)
    assert (await status(client))["revision"] == before["revision"]  # the approval rule still applies

    gateway.audit_path.rmdir()  # the log is writable again: the reload is tried again and made
    after = await revision_becomes(client, until, before["revision"])
    assert after["errors"] == []
    [event] = reload_events(gateway)
    assert (event["revision"], event["rules_removed"]) == (after["revision"], ["guard/creating-needs-approval"])


# --- the warning at start (issue 18, item 8) -------------------------------------------------------


def _partial_set_warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "policies reload without a manifest" in r.getMessage()]


async def test_serving_without_a_manifest_warns_at_start_how_to_deploy_safely(start_gateway, configs, http_api,
                                                                             caplog):
    # A deploy that pauses longer than the settle interval loads the files written so far: say so at start.
    caplog.set_level(logging.WARNING, logger="gateway")
    await start_gateway(reload_config(configs, http_api), {"guard.yaml": GUARD})
    [warning] = _partial_set_warnings(caplog)
    assert f"reload.settle ({SETTLE:g}s)" in warning
    assert "gateway check --config CONFIG --write-manifest" in warning and "reload.manifest" in warning
    assert "(policies)" in warning  # the policy path as shown, never the host path


async def test_no_warning_with_a_manifest_or_a_configmap(start_gateway, configs, http_api, caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="gateway")
    signed = tmp_path / "signed"
    config = reload_config(configs, http_api, manifest="policies/policies.manifest.json")
    write_manifest(configs.write(signed, config, {"guard.yaml": GUARD}))
    await start_gateway(config, {}, root=signed)

    k8s = tmp_path / "k8s"
    version = configmap_version(k8s / "policies", "..2026_11_30_10_00_00.000000001", {"guard.yaml": GUARD})
    (k8s / "policies" / "..data").symlink_to(version.name)
    (k8s / "policies" / "guard.yaml").symlink_to("..data/guard.yaml")
    await start_gateway(reload_config(configs, http_api), {}, root=k8s)
    assert _partial_set_warnings(caplog) == []
