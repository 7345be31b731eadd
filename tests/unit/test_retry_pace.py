"""A tenant's retries are released at most ``maxRetriesPerSecondPerTenant`` a second by all pollers
together (punctual.dispatch.polling.retry_pace): a retry storm (a target that always fails, 186
attempts a millisecond apart) cannot swamp the deployment, the excess is deferred (never dropped),
and another tenant's slots go at once."""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from execution_harness import Rig
from factories import job as make_job
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.polling.release import SlotReleaser
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.slots import fire_timer
from punctual.timing.timers import Lane, Timer, TimerKind, TimerLayout, slot_key
from simulation import instant_of, most_within

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LAYOUT = TimerLayout(4, 2, 180)
SECOND = timedelta(seconds=1)
STORM = {"max_attempts": 186, "backoff": "fixed", "base_seconds": 0.001, "max_seconds": 0.001}


def _config(rate: float) -> PollerConfig:
    return PollerConfig(
        layout=LAYOUT,
        short_queue_urls=("short",),
        long_queue_urls=("long",),
        max_retries_per_second_per_tenant=rate,
    )


class _Poller:
    """One poller of a shard group: its own process state (ledger, clock, queue)."""

    def __init__(
        self, store: MemoryStore, rate: float, lane: tuple[int, int], now: datetime, pool: ThreadPoolExecutor
    ) -> None:
        self.clock = ManualClock(now)
        self.queues = MemoryQueues(now=self.clock.now)
        self.metrics = RecordingMetrics()
        self.releaser = SlotReleaser(store, self.queues, self.clock, _config(rate), self.metrics, pool)
        self.releaser.ledger.lane = lane

    def messages(self) -> list[DispatchMessage]:
        return [stored.message for stored in self.queues.queues.get("short", [])]


def _waiting(job: Job) -> Execution:
    """The record of ``job``'s slot at T after its first attempt failed: waiting for attempt 2."""
    return Execution(
        job_id=job.id, tenant=job.tenant, slot=slot_key(T), scheduled_at=T, attempt=1,
        status=ExecutionStatus.RETRY_WAIT, started_at=T, finished_at=T, job_version=job.version, error="HTTP 500",
    )  # fmt: skip


def _release_once(store: MemoryStore, timers: list[Timer], rate: float, now: datetime) -> _Poller:
    """One poller (one shard group) that releases ``timers`` at ``now``."""
    with ThreadPoolExecutor(1) as pool:
        poller = _Poller(store, rate, (0, 1), now, pool)
        poller.releaser.release(timers)
    return poller


def _failing(store: MemoryStore, tenant: str, count: int, dues: list[datetime]) -> list[Timer]:
    """``count`` jobs of ``tenant`` whose slot at T failed its first attempt: each record waits for
    attempt 2, whose RETRY timer is due at the given instant."""
    timers = []
    for index in range(count):
        job = make_job(
            f"{tenant}-{index:04d}", "rate(1 minute)", now=T - timedelta(hours=1), tenant=tenant, retry=STORM
        )
        store.create_job(job, None, max_jobs=100_000)
        slot = slot_key(T)
        store.save_execution(_waiting(job), None, 0)
        timer = LAYOUT.make(
            now=T,
            due=dues[index % len(dues)],
            job_id=job.id,
            tenant=tenant,
            slot=slot,
            attempt=2,
            kind=TimerKind.RETRY,
            job_version=job.version,
        )
        timers.append(timer)
    return timers


def _first_attempts(store: MemoryStore, tenant: str, count: int) -> list[Timer]:
    timers = []
    for index in range(count):
        due = T + timedelta(seconds=index % 5)
        job: Job = make_job(
            f"{tenant}-{index:04d}", f"at({due:%Y-%m-%dT%H:%M:%S})", now=T - timedelta(hours=1), tenant=tenant
        )
        store.create_job(job, None, max_jobs=100_000)
        timers.append(fire_timer(LAYOUT, job, due, T - timedelta(hours=1)))
    return timers


def _deferred(store: MemoryStore, tenant: str, after: datetime) -> list[Timer]:
    """RETRY timers of ``tenant`` written again by a poller, due after ``after`` (in 4 minutes)."""
    found = []
    first = after.replace(second=0, microsecond=0)
    for minute in range(0, 4):
        for lane, shards in ((Lane.NEAR, LAYOUT.near_shard_count), (Lane.FAR, LAYOUT.shard_count)):
            for shard in range(shards):
                found += store.query_timers(lane, first + timedelta(minutes=minute), shard, None, None)
    return [t for t in found if t.tenant == tenant and t.kind is TimerKind.RETRY and t.due > after]


@settings(max_examples=40, deadline=None)
@given(
    storm=st.integers(min_value=1, max_value=150),
    spread_s=st.integers(min_value=0, max_value=5),
    rate=st.sampled_from([1.0, 3.0, 10.0, 25.0, 2.5]),
    groups=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_a_tenants_retries_keep_to_its_rate_in_every_second_across_pollers(
    storm: int, spread_s: int, rate: float, groups: int, seed: int
) -> None:
    rng = random.Random(seed)
    store = MemoryStore()
    # Given a storming tenant's retries due over a few seconds, and another tenant's first attempts
    dues = [T + timedelta(seconds=s) for s in range(spread_s + 1)]
    retries = _failing(store, "storm", storm, dues)
    calm = _first_attempts(store, "calm", 12)
    # released over 1..3 shard groups of two pollers each, each in its own order, chunking and moment
    owner = {t.job_id: rng.randrange(groups) for t in retries + calm}
    pollers: list[_Poller] = []
    steps: list[tuple[_Poller, list[Timer]]] = []
    with ThreadPoolExecutor(4) as pool:
        for group in range(groups):
            mine = [t for t in retries + calm if owner[t.job_id] == group]
            for _ in range(2):
                poller = _Poller(
                    store, rate, (group, groups), T + timedelta(milliseconds=rng.randint(0, 900)), pool
                )
                pollers.append(poller)
                order = mine[:]
                rng.shuffle(order)
                while order:
                    size = rng.randint(1, len(order))
                    steps.append((poller, order[:size]))
                    order = order[size:]
        rng.shuffle(steps)
        for poller, batch in steps:
            poller.releaser.release(batch)
    # Then, whichever message of each attempt SQS keeps,
    sent: dict[str, list[DispatchMessage]] = {}
    for poller in pollers:
        for message in poller.messages():
            sent.setdefault(message.dedup_id, []).append(message)
    kept = [rng.choice(copies) for copies in sent.values()]
    storm_kept = [m for m in kept if m.tenant == "storm"]
    # the storming tenant's retries start at most its rate in every one-second window
    assert all(m.kind == MessageKind.RETRY for m in storm_kept)
    assert most_within([instant_of(m) for m in storm_kept], SECOND) <= math.ceil(rate)
    assert all(instant_of(m) >= T for m in storm_kept)
    # none is lost: each retry is sent or deferred (its timer written again, later)
    deferred = {t.job_id for t in _deferred(store, "storm", T + timedelta(seconds=spread_s))}
    assert {m.job_id for m in storm_kept} | deferred == {t.job_id for t in retries}
    # and the other tenant's first attempts all go at once, untouched by the storm
    calm_kept = [m for m in kept if m.tenant == "calm"]
    assert len(calm_kept) == len(calm)
    assert all(m.kind == MessageKind.FIRE and not m.not_before for m in calm_kept)


def test_deferred_retries_come_back_later_and_every_one_is_sent_within_the_rate() -> None:
    # Given 60 retries of one tenant due at once, at a retry rate of 2 a second, one poller
    store = MemoryStore()
    retries = _failing(store, "storm", 60, [T])
    with ThreadPoolExecutor(2) as pool:
        poller = _Poller(store, 2.0, (0, 1), T, pool)
        # When it releases them: what fits the next 10 s is sent (held until its instant)
        poller.releaser.release(retries)
        assert 15 <= len(poller.messages()) <= 20
        later = _deferred(store, "storm", T)
        # and the rest are deferred, counted, never dropped
        assert len(later) == 60 - len(poller.messages())
        assert poller.metrics.total("RetriesDeferred") == 60 - 1  # every one but the first, at its due
        # When each deferred timer falls due, it is released again
        while later := sorted(_deferred(store, "storm", poller.clock.now()), key=lambda t: t.due_ms):
            poller.clock.set(later[0].due)
            poller.releaser.release([t for t in later if t.due <= poller.clock.now()])
    # Then every retry was sent once, and never more than 2 in any one-second window
    messages = poller.messages()
    assert sorted(m.job_id for m in messages) == sorted(t.job_id for t in retries)
    assert most_within([instant_of(m) for m in messages], SECOND) <= 2


def test_a_retry_deferred_past_its_max_age_is_sent_unplaced_for_its_claim_to_end_it() -> None:
    # Given a retry whose slot's max_age is over (its claim ends it FAILED, no attempt is made)
    store = MemoryStore()
    (timer,) = _failing(store, "storm", 1, [T])
    job = store.get_job("storm", timer.job_id)
    assert job is not None
    poller = _release_once(store, [timer], 1.0, T + timedelta(seconds=job.retry.max_age_seconds + 11))
    # Then it is sent at once, on no grid instant
    (message,) = poller.messages()
    assert message.kind == MessageKind.RETRY and not message.not_before


def test_no_retry_rate_places_nothing() -> None:
    # Given a retry rate of 0 (no limit): 50 retries due at once all go at once
    store = MemoryStore()
    retries = _failing(store, "storm", 50, [T])
    poller = _release_once(store, retries, 0.0, T)
    assert len(poller.messages()) == 50
    assert not any(m.not_before for m in poller.messages())
    assert store.budget_reservations("storm", "#retries", T, T + timedelta(minutes=5)) == {}


def test_a_retry_is_never_placed_past_its_slots_age_and_waits_for_it_to_end_instead() -> None:
    # Given 10 retries at 1 a second whose slots' max_age (with the claim's grace) ends in 5 s
    store = MemoryStore()
    retries = _failing(store, "storm", 10, [T])
    job = store.get_job("storm", retries[0].job_id)
    assert job is not None
    age_end = T + timedelta(seconds=job.retry.max_age_seconds + 10)
    poller = _release_once(store, retries, 1.0, age_end - timedelta(seconds=5))
    # Then those sent start before the age ends (a retry placed later would not start), and the
    # others come back once it has ended, for their claims to end their slots
    sent = poller.messages()
    assert 4 <= len(sent) <= 6
    assert all(instant_of(m) <= age_end for m in sent)
    later = _deferred(store, "storm", age_end)
    assert len(later) == 10 - len(sent)
    assert all(t.due == age_end + timedelta(seconds=1) for t in later)


# --------------------------------------------------------------------------- in the worker


def _retry_rig(now: datetime) -> tuple[Rig, Job, list[datetime]]:
    """A slot of a job whose target has a rate budget, waiting for attempt 2; the target's calls."""
    clock = ManualClock(now)
    rig = Rig(MemoryStore(), clock)
    target = {"type": "http", "url": "https://hooks.example.com/x", "rate_budget_per_second": 1}
    job = rig.add_job(target=target, retry=STORM)
    rig.store.save_execution(_waiting(job), None, 0)
    called: list[datetime] = []

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called.append(clock.now())
            return TargetResult.ok()

    rig.target = Target()  # type: ignore[assignment]  # (every worker of the rig calls it)
    return rig, job, called


def test_the_worker_holds_a_retry_until_its_tenants_retry_rate_lets_it_go() -> None:
    # Given attempt 2 of a slot, placed by its tenant's retry rate at T + 5 s, received at T
    rig, job, called = _retry_rig(T)
    message = rig.message(job, T, attempt=2, kind=MessageKind.RETRY)
    rig.send(DispatchMessage(**{**message.__dict__, "not_before": "2026-12-01T12:00:05.000Z"}))
    worker = rig.worker()
    # When the worker receives it: back to the queue until a second before its instant
    (held,) = rig.work(worker)
    assert (held.outcome, held.ack, held.return_after_s) == ("waiting", False, 4)
    # and when it comes back, it runs at its instant
    rig.advance_to(T + timedelta(seconds=4))
    (ran,) = rig.work(worker)
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value and called == [T + timedelta(seconds=5)]


def test_a_retry_reaching_its_worker_after_its_instant_runs_at_once_not_on_its_targets_budget() -> None:
    # Given attempt 2 placed at T + 1 s by the retry rate, whose message reaches a worker at T + 2.5 s
    rig, job, called = _retry_rig(T + timedelta(seconds=2.5))
    message = rig.message(job, T, attempt=2, kind=MessageKind.RETRY)
    rig.send(DispatchMessage(**{**message.__dict__, "not_before": "2026-12-01T12:00:01.000Z"}))
    # Then it runs at once: the retry rate placed it, the target's budget does not place it again
    (ran,) = rig.work(rig.worker())
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value
    assert called == [T + timedelta(seconds=2.5)]
    assert rig.store.budget_reservations(job.tenant, "hooks.example.com", T, T + timedelta(minutes=1)) == {}


def test_a_retry_released_after_its_due_is_not_counted_as_deferred_by_the_rate() -> None:
    # Given one retry whose timer was due 2 s before the poller releases it (a poll's lag, a poller
    # restarting), and a tenant retry rate far above one retry
    store = MemoryStore()
    timers = _failing(store, "calm", 1, [T + timedelta(seconds=1)])
    poller = _release_once(store, timers, 100.0, T + timedelta(seconds=3))
    # Then it is sent at once and nothing says the rate deferred it (QA23: local mode's demo logged
    # "retries of tenant demo deferred by its retry rate: 1" for every retry a poll released late)
    [message] = poller.messages()
    assert message.kind == MessageKind.RETRY and poller.metrics.total("RetriesDeferred") == 0


def test_retries_reaching_a_stalled_worker_after_their_instants_keep_to_their_tenants_rate() -> None:
    # Given six retries of one tenant, placed by its retry rate (2 a second) at T + 1 s to T + 3.5 s,
    # that all reach one worker at T + 5 s (it stalled: QA, a busy machine called 7 of a tenant's
    # retries within 0.9 s at a rate of 3)
    clock = ManualClock(T + 5 * SECOND)
    rig = Rig(MemoryStore(), clock)
    called: list[datetime] = []

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called.append(clock.now())
            return TargetResult.ok()

    rig.target = Target()  # type: ignore[assignment]
    for n in range(6):
        job = rig.add_job(f"storm-{n}", retry=STORM)
        rig.store.save_execution(_waiting(job), None, 0)
        message = rig.message(job, T, attempt=2, kind=MessageKind.RETRY)
        placed = T + SECOND + n * SECOND / 2
        rig.send(
            DispatchMessage(**{**message.__dict__, "not_before": placed.isoformat().replace("+00:00", "Z")})
        )
    worker = rig.worker(max_retries_per_second=2.0)
    # When the worker runs them, one after another
    ran = rig.work(worker)
    # Then each runs once, on new instants of the tenant's retry grid: at most its rate in every
    # window of a second, none called before it reached the worker, all within the worker's wait
    assert [r.outcome for r in ran] == [ExecutionStatus.SUCCEEDED.value] * 6
    assert most_within(called, timedelta(seconds=0.9)) <= 2
    assert min(called) >= T + 5 * SECOND and max(called) <= T + 15 * SECOND
