"""`gateway serve --workers N`: N gateway processes on one listening socket, sharing the store.

The parent opens the store once (so migrations run once, and a schema newer than the code stops
everything before a worker starts), binds the socket, and starts N workers with ``spawn``; each
loads the config, builds its own app (its own upstreams, caches and policy watcher) and serves the
inherited socket with uvicorn. The kernel spreads connections across them: while one is down, the
others take every connection. A SQLite store is marked ``shared`` so each call's counts are written
before it answers (PostgreSQL always does).

Each worker writes its own audit file, ``audit.worker-K.jsonl`` beside the configured ``audit.jsonl`` (K is
its slot, 0 to N-1, kept by the worker started in its place), so each file holds one chain that its
writer continues across restarts; `gateway audit verify` checks each chain on its own.

The parent starts a new worker in place of one that dies. A worker that dies within
``WORKER_QUICK_DEATH_SECONDS`` of starting ``WORKER_CRASH_LOOP_LIMIT`` times in a row is in a crash
loop: the parent stops the others and exits 1. It stops them all, exit 0, on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import PurePath
from types import FrameType

from gateway.config.load import LoadedConfig
from gateway.core.limits import (
    WORKER_CRASH_LOOP_LIMIT,
    WORKER_POLL_SECONDS,
    WORKER_QUICK_DEATH_SECONDS,
    WORKER_STOP_SECONDS,
)

__all__ = ["serve_workers", "worker_audit_file"]

log = logging.getLogger("gateway")


@dataclass(slots=True)
class _Slot:
    """One worker's place: the process in it now, when it started, and how many died at once in a row."""

    name: str
    process: BaseProcess
    started: float
    quick_deaths: int = 0


def serve_workers(args: argparse.Namespace, config: LoadedConfig, *, json_logs: bool = False) -> int:
    """Run ``args.workers`` worker processes on one socket until interrupted; the exit status."""
    from gateway.app import build_store

    config.spec.store.shared = True
    build_store(config).close()  # migrate (or refuse) once, before any worker starts
    host, port = config.spec.listen.host, config.spec.listen.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(2048)
    if config.spec.metrics.enabled:  # each worker's series in files there; a scrape of any worker adds them up
        from gateway.observe.metrics import prepare_multiprocess_dir

        prepare_multiprocess_dir()
    context = multiprocessing.get_context("spawn")

    def start(name: str) -> BaseProcess:
        process = context.Process(target=_worker, name=name, args=(args.config, host, port, args.log_level,
                                                                   listener, json_logs, names.index(name)))
        process.start()
        return process

    names = [f"gateway-worker-{n}" for n in range(args.workers)]
    slots = [_Slot(name, start(name), time.monotonic()) for name in names]
    for slot in slots:
        log.info("worker %s started (pid %s)", slot.name, slot.process.pid)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"gateway: {args.workers} workers listening on http://{host}:{port}", file=sys.stderr)
    try:
        crash_loop = _supervise(slots, start, lambda: stopping)
    finally:  # whatever ends supervision, no worker outlives the parent
        _stop_all(slots)
        listener.close()
    if crash_loop is not None:
        log.error("%s", crash_loop)
        return 1
    return 0


def _supervise(slots: list[_Slot], start: Callable[[str], BaseProcess], stopping: Callable[[], bool]) -> str | None:
    """Start each worker that dies again until told to stop (None), or why a crash loop ends it."""
    while not stopping():
        multiprocessing.connection.wait([s.process.sentinel for s in slots], timeout=WORKER_POLL_SECONDS)
        for slot in slots:
            if stopping():
                return None
            if slot.process.is_alive():
                continue
            lived, old = time.monotonic() - slot.started, slot.process
            how, pid = _how_it_ended(old.exitcode), old.pid
            slot.quick_deaths = slot.quick_deaths + 1 if lived < WORKER_QUICK_DEATH_SECONDS else 0
            if slot.quick_deaths >= WORKER_CRASH_LOOP_LIMIT:  # left in its slot: _stop_all reaps it
                return (f"worker {slot.name} died within {WORKER_QUICK_DEATH_SECONDS:g} s of starting"
                        f" {slot.quick_deaths} times in a row (last: it {how}): stopping the gateway. Its own"
                        " error is above; fix it, then start the gateway again.")
            slot.process, slot.started = start(slot.name), time.monotonic()
            _reap(old)  # only now: should the start fail, the dead one stays in its slot for _stop_all
            log.warning("worker %s (pid %s) %s after %.1f s; started it again (pid %s)", slot.name, pid, how, lived,
                        slot.process.pid)
    return None


def _how_it_ended(exitcode: int | None) -> str:
    """``exited with status 3`` or ``was killed by SIGKILL``."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _reap(process: BaseProcess) -> None:
    """Forget a dead worker: its in-progress gauges go, and so do the process object's handles."""
    from gateway.observe.metrics import worker_exited

    process.join()
    if process.pid is not None:
        worker_exited(process.pid)
    process.close()


def _stop_all(slots: list[_Slot]) -> None:
    """SIGTERM every worker (uvicorn finishes its requests and runs the lifespan's shutdown), then kill stragglers."""
    for slot in slots:
        if slot.process.is_alive():
            slot.process.terminate()
    for slot in slots:
        slot.process.join(WORKER_STOP_SECONDS)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join(WORKER_STOP_SECONDS)
        _reap(slot.process)


def worker_audit_file(file: str, slot: int) -> str:
    """The audit file of the worker in ``slot``: ``audit.worker-1.jsonl`` beside ``audit.jsonl``."""
    path = PurePath(file)
    return str(path.with_name(f"{path.stem}.worker-{slot}{path.suffix}"))


def _worker(config_file: str, host: str, port: int, log_level: str, listener: socket.socket,
            json_logs: bool = False, slot: int = 0) -> None:
    """One worker: its own app on the shared socket (exit status 1, with the reason, when it cannot start)."""
    import uvicorn

    from gateway.app import build_app, server_options
    from gateway.cli.start_errors import START_ERRORS, report_start_error
    from gateway.config.load import load_config
    from gateway.observe.logs import configure_logs, uvicorn_log_config

    try:  # the file is read again here: it may have changed since the parent checked it
        config = load_config(config_file)
        configure_logs(getattr(logging, log_level.upper()), json_lines=json_logs,
                       libraries=config.spec.logging.libraries == "verbose", worker=True)
        config.spec.listen.host, config.spec.listen.port = host, port
        config.spec.store.shared = True
        if config.spec.audit.file:  # one writer per file: each worker its own chain
            config.spec.audit.file = worker_audit_file(config.spec.audit.file, slot)
        app = build_app(config)
    except START_ERRORS as exc:
        report_start_error(exc)
        sys.exit(1)
    log_config = uvicorn_log_config(json_lines=json_logs, access_on_stdout=not config.spec.audit.stdout)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level=log_level, log_config=log_config,
                                           **server_options(config)))
    server.run(sockets=[listener])
    if not server.started:  # the lifespan refused to start (uvicorn.run says so with this status)
        sys.exit(3)
