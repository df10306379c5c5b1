"""`gateway serve --workers N`: N gateway processes on one listening socket, sharing the store.

The parent opens the store once (so migrations run once, and a schema newer than the code stops
everything before a worker starts), binds the socket, and starts N workers with ``spawn``; each
loads the config, builds its own app (its own upstreams, caches and policy watcher) and serves the
inherited socket with uvicorn. The kernel spreads connections across them. A SQLite store is
marked ``shared`` so each call's counts are written before it answers (PostgreSQL always does).
The parent stops the workers on SIGINT/SIGTERM, and stops them all if one dies.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import signal
import socket
import sys
import time
from multiprocessing.process import BaseProcess
from types import FrameType

from gateway.config.load import LoadedConfig
from gateway.limits import WORKER_POLL_SECONDS, WORKER_STOP_SECONDS

__all__ = ["serve_workers"]

log = logging.getLogger("gateway")


def serve_workers(args: argparse.Namespace, config: LoadedConfig, *, json_logs: bool = False) -> int:
    """Run ``args.workers`` worker processes on one socket until interrupted; the exit status."""
    from gateway.app import build_store
    from gateway.observe.metrics import prepare_multiprocess_dir, worker_exited

    config.spec.store.shared = True
    build_store(config).close()  # migrate (or refuse) once, before any worker starts
    host, port = config.spec.listen.host, config.spec.listen.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(2048)
    if config.spec.metrics.enabled:  # each worker's series in files there; a scrape of any worker adds them up
        prepare_multiprocess_dir()
    context = multiprocessing.get_context("spawn")
    workers: list[BaseProcess] = [
        context.Process(target=_worker, args=(args.config, host, port, args.log_level, listener, json_logs),
                        name=f"gateway-worker-{n}") for n in range(args.workers)]
    for worker in workers:
        worker.start()
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"gateway: {args.workers} workers listening on http://{host}:{port}", file=sys.stderr)
    while not stopping and all(w.is_alive() for w in workers):
        time.sleep(WORKER_POLL_SECONDS)
    for worker in workers:
        if worker.is_alive():
            worker.terminate()  # SIGTERM: uvicorn finishes its requests and runs the lifespan's shutdown
    for worker in workers:
        worker.join(WORKER_STOP_SECONDS)
        if worker.is_alive():
            worker.kill()
            worker.join(WORKER_STOP_SECONDS)
        if worker.pid is not None:
            worker_exited(worker.pid)
    listener.close()
    return 0 if stopping else 1


def _worker(config_file: str, host: str, port: int, log_level: str, listener: socket.socket,
            json_logs: bool = False) -> None:
    """One worker: its own app on the shared socket."""
    import uvicorn

    from gateway.app import build_app, server_options
    from gateway.config.load import load_config
    from gateway.observe.logs import configure_logs, uvicorn_log_config

    config = load_config(config_file)
    configure_logs(getattr(logging, log_level.upper()), json_lines=json_logs,
                   libraries=config.spec.logging.libraries == "verbose", worker=True)
    config.spec.listen.host, config.spec.listen.port = host, port
    config.spec.store.shared = True
    app = build_app(config)
    log_config = uvicorn_log_config(json_lines=json_logs, access_on_stdout=not config.spec.audit.stdout)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level=log_level, log_config=log_config,
                                           **server_options(config)))
    server.run(sockets=[listener])
