"""Run a `gateway` command in this process: ``gateway.cli.main(argv)`` in a folder, its output captured.

Starting ``python -m gateway`` costs seconds of imports on a busy machine; the commands' own tests call
``main`` directly and keep one real subprocess per command (``run_subprocess``) for the console entry.
Imported by name (``from cli_run import run_cli``), as ``loopback`` is.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from gateway.cli import main

__all__ = ["run_cli", "run_subprocess"]


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` run in ``cwd`` by ``main``: its exit code (argparse's exits too), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # as the interpreter does: None is 0, a message goes to stderr with 1
                if exit_.code is None or isinstance(exit_.code, int):
                    code = exit_.code or 0
                else:
                    print(exit_.code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["gateway", *args], code, out.getvalue(), err.getvalue())


def run_subprocess(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m gateway ARGS` in ``cwd``: the real console entry, for one smoke test per command."""
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
