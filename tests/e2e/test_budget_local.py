"""A target's rate budget at a real receiver (issue 32): a burst of slots due at one instant reaches
its target spread over the budget from its first second on, never early, none over the bound.

Runs on the shared local mode (before ``test_local_mode.py``, whose last test stops it). In local
mode, as deployed, each shard group has two pollers that each release every slot of the group (the
FIFO queue keeps one message per slot): they share the budget through its reservations in the table
(:mod:`punctual.dispatch.budget_reservations`), and the worker that claims a smoothed slot waits for its
instant before the call: the spacing of the budget's grid (1.1 / rate) is what the receiver sees,
give or take the time from a message's instant to its call.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from local.harness import LocalMode
from simulation import most_within

BUDGET = 5  # calls a second: one every 220 ms
SLOTS = 25  # 25 x 220 ms = 5.3 s: the budget alone spreads them over 5.3 s
# The lateness bound is what a slot may give up to its budget. It is generous here so that what is
# tested is the budget: a call reached past its bound goes at once (the bound wins over the budget,
# and is reported), and local mode's two worker processes on a loaded two-core machine have been
# seen to deliver held messages 7.7 s late. Every call before its bound takes a reserved instant of
# the budget, however late its message came.
LATENESS_S = 30


def test_a_burst_reaches_its_target_within_its_rate_budget_from_the_first_second(
    local_mode: LocalMode,
) -> None:
    local = local_mode
    # Given 25 one-time jobs due at one instant, calling one host with a budget of 5 calls a second
    instant = math.ceil((time.time() + 40) / 60) * 60
    due = datetime.fromtimestamp(instant, UTC)
    url = local.hook("budget")
    spec = {
        "schedule": f"at({due:%Y-%m-%dT%H:%M:%S})",
        "target": {"type": "http", "url": url, "rate_budget_per_second": BUDGET},
        "max_lateness_seconds": LATENESS_S,
        "timeout_seconds": 10,
    }
    assert (
        local.register([{"id": f"budget-{i:02d}", "job": spec} for i in range(SLOTS)], "budget-e2e") == SLOTS
    )
    assert time.time() < instant - 5, "registration took too long"

    # When the instant comes, Then every slot reaches the receiver once
    def arrived() -> list[dict[str, object]] | None:
        found = [r for r in local.records() if r["name"] == "budget"]
        return found if len({r["key"] for r in found}) == SLOTS else None

    records = local.wait(arrived, instant - time.time() + LATENESS_S + 60, "every slot to reach the receiver")
    arrivals = sorted(float(r["arrived"]) for r in records)  # type: ignore[arg-type]
    # never before its instant, never later than its bound allows (plus the call's own time)
    assert arrivals[0] >= instant
    assert arrivals[-1] <= instant + LATENESS_S + 5
    # spread over the budget: 25 calls at 220 ms apart take more than 5 s (not 25 in the first)
    assert arrivals[-1] - arrivals[0] >= (SLOTS - 1) * 1.1 / BUDGET * 0.9
    # the burst's first second holds at most the budget (it held 20 against a budget of 10)
    assert sum(1 for a in arrivals if a < instant + 1) <= BUDGET
    # and so does every window: the grid leaves 100 ms for the time from a message's instant to
    # its call, so any 0.9 s of arrivals holds at most the budget; one call more is its arrival's
    # jitter, not the grid's (a call reaching the receiver 200 ms late closes its gap to the next:
    # seen once in a full run on two busy cores, after eight clean ones)
    assert most_within(arrivals, 0.9) <= BUDGET + 1
    assert most_within(arrivals, 0.6) <= BUDGET - 1  # (the grid puts 3 in any 0.6 s; a burst, 5+)
