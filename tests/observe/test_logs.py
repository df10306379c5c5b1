"""JSON log lines (gateway/observe/logs.py): the time keeps its shape now that core/clock.py writes it."""

from __future__ import annotations

import json
import logging
import time

import pytest

from gateway.observe.logs import JsonFormatter


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("gateway.test", logging.INFO, __file__, 1, "hello", None, None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0  # as logging computes it
    return record


@pytest.mark.parametrize("created", [1764631868.123456, 1764631868.0,
                                     1764631868.9995, 1764631868.9999999, 0.001, 4102444799.999])
def test_json_log_time_is_what_it_was(created: float) -> None:
    """The JSON log's time: the record's whole second and its own milliseconds, as before clock.py."""
    record = _record(created)
    former = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
    assert json.loads(JsonFormatter().format(record))["time"] == former


def test_a_fresh_record_keeps_logging_s_own_milliseconds() -> None:
    record = logging.LogRecord("gateway.test", logging.INFO, __file__, 1, "hello", None, None)
    stamp = json.loads(JsonFormatter().format(record))["time"]
    assert stamp == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
