"""A message whose worker died before claiming it, sent by a poller that died before its resend
check: the poller that resumes the minute watches it again and the slot runs within seconds
(issue 30; punctual.dispatch.polling.rewatch).

Found by the chaos run of both phases: a ``rate(2 seconds)`` slot released, its worker killed
0.8 s later, the minute's only poller killed 2 s after that; the restarted poller found the
slot's timer superseded by the next one and nothing ran the slot. Time here is simulated
(tests/simulation.py): the lateness asserted is the design's (resend delay, restart delay).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from factories import spec
from punctual.dispatch.polling import PollerConfig
from punctual.models import Execution
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, Simulation

T0 = datetime.fromisoformat("2026-11-30T10:00:00+00:00")
RESEND_AFTER_S = 4.0
DIED_AT = T0 + timedelta(seconds=20)  # the slot whose worker dies


def _world() -> tuple[MemoryStore, ManualClock, Simulation, JobService]:
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(minutes=10))
    config = PollerConfig(
        layout=LAYOUT,
        short_queue_urls=(SHORT,),
        long_queue_urls=(LONG,),
        concurrency=2,
        resend_after_s=RESEND_AFTER_S,
    )

    sim = Simulation(store, clock, config=config, claim_latency_s=0.3, metrics=RecordingMetrics())
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    return store, clock, sim, jobs


def _claimed_at(store: MemoryStore, tenant: str, job_id: str, slot: datetime) -> Execution | None:
    return store.get_execution(tenant, job_id, slot_key(slot))


@pytest.mark.parametrize("kill_after_s", [0.5, 2.0, 3.5])
def test_a_slot_whose_worker_and_poller_both_died_runs_within_seconds(kill_after_s: float) -> None:
    # Given a rate(2 seconds) job (a near chain: its next timer lands in the same minute) and a
    # rate(1 hour) job (a far timer, its next one an hour on), both due at second 20, and the
    # worker that receives each one's slot :20 dies before its claim
    store, _, sim, jobs = _world()
    near, _ = jobs.register("default", spec("rate(2 seconds)", start_at=T0.isoformat()))
    far, _ = jobs.register("default", spec("rate(1 hour)", start_at=DIED_AT.isoformat()))
    sim.lost = lambda m: m.resend == 0 and m.slot == slot_key(DIED_AT) and m.job_id in (near.id, far.id)
    # When the minute's only poller dies before its resend check (restarted a second later)
    kill = DIED_AT + timedelta(seconds=kill_after_s)
    sim.run([T0 - timedelta(minutes=1), T0], until=T0 + timedelta(seconds=50), kills=[kill])
    # Then both slots were claimed within seconds of their instant: the resumed poller watched them
    assert sim.restarts >= 1
    for job in (near, far):
        record = _claimed_at(store, job.tenant, job.id, DIED_AT)
        assert record is not None, f"{job.schedule} slot {DIED_AT} never claimed"
        assert record.started_at is not None
        lateness = (record.started_at - DIED_AT).total_seconds()
        assert lateness <= 10.0, (job.schedule, lateness)
    # And every slot of the near chain in the minute has its record (nothing else was lost)
    for second in range(0, 44, 2):
        assert _claimed_at(store, near.tenant, near.id, T0 + timedelta(seconds=second)) is not None, second


def test_a_slot_claimed_before_the_restart_is_not_sent_again() -> None:
    # Given the same jobs, with healthy workers
    _, _, sim, jobs = _world()
    near, _ = jobs.register("default", spec("rate(2 seconds)", start_at=T0.isoformat()))
    far, _ = jobs.register("default", spec("rate(1 hour)", start_at=DIED_AT.isoformat()))
    # When the poller dies 2 s after second 20 and resumes
    sim.run(
        [T0 - timedelta(minutes=1), T0],
        until=T0 + timedelta(seconds=50),
        kills=[DIED_AT + timedelta(seconds=2)],
    )
    # Then the watch read their records and sent no copy: each slot went to the queue once
    for job in (near, far):
        copies = [m for m in sim.sent(job.id) if m.slot == slot_key(DIED_AT)]
        assert len(copies) == 1, copies
