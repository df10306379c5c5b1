"""Policy test suites and their runner (`gateway test`)."""

from __future__ import annotations

from gateway.testing.runner import CaseReport, Status, TestRun, run_tests

__all__ = ["CaseReport", "Status", "TestRun", "run_tests"]
