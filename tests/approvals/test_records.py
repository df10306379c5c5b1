"""A store already shut down (the gateway is stopping) is "unavailable" to the approval service, never a crash."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.approvals.records import Records
from gateway.approvals.store import ApprovalStore
from gateway.core.errors import StoreUnavailable
from gateway.store.sqlite import SqliteStore


async def test_a_closed_store_is_unavailable(tmp_path: Path) -> None:
    sqlite = SqliteStore(tmp_path / "gateway.sqlite3")
    records = Records(ApprovalStore(sqlite), time.time)
    assert await records.run(records.store.get, "missing") is None
    sqlite.close()
    with pytest.raises(StoreUnavailable, match="the approvals database is closed"):
        await records.run(records.store.get, "missing")
