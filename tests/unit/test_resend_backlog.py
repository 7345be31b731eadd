"""The re-send watch tells a backlog the workers are draining from a message a dead worker holds.

QA 2026-12-07: a tenant's catch-up burst (~420 owed slots of a ``rate(1 seconds)`` job after a
restart) waited in the queue behind busy workers; the watch re-sent every message unclaimed 4 s
after its send, up to three times, so the copies joined the same backlog, the workers dropped
~970 duplicate claims, and another tenant's on-time slots behind it ran 18 to 95 s late.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from factories import job as make_job
from factories import spec
from punctual.dispatch.polling.minute import MinutePoll
from punctual.dispatch.polling.resend import ResendWatch
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind, message_for
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import CLOCK_SKEW_S
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation, SteadyWorkers

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUEUE = "short"


def _burst(count: int) -> list[DispatchMessage]:
    job = make_job("catch-up", "rate(1 second)", now=T - timedelta(hours=1), tenant="acme")
    slots = [T - timedelta(seconds=count - i) for i in range(count)]
    return [message_for(job, f"{s:%Y-%m-%dT%H:%M:%SZ}", s, 1, MessageKind.FIRE, T) for s in slots]


def _claim(store: MemoryStore, message: DispatchMessage, at: datetime) -> None:
    """A worker's claim: the first copy of a slot writes its record, a repeat is dropped."""
    if store.get_execution(message.tenant, message.job_id, message.slot) is not None:
        return
    scheduled = datetime.fromisoformat(message.scheduled_at)
    store.save_execution(
        Execution(
            job_id=message.job_id,
            tenant=message.tenant,
            slot=message.slot,
            scheduled_at=scheduled,
            attempt=message.attempt,
            status=ExecutionStatus.SUCCEEDED,
            started_at=at,
            job_version=message.job_version,
        ),
        None,
        0,
    )


def _drain(
    count: int, per_second: float, dead: set[int], until_s: float, skew_s: float = 0.0
) -> list[tuple[float, str]]:
    """``count`` messages sent at T, claimed in order at ``per_second`` by live workers (those of
    ``dead`` received by a worker that died before its handler: never claimed) whose clocks are
    ``skew_s`` off the poller's; the watch checked every 100 ms. Returns (seconds after T, slot) of
    each copy it sent."""
    store, queues = MemoryStore(), MemoryQueues(now=lambda: T)
    watch = ResendWatch(store, queues, [QUEUE], RecordingMetrics(), after_s=4.0)
    burst = _burst(count)
    queues.send(QUEUE, burst)
    watch.sent(QUEUE, burst, T)
    copies: list[tuple[float, str]] = []
    taken = 0  # the workers take the queue in order, copies at its end
    for tick in range(int(until_s * 10) + 1):
        now = T + timedelta(milliseconds=100 * tick)
        queued = queues.all_messages()
        while taken < len(queued) and (at := T + timedelta(seconds=(taken + 1) / per_second)) <= now:
            if taken not in dead:
                _claim(store, queued[taken], at + timedelta(seconds=skew_s))
            taken += 1
        before = len(queues.all_messages())
        watch.check(now)
        copies += [(tick / 10, m.slot) for m in queues.all_messages()[before:]]
    return copies


def test_a_backlog_the_workers_are_draining_is_not_re_sent() -> None:
    # Given 200 slots sent at once to workers that claim 10 a second, in order (20 s of backlog)
    # When the watch checks them as the workers drain the queue
    copies = _drain(200, per_second=10, dead=set(), until_s=30)
    # Then it sends no copy: each would only join the backlog and be dropped by its claim
    # (before: 50 a round from the 4th second on, each message up to three times)
    assert copies == []


def test_a_message_a_dead_worker_holds_inside_a_backlog_is_re_sent_once_later_ones_are_claimed() -> None:
    # Given the same backlog, whose 30th message a worker received and died on before its handler
    burst = _burst(200)
    copies = _drain(200, per_second=10, dead={29}, until_s=30)
    # Then that message alone is re-sent, as soon as its check finds later messages claimed
    assert copies == [(4.0, burst[29].slot)]


def test_a_dead_held_message_at_a_backlogs_end_is_re_sent_once_the_claims_stop() -> None:
    # Given the backlog's last message held by a dead worker (nothing is sent after it)
    burst = _burst(200)
    copies = _drain(200, per_second=10, dead={199}, until_s=40)
    # Then it is re-sent once no claim was seen for the watch's period after the one before it
    # (claimed at T+19.9 s), not left for the queue's visibility timeout
    assert [slot for _, slot in copies] == [burst[199].slot]
    assert 20.0 <= copies[0][0] <= 19.9 + 4.0 + 1.0


@pytest.mark.parametrize("skew_s", [-CLOCK_SKEW_S, CLOCK_SKEW_S])
def test_a_backlog_drained_by_workers_whose_clocks_are_off_the_pollers_is_not_re_sent(skew_s: float) -> None:
    # Given the same backlog, drained by workers whose clocks are 5 s behind (or ahead of) the
    # poller's: a record's start, by the worker's clock, says its claim was 5 s older than it was
    copies = _drain(200, per_second=10, dead=set(), until_s=30, skew_s=skew_s)
    # Then the watch still sees the workers draining it, and sends no copy (QA29: with the workers
    # 5 s behind, every message still unclaimed 4 s after its send was re-sent, three times)
    assert copies == []


@pytest.mark.parametrize("skew_s", [-CLOCK_SKEW_S, CLOCK_SKEW_S])
def test_a_dead_held_message_is_re_sent_whatever_the_workers_clocks(skew_s: float) -> None:
    burst = _burst(200)
    assert _drain(200, per_second=10, dead={29}, until_s=30, skew_s=skew_s) == [(4.0, burst[29].slot)]
    # (at the backlog's end: once no claim was seen for the watch's period, give or take its second
    # of re-checks: a claim is dated no later than the check that found it)
    [(at, slot)] = _drain(200, per_second=10, dead={199}, until_s=40, skew_s=skew_s)
    assert slot == burst[199].slot and 20.0 <= at <= 19.9 + 4.0 + 2.0


def test_a_lone_message_a_dead_worker_holds_is_re_sent_after_the_period() -> None:
    # Given one message on a quiet queue, received by a worker that died before its handler
    burst = _burst(1)
    copies = _drain(1, per_second=10, dead={0}, until_s=10)
    # Then it is re-sent at its first check, 4 s on, as before
    assert copies == [(4.0, burst[0].slot)]


def test_a_tenants_catch_up_burst_draws_no_copies_in_front_of_another_tenants_slots() -> None:
    # Given a rate(1 second) job that ran, then 7 minutes with no poller (420 slots owed, catch-up
    # policy all), and another tenant's rate(5 seconds) job; workers that claim 20 a second
    store, clock = MemoryStore(), ManualClock(T - timedelta(minutes=2))
    sim = SteadyWorkers(store, clock)
    sim.config = replace(sim.config, resend_after_s=4.0)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
    burst, _ = jobs.register("acme", spec("rate(1 second)", start_at=T.isoformat()))
    sim.run([T - timedelta(minutes=1), T], until=T + timedelta(seconds=70))
    back = T + timedelta(minutes=8)
    clock.set(back - timedelta(seconds=10))
    other, _ = jobs.register(
        "globex", spec("rate(5 seconds)", start_at=(back + timedelta(seconds=2)).isoformat())
    )
    # When the pollers come back and release the owed slots
    sim.run(
        [back, back + timedelta(minutes=1), back + timedelta(minutes=2)], until=back + timedelta(minutes=3)
    )
    # Then no slot waiting behind the burst is re-sent (before: 389 copies, each a dropped claim)
    assert [m for _, m in sim.queues.log if m.resend] == [] and sim.dropped == 0
    # and the other tenant's slots wait only for the burst itself (before: up to 14.9 s)
    late = [
        (at - datetime.fromisoformat(s.replace("Z", "+00:00"))).total_seconds()
        for (job, s), at in sim.started.items()
        if job == other.id
    ]
    assert len(late) == 36 and max(late) < 7.0
    assert sum(1 for job, _ in sim.started if job == burst.id) == 660


def test_a_takeover_waiting_in_a_backlog_is_not_re_sent() -> None:
    # Given a slot claimed by a worker that died (RUNNING, its lease lapsed at T+1), sent at T in
    # front of 100 slots the workers claim 10 a second
    store, queues = MemoryStore(), MemoryQueues(now=lambda: T)
    watch = ResendWatch(store, queues, [QUEUE], RecordingMetrics(), after_s=4.0)
    lost, *burst = _burst(101)
    queues.send(QUEUE, [lost, *burst])
    watch.sent(QUEUE, [lost, *burst], T)
    running = Execution(
        job_id=lost.job_id,
        tenant=lost.tenant,
        slot=lost.slot,
        scheduled_at=datetime.fromisoformat(lost.scheduled_at),
        attempt=1,
        status=ExecutionStatus.RUNNING,
        started_at=T,
        lease_until=T + timedelta(seconds=1),
        job_version=lost.job_version,
    )
    store.save_execution(running, None, 0)
    sent: list[tuple[float, MessageKind, int]] = []
    for tick in range(121):
        now = T + timedelta(milliseconds=100 * tick)
        for index, message in enumerate(burst):
            if T + timedelta(seconds=(index + 1) / 10) <= now:
                _claim(store, message, T + timedelta(seconds=(index + 1) / 10))
        before = len(queues.all_messages())
        watch.check(now)
        sent += [(tick / 10, m.kind, m.resend) for m in queues.all_messages()[before:]]
    # Then its takeover goes at its first check, and waits behind the backlog like any slot sent
    # then: no copy of it while the workers drain what was sent before it
    assert sent == [(4.0, MessageKind.TAKEOVER, 1)]


def _sent_at_a_pollers_end(messages: list[DispatchMessage]) -> tuple[Simulation, MinutePoll]:
    """A minute's poller at its end (its minute and grace over) that sent ``messages`` then."""
    store, clock = MemoryStore(), ManualClock(T)
    sim = Simulation(store, clock)
    sim.config = replace(sim.config, resend_after_s=4.0)
    run = sim.poller().poller.minute_poll(T, 0, 1)
    clock.set(run.final)
    sim.queues.send(SHORT, messages)
    run.poller.releaser.watch.sent(SHORT, messages, clock.now())
    return sim, run


def test_a_dead_held_message_sent_at_a_pollers_end_is_re_sent_before_its_watch_ends() -> None:
    # Given a minute's poller at its end (its minute and grace over) that sends 11 slots there, the
    # last one received by a worker that died before its handler ran, the 10 others claimed by
    # healthy workers over 2 s
    *claimed_ones, lost = _burst(11)
    sim, run = _sent_at_a_pollers_end([*claimed_ones, lost])
    for index, message in enumerate(claimed_ones):
        _claim(sim.store, message, run.final + timedelta(seconds=0.2 * (index + 1)))
    # When it runs its last re-send checks
    run.finish()
    # Then the lost slot is re-sent before the watch is gone (before: it waited for the claims to
    # be after_s old, past the watch's end, and stayed in flight for the queue's 960 s timeout)
    assert [(m.slot, m.resend) for _, m in sim.queues.log if m.resend] == [(lost.slot, 1)]


def test_a_copy_whose_original_was_claimed_does_not_say_the_workers_went_past_it() -> None:
    # Given a slot sent at T to a queue no worker takes yet, 50 more sent at T+2, the first one
    # re-sent at its check (T+4: nothing claimed at all), behind the 50; then workers that take
    # the queue in order at 10 a second from T+5: the original is claimed, its copy still waits
    store, queues = MemoryStore(), MemoryQueues(now=lambda: T)
    watch = ResendWatch(store, queues, [QUEUE], RecordingMetrics(), after_s=4.0)
    first, *burst = _burst(51)
    queues.send(QUEUE, [first])
    watch.sent(QUEUE, [first], T)
    copies: list[DispatchMessage] = []
    taken = 0
    for tick in range(201):
        now = T + timedelta(milliseconds=100 * tick)
        if tick == 20:
            queues.send(QUEUE, burst)
            watch.sent(QUEUE, burst, now)
        queued = queues.all_messages()
        while taken < len(queued) and (at := T + timedelta(seconds=5 + (taken + 1) / 10)) <= now:
            _claim(store, queued[taken], at)
            taken += 1
        before = len(queued)
        watch.check(now)
        copies += queues.all_messages()[before:]
    # Then only the first slot was copied (at T+4): its slot found claimed at the copy's check is
    # the original's claim, not the workers reaching the copy's place behind the 50 (before: every
    # one of the 50 still waiting then was taken for passed over, and re-sent)
    assert [(m.slot, m.resend) for m in copies] == [(first.slot, 1)]


def test_more_dead_held_messages_than_a_round_re_sends_at_a_pollers_end_are_all_re_sent() -> None:
    # Given a minute's poller at its end that sends 120 slots there, all received by workers that
    # died before their handler ran (an init failure of every worker): more than the MAX_PER_ROUND
    # (50) copies a check round sends
    lost = _burst(120)
    sim, run = _sent_at_a_pollers_end(lost)
    # When it runs its last re-send checks
    run.finish()
    # Then every one is re-sent before the watch is gone (before: 50 a round, the last round's
    # rest checked again a second later, past the watch's end: 20 left in flight for the queue's
    # 960 s timeout)
    assert {m.slot for _, m in sim.queues.log if m.resend} == {m.slot for m in lost}


def test_a_queue_whose_messages_are_claimed_before_their_checks_is_read_a_period_a_minute() -> None:
    """Review (QA32): every send re-armed the count's reads while the last figure was over 0, and at
    10,000 triggers a second the messages in transit keep it so: each poller read each short queue
    every second all minute ($0.003 a million triggers more at 20 pollers over 3 queues). A count
    over 0 is no backlog in front of this poller's messages; a check that finds some unclaimed is."""
    from punctual.dispatch.polling.resend_backlog import EPISODE_S, READ_EVERY_S, QueueBacklogs

    reads: list[datetime] = []
    now = T

    def count(url: str) -> int:
        reads.append(now)
        return 50  # messages in transit, always some

    backlogs = QueueBacklogs(count, remote=False, after_s=4.0)
    minutes = 3
    for second in range(minutes * 60):  # a send every second; every message claimed before its check
        now = T + timedelta(seconds=second)
        backlogs.sent(QUEUE, now)
        backlogs.observe(now)
    period = (4.0 + 1) / READ_EVERY_S + 1
    assert len(reads) <= (minutes * 60 / EPISODE_S + 1) * period, len(reads)
    # And a check that finds messages unclaimed keeps the count read while the poller sends
    reads.clear()
    backlogs.unclaimed({QUEUE}, now)
    for second in range(1, 31):
        now = T + timedelta(seconds=minutes * 60 + second)
        backlogs.sent(QUEUE, now)
        backlogs.observe(now)
    assert len(reads) >= 30 / READ_EVERY_S - 1, len(reads)


def _at_its_end(count: int) -> tuple[SteadyWorkers, MinutePoll, list[DispatchMessage]]:
    """A minute's poller at its end (its minute and grace over) that sent ``count`` slots there, and
    workers that claim them in order at 10 a second."""
    store, clock = MemoryStore(), ManualClock(T)
    sim = type("Workers", (SteadyWorkers,), {"RATE": 10.0})(store, clock)
    sim.config = replace(sim.config, resend_after_s=4.0)
    run = sim.poller().poller.minute_poll(T, 0, 1)
    clock.set(run.final)
    burst = _burst(count)
    sim.queues.send(SHORT, burst)
    run.poller.releaser.watch.sent(SHORT, burst, clock.now())
    return sim, run, burst


def test_a_pollers_last_checks_end_when_its_invocation_is_nearly_out_of_time() -> None:
    # Given a poller at its end whose last checks hold a backlog the workers drain (15 s of it:
    # sent there and half a second later, so their checks fall on two phases of each second), and
    # whose invocation says it is nearly out of time 6 s after its end
    sim, run, burst = _at_its_end(100)
    sim.base.set(run.final + timedelta(seconds=0.5))
    later = _burst(150)[:50]  # (other slots)
    sim.queues.send(SHORT, later)
    run.poller.releaser.watch.sent(SHORT, later, sim.base.now())
    burst += later
    sim.base.set(run.final)
    stop_at = run.final + timedelta(seconds=6)
    # When it runs (its minute over at once) to its last checks
    run.run(stop=lambda: sim.base.now() >= stop_at)
    # Then they end within two seconds of that (seen at the next round, then the rounds of a
    # second; review of 504894c6: they ignored it, and while they stayed on for a held backlog a
    # poller at pollerLeadS 40 ran past its 120 s Lambda timeout, killed before its last round), and those
    # last rounds re-sent what was still unclaimed, as the watch's end does, rather than leave a
    # message a dead worker may hold to the queue's timeout
    assert sim.base.now() <= stop_at + timedelta(seconds=2)
    resent = {m.slot for _, m in sim.queues.log if m.resend}
    started = {slot for (_, slot) in sim.started}
    assert resent and {m.slot for m in burst} <= started | resent


class _Endless(BaseException):
    """Out of a loop that would not end (not an Exception: the poller's loop logs and goes on)."""


def test_a_pollers_last_checks_end_while_the_store_fails() -> None:
    # Given a poller at its end with 10 slots to check, and record reads that fail (a throttled
    # table)
    sim, run, _ = _at_its_end(10)
    reads = 0

    def failing(*args: object, **kwargs: object) -> dict[object, Execution]:
        nonlocal reads
        reads += 1
        if reads > 500:
            raise _Endless
        raise RuntimeError("throttled")

    run.poller.releaser.watch.store.batch_get_executions = failing  # type: ignore[method-assign]
    # When it runs its last checks
    run.finish()
    # Then they end by their end, retrying a failed round every ROUND_RETRY_S (review: a failed
    # round's messages were due again at once, and the loop read the store without end, until the
    # Lambda timed out)
    assert sim.base.now() <= run.final + timedelta(seconds=4.0 + 1 + 1)
    assert 1 <= reads <= 10, reads
