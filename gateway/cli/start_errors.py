"""What stops the gateway from starting, and how it is said: diagnostics with file:line, or one line."""

from __future__ import annotations

import sqlite3
import sys

from gateway.core.diagnostics import SourceLines, render
from gateway.core.errors import AuditStartError, ConfigError, PolicyLoadError, StoreSchemaError, StoreUnavailable

__all__ = ["START_ERRORS", "report_start_error"]

# What stops the gateway from starting, said without a traceback (by `gateway serve` and by each worker).
START_ERRORS = (ConfigError, PolicyLoadError, OSError, sqlite3.Error, StoreSchemaError, StoreUnavailable,
                AuditStartError)


def report_start_error(exc: BaseException) -> None:
    """Print why the gateway cannot start on stderr: diagnostics with file:line, or one line."""
    if isinstance(exc, (ConfigError, PolicyLoadError)):
        sources = SourceLines()
        for d in exc.diagnostics:
            print(render(d, sources), file=sys.stderr)
    elif isinstance(exc, (OSError, sqlite3.Error)):  # a data file that looked fine but cannot be opened after all
        print(f"gateway: cannot open the gateway's data files: {exc}", file=sys.stderr)
    else:  # a newer schema, PostgreSQL out of reach, or an audit file whose chain cannot be taken up
        print(f"gateway: {exc}", file=sys.stderr)
