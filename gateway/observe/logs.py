"""The gateway's own log lines: who logs at which level, and JSON (``logging: {format: json}``).

No argument value reaches a log line, at any level, by default. The values of a call live in the audit
log, redacted; the process log is read by more people and kept longer. Libraries print request data:
httpx2 logs every upstream URL at INFO (an HTTP upstream's path segments and query hold arguments),
sse-starlette every event's bytes at DEBUG, the MCP SDK messages at DEBUG. So the root logger (every
library) stays at WARNING and only the ``gateway`` loggers and uvicorn's follow ``--log-level``, unless
``logging.libraries: verbose`` says otherwise; and uvicorn's access log never shows a query string.

JSON: one object a line on stderr: time (RFC 3339, UTC), level, logger, message, and when there is one the
exception and the current trace (trace_id, span_id) so a log line can be found from its trace. The
audit log is separate and always JSON (docs/gateway.md).
"""

from __future__ import annotations

import copy
import json
import logging
import sys
from typing import Any

from opentelemetry import trace

from gateway.core.clock import rfc3339_ms

__all__ = ["JsonFormatter", "NoQueryString", "configure_logs", "uvicorn_log_config"]

# The level of every library's logger (the root's) unless `logging.libraries: verbose`.
LIBRARY_LEVEL = logging.WARNING
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_WORKER_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON, with the exception and the current trace when there are any."""
        # The record's own milliseconds, so the stamp agrees with logging's %(asctime)s to the digit.
        stamp = rfc3339_ms(int(record.created) + record.msecs / 1000)
        line: dict[str, Any] = {"time": stamp, "level": record.levelname,
                                "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"], line["span_id"] = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logs(level: int, *, json_lines: bool = False, libraries: bool = False, worker: bool = False) -> None:
    """The process's logging: the ``gateway`` loggers at ``level``, every library at ``LIBRARY_LEVEL`` (at
    ``level`` too with ``libraries``), on stderr: as JSON lines (replacing the handlers so far), or as text
    (through the handlers there are, if any: a host that set up logging keeps its own)."""
    root = logging.getLogger()
    if json_lines or not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if json_lines else
                             logging.Formatter(_WORKER_FORMAT if worker else _TEXT_FORMAT))
        logging.basicConfig(handlers=[handler], force=True)
    root.setLevel(level if libraries else max(level, LIBRARY_LEVEL))
    logging.getLogger("gateway").setLevel(level)


class NoQueryString(logging.Filter):
    """uvicorn's access lines with the query string cut off the path (``?…`` marks that there was one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's path argument; never drops a record."""
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (args[0], args[1], args[2].split("?", 1)[0] + "?…", args[3], args[4])
        return True


def uvicorn_log_config(*, json_lines: bool = False, access_on_stdout: bool = True) -> dict[str, Any]:
    """uvicorn's log_config: its own format (or JSON), the access log on stdout unless it carries the
    decision log, and never a query string in an access line."""
    if json_lines:
        config = _uvicorn_json_config()
    else:
        import uvicorn.config

        config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
        if not access_on_stdout:
            config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config["filters"] = {"no_query": {"()": NoQueryString}}
    config["loggers"]["uvicorn.access"]["filters"] = ["no_query"]  # on the logger: its records only
    return config


def _uvicorn_json_config() -> dict[str, Any]:
    """uvicorn's log_config for JSON: its server and access logs through the same formatter, on stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["default"], "level": "INFO", "propagate": False},
        },
    }
