"""The audit log fails closed, under attack and under bad luck, with the real gateway and a real upstream.

The promise: no tool runs unless its intent record is on disk first. So for every call, the recording
upstream saw it exactly when an intent line for it was written. A disk that is full, a read-only
file, ``ulimit -f``, a rotation or deletion mid-call: each must keep that, leave only whole JSON
lines, and lose no event.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from audit_support import strict_lines

from gateway.pipeline.audit import AuditLog
from gateway.pipeline.lifecycle import AUDIT_FAILED, AUDIT_FAILED_AFTER_RUN

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

Json = dict[str, Any]
POLICY = {"p.yaml": "policy: p\nrules: []\n"}


def earlier_events(path: Path, *events: Json) -> None:
    """What a gateway before this one left in the file (chained, as every gateway writes)."""
    log = AuditLog(path)
    for event in events:
        log.write(event)
    log.close()


def of(events: list[Json], call_id: str, kind: str) -> list[Json]:
    return [e for e in events if e.get("call_id") == call_id and e.get("event") == kind]


def marker() -> str:
    return f"m-{uuid.uuid4().hex}"


# --- a full device, a read-only file, a full filesystem ---------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
async def test_an_audit_file_on_dev_full_refuses_the_call_before_the_tool_runs(start_gateway, configs, http_api,
                                                                              rest, rest_call, connect_mcp, tmp_path):
    root = tmp_path / "gw"
    (root / "data").mkdir(parents=True)
    (root / "data" / "audit.jsonl").symlink_to("/dev/full")
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), POLICY, root=root)
    order, mcp_order = marker(), marker()

    body = await rest_call(rest(gateway), "api_create_item", {"name": order})
    async with connect_mcp(gateway, "alice") as conn:
        result = await conn.call("api_create_item", {"name": mcp_order})

    assert (body["_status"], body["decision"], body["is_error"]) == (200, "audit_failed", True)
    assert body["content"] == [{"type": "text", "text": AUDIT_FAILED}]
    assert (result.is_error, [b.text for b in result.content]) == (True, [AUDIT_FAILED])
    assert http_api.seen(order) == [] and http_api.seen(mcp_order) == []  # the tool never ran


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real, tiny filesystem (tmpfs) at ``where``; the test is skipped where mounting is not allowed."""
    where.mkdir(parents=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:  # lazily: the gateway may still hold the file open while it shuts down
        subprocess.run(["umount", "--lazy", str(where)], check=True)


async def test_a_read_only_audit_file_refuses_calls(start_gateway, configs, http_api, rest, rest_call, tmp_path):
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0:  # root writes through file modes: make the filesystem itself read-only
            folder = stack.enter_context(tmpfs(tmp_path / "ro", "1m"))
            earlier_events(folder / "audit.jsonl", {"event": "earlier"})
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            folder = tmp_path / "ro"
            folder.mkdir()
            earlier_events(folder / "audit.jsonl", {"event": "earlier"})
            (folder / "audit.jsonl").chmod(0o444)
        config = configs.base(configs.http_upstream("api", http_api.url), audit={"file": str(folder / "audit.jsonl")})
        gateway = await start_gateway(config, POLICY)
        order = marker()

        body = await rest_call(rest(gateway), "api_create_item", {"name": order})

        assert (body["decision"], body["content"][0]["text"]) == ("audit_failed", AUDIT_FAILED)
        assert http_api.seen(order) == []
        assert strict_lines(folder / "audit.jsonl") == [{"event": "earlier"}]


async def test_a_full_filesystem_refuses_calls_and_leaves_only_whole_lines(start_gateway, configs, http_api, rest,
                                                                           rest_call, tmp_path):
    with tmpfs(tmp_path / "tiny", "64k") as folder:
        audit = folder / "audit.jsonl"
        (folder / "filler").write_bytes(b"f" * 48 * 1024)  # leaves 16 KiB for the log
        config = configs.base(configs.http_upstream("api", http_api.url), audit={"file": str(audit)})
        gateway = await start_gateway(config, POLICY)
        client = rest(gateway)

        # An event larger than the room left: the write stops part-way, and that part is cut off again.
        big = marker()
        body = await rest_call(client, "api_create_item", {"name": big + "x" * 24_000}, call_id=big)
        assert (body["decision"], body["content"][0]["text"]) == ("audit_failed", AUDIT_FAILED)
        assert http_api.seen(big) == []
        assert strict_lines(audit) == []

        # Small calls go through (each on a line of its own) until the disk is full; then they are refused.
        calls = []
        for _ in range(40):
            cid = marker()
            body = await rest_call(client, "api_create_item", {"name": cid}, call_id=cid)
            calls.append((cid, body))
            if body["decision"] == "audit_failed" and body["content"][0]["text"] == AUDIT_FAILED:
                break
        decisions = [b["decision"] for _, b in calls]
        assert decisions[0] == "allow" and decisions[-1] == "audit_failed", decisions

        events = strict_lines(audit)
        for cid, body in calls:  # the tool ran exactly when its intent was written first
            assert bool(http_api.seen(cid)) == bool(of(events, cid, "call.intent")), (cid, body["content"])
            if body["decision"] == "allow":
                assert len(of(events, cid, "call.outcome")) == 1


# --- ulimit -f, in a real `gateway serve` process --------------------------------------------------

# Run `gateway serve` as `ulimit -f` would: the file size limit set before the gateway starts. SIGXFSZ
# is put back to its default (kill), as a launcher may leave it: the gateway must ignore it itself.
LAUNCH = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from gateway.cli import main
sys.exit(main(sys.argv[2:]))
"""


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def gateway_process(config_file: Path, *, file_limit: int | None = None, stdout: int | None = None,
                          log_level: str = "warning") -> Any:
    """`gateway serve` in its own process on loopback; yields (process, base url)."""
    port = free_port()
    args = [sys.executable, "-c", LAUNCH, str(file_limit or -1)] if file_limit else [sys.executable, "-m", "gateway"]
    process = await asyncio.create_subprocess_exec(
        *args, "serve", str(config_file), "--host", "127.0.0.1", "--port", str(port), "--log-level", log_level,
        stdin=asyncio.subprocess.DEVNULL, stdout=stdout if stdout is not None else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=url) as client:
            for _ in range(300):
                if process.returncode is not None:
                    assert process.stderr is not None
                    pytest.fail(f"gateway exited: {(await process.stderr.read()).decode()}")
                with contextlib.suppress(httpx2.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield process, url
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 20)


async def test_under_ulimit_f_calls_are_refused_the_process_survives_and_every_line_is_whole(
        configs, http_api, keys, tmp_path):
    limit = 8 * 1024 * 1024  # room for SQLite's files; the log is filled up to a few KiB below it
    config = configs.base(configs.http_upstream("api", http_api.url))
    config_file = configs.write(tmp_path, config, POLICY)
    audit = tmp_path / "data" / "audit.jsonl"
    audit.parent.mkdir()
    filler = AuditLog(audit)
    filler.write({"event": "filler"})
    while audit.stat().st_size < limit - 7_000:  # lines of 1,156 bytes (chain fields included): 6 KiB or so left
        filler.write({"event": "filler", "pad": "p" * 1000})
    filler.close()
    before = audit.stat().st_size

    async with gateway_process(config_file, file_limit=limit) as (process, url):
        headers = {"Authorization": f"Bearer {keys['alice']}", "X-Gateway-Session": "s-ulimit"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            async def invoke(name: str, cid: str) -> Json:
                response = await client.post("/v1/tools/api_create_item/invoke",
                                              json={"arguments": {"name": name}, "call_id": cid})
                assert response.status_code == 200, response.text
                body: Json = response.json()
                return body

            big = marker()  # an intent larger than the room left: the kernel writes part of it, then EFBIG
            body = await invoke(big + "x" * 8_000, big)
            assert (body["decision"], body["content"][0]["text"]) == ("audit_failed", AUDIT_FAILED)
            assert http_api.seen(big) == []
            assert audit.stat().st_size == before  # the part that was written was cut off again

            calls = []
            for _ in range(40):
                cid = marker()
                calls.append((cid, await invoke(cid, cid)))
                if calls[-1][1]["content"][0]["text"] == AUDIT_FAILED:
                    break
            assert calls[0][1]["decision"] == "allow"
            assert calls[-1][1]["content"][0]["text"] == AUDIT_FAILED

            assert process.returncode is None  # SIGXFSZ did not kill it
            assert (await client.get("/healthz")).status_code == 200

    assert audit.stat().st_size <= limit
    events = strict_lines(audit)
    for cid, _ in calls:
        assert bool(http_api.seen(cid)) == bool(of(events, cid, "call.intent"))


async def test_stdout_mode_writes_only_whole_json_lines_to_stdout(configs, http_api, keys, tmp_path):
    config = configs.base(configs.http_upstream("api", http_api.url), audit={"file": None, "stdout": True})
    config_file = configs.write(tmp_path, config, POLICY)
    cid = marker()
    # at the default log level, where uvicorn logs every request (to stdout, unless told otherwise)
    async with gateway_process(config_file, stdout=asyncio.subprocess.PIPE, log_level="info") as (process, url):
        headers = {"Authorization": f"Bearer {keys['alice']}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            response = await client.post("/v1/tools/api_create_item/invoke",
                                         json={"arguments": {"name": cid}, "call_id": cid})
            assert response.json()["decision"] == "allow"
        process.terminate()
        out, _ = await asyncio.wait_for(process.communicate(), 20)

    events = [json.loads(line) for line in out.decode().splitlines()]  # no access log or other text in between
    assert [e["event"] for e in events if e["call_id"] == cid] == ["call.intent", "call.outcome"]
    assert not (tmp_path / "data" / "audit.jsonl").exists()


# --- bounded events ----------------------------------------------------------------------------------


def compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def test_a_large_argument_is_logged_as_a_digest_and_a_preview(start_gateway, configs, http_api, rest, rest_call):
    config = configs.base(configs.http_upstream("api", http_api.url), audit={"file": "data/audit.jsonl",
                                                                             "max_value_bytes": 4_096})
    gateway = await start_gateway(config, POLICY)
    cid = marker()
    name = cid + "n" * 300_000

    body = await rest_call(rest(gateway), "api_create_item", {"name": name, "qty": 3}, call_id=cid)

    assert body["decision"] == "allow"
    assert http_api.seen(cid)[0]["body"]["name"] == name  # the tool got it whole; the log did not
    assert max(len(line) for line in gateway.audit_path.read_bytes().splitlines()) < 8_192
    events = strict_lines(gateway.audit_path)
    (intent,), (outcome,) = of(events, cid, "call.intent"), of(events, cid, "call.outcome")
    digest = {"truncated": True, "sha256": hashlib.sha256(compact(name)).hexdigest(), "bytes": len(name) + 2,
              "preview": '"' + name[:511]}
    assert intent["final_args"] == outcome["original_args"] == outcome["final_args"] == {"name": digest, "qty": 3}


async def test_an_argument_over_the_call_limit_is_refused_and_its_event_is_bounded(start_gateway, configs, http_api,
                                                                                   rest, rest_call):
    config = configs.base(configs.http_upstream("api", http_api.url), limits={"max_argument_bytes": 100_000})
    gateway = await start_gateway(config, POLICY)
    cid = marker()

    body = await rest_call(rest(gateway), "api_create_item", {"name": "z" * 900_000}, call_id=cid)

    assert (body["decision"], body["content"][0]["text"]) == ("reject", "The arguments are too large.")
    assert gateway.audit_path.stat().st_size < 70_000  # not the 900 KB the caller sent
    (event,) = of(strict_lines(gateway.audit_path), cid, "call.outcome")
    assert event["original_args"]["name"]["sha256"] == hashlib.sha256(compact("z" * 900_000)).hexdigest()


# --- rotation and deletion mid-call ------------------------------------------------------------------


def rotate(path: Path, how: str) -> None:
    """What logrotate (or an operator) does to the log file."""
    if how == "rename":
        path.rename(path.with_name(path.name + ".1"))
    elif how == "rename-and-create":  # logrotate's default `create` mode
        path.rename(path.with_name(path.name + ".1"))
        path.touch()
    elif how == "copytruncate":
        shutil.copyfile(path, path.with_name(path.name + ".1"))
        os.truncate(path, 0)
    else:
        path.unlink()


@pytest.mark.parametrize("how", ["rename", "rename-and-create", "copytruncate", "delete"])
async def test_rotating_the_file_mid_call_loses_no_event(start_gateway, configs, http_api, rest, rest_call, until,
                                                        how):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), POLICY)
    path = gateway.audit_path
    cid = marker()
    running = asyncio.create_task(rest_call(rest(gateway), "api_nap", {"seconds": 1.0, "tag": cid}, call_id=cid))

    async def intent_written() -> list[Json]:
        return of(strict_lines(path), cid, "call.intent") if path.exists() else []

    (intent,) = await until(intent_written)
    rotate(path, how)
    body = await running

    assert body["decision"] == "allow" and http_api.seen(cid)
    (outcome,) = of(strict_lines(path), cid, "call.outcome")  # at the path, in the new file
    assert outcome["id"] == intent["id"] and outcome["upstream_outcome"]["status"] == "ok"
    assert of(strict_lines(path), cid, "call.intent") == []
    if how != "delete":  # the intent stayed in the rotated file, and the outcome did not go there
        rotated = strict_lines(path.with_name(path.name + ".1"))
        assert of(rotated, cid, "call.intent") == [intent] and of(rotated, cid, "call.outcome") == []


async def test_an_outcome_that_cannot_be_recorded_withholds_the_result(start_gateway, configs, http_api, rest,
                                                                       rest_call, until):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), POLICY)
    path = gateway.audit_path
    cid = marker()
    running = asyncio.create_task(rest_call(rest(gateway), "api_nap", {"seconds": 1.0, "tag": cid}, call_id=cid))

    await until(lambda: asyncio.sleep(0, path.exists() and of(strict_lines(path), cid, "call.intent")))
    path.rename(path.with_name("audit.jsonl.1"))
    path.mkdir()  # the outcome has nowhere to go
    body = await running

    assert (body["decision"], body["content"][0]["text"]) == ("audit_failed", AUDIT_FAILED_AFTER_RUN)
    assert http_api.seen(cid)  # it ran, and its intent says so
    assert of(strict_lines(path.with_name("audit.jsonl.1")), cid, "call.intent")

    path.rmdir()  # writable again: the next call is recorded
    after = marker()
    assert (await rest_call(rest(gateway), "api_create_item", {"name": after}, call_id=after))["decision"] == "allow"
    assert [e["event"] for e in strict_lines(path) if e["call_id"] == after] == ["call.intent", "call.outcome"]


# --- approved calls ----------------------------------------------------------------------------------


async def test_an_approved_call_writes_its_intent_with_the_approval_and_does_not_run_unrecorded(bench, call_id):
    from approval_support import approve_rule, policy

    gw = await bench.start(policy(approve_rule("deploys-need-ops", approvers=["group:ops"])))
    recorded, unrecorded = call_id(), call_id()
    for cid, service in ((recorded, "billing"), (unrecorded, "search")):
        held = await bench.invoke(gw, "ops_deploy", {"service": service}, call_id=cid)
        assert held.status_code == 202, held.text
        assert (await bench.decide(gw, "bob", held.json()["approval_id"])).status_code == 200

    ran = (await bench.invoke(gw, "ops_deploy", {"service": "billing"}, call_id=recorded)).json()
    assert (ran["decision"], ran["is_error"]) == ("approve", False)
    events = strict_lines(gw.audit_path)
    (intent,) = of(events, recorded, "call.intent")
    held, outcome = of(events, recorded, "call.outcome")  # each request has its outcome: held, then run
    assert (held["verdict"], held["upstream_outcome"]["status"], outcome["id"]) == ("pending", "not_called",
                                                                                     intent["id"])
    assert intent["approval"] == {"id": ran["meta"]["gateway/approval_id"], "approved": True, "pending": False,
                                  "replayed": False} == outcome["approval"]
    assert (intent["verdict"], intent["final_args"]) == ("approve", {"service": "billing"})

    gw.audit_path.unlink()
    gw.audit_path.mkdir()  # the log breaks between the approval and the run
    refused = (await bench.invoke(gw, "ops_deploy", {"service": "search"}, call_id=unrecorded)).json()
    assert (refused["decision"], refused["content"][0]["text"]) == ("audit_failed", AUDIT_FAILED)
    assert bench.upstream.ran("deploy", service="search") == 0  # approved, but never run unrecorded
    assert bench.upstream.ran("deploy", service="billing") == 1


@pytest.mark.parametrize("audit", [{"max_value_bytes": 10}, {"max_event_bytes": 100}, {"fsync": "sometimes"}])
def test_audit_bounds_too_small_to_be_useful_are_config_errors(configs, tmp_path, audit):
    from gateway.core.errors import ConfigError

    config_file = configs.write(tmp_path, configs.base(audit={"file": "data/audit.jsonl", **audit}), POLICY)
    with pytest.raises(ConfigError) as raised:
        configs.load(config_file)
    assert next(iter(audit)) in str(raised.value.diagnostics)


async def test_fsync_on_still_records_every_call(start_gateway, configs, http_api, rest, rest_call):
    config = configs.base(configs.http_upstream("api", http_api.url), audit={"file": "data/audit.jsonl",
                                                                             "fsync": True})
    gateway = await start_gateway(config, POLICY)
    assert gateway.gateway.audit.fsync is True  # the knob reaches the writer
    cid = marker()
    assert (await rest_call(rest(gateway), "api_create_item", {"name": cid}, call_id=cid))["decision"] == "allow"
    assert [e["event"] for e in strict_lines(gateway.audit_path) if e["call_id"] == cid] == [
        "call.intent", "call.outcome"]


# --- the chain at start --------------------------------------------------------------------------------


async def test_start_new_on_a_broken_log_records_the_calls_on_a_new_chain_that_says_why(start_gateway, configs,
                                                                                         http_api, rest, rest_call,
                                                                                         tmp_path):
    from audit_support import chained_lines

    from gateway.pipeline.audit_verify import verify

    root = tmp_path / "gw"
    (root / "data").mkdir(parents=True)
    (root / "data" / "audit.jsonl").write_text('{"event":"call.outcome","edited":"by hand"}\n')
    config = configs.base(configs.http_upstream("api", http_api.url),
                          audit={"file": "data/audit.jsonl", "on_broken_chain": "start_new"})
    gateway = await start_gateway(config, POLICY, root=root)
    cid = marker()
    assert (await rest_call(rest(gateway), "api_create_item", {"name": cid}, call_id=cid))["decision"] == "allow"

    lines = gateway.audit_path.read_bytes().splitlines(keepends=True)
    rest_of_log = tmp_path / "after-the-broken-line.jsonl"
    rest_of_log.write_bytes(b"".join(lines[1:]))
    started, *after = chained_lines(rest_of_log)
    assert (started["event"], started["seq"], started["prev"]) == ("audit.chain_started", 1, None)
    assert "is not a chained event" in started["reason"]
    assert [(e["event"], e["chain"]) for e in after if e.get("call_id") == cid] == [
        ("call.intent", started["chain"]), ("call.outcome", started["chain"])]
    report = verify([gateway.audit_path])
    assert [(p.where.line, p.kind) for p in report.problems] == [(1, "not-chained")]  # the old line, still shown
    assert [c.intact for c in report.chains] == [True]
