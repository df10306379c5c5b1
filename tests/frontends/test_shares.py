"""The counting behind each key's share of the connections (gateway/frontends/http/shares.py), and its config.

The end-to-end behaviour, with real clients on a real gateway, is in tests/frontends/test_connection_shares.py;
here the arithmetic: how much heavy keys can take, what is left for the others, who may use the reserve.
"""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from gateway.config.model import HttpSpec
from gateway.core.limits import DEFAULT_MAX_CONNECTIONS
from gateway.frontends.http.shares import Shares


def fill(shares: Shares, key: str, operator: bool = False) -> int:
    """Take slots for ``key`` until refused; how many it got."""
    taken = 0
    while shares.take(key, operator) is None:
        taken += 1
    return taken


def defaults() -> Shares:
    http = HttpSpec()
    return Shares(http.max_connections - http.reserved(), http.reserved(), http.connection_share())


def test_the_defaults_give_a_key_an_eighth_and_keep_a_sixteenth_for_approvers():
    http = HttpSpec()
    assert (http.max_connections, http.connection_share(), http.reserved()) == (DEFAULT_MAX_CONNECTIONS, 64, 32)


def test_a_key_past_its_share_is_told_so_and_others_are_not_affected():
    shares = Shares(pool=100, reserved=4, per_principal=3)
    assert fill(shares, "a") == 3
    over = shares.take("a", operator=False)
    assert over is not None and (over.status, over.code, over.share) == (429, "connection-share", "principal")
    assert "3 requests open at once" in over.message
    assert fill(shares, "b") == 3
    shares.give("a")
    assert shares.take("a", operator=False) is None  # a slot given back can be taken again


def test_any_number_of_heavy_keys_at_the_default_caps_leave_room_for_one_more():
    shares = defaults()
    got = [fill(shares, f"heavy-{n}") for n in range(12)]
    assert got[:5] == [64] * 5  # each its whole share while the pool is roomy
    assert all(later < earlier for earlier, later in itertools.pairwise(got[5:]))  # a third of what is left
    assert sum(got) < shares.pool
    assert shares.take("light", operator=False) is None  # twelve keys at full tilt: a thirteenth still gets in


def test_a_lone_key_never_takes_more_than_a_third_of_the_pool():
    shares = Shares(pool=90, reserved=2, per_principal=90)
    assert fill(shares, "alone") == 30
    assert fill(shares, "next") == 20  # a third of the 60 left


def test_the_reserve_serves_operators_only_once_the_pool_is_full():
    shares = Shares(pool=8, reserved=2, per_principal=8)
    took = [fill(shares, f"agent-{n}") for n in range(6)]
    assert took == [3, 2, 1, 1, 1, 0]  # the pool of 8 is full; the sixth agent gets nothing
    refused = shares.take("agent-5", operator=False)
    assert refused is not None
    assert (refused.status, refused.code, refused.share) == (503, "connection-pool-busy", "pool")
    assert shares.take("carol", operator=True) is None
    assert shares.take("root", operator=True) is None
    full = shares.take("carol", operator=True)
    assert full is not None and (full.status, full.share) == (503, "reserved")
    shares.give("carol")  # gives back the reserved slot: the reserve has room again, the pool is still full
    assert shares.take("agent-5", operator=False) is not None
    assert shares.take("root", operator=True) is None


def test_a_key_holding_pool_slots_gets_429_not_503_when_the_pool_is_busy():
    shares = Shares(pool=8, reserved=0, per_principal=8)
    assert fill(shares, "a") == 3
    over = shares.take("a", operator=False)
    assert over is not None and (over.status, over.share) == (429, "principal")


def test_slots_given_back_are_all_accounted_for():
    shares = Shares(pool=8, reserved=2, per_principal=8)
    fill(shares, "a")
    fill(shares, "b")
    for key in ("a", "b"):
        while shares.holding(key):
            shares.give(key)
    shares.give("nobody")  # giving back what was never taken changes nothing
    assert fill(shares, "a") == 3


@pytest.mark.parametrize("reserved", [24, 30])
def test_the_reserve_must_leave_connections_for_agents(reserved):
    with pytest.raises(ValidationError, match="must be smaller than max_connections"):
        HttpSpec(max_connections=24, reserved_connections=reserved)


def test_the_reserve_of_a_tiny_cap_leaves_one_connection_for_agents():
    assert HttpSpec(max_connections=1).reserved() == 0
    assert HttpSpec(max_connections=2).reserved() == 1
    assert HttpSpec(max_connections=24, max_connections_per_principal=7).connection_share() == 7
