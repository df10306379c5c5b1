"""The gateway's own log lines as JSON (``logging: {format: json}`` or ``gateway serve --log-format json``).

One object a line on stderr: time (RFC 3339, UTC), level, logger, message, and when there is one the
exception and the current trace (trace_id, span_id) so a log line can be found from its trace. The
audit log is separate and always JSON (docs/gateway.md).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import trace

__all__ = ["JsonFormatter", "use_json_logs", "uvicorn_json_config"]


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON, with the exception and the current trace when there are any."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {"time": f"{stamp}.{int(record.msecs):03d}Z", "level": record.levelname,
                                "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"], line["span_id"] = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        return json.dumps(line, ensure_ascii=False, default=str)


def use_json_logs(level: int) -> None:
    """Send every log record to stderr as JSON (replacing the handlers set up so far)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


def uvicorn_json_config() -> dict[str, Any]:
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
