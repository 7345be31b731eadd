"""The chain auditor (issue 28): chains broken on purpose are found and repaired from the job's
next slot, the slots lost recorded as one MISSED record; a healthy cluster sees no repair.

Real minute pollers, a real worker and the job service on the in-memory store and a manual clock
(:mod:`audit_harness`); the same scenarios run against DynamoDB under moto in
``tests/integration/test_chain_audit_dynamo.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import jsonschema
import pytest
from audit_harness import GRACE_S, INFLIGHT_GRACE_S, AuditRig, Breaker, misplaced_head

from factories import spec
from punctual.auditing import CHAIN_REPAIRED, segments_for
from punctual.auditing.liveness import head_after
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.dispatch.queues import MessageKind
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.store.base import Turn
from punctual.store.memory import MemoryStore
from punctual.timing.timers import minute_of, slot_instant, slot_key
from punctual.usecases.backfills import Backfill, BackfillState
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(t0: datetime) -> AuditRig:
    return AuditRig(MemoryStore(), ManualClock(t0))


def register(rig: AuditRig, job_id: str, schedule: str, **fields: object) -> Job:
    job, _ = rig.jobs.register("default", spec(schedule, **fields), job_id=job_id)
    return job


def runs(rig: AuditRig, job: Job) -> Counter[str]:
    """Each slot of ``job`` the target was called for, and how often (first attempts)."""
    return Counter(c.slot for c in rig.target.calls if c.job_id == job.id and c.attempt == 1)


def one_time_without_timer(rig: AuditRig, at: datetime) -> Job:
    """A one-time job of ``at`` whose timer is lost."""
    job = register(rig, "once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})")
    Breaker(rig.store).delete(rig.future_chain_timers(job)[0])
    return job


def run_now(rig: AuditRig, job: Job, times: int) -> None:
    """Run ``job`` now ``times`` times, 100 ms apart, and let the worker run them."""
    for _ in range(times):
        rig.jobs.trigger("default", job.id)
        rig.clock.advance(0.1)
    rig.work()


def waiting_for_retry(rig: AuditRig, job: Job, slot: datetime) -> datetime:
    """A slot of ``job`` that waits for its retry (attempt 1 ended at its instant), no timer."""
    fields = {"scheduled_at": slot, "finished_at": slot, "status": ExecutionStatus.RETRY_WAIT}
    rig.store.save_execution(Execution(job_id=job.id, slot=slot_key(slot), attempt=1, **fields), None, 0)
    return slot


def head_timers(rig: AuditRig, job: Job) -> list[str]:
    return [t.slot for t in rig.future_chain_timers(job)]


# --------------------------------------------------------------------------- a healthy cluster


def test_a_healthy_cluster_sees_no_repair_over_many_cycles(rig: AuditRig, t0: datetime) -> None:
    # Given every kind of chain, near and far lanes, a queue job, a dependant, a one-time job
    jobs = [
        register(rig, "minutely", "rate(1 minute)"),
        register(rig, "fast", "rate(2 seconds)"),
        register(rig, "cron", "cron(*/2 * * * ? *)"),
        register(rig, "lane-edge", "rate(3 minutes)"),
        register(rig, "four", "rate(4 minutes)"),
        register(rig, "hourly", "rate(1 hour)"),
        register(rig, "jittered", "rate(1 minute)", jitter_seconds=20),
        register(rig, "delayed", "delay(20 seconds)"),
        register(rig, "queued", "rate(5 seconds)", overlap="queue"),
        register(rig, "once", f"at({(t0 + timedelta(minutes=4)).strftime('%Y-%m-%dT%H:%M:%S')})"),
        register(rig, "later", "rate(1 minute)", start_at=(t0 + timedelta(minutes=9)).isoformat()),
    ]
    register(rig, "child", "after(minutely, cron)")
    paused = register(rig, "paused", "rate(30 seconds)")
    replaced = register(rig, "replaced", "rate(1 minute)")

    def pause() -> None:
        rig.jobs.pause("default", paused.id)

    def resume() -> None:
        rig.jobs.resume("default", paused.id)

    def replace() -> None:
        rig.jobs.replace("default", replaced.id, spec("rate(2 minutes)"))

    def late_registration() -> None:
        register(rig, "newcomer", "rate(10 seconds)")

    events = [
        (t0 + timedelta(minutes=3, seconds=12), pause),
        (t0 + timedelta(minutes=7, seconds=40), resume),
        (t0 + timedelta(minutes=5, seconds=31), replace),
        (t0 + timedelta(minutes=11, seconds=29), late_registration),
    ]
    # When it runs for 25 minutes with two pollers, one of them 2 s ahead, both killed twice
    kills = [t0 + timedelta(minutes=6, seconds=20), t0 + timedelta(minutes=14, seconds=45)]
    rig.run(25, events=events, kills=kills, skew_s=(0.0, 2.0))
    # Then every audit found every chain live, and none was repaired
    assert len(rig.reports) == 25
    assert rig.repairs == []
    assert sum(r.jobs for r in rig.reports) > 300
    assert rig.metrics.total("ChainsRepaired") == 0
    assert not [e for e in rig.events.events if e.detail_type == CHAIN_REPAIRED_EVENT]
    # (and the chains really ran: each slot once)
    for job in jobs[:3]:
        assert runs(rig, job) and max(runs(rig, job).values()) == 1
    assert rig.store.get_job("default", "once").state is JobState.COMPLETED


def test_an_audit_in_the_middle_of_a_release_finds_the_chain_live(rig: AuditRig, t0: datetime) -> None:
    # Given a job whose slot is being released: sent, its next timer not written yet
    job = register(rig, "job", "rate(1 minute)")
    audits = []
    put = rig.store.put_timers

    def audit_first(timers):  # type: ignore[no-untyped-def]
        if any(t.job_id == job.id for t in timers) and rig.clock.now() > t0 + timedelta(minutes=4):
            audits.append(rig.audit())
        put(timers)

    rig.store.put_timers = audit_first  # type: ignore[method-assign]
    # When the auditor runs right then (however long since the chain's last change)
    rig.run(8)
    # Then it saw the slot's own timer (kept after it fired) and repaired nothing
    assert audits
    assert rig.repairs == []


def test_a_job_just_registered_or_replaced_is_not_judged(rig: AuditRig, t0: datetime) -> None:
    rig.run(3)
    job = register(rig, "new", "rate(1 minute)")
    report = rig.audit()
    assert (report.recent, report.repairs) == (1, [])
    rig.clock.advance(GRACE_S + 1)
    rig.jobs.replace("default", job.id, spec("rate(5 minutes)"))
    assert (rig.audit().recent, rig.repairs) == (1, [])


# --------------------------------------------------------------------------- broken on purpose


def test_a_deleted_timer_is_repaired_from_the_next_slot_and_the_lost_slots_recorded(
    rig: AuditRig, t0: datetime
) -> None:
    job = register(
        rig,
        "job",
        "rate(1 minute)",
        alerts=[{"on": ["missed"], "target": {"type": "http", "url": "https://example.com/a"}}],
    )
    rig.run(3)
    breaker = Breaker(rig.store)
    # Given its head timer is deleted
    [head] = rig.future_chain_timers(job)
    breaker.delete(head)
    # When the cluster and the auditor go on
    rig.run(8)
    # Then one repair: the slots from the deleted one to the repair were recorded MISSED, as one
    # record, and the chain goes on from the next slot
    [repair] = rig.repairs
    assert (repair.kind, repair.applied, repair.missed_from) == ("clock", True, head.slot)
    missed = [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    assert len(missed) == 1
    record = missed[0]
    assert record.slot == head.slot and record.error and record.error.startswith(CHAIN_REPAIRED)
    assert (record.last_slot, record.slot_count) == (repair.missed_through, repair.missed_count)
    assert repair.missed_count == 2  # found GRACE_S (2 minutes) after the lost slot's instant, at most
    ran = runs(rig, job)
    lost = {slot_key(datetime.fromisoformat(head.slot.replace("Z", "+00:00")) + i * MINUTE) for i in range(2)}
    assert not lost & set(ran)
    assert repair.next_slot in ran and max(ran.values()) == 1
    assert head_timers(rig, job)  # the chain is alive again
    # And it was told: the event (valid against the schema), the metrics, the job's missed alert
    [event] = [e for e in rig.events.events if e.detail_type == CHAIN_REPAIRED_EVENT]
    jsonschema.validate(event.detail, SCHEMA)
    assert event.detail["status"] == "REPAIRED" and event.detail["missed_count"] == 2
    assert rig.metrics.total("ChainsRepaired") == 1 and rig.metrics.total("ChainsBroken") == 1
    assert rig.store.get_job("default", job.id).skipped_slots == 2
    alerts = [m for m in rig.sim.sent(job.id) if m.kind == MessageKind.ALERT]
    assert [m.slot for m in alerts] == [head.slot]  # a worker raises the range's missed alert


def test_a_timer_of_another_version_is_repaired(rig: AuditRig) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    breaker = Breaker(rig.store)
    [head] = rig.future_chain_timers(job)
    breaker.rewrite_version(head, job.version + 1)  # the poller drops it as stale
    rig.run(6)
    [repair] = rig.repairs
    assert repair.kind == "clock" and repair.missed_from == head.slot
    assert max(runs(rig, job).values()) == 1 and repair.next_slot in runs(rig, job)


@pytest.mark.parametrize("shift_s", [-150, 150])
def test_a_head_timer_in_the_wrong_minute_is_reported_as_misplaced_and_its_slot_runs_once(
    rig: AuditRig, shift_s: int
) -> None:
    # Given the head's timer is in a bucket minutes earlier or later than its slot's, when the
    # auditor and the cluster go on past the slot
    job, head = misplaced_head(rig, Breaker(rig.store), "rate(10 minutes)", 12, shift_s)
    # Then it was found where it is, not reported as "no timer of slot" with a chain restarted:
    # the right timer written beside it, no slot recorded lost, the slot run once
    [repair] = rig.repairs
    assert (repair.kind, repair.applied, repair.next_slot, repair.missed_count) == (
        "misplaced",
        True,
        head.slot,
        0,
    )
    assert repair.reason.startswith(f"timer of slot {head.slot} in the wrong minute"), repair.reason
    assert "the right one written, the stray left (harmless" in repair.reason
    assert head.sk in {t.sk for t in rig.chain_timers(job)}
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    ran = runs(rig, job)
    assert ran[head.slot] == 1 and max(ran.values()) == 1
    assert head_timers(rig, job)  # and the chain goes on
    [event] = [e for e in rig.events.events if e.detail_type == CHAIN_REPAIRED_EVENT]
    jsonschema.validate(event.detail, SCHEMA)
    assert event.detail["repair"] == "misplaced" and event.detail["missed_count"] == 0


def test_a_release_that_wrote_no_next_timer_is_repaired_without_counting_its_slot_lost(
    rig: AuditRig, t0: datetime
) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    breaker = Breaker(rig.store)
    # Given the next release sends its slot but its next timer is lost
    breaker.drop_next_timers(job)
    rig.run(1, audit_at_s=None)  # (no audit while the fault lasts: it would be dropped too)
    breaker.stop_dropping()
    sent = rig.sent_slots(job)[-1]
    assert breaker.dropped and head_timers(rig, job) == []
    rig.run(6)
    # Then the slot that was sent ran (once) and is not among the lost ones
    [repair] = rig.repairs
    assert runs(rig, job)[sent] == 1
    assert repair.missed_from is not None and repair.missed_from > sent
    assert max(runs(rig, job).values()) == 1


def test_a_chain_broken_behind_many_run_now_slots_is_repaired_from_its_lost_slot(rig: AuditRig) -> None:
    # Given a job that ran its scheduled slots, then was run now more times than the auditor's
    # look for the newest scheduled record reads (150 records), and whose head timer is lost
    job = register(rig, "job", "rate(10 minutes)")
    rig.run(12)
    run_now(rig, job, 160)
    [head] = rig.future_chain_timers(job)
    Breaker(rig.store).delete(head)
    # When the cluster goes on past the lost slot, then the auditor too
    rig.run(8, audit_at_s=None)
    rig.run(20)
    # Then the chain was repaired once from the lost slot, recorded MISSED (QA27: the repair's
    # lost range began at the job's first slot, run long ago, so its lock failed at every pass,
    # nothing was written and the job never fired again)
    [repair] = rig.repairs
    assert (repair.kind, repair.applied, repair.missed_from, repair.missed_count) == (
        "clock",
        True,
        head.slot,
        1,
    )
    scheduled = {slot: count for slot, count in runs(rig, job).items() if "~" not in slot}
    assert head.slot not in scheduled and repair.next_slot in scheduled and max(scheduled.values()) == 1
    assert len(scheduled) == 3  # 10:10, then from the repair on: 10:30 and 10:40
    assert head_timers(rig, job)  # the chain is alive again


def test_a_live_delay_chain_behind_many_run_now_slots_is_not_repaired(rig: AuditRig) -> None:
    # Given a delay job run now more times than the auditor's look for its newest scheduled run
    # reads (150 records), its chain live
    job = register(rig, "job", "delay(5 minutes)")
    rig.run(12)
    run_now(rig, job, 160)
    # When the cluster and the auditor go on
    rig.run(30)
    # Then nothing was repaired (QA27: the chain was judged from the job's registration, its first
    # slot's timer not found, and that slot, run long ago, armed again: a false Chain Repaired,
    # and a second chain once that slot's record had expired), and each slot ran once
    assert rig.repairs == []
    assert sum(report.skipped for report in rig.reports) > 0  # not judged while it cannot be
    scheduled = {slot: count for slot, count in runs(rig, job).items() if "~" not in slot}
    assert len(scheduled) == 8 and max(scheduled.values()) == 1


def test_an_auditor_whose_clock_is_ahead_records_no_slot_lost_that_is_not_due_yet(rig: AuditRig) -> None:
    # Given a job whose chain broke, found by an auditor whose clock is 30 s ahead of the cluster's
    job = register(rig, "job", "rate(1 minute)")
    rig.run(3)
    breaker = Breaker(rig.store)
    for timer in rig.future_chain_timers(job):
        breaker.delete(timer)
    rig.auditor.clock = OffsetClock(rig.clock, 30)
    rig.run(8, audit_at_s=None)
    # When it audits 40 s into a minute (20 s before the next slot, after it on its own clock)
    rig.run(3, audit_at_s=40)
    # Then the slots it records lost were all due when it repaired, and the next one ran (QA27: the
    # slot due 20 s later was recorded MISSED, never run)
    [repair] = rig.repairs
    [record] = [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    repaired = record.finished_at - timedelta(seconds=30)
    assert repair.missed_through is not None and slot_instant(repair.missed_through) <= repaired
    assert repair.next_slot == slot_key(minute_of(repaired) + MINUTE)
    assert runs(rig, job)[repair.next_slot] == 1 and max(runs(rig, job).values()) == 1


def test_a_one_time_job_found_broken_by_an_auditor_ahead_runs_at_its_instant(
    rig: AuditRig, t0: datetime
) -> None:
    # Given a one-time job whose timer was lost, found 20 s before its instant by an auditor 30 s ahead
    at = t0 + timedelta(minutes=8)
    job = one_time_without_timer(rig, at)
    rig.auditor.clock = OffsetClock(rig.clock, 30)
    rig.run(5, audit_at_s=None)  # (the audit below is the first, 20 s before its instant)
    rig.run(3, audit_at_s=40)
    # Then it runs, once, and completes (QA27: it was recorded MISSED and COMPLETED before its instant)
    assert runs(rig, job) == {slot_key(at): 1}
    assert [r.status for r in rig.history(job)] == [ExecutionStatus.SUCCEEDED]
    assert rig.store.get_job("default", job.id).state is JobState.COMPLETED


def test_a_broken_chains_released_slot_still_waiting_for_a_worker_is_not_recorded_lost(
    rig: AuditRig,
) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    breaker = Breaker(rig.store)
    # Given a release that sent its slot and lost its next timer, the slot's message not yet run
    # past the grace (the workers behind)
    breaker.drop_next_timers(job)
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]
    rig.run(1, audit_at_s=None)
    breaker.stop_dropping()
    held = rig.chain_timers(job)[-1].slot  # the last slot released from its stored timer
    rig.run(4)
    rig.work = work  # type: ignore[method-assign]
    rig.run(3)
    # Then the chain was repaired, the slot released ran once, not recorded lost (QA27: the lost
    # range began at it, its record MISSED and its run dropped)
    [repair] = rig.repairs
    assert repair.missed_from is not None and repair.missed_from > held
    assert runs(rig, job)[held] == 1 and max(runs(rig, job).values()) == 1


def test_a_dead_delay_chain_runs_its_next_run_late_and_loses_nothing(rig: AuditRig) -> None:
    job = register(rig, "job", "delay(20 seconds)")
    rig.run(2)
    breaker = Breaker(rig.store)
    breaker.drop_next_timers(job)  # the next run's timer, written at the run's end, is lost
    rig.run(1, audit_at_s=None)
    breaker.stop_dropping()
    before = len(runs(rig, job))
    rig.run(5)
    [repair] = rig.repairs
    assert repair.kind == "delay" and repair.missed_count == 0
    assert len(runs(rig, job)) > before + 3  # it runs again, every 20 s after the previous end
    assert max(runs(rig, job).values()) == 1
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]


def test_a_delay_chain_through_excluded_slots_is_live_not_repaired(rig: AuditRig, t0: datetime) -> None:
    # QA28: a delay() job's slot on an excluded day has no run whose end writes the next timer; the
    # release writes it, N after the slot, and the auditor looks for it there, however late the
    # release was (a jitter's seconds): not a suspect, no repair, no second chain
    CalendarService(rig.store, rig.clock).put("default", "today", CalendarSpec(dates=[f"{t0:%Y-%m-%d}"]))
    job = register(rig, "job", "delay(5 minutes)", exclude_calendars=["today"], jitter_seconds=40)
    rig.run(22)
    excluded = [r.slot for r in rig.history(job) if r.status is ExecutionStatus.EXCLUDED]
    assert len(excluded) >= 4 and len(rig.history(job)) == len(excluded)
    gaps = {slot_instant(b) - slot_instant(a) for a, b in pairwise(excluded)}
    assert gaps == {timedelta(minutes=5)} and not runs(rig, job)
    assert [report.suspects for report in rig.reports] == [0] * len(rig.reports)
    assert rig.repairs == [] and len(rig.future_chain_timers(job)) == 1


def test_a_one_time_job_whose_timer_is_lost_is_recorded_missed_and_completed(
    rig: AuditRig, t0: datetime
) -> None:
    at = t0 + timedelta(minutes=3)
    job = one_time_without_timer(rig, at)
    rig.run(6, audit_at_s=None)  # (an audit before its instant would re-arm it: nothing lost then)
    rig.run(2)
    [repair] = rig.repairs
    assert (repair.kind, repair.missed_from, repair.missed_count) == ("completion", slot_key(at), 1)
    stored = rig.store.get_job("default", job.id)
    assert stored.state is JobState.COMPLETED and CHAIN_REPAIRED in (stored.state_reason or "")
    assert [r.status for r in rig.history(job)] == [ExecutionStatus.MISSED]


@pytest.mark.parametrize("end", ["at", "end_at"])
def test_last_slots_released_and_waiting_for_a_worker_are_not_recorded_lost(
    rig: AuditRig, t0: datetime, end: str
) -> None:
    # Given a job whose last slots were released, their messages not yet run past the grace (the
    # workers behind, or the messages held by a rate budget or an outage's backoff)
    last = t0 + timedelta(minutes=3)
    if end == "at":
        job = register(rig, "j", f"at({last.strftime('%Y-%m-%dT%H:%M:%S')})")
    else:
        job = register(rig, "j", "rate(1 minute)", end_at=last.isoformat())
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]
    rig.run(9)
    rig.work = work  # type: ignore[method-assign]
    # When the workers catch up
    rig.run(3)
    # Then every slot ran once, none was recorded lost, and the job completed (QA27: the auditor
    # found it "still ENABLED with no slot left", recorded the slots MISSED and their runs were
    # dropped)
    assert rig.repairs == []
    assert set(runs(rig, job).values()) == {1} and slot_key(last) in runs(rig, job)
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    assert rig.store.get_job("default", job.id).state is JobState.COMPLETED


def test_a_one_time_job_left_enabled_after_its_run_is_completed_with_nothing_lost(
    rig: AuditRig, t0: datetime
) -> None:
    at = t0 + timedelta(minutes=2)
    job = register(rig, "once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})")
    replace_job = rig.store.replace_job
    lost = []
    losing = [True]  # every COMPLETED write is dropped while this holds (a bug that skips it)

    def completion_lost(job_, expected_version, timers=(), **kw):  # type: ignore[no-untyped-def]
        if job_.state is JobState.COMPLETED and losing:
            lost.append(job_)
            return None  # reported written, never written: nothing retries it
        return replace_job(job_, expected_version, timers, **kw)

    rig.store.replace_job = completion_lost  # type: ignore[method-assign]
    rig.run(2)
    losing.clear()
    assert lost and rig.store.get_job("default", job.id).state is JobState.ENABLED
    rig.run(5)
    [repair] = rig.repairs
    assert (repair.kind, repair.missed_count) == ("completion", 0)
    assert rig.store.get_job("default", job.id).state is JobState.COMPLETED
    assert [r.status for r in rig.history(job)] == [ExecutionStatus.SUCCEEDED]


def test_a_dependant_that_lost_its_link_is_linked_again(rig: AuditRig, t0: datetime) -> None:
    parent = register(rig, "parent", "rate(1 minute)")
    child = register(rig, "child", "after(parent)")
    rig.store.set_dependents("default", child.id, ["parent"], present=False)  # the half-done write
    rig.run(5)
    [repair] = rig.repairs
    assert repair.kind == "dependency"
    assert rig.store.list_dependents("default", parent.id) == [child.id]
    assert runs(rig, child)  # the parent's next successes dispatch it again


def test_an_after_job_whose_parent_is_gone_is_reported_every_run_never_repaired(rig: AuditRig) -> None:
    """A delete refuses a parent its children name; one that went anyway (before that rule, or a race
    with a child's write) leaves a job nothing can dispatch: said each run, loudly, not "live"."""
    register(rig, "parent", "rate(1 minute)")
    child = register(rig, "child", "after(parent)")
    rig.store.delete_job("default", "parent", parents=())  # underneath the refusal
    rig.run(4)
    judged = [r for r in rig.reports if r.jobs and not r.recent]  # (the first run: just registered)
    assert len(judged) >= 2 and all(r.orphans == 1 and r.live == 0 for r in judged), rig.reports
    assert not rig.repairs and rig.store.get_job("default", child.id).state is JobState.ENABLED
    assert rig.metrics.total("JobsOrphaned") >= 1


def test_an_after_job_whose_parents_share_no_slot_is_reported_as_never_firing(rig: AuditRig) -> None:
    """A write refuses such parents; a child written before that rule (or a parent's spec changed
    underneath) is said each run, as an orphan is: nothing will ever dispatch it."""
    register(rig, "a", "cron(0 * * * ? *)")
    register(rig, "b", "cron(0 */2 * * ? *)")
    child = register(rig, "child", "after(a, b)")
    rig.store.replace_job(
        rig.store.get_job("default", "b").model_copy(update={"schedule": "cron(30 * * * ? *)", "version": 2}),
        1,
    )
    rig.run(4)
    judged = [r for r in rig.reports if r.jobs and not r.recent]
    assert len(judged) >= 2 and all(r.orphans == 1 for r in judged), rig.reports
    assert all(r.job_id != child.id for r in rig.repairs)  # (b's chain, written underneath, is mended)
    assert rig.store.get_job("default", child.id).state is JobState.ENABLED
    # A parent paused says why by itself: not reported
    rig.jobs.pause("default", "b")
    rig.reports.clear()
    rig.run(2)
    assert all(r.orphans == 0 for r in rig.reports if r.jobs), rig.reports


def test_a_queued_slot_whose_hand_over_was_lost_gets_the_turn(rig: AuditRig, t0: datetime) -> None:
    job = register(rig, "q", "rate(1 hour)", overlap="queue")
    holder, waiting = slot_key(t0 - timedelta(hours=2)), slot_key(t0 - timedelta(hours=1))
    done = Execution(
        job_id=job.id,
        slot=holder,
        scheduled_at=t0 - timedelta(hours=2),
        status=ExecutionStatus.SUCCEEDED,
        finished_at=t0 - timedelta(hours=2),
    )
    queued = Execution(
        job_id=job.id, slot=waiting, scheduled_at=t0 - timedelta(hours=1), status=ExecutionStatus.QUEUED
    )
    rig.store.save_execution(done, None, 0)
    rig.store.save_execution(queued, None, 0)
    rig.store.take_turn("default", job.id, holder, t0 - timedelta(hours=2))
    rig.store.wait_for_turn("default", job.id, waiting)
    rig.clock.advance(GRACE_S + 1)
    rig.run(3)
    [repair] = rig.repairs
    assert repair.kind == "queued" and repair.next_slot == waiting
    assert runs(rig, job)[waiting] == 1
    assert rig.store.get_turn("default", job.id) in (None, Turn())


def test_a_retry_whose_timer_was_lost_is_retried(rig: AuditRig, t0: datetime) -> None:
    job = register(rig, "d", "delay(1 hour)", retry={"max_attempts": 3, "base_seconds": 5, "max_seconds": 5})
    slot = waiting_for_retry(rig, job, t0 - timedelta(hours=1))
    rig.clock.advance(INFLIGHT_GRACE_S)
    rig.run(3)
    [repair] = rig.repairs
    assert (repair.kind, repair.next_slot) == ("retry", slot_key(slot))
    assert [(c.slot, c.attempt) for c in rig.target.calls if c.job_id == job.id] == [(slot_key(slot), 2)]


def test_a_retry_repaired_by_an_auditor_30_s_behind_is_retried(rig: AuditRig, t0: datetime) -> None:
    # Given a slot waiting for a retry whose timer was lost, found by an auditor whose clock is
    # 30 s behind the pollers', 25 s into a minute (its now in the minute before, whose pollers
    # stopped reading it 10 s past its end)
    job = register(rig, "d", "delay(1 hour)", retry={"max_attempts": 3, "base_seconds": 5, "max_seconds": 5})
    rig.run(2, audit_at_s=None)
    slot = waiting_for_retry(rig, job, t0 - timedelta(hours=1))
    rig.auditor.clock = OffsetClock(rig.clock, -30)
    rig.run(1, audit_at_s=25)
    rig.run(3, audit_at_s=None)
    # Then the retry ran (QA27: the repair's timer, due at the auditor's now, went into that
    # finished minute's bucket and was never released)
    [repair] = rig.repairs
    assert (repair.kind, repair.next_slot) == ("retry", slot_key(slot))
    assert [(c.slot, c.attempt) for c in rig.target.calls if c.job_id == job.id] == [(slot_key(slot), 2)]


def test_a_stalled_backfill_takes_its_next_step(rig: AuditRig, t0: datetime) -> None:
    job = register(rig, "b", "rate(1 hour)")
    slots = [slot_key(t0 - timedelta(hours=h)) for h in (3, 2)]
    backfill = Backfill(
        id="b" * 20,
        tenant="default",
        job_id=job.id,
        start=t0 - timedelta(hours=3),
        end=t0 - timedelta(hours=1),
        max_parallel=2,
        tick_s=2.0,
        slots=slots,
        state=BackfillState.RUNNING,
        created_at=t0,
        updated_at=t0,
    )
    rig.store.create_backfill(backfill)  # created, its first step's timer never written
    rig.clock.advance(GRACE_S + 1)
    rig.run(3)
    [repair] = rig.repairs
    assert repair.kind == "backfill"
    assert set(runs(rig, job)) >= set(slots)
    assert rig.store.get_backfill("default", job.id, backfill.id).state is BackfillState.DONE


# --------------------------------------------------------------------------- races and guards


def test_two_auditors_racing_repair_once_and_the_next_slots_run_once(rig: AuditRig) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    Breaker(rig.store).delete(rig.future_chain_timers(job)[0])
    rig.run(3, audit_at_s=None)
    # Given a second auditor that confirms the same break and repairs while the first one is
    # between its confirmation and its repair
    other = rig.make_auditor()
    clock = rig.auditor.repairer
    first_clock = clock.clock
    seen = []

    def racing(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(other.run(minute_of(rig.clock.now())))
        return first_clock(*args, **kwargs)

    clock.clock = racing  # type: ignore[method-assign]
    rig.audit()
    # Then the second repaired, the first found the lost slots' record taken and wrote nothing
    [[won]] = [r.repairs for r in seen]
    [lost] = rig.reports[-1].repairs
    assert won.applied and not lost.applied
    assert len([r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]) == 1
    rig.run(4)
    assert max(runs(rig, job).values()) == 1
    assert len(head_timers(rig, job)) == 1


def test_pollers_behind_defer_the_judgement_and_their_catch_up_needs_no_repair(
    rig: AuditRig, t0: datetime
) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    # Given no poller runs for six minutes (a dispatch outage)
    outage_end = rig.clock.now() + timedelta(minutes=6)
    while rig.clock.now() < outage_end:
        rig.clock.advance(60)
        rig.audit()
    # Then the auditor judged nothing: the chain waits in buckets not drained yet
    assert rig.repairs == []
    assert sum(r.deferred for r in rig.reports) >= 3
    # And once the pollers catch up, the chain is live (the outage's slots run under catch-up)
    rig.run(5)
    assert rig.repairs == []
    assert runs(rig, job) and max(runs(rig, job).values()) == 1


def test_with_repairs_off_a_broken_chain_is_reported_and_left_alone(t0: datetime) -> None:
    rig = AuditRig(MemoryStore(), ManualClock(t0), repair=False)
    job = register(rig, "job", "rate(1 minute)")
    rig.run(2)
    Breaker(rig.store).delete(rig.future_chain_timers(job)[0])
    rig.run(4)
    assert rig.repairs and all(not r.applied for r in rig.repairs)
    assert rig.metrics.total("ChainsBroken") >= 1 and rig.metrics.total("ChainsRepaired") == 0
    assert head_timers(rig, job) == []
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]


@pytest.mark.parametrize("period", [1, 7, 60, 300])
@pytest.mark.parametrize("segments", [1, 8, 256, 512])
def test_every_segment_is_audited_once_per_period(t0: datetime, period: int, segments: int) -> None:
    seen = Counter(
        s for m in range(period) for s in segments_for(t0 + timedelta(minutes=m), segments, period)
    )
    assert seen == Counter(range(segments))


def test_the_head_is_the_first_slot_released_after_the_instant_even_with_jitter(t0: datetime) -> None:
    from factories import job as make_job
    from punctual.timing.slots import dispatch_instant, next_slot

    job = make_job("j", "rate(10 seconds)", now=t0, jitter_seconds=25)
    for offset in range(0, 300, 7):
        instant = t0 + timedelta(seconds=offset)
        head = head_after(job, instant)
        assert head is not None and dispatch_instant(job, head) > instant
        slot = next_slot(job, t0 - timedelta(seconds=1))
        while slot is not None and slot < head:  # every earlier slot was released by then
            assert dispatch_instant(job, slot) <= instant
            slot = next_slot(job, slot)


@pytest.mark.parametrize("schedule", ["rate(1 minute)", "rate(5 minutes)"])
def test_a_repair_of_a_chain_that_was_live_after_all_doubles_no_slot_and_leaves_one_chain(
    rig: AuditRig, schedule: str
) -> None:
    # Given a live chain, and a repair written anyway (what a wrong verdict would do), two
    # minutes before its next slot: a near-lane timer beside the chain's own (far for 5 minutes)
    job = register(rig, "job", schedule)
    rig.run(6)
    now = rig.clock.now()
    head = head_after(job, now)
    assert head is not None
    rig.clock.set(head - timedelta(seconds=120))
    rig.auditor.repairer.clock(job, head, now, "forced", rig.clock.now())
    # When the cluster goes on
    rig.run(16, audit_at_s=None)
    # Then every slot ran once, and a single chain is left: one timer ahead, no more
    ran = runs(rig, job)
    assert head.strftime("%Y-%m-%dT%H:%M:%SZ") in ran and max(ran.values()) == 1
    assert len(head_timers(rig, job)) == 1


def test_a_parents_lost_slots_are_recorded_missed_for_its_after_children_too(rig: AuditRig) -> None:
    # Given a parent with an after() child (with a missed rule) that runs with it
    parent = register(rig, "parent", "rate(1 minute)")
    child = register(
        rig,
        "child",
        "after(parent)",
        alerts=[{"on": ["missed"], "target": {"type": "http", "url": "https://example.com/a"}}],
    )
    rig.run(3)
    assert runs(rig, child)  # the child runs its parent's slots
    # When the parent's head timer is deleted and the auditor repairs the chain
    [head] = rig.future_chain_timers(parent)
    Breaker(rig.store).delete(head)
    rig.run(8)
    [repair] = rig.repairs
    # Then the child's same slots are one MISSED record too (not a hole), counted and alerted
    [missed] = [r for r in rig.history(child) if r.status is ExecutionStatus.MISSED]
    assert (missed.slot, missed.last_slot, missed.slot_count) == (
        repair.missed_from,
        repair.missed_through,
        repair.missed_count,
    )
    assert missed.error == "not run: parent parent's slot was MISSED"
    assert rig.store.get_job("default", child.id).skipped_slots == repair.missed_count  # type: ignore[union-attr]
    alerts = [m for m in rig.sim.sent(child.id) if m.kind == MessageKind.ALERT]
    assert [m.slot for m in alerts] == [head.slot]
    assert not set(runs(rig, child)) & {missed.slot}


def test_a_repairs_missed_range_reaches_a_jobs_own_bus_without_a_missed_rule(rig: AuditRig) -> None:
    """QA23: the range a repair records MISSED was handed to a worker only for a job with a
    ``missed`` alert rule; a job with its own ``events_bus`` (and no rule) never had its Slot
    Missed copied there, as a poller's release does for the slots it records MISSED."""
    bus = {"type": "eventbridge", "event_bus_arn": "arn:aws:events:us-east-1:123456789012:event-bus/ops"}
    job = register(rig, "job", "rate(1 minute)", events_bus=bus)
    rig.run(3)
    [head] = rig.future_chain_timers(job)
    Breaker(rig.store).delete(head)
    rig.run(8)
    [repair] = rig.repairs
    assert repair.missed_from == head.slot
    handed = [m for m in rig.sim.sent(job.id) if m.kind == MessageKind.ALERT]
    assert [m.slot for m in handed] == [head.slot]  # its worker copies the Slot Missed to the bus


def test_a_repairs_missed_ranges_are_slot_missed_events_on_the_deployment_bus(rig: AuditRig) -> None:
    """QA23 left: the MISSED range a chain repair wrote (and its after() child's) had a Chain
    Repaired event only; a subscriber to Slot Missed, which hears of every range a poller
    records, never heard of these."""
    parent = register(rig, "parent", "rate(1 minute)")
    child = register(rig, "child", "after(parent)")
    rig.run(3)
    [head] = rig.future_chain_timers(parent)
    Breaker(rig.store).delete(head)
    rig.run(8)
    [repair] = rig.repairs
    missed = [e for e in rig.events.events if e.detail_type == SLOT_MISSED]
    assert sorted((e.detail["job_id"], e.detail["slot"]) for e in missed) == [
        (child.id, repair.missed_from),
        (parent.id, repair.missed_from),
    ]
    for event in missed:
        jsonschema.validate(event.detail, SCHEMA)
        assert event.detail["status"] == "MISSED"
        assert event.detail["slot_count"] == repair.missed_count


def test_a_completion_that_loses_its_race_still_tells_of_the_slots_it_recorded_missed(
    rig: AuditRig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (QA24): a completion repair that wrote its MISSED record and then lost the job's
    version to another writer reported itself not applied, so the records it wrote never had
    their Slot Missed or Chain Repaired event (and the next audit, finding them, sends none)."""
    from punctual.store.base import VersionConflictError

    at = t0 + timedelta(minutes=3)
    job = one_time_without_timer(rig, at)
    rig.run(6, audit_at_s=None)
    replace_job = rig.store.replace_job

    def raced(new: Job, *args: object, **kwargs: object) -> object:
        if new.state is JobState.COMPLETED:  # another writer moved the job first
            raise VersionConflictError("job moved", new.version + 1)
        return replace_job(new, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.store, "replace_job", raced)
    rig.run(2)
    repair = rig.repairs[0]  # (the job stays ENABLED here: the next audits try again)
    assert repair.applied and repair.missed_count == 1
    assert [r.status for r in rig.history(job)] == [ExecutionStatus.MISSED]
    kinds = [e.detail_type for e in rig.events.events]
    assert CHAIN_REPAIRED_EVENT in kinds and SLOT_MISSED in kinds
