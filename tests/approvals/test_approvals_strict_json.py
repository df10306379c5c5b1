"""A held call whose arguments JSON cannot carry (NaN, ±Infinity) never breaks the approver API (issue 7, item 6).

One NaN in a held call used to make ``GET /v1/approvals`` answer 500, so the page and the CLI showed
nothing, and deciding it answered 500 too. The store now writes strict JSON: the shown copy of such a
value is its name as a string, while the request's digest stays over the real arguments. A row an
older gateway wrote with a bare NaN in it is read back the same way.
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any

import httpx2
from cli_run import run_cli_async

from gateway.approvals.model import args_digest

ARGS = {"order": "A-7", "amount": math.nan, "limit": math.inf, "floor": -math.inf, "nested": [{"x": math.nan}]}
SHOWN = {"order": "A-7", "amount": "NaN", "limit": "Infinity", "floor": "-Infinity", "nested": [{"x": "NaN"}]}


async def _listing(base: str) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": "Bearer bob-key"}) as client:
        return await client.get("/v1/approvals")


async def _decide(base: str, approval_id: str) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": "Bearer bob-key"}) as client:
        return await client.post(f"/v1/approvals/{approval_id}/decision", json={"approve": True, "comment": "ok"})


async def test_a_held_call_with_nan_lists_shows_and_is_decided(serve: Any, approval_desk: Any) -> None:
    held = approval_desk.add(args=ARGS)
    base = await serve(approval_desk.app())

    listed = await _listing(base)

    assert listed.status_code == 200, listed.text
    [shown] = listed.json()["approvals"]
    assert shown["final_args"] == shown["original_args"] == SHOWN
    assert shown["args_digest"] == args_digest(ARGS)  # bound to what the tool would receive
    decided = await _decide(base, held.id)
    assert (decided.status_code, decided.json()["state"]) == (200, "approved"), decided.text
    stored = approval_desk.sqlite.connection.execute("SELECT data FROM approvals").fetchone()[0]
    json.loads(stored, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # strict JSON only
    shown_by_cli = await run_cli_async("approvals", "show", held.id, "--url", base, "--key", "bob-key")
    assert shown_by_cli.returncode == 0, shown_by_cli.stderr
    assert "NaN" in shown_by_cli.stdout and "Infinity" in shown_by_cli.stdout


async def test_a_row_an_older_gateway_wrote_with_a_bare_nan_still_lists_and_decides(serve: Any,
                                                                                    approval_desk: Any) -> None:
    held = approval_desk.add(args={"order": "A-8", "amount": 1})
    db: sqlite3.Connection = approval_desk.sqlite.connection
    (data,) = db.execute("SELECT data FROM approvals WHERE id = ?", (held.id,)).fetchone()
    old = json.loads(data)
    old["final_args"]["amount"] = old["original_args"]["amount"] = math.nan
    db.execute("UPDATE approvals SET data = ? WHERE id = ?", (json.dumps(old), held.id))  # json.dumps writes NaN
    assert "NaN" in db.execute("SELECT data FROM approvals").fetchone()[0]
    base = await serve(approval_desk.app())

    listed = await _listing(base)

    assert listed.status_code == 200, listed.text
    assert listed.json()["approvals"][0]["final_args"] == {"order": "A-8", "amount": "NaN"}
    decided = await _decide(base, held.id)
    assert (decided.status_code, decided.json()["state"]) == (200, "approved"), decided.text
