"""A drain's retry of a release that failed after its sends (release.ReleaseFailed) takes only
the timers that release sent for maybe sent by its failure: the timers an earlier poller may
have sent keep that poller's bound (:mod:`punctual.dispatch.polling.sent_bound`). One instant for
all of them made a slot the earlier poller never sent (due after its bound) maybe sent by the
failure, and a catch-up ``none`` slot ran late as a copy instead of being recorded MISSED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from punctual.dispatch.polling.drain import MinuteDrain
from punctual.dispatch.polling.release import ReleaseFailed, ReleaseReport
from punctual.runtime.clock import ManualClock
from punctual.store.progress import ProgressMark
from punctual.timing.timers import TimerKind, TimerLayout, slot_key, to_ms

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _ms(seconds: float) -> int:
    return to_ms(T0 + timedelta(seconds=seconds))


class _Releaser:
    """Records each release (job ids, uncertain, sent_by_ms); the first one of ``fail_once`` fails
    after sending it (ReleaseFailed)."""

    def __init__(self, fail_once: str) -> None:
        self.clock = ManualClock(T0 + timedelta(seconds=25))
        self.config = SimpleNamespace(unmarked_ms=9000, every_region_releases=False)
        self.calls: list[tuple[list[str], bool, int | None]] = []
        self.fail_once: str | None = fail_once

    def release(self, timers: Any, uncertain: bool = False, sent_by_ms: int | None = None) -> ReleaseReport:
        if not timers:
            return ReleaseReport()
        jobs = sorted(t.job_id for t in timers)
        self.calls.append((jobs, uncertain, sent_by_ms))
        if self.fail_once in jobs:
            self.fail_once = None
            raise ReleaseFailed([t for t in timers if t.job_id == jobs[0]])
        return ReleaseReport(released=len(timers))


def _timer(job_id: str, due_s: int) -> Any:
    due = T0 + timedelta(seconds=due_s)
    return TimerLayout().make(
        now=T0,
        due=due,
        job_id=job_id,
        tenant="t",
        slot=slot_key(due),
        attempt=1,
        kind=TimerKind.FIRE,
        job_version=1,
    )


def test_a_retry_takes_what_the_failed_release_sent_apart_from_what_an_earlier_poller_may_have() -> None:
    # Given a restart's drain: the poller before it may have sent what is due by 12:00:10 (its send
    # bound), its timers due by 12:00:20 uncertain; a timer due 12:00:15 (after the bound: never
    # sent) and one due 12:00:22, whose release at 12:00:25 fails after its send
    releaser = _Releaser(fail_once="b")
    drain = MinuteDrain(releaser, uncertain_through_ms=_ms(20))  # type: ignore[arg-type]
    drain.resume([ProgressMark(0, 1, None, _ms(10))], unmarked_ms=9000)
    drain.hold([_timer("a", 15), _timer("b", 22)])
    with pytest.raises(ReleaseFailed):
        drain.release_due(_ms(25))
    # When the retry goes, 65 s later
    releaser.clock.set(T0 + timedelta(seconds=90))
    drain.release_due(_ms(90))
    # Then the 12:00:15 timer is judged by the earlier poller's bound (maybe sent by 12:00:10: its
    # slot keeps its policy), the failed release's by its failure instant (12:00:25)
    retry = releaser.calls[1:]
    assert (["a"], True, _ms(10)) in retry, releaser.calls
    assert (["b"], True, _ms(25)) in retry, releaser.calls
    assert not drain.heap and not drain.failed_at


def test_each_shard_is_judged_by_the_bound_of_the_group_that_covered_it() -> None:
    # Given a past minute released by two shard groups (of two) whose pollers bounded their sends
    # at 12:00:59.999 (group 0, alive to the end) and 12:00:10 (group 1, dead early), drained by a
    # poller of another grouping whose shards span both, at 12:01:20
    releaser = _Releaser(fail_once="none")
    drain = MinuteDrain(releaser, uncertain_through_ms=_ms(80))  # type: ignore[arg-type]
    drain.resume([ProgressMark(0, 2, _ms(50), _ms(59.999)), ProgressMark(1, 2, _ms(8), _ms(10))], 9000)
    timers = [_timer(f"job-{i}", 30) for i in range(40)]
    even = {t.job_id for t in timers if t.shard % 2 == 0}
    odd = {t.job_id for t in timers if t.shard % 2 == 1}
    assert even and odd  # (both groups' shards among them)
    drain.hold(timers)
    drain.release_due(_ms(80))
    # Then the timers of group 0's shards are maybe sent by its bound, those of group 1's by its
    # own (before they were due: never sent, their policy decides), not by the furthest of the two
    sent_by = {job: at for jobs, _, at in releaser.calls for job in jobs}
    assert {sent_by[job] for job in even} == {_ms(59.999)}, releaser.calls
    assert {sent_by[job] for job in odd} == {_ms(10)}, releaser.calls
