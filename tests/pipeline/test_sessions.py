"""Session counters live in SQLite: a budget rule keeps counting, and a terminated session stays
terminated, across a gateway restart on the same files."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

BUDGET = """
policy: budget
rules:
  - id: three-calls
    when: session.calls >= 3
    action: terminate
    message: This session has used its budget of 3 calls.
"""
USED_UP = "This session has used its budget of 3 calls."


async def test_session_counters_survive_a_restart(tmp_path, configs, http_api, rest, rest_call):
    config_file = configs.write(tmp_path, configs.base(configs.http_upstream("api", http_api.url)),
                                {"budget.yaml": BUDGET})

    async def calls(session: str, count: int) -> list[dict]:
        async with configs.run(config_file) as gateway:
            client = rest(gateway, session=session)
            return [await rest_call(client, "api_search", {"q": f"{session}-{i}"}) for i in range(count)]

    before = await calls("budget-session", 2)
    after = await calls("budget-session", 3)  # a new gateway process-equivalent: new app, store, caches
    fresh = await calls("another-session", 1)
    still = await calls("budget-session", 1)

    assert [b["decision"] for b in before] == ["allow", "allow"]
    assert [b["decision"] for b in after] == ["allow", "terminate", "terminated"]
    assert [b["content"][0]["text"] for b in after[1:]] == [USED_UP, USED_UP]
    assert after[1]["meta"]["gateway/terminated"] is True
    assert [b["decision"] for b in fresh] == ["allow"]
    assert (still[0]["decision"], still[0]["content"][0]["text"]) == ("terminated", USED_UP)
    # the calls that hit the budget never ran: budget-session-1 and -0 ran once per gateway run before them
    assert (len(http_api.seen("budget-session-0")), len(http_api.seen("budget-session-1"))) == (2, 1)
    assert http_api.seen("budget-session-2") == []


async def test_concurrent_calls_cannot_overrun_a_session_budget(start_gateway, configs, http_api, rest, rest_call):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)), {"budget.yaml": BUDGET})
    client = rest(gateway, session="parallel-budget")

    bodies = await asyncio.gather(*(rest_call(client, "api_nap", {"seconds": 0.3, "tag": f"parallel-budget-{i}"})
                                    for i in range(6)))

    decisions = sorted(b["decision"] for b in bodies)
    assert len(http_api.seen("parallel-budget-")) <= 3
    assert decisions.count("allow") == 3
