"""No shard group depends on one poller (issue 30, point 1): two pollers of the same group both
release every slot (SQS deduplication and the claim keep one run per slot), so one that dies
mid-minute delays nothing. Virtual time (tests/simulation.py): the instants compared are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from factories import spec
from punctual.dispatch.tick import LEAN, STANDARD, plan_minute, replicas_for
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Node, Simulation

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)  # the measured minute
KILL = T0 + timedelta(seconds=30)


def _workload(sim: Simulation, store: MemoryStore, clock: ManualClock) -> None:
    """Far and near slots all through the minute: 8 rate(1 second) chains (near timers), 24
    jobs each every minute at seconds spread over it (far timers, written long before)."""
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
    for n in range(8):
        start = T0 - timedelta(seconds=20)
        jobs.register("default", spec("rate(1 second)", start_at=start.isoformat()), job_id=f"rate-{n}")
    for n in range(24):
        start = T0 + timedelta(seconds=(n * 7) % 60)
        jobs.register("default", spec("rate(1 minute)", start_at=start.isoformat()), job_id=f"minutely-{n}")


def _first_sends(
    replicas: int, kill: Callable[[list[Node]], list[tuple[datetime, Node]]] | None, restart_s: float = 4.0
) -> dict[tuple[str, str], datetime]:
    """Every slot due in T0's minute -> when it first reached the queue (the base clock)."""
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(minutes=6))
    sim = Simulation(store, clock, claim_latency_s=0.3)
    _workload(sim, store, clock)
    clock.set(T0 - timedelta(minutes=1, seconds=15))
    nodes = [sim.poller() for _ in range(replicas)]
    sim.run(
        [T0 - timedelta(minutes=1), T0],
        until=T0 + timedelta(minutes=1, seconds=15),
        pollers=nodes,
        node_kills=kill(nodes) if kill else None,
        restart_s=restart_s,
    )
    first: dict[tuple[str, str], datetime] = {}
    for at, message in sim.queues.log:
        if T0 <= datetime.fromisoformat(message.scheduled_at) < T0 + timedelta(minutes=1):
            first.setdefault((message.job_id, message.slot), at)
    return first


def test_one_of_two_pollers_killed_mid_minute_delays_no_slot() -> None:
    # Given a minute of far and near slots, released by two pollers of the same group
    calm = _first_sends(2, None)
    assert len(calm) == 8 * 60 + 24
    # When one of them dies at second 30 (its restart comes 4 s later)
    killed = _first_sends(2, lambda nodes: [(KILL, nodes[0])])
    # Then every slot reached the queue when it did without the kill: none later, none missing
    assert killed.keys() == calm.keys()
    later = {slot: killed[slot] - calm[slot] for slot in calm if killed[slot] > calm[slot]}
    assert later == {}


def test_with_one_poller_the_same_kill_delays_the_slots_due_until_its_restart() -> None:
    # The comparison that makes the test above mean something: a lone poller killed at second 30
    # and back 4 s later releases the slots due meanwhile late
    calm = _first_sends(1, None)
    killed = _first_sends(1, lambda nodes: [(KILL, nodes[0])])
    assert killed.keys() == calm.keys()
    late = [slot for slot in calm if killed[slot] - calm[slot] >= timedelta(seconds=1)]
    assert len(late) >= 8 * 3  # at least three seconds of the rate(1 second) chains


def test_two_pollers_killed_in_turn_still_delay_nothing() -> None:
    # Given two pollers killed one after the other, each back 4 s after its death (never both down)
    calm = _first_sends(2, None)
    killed = _first_sends(
        2,
        lambda nodes: [
            (T0 + timedelta(seconds=s), nodes[i % 2]) for i, s in enumerate((5, 12, 19, 26, 33, 40, 47, 54))
        ],
    )
    # Then still no slot is later than without the kills
    assert killed.keys() == calm.keys()
    assert [slot for slot in calm if killed[slot] > calm[slot]] == []


def test_a_minute_on_the_standard_poller_gets_two_pollers_per_group_an_idle_one_one() -> None:
    settings = Settings(shard_count=16, near_shard_count=4, shard_groups=3)
    plan = plan_minute(T0, settings)  # no store: the load is unknown, the standard poller
    assert plan["poller"] == STANDARD
    assert [(p["group"], p.get("replica", 0)) for p in plan["pollers"]] == [
        (g, r) for r in (0, 1) for g in range(3)
    ]
    assert plan["groups"] == plan["pollers"][:3]
    # An idle minute (the lean poller) keeps one: a second would cost what the first does
    assert replicas_for(1, LEAN, settings) == 1
    # And the inline Map runs 40 at once: more than 20 groups keep one poller each
    assert replicas_for(20, STANDARD, settings) == 2 and replicas_for(21, STANDARD, settings) == 1
    sliced = settings.model_copy(update={"group_slices": 2})
    assert replicas_for(40, STANDARD, sliced) == 2 and replicas_for(41, STANDARD, sliced) == 1
    assert replicas_for(3, STANDARD, settings.model_copy(update={"poller_replicas": 1})) == 1
