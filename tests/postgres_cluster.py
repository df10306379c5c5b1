"""A throwaway PostgreSQL cluster for tests: initdb + pg_ctl in a temp dir, on a free loopback port.

The binaries are found on PATH or under Debian's /usr/lib/postgresql/<version>/bin (the `postgresql`
package that .ci/install-system installs). initdb refuses to run as root, so as root the cluster is
made and run by the `postgres` user (the package creates it) through `runuser`. Each test gets a
database of its own (``Cluster.new_database``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

__all__ = ["Cluster", "find_binaries", "running_cluster"]

USER = "gateway"


def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl, or None if PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A running cluster: connect as ``USER`` to 127.0.0.1:port without a password."""

    port: int
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the server now (``-m immediate``: as a crash would), for tests of the store going away."""
        if self._stop is not None:
            self._stop()

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URL for one database."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; its DSN."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """Start a cluster for the duration of the block (raises RuntimeError if it cannot)."""
    binaries = find_binaries()
    if binaries is None:
        raise RuntimeError("PostgreSQL is not installed (initdb/pg_ctl): run `bash .ci/install-system`")
    as_user: list[str] = []
    home = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
    if os.geteuid() == 0:  # initdb will not run as root: the package's `postgres` user runs the cluster
        shutil.chown(home, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = home / "data", home / "server.log"
    port = _free_port()
    try:
        subprocess.run([*as_user, str(binaries / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8",
                        "--no-sync", "--no-instructions"], check=True, capture_output=True)
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {home} -c fsync=off -c synchronous_commit=off"
                   " -c full_page_writes=off -c max_connections=400")
        started = subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
                                  "-w", "-t", "60", "start"], capture_output=True)
        if started.returncode != 0:
            logged = log.read_text() if log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.decode()} {logged}")
        def stop() -> None:
            subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           capture_output=True)

        try:
            yield Cluster(port, stop)
        finally:
            stop()  # a cluster a test stopped already: pg_ctl says so, nothing else happens
    finally:
        shutil.rmtree(home, ignore_errors=True)
