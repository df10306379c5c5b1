"""Run a `gateway` command in this process: ``gateway.cli.main(argv)`` in a folder, its output captured.

Starting ``python -m gateway`` costs seconds of imports on a busy machine; the commands' own tests call
``main`` directly and keep one real subprocess per command (``run_subprocess``) for the console entry.
A command that talks to a server on the test's own event loop (`approvals`, `sessions`, `status`) runs
in a worker thread (``run_cli_async``), so the loop keeps serving while the command waits for answers.
Imported by name (``from cli_run import run_cli``), as ``loopback`` is.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from gateway.cli import main

__all__ = ["CLIENT_ENV", "run_cli", "run_cli_async", "run_subprocess", "run_subprocess_async"]

# What the API commands read from the environment; unset unless a test names them, in process or not.
CLIENT_ENV = ("GATEWAY_URL", "GATEWAY_API_KEY")

TIMEOUT = 120.0  # seconds a command may take; in process it takes milliseconds, a subprocess seconds of start-up


def run_cli(cwd: Path | None, *args: str,
            env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` run in ``cwd`` (None: where the test runs) by ``main``, with ``env`` set on top of the
    environment (a None value unsets): its exit code (argparse's exits too), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    with _environment(env or {}), _logging_kept():
        if cwd is not None:
            os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = _exit_code(args)
        finally:
            os.chdir(before)
    return subprocess.CompletedProcess(["gateway", *args], code, out.getvalue(), err.getvalue())


async def run_cli_async(*args: str, cwd: Path | None = None, env: Mapping[str, str | None] | None = None,
                        timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``run_cli`` in a worker thread, so that a server on this event loop can answer the command."""
    return await asyncio.wait_for(asyncio.to_thread(run_cli, cwd, *args, env=env), timeout)


def run_subprocess(cwd: Path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`python -m gateway ARGS` in ``cwd``: the real console entry, for one smoke test per command."""
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=_clean_env({}))


async def run_subprocess_async(*args: str, env: Mapping[str, str] | None = None,
                               timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``run_subprocess`` without blocking this event loop (a server on it answers the command)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, env=_clean_env(env or {}), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:  # timed out: do not leave it running
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return subprocess.CompletedProcess(["gateway", *args], process.returncode, out.decode(), err.decode())


def _exit_code(args: tuple[str, ...]) -> int:
    try:
        return main(list(args))
    except SystemExit as exit_:  # as the interpreter does: None is 0, a message goes to stderr with 1
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1


def _clean_env(env: Mapping[str, str]) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in CLIENT_ENV}, **env}


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """``CLIENT_ENV`` unset and ``env`` set while the command runs; the environment as it was afterwards."""
    saved = {name: os.environ.get(name) for name in {*CLIENT_ENV, *env}}
    _set({**dict.fromkeys(CLIENT_ENV), **env})
    try:
        yield
    finally:
        _set(saved)


def _set(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """The root and ``gateway`` loggers as they were, after a command (`serve`) that configures logging."""
    root, ours = logging.getLogger(), logging.getLogger("gateway")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        ours.setLevel(levels[1])
