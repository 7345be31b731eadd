"""The chaos verdict on hand-made runs: it counts what it must and names every violation.

No processes: a ledger, receiver records and execution records are written the way a run
writes them (tests/chaos_runs.py), then judged (local/chaos/verdict.py). The fire delay and the
alert and target-call counts: test_chaos_verdict_delays.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos_runs import T0, RunBuilder, S, at, key, kinds, ts
from local.chaos.ledger import load, time_slots
from local.chaos.verdict import judge_dir
from local.chaos.verdict_data import Bounds
from punctual.execution import LEASE_LOST_NOTE
from punctual.models import RetryPolicy
from punctual.timing.retries import next_retry_at, seeded_random


@pytest.fixture
def run(tmp_path: Path) -> RunBuilder:
    return RunBuilder(tmp_path)


def test_every_owed_slot_once_is_a_clean_verdict(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    for slot in range(0, 40, 5):
        run.ran(job, slot)
    verdict = run.judge(cut=20)
    # 0, 5, 10, 15, 20 are owed; 25..35 ran after the cut (optional)
    assert (verdict.slots, verdict.executed_once, verdict.duplicates, verdict.missed, verdict.early) == (
        5,
        5,
        0,
        0,
        0,
    )
    assert verdict.ok and verdict.line() == (
        "slots 5, executed once 5, duplicates 0, missed 0, early 0, chain repairs 0, faults 3, "
        "fire delay p50 0.11 s p99 0.11 s max 0.11 s (5 slots)"
    )


def test_an_attempt_delivered_twice_is_a_duplicate_named_by_its_slot(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0)
    run.ran(job, 5, requests=[(1, 5.1, 5.2, 200), (1, 5.3, 5.4, 200)])
    verdict = run.judge(cut=5)
    assert verdict.duplicates == 1 and verdict.executed_once == 1 and not verdict.ok
    [violation] = verdict.violations
    assert (violation.kind, violation.job, violation.slot) == ("duplicate", "rate-00", key(5))
    assert "attempt 1 reached the receiver again" in violation.detail


def test_a_request_after_the_slot_succeeded_is_a_duplicate(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0, requests=[(1, 0.15, 0.18, 200), (2, 9.0, 9.1, 200)])
    verdict = run.judge(cut=4)
    assert verdict.duplicates >= 1 and "duplicate" in kinds(verdict)


def test_an_owed_slot_that_never_ran_is_missed_with_a_diagnosis(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0)
    run.ran(job, 10)
    run.kill("worker-1", 5.5)
    verdict = run.judge(cut=10)
    assert (verdict.slots, verdict.missed) == (3, 1)
    [violation] = verdict.violations
    assert violation.kind == "missed" and violation.slot == key(5)
    assert "no execution record" in violation.detail and "worker-1 +0.5s" in violation.detail


def test_a_slot_stuck_running_is_missed(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    # (what the first chaos run found: a taken-over attempt whose worker died too, never recovered)
    run.ran(
        job,
        0,
        attempts=[(S.TIMED_OUT, 0.1, 21, LEASE_LOST_NOTE), (S.RUNNING, 21, 22, None)],
        requests=[(1, 0.2, 3.0, 200), (2, 21.1, 24.0, 200)],
        final=S.RUNNING,
    )
    run.executions[job][0].attempts.pop()  # a running attempt is not on the list yet
    run.kill("worker-2", 3)
    run.kill("worker-1", 24.1)
    verdict = run.judge(cut=2)
    assert (verdict.missed, verdict.duplicates) == (1, 0)
    assert kinds(verdict) == ["missed"]
    assert "record RUNNING attempt 2" in verdict.violations[0].detail


def test_early_is_measured_against_the_largest_clock_offset(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 3.0, 3.1, None)])
    assert run.judge(cut=5, skew_s=1.0).early == 1


def test_a_release_within_the_skew_is_not_early(tmp_path: Path) -> None:
    run = RunBuilder(tmp_path)
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=5)
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 3.0, 3.1, None)])
    verdict = run.judge(cut=5, skew_s=2.5)
    assert verdict.early == 0 and verdict.ok


def test_slots_of_a_paused_interval_are_not_owed_when_the_job_does_not_catch_up(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0, catchup="none")
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    run.change("rate-00", "resume", 130, 3, "ENABLED", 135)
    for slot in [*range(0, 40, 5), *range(135, 160, 5)]:
        run.ran(job, slot)
    verdict = run.judge(cut=155)
    # owed: 0..35 (before the 60 s guard ahead of the pause), 135..155; 40..130 optional and absent
    assert (verdict.slots, verdict.executed_once, verdict.missed) == (13, 13, 0), verdict.violations
    expected = time_slots(load(run.path).jobs["rate-00"], ts(155), ts(160), 0.0)
    assert not expected[key(100)].owed and "pause" in expected[key(100)].reason
    assert not expected[key(120)].owed and expected[key(140)].owed


def test_slots_due_while_paused_are_owed_by_the_resume_under_catch_up_all(run: RunBuilder) -> None:
    # Given a job with the default catch-up policy (all), paused at 100 and resumed at 130: the
    # resume runs every slot the pause owes (docs/how-it-works.md, "Resuming"), late
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    run.change("rate-00", "resume", 130, 3, "ENABLED", 135)
    for slot in [*range(0, 40, 5), *range(135, 160, 5)]:
        run.ran(job, slot)
    # When none of the slots due inside the pause ran
    verdict = run.judge(cut=155, skew_s=2.0)
    # Then those strictly inside it (more than the skew and a margin after the pause, before the
    # resume) are missed: 105..125; 100 (the pause's own instant) and 130 (the resume's) may go
    missed = sorted(v.slot for v in verdict.violations if v.kind == "missed")
    assert missed == [key(s) for s in range(105, 130, 5)], verdict.violations
    # And once the resume ran them (late, by design), each is once and left out of the fire delay
    for slot in range(105, 130, 5):
        run.ran(job, slot, attempts=[(S.SUCCEEDED, 130.5, 130.6, None)], requests=[(1, 130.55, 130.58, 200)])
    verdict = run.judge(cut=155, skew_s=2.0)
    assert verdict.ok and (verdict.slots, verdict.executed_once) == (18, 18), verdict.violations
    assert verdict.fire_delay is not None and verdict.fire_delay.max < 1.0
    assert verdict.delay_excluded == {"due while paused, run by the resume (late by design)": 5}


def test_a_rerun_after_a_lost_worker_needs_a_kill_to_explain_it(run: RunBuilder) -> None:
    lost = [(S.TIMED_OUT, 0.1, 21.0, LEASE_LOST_NOTE), (S.SUCCEEDED, 21.0, 21.5, None)]
    two_oks = [(1, 0.2, 3.0, 200), (2, 21.1, 21.4, 200)]
    job = run.job("rate-00", "rate", "rate(60 seconds)", first=0)
    run.ran(job, 0, attempts=lost, requests=two_oks)
    run.kill("worker-1", 1.0)
    assert run.judge(cut=10).ok


def test_a_lapsed_lease_without_a_crash_is_two_owners(run: RunBuilder) -> None:
    lost = [(S.TIMED_OUT, 0.1, 21.0, LEASE_LOST_NOTE), (S.SUCCEEDED, 21.0, 21.5, None)]
    job = run.job("rate-00", "rate", "rate(60 seconds)", first=0)
    run.ran(job, 0, attempts=lost, requests=[(1, 0.2, 25.0, 200), (2, 21.1, 21.4, 200)])
    run.kill("ecs-worker", 1.0)  # the wrong runtime: no Lambda worker died
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["owners", "owners"]
    assert any("in flight at the receiver at once" in v.detail for v in verdict.violations)


def test_a_retry_before_its_backoff_instant_is_a_violation(run: RunBuilder) -> None:
    retry = {"max_attempts": 5, "backoff": "fixed", "base_seconds": 3, "max_seconds": 3, "jitter": False}
    job = run.job("flaky-00", "flaky", "rate(60 seconds)", first=0, retry=retry)
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "HTTP 500"), (S.SUCCEEDED, 1.5, 1.6, None)],
        requests=[(1, 0.11, 0.19, 500), (2, 1.51, 1.59, 200)],
    )
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["retries"] and "before its backoff instant" in verdict.violations[0].detail


def test_a_jittered_retry_at_its_instant_passes(run: RunBuilder) -> None:
    retry = {"max_attempts": 5, "backoff": "exponential", "base_seconds": 2, "max_seconds": 8, "jitter": True}
    job = run.job("flaky-00", "flaky", "rate(60 seconds)", first=0, retry=retry)
    due = next_retry_at(
        RetryPolicy.model_validate(retry),
        failed_attempt=1,
        failed_at=at(0.2),
        scheduled_at=at(0),
        rng=seeded_random(job, key(0), 1),
    )
    assert due is not None
    start = (due - T0).total_seconds() + 0.05
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "HTTP 500"), (S.SUCCEEDED, start, start + 0.1, None)],
        requests=[(1, 0.11, 0.19, 500), (2, start + 0.01, start + 0.09, 200)],
    )
    assert run.judge(cut=10).ok


def test_a_job_meant_to_fail_must_use_every_attempt_and_never_succeed(run: RunBuilder) -> None:
    retry = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 2, "max_seconds": 2, "jitter": False}
    job = run.job("doomed-00", "doomed", "rate(60 seconds)", first=0, retry=retry, meant_to_fail=True)
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "500"), (S.FAILED, 2.3, 2.4, "500")],
        requests=[(1, 0.11, 0.19, 500), (2, 2.31, 2.39, 500)],
        final=S.FAILED,
    )
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["terminal"] and "after 2 of 3 attempts" in verdict.violations[0].detail


def test_a_child_that_ran_without_both_parents_breaks_the_dependency(run: RunBuilder) -> None:
    a = run.job("pair-00a", "pair", "rate(10 seconds)", first=0)
    b = run.job("pair-00b", "pair", "rate(10 seconds)", first=0)
    child = run.job(
        "after-pair-00",
        "after",
        "after(id-pair-00a, id-pair-00b)",
        first=None,
        parents=("pair-00a", "pair-00b"),
    )
    run.ran(a, 0)
    run.ran(b, 0, final=S.FAILED, attempts=[(S.FAILED, 0.1, 0.2, "500")])
    run.ran(a, 10)
    run.ran(b, 10, attempts=[(S.SUCCEEDED, 10.1, 10.4, None)])
    run.ran(child, 0, attempts=[(S.SUCCEEDED, 0.5, 0.6, None)])
    run.ran(child, 10, attempts=[(S.SUCCEEDED, 10.3, 10.5, None)])  # before b's success was recorded
    verdict = run.judge(cut=10)
    details = sorted((v.kind, v.slot) for v in verdict.violations)
    assert ("phantom", key(0)) in details  # no slot both parents succeeded for
    assert ("dependency", key(10)) in details
    # b's failed slot 0 is a missed owed slot of b: it was meant to succeed
    assert ("missed", key(0)) in details


def test_a_delay_chain_is_owed_from_each_finish(run: RunBuilder) -> None:
    job = run.job("delay-00", "delay", "delay(5 seconds)", first=None, registered=-0.5)
    # registered at -0.5 s: anchor 0, first slot 5; each next slot = ceil(finish) + 5
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 5.1, 6.3, None)])
    run.ran(job, 12, attempts=[(S.SUCCEEDED, 12.1, 12.2, None)])
    verdict = run.judge(cut=20)
    assert (verdict.slots, verdict.missed) == (3, 1)  # 5, 12 and 18 (= ceil(12.2) + 5) owed; 18 never ran
    assert verdict.violations[0].slot == key(18)


def test_a_slot_due_before_a_pause_but_not_started_may_be_skipped(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    for slot in range(0, 35, 5):
        run.ran(job, slot)
    # slot 35 was delivered late (its worker died holding it) and found the job paused
    run.ran(job, 35, attempts=[(S.SKIPPED, 100.5, 100.5, "job is paused")], final=S.SKIPPED, requests=[])
    run.executions[job][-1] = run.executions[job][-1].model_copy(update={"error": "job is paused"})
    verdict = run.judge(cut=150)
    assert verdict.ok and (verdict.slots, verdict.executed_once) == (7, 7), verdict.violations
    # a slot skipped before the pause was even asked for is missed
    run2 = RunBuilder(run.path.parent / "again")
    job = run2.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run2.change("rate-00", "pause", 100, 2, "PAUSED", None)
    run2.ran(job, 35, attempts=[(S.SKIPPED, 36, 36, "job is paused")], final=S.SKIPPED, requests=[])
    assert any(v.kind == "missed" and v.slot == key(35) for v in run2.judge(cut=150).violations)


def test_a_delay_chain_counts_from_the_slot_when_its_run_ended_before_it(run: RunBuilder) -> None:
    job = run.job("delay-00", "delay", "delay(5 seconds)", first=None, registered=-0.5)
    # slot 5 released 4 s early (a poller 4.5 s ahead) and over at 1.1: the next slot is 10, not 7
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 1.0, 1.1, None)])
    run.ran(job, 7, attempts=[(S.SUCCEEDED, 7.1, 7.2, None)])
    verdict = run.judge(cut=12, skew_s=4.5)
    assert sorted((v.kind, v.slot) for v in verdict.violations) == [("missed", key(10)), ("phantom", key(7))]


# --------------------------------------------------------------------------- backfill


def _backfilled(run: RunBuilder, ids: tuple[str, str] = ("b1", "b1")) -> str:
    job = run.job("backfill-00", "backfill", "* * * * *", first=60)
    for backfill_id, when in zip(ids, (5.0, 5.5), strict=True):
        run.ledger.write(
            "backfill",
            key="backfill-00",
            job_id=job,
            sent=ts(when),
            answered=ts(when + 0.1),
            status=202,
            job={"id": backfill_id, "slots": 3},
            spec={"start": key(-240), "end": key(-60)},
        )
    return job


def _mark(run: RunBuilder, job: str, backfill_id: str | None = "b1") -> None:
    run.executions[job] = [  # the slots before the registration ran through the backfill
        e.model_copy(update={"backfill": backfill_id}) if e.scheduled_at < T0 else e
        for e in run.executions[job]
    ]


def test_backfilled_slots_are_owed_once_and_not_counted_as_fire_delay(run: RunBuilder) -> None:
    job = _backfilled(run)
    for slot in (-240, -180, -120):  # run by the backfill, minutes after their instants
        run.ran(job, slot, attempts=[(S.SUCCEEDED, 10 + slot / 100, 11 + slot / 100, None)])
    run.ran(job, 60)  # the job's own scheduled slot
    _mark(run, job)
    verdict = run.judge(cut=70)
    assert kinds(verdict) == [] and verdict.slots == 4 and verdict.executed_once == 4
    assert any("backfilled (past slots: late by design) 3" in note for note in verdict.notes)


def test_a_backfilled_slot_run_twice_missing_or_outside_its_backfill_is_named(run: RunBuilder) -> None:
    job = _backfilled(run, ids=("b1", "b2"))
    run.ran(
        job, -240, attempts=[(S.SUCCEEDED, 8, 9, None)], requests=[(1, 8.1, 8.2, 200), (1, 8.3, 8.4, 200)]
    )
    run.ran(job, -180, attempts=[(S.SUCCEEDED, 9, 10, None)])
    run.ran(job, 60)
    _mark(run, job, None)
    verdict = run.judge(cut=70)
    assert set(kinds(verdict)) == {"backfill", "duplicate", "missed"}
    assert any("several backfills" in str(v) for v in verdict.violations)
    assert any("ran outside its backfill" in str(v) for v in verdict.violations)
    assert [v.slot for v in verdict.violations if v.kind == "missed"] == [key(-120)]


def test_a_chain_the_auditor_repaired_fails_the_run_and_is_named(run: RunBuilder) -> None:
    # Given every owed slot ran once, but the chain auditor repaired a chain during the run
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    for slot in range(0, 25, 5):
        run.ran(job, slot)
    run.chain_repairs.append(
        {
            "job_id": job,
            "repair": "clock",
            "error": "chain repaired (clock): no timer of slot 2026-11-30T10:00:10Z",
            "next_slot": "2026-11-30T10:00:20Z",
            "missed_from": "2026-11-30T10:00:10Z",
            "missed_count": 2,
        }
    )
    verdict = run.judge(cut=20)
    # Then the verdict fails with a violation naming the repair, and its line counts it
    assert not verdict.ok and kinds(verdict) == ["chain repaired"]
    (violation,) = verdict.violations
    assert violation.job == job and violation.slot == "2026-11-30T10:00:10Z"
    assert "2 slot(s) lost" in violation.detail
    assert ", early 0, chain repairs 1, faults 3, " in verdict.line()
    # And the run's files alone judge it the same
    again = judge_dir(run.save(20, Bounds()))
    assert kinds(again) == ["chain repaired"] and ", chain repairs 1, " in again.line()


def test_a_resume_that_answers_now_keeps_the_rate_grid(run: RunBuilder) -> None:
    # Given a rate(3 seconds) job paused for 7.5 s: its resume owes the slots due meanwhile, so its
    # answer's next_fire_at is the resume's own instant, milliseconds and all (a run, seed 12)
    job = run.job("rate-01", "rate", "rate(3 seconds)", first=0, catchup="none")
    run.change("rate-01", "pause", 61.2, 2, "PAUSED", None, schedule="rate(3 seconds)")
    run.change("rate-01", "resume", 68.65, 3, "ENABLED", 68.75, schedule="rate(3 seconds)")
    # When the job fires on its grid before and after (0, 3, ..., 60 and 69, 72, ...)
    for slot in [*range(0, 63, 3), *range(69, 100, 3)]:
        run.ran(job, slot)
    verdict = run.judge(cut=96)
    # Then the slots after the resume are the grid's, not a grid from 68.75 (71, 74, ... missed;
    # 69, 72, ... phantoms)
    assert verdict.ok, verdict.violations
    assert verdict.slots == 1 + 9  # 0 (before the guard ahead of the pause), 72..96 (69: the catch-up)
