"""A poller sends nothing it could not vouch for after its death (:mod:`punctual.dispatch.polling.sent_bound`).

A resumer judged which slots an earlier poller may have sent from the release marks, written
after the sends: with their writes failing while the releases went on, slots sent on time, still
waiting in a backlogged queue, were judged late again and recorded MISSED (QA33: 199 of 300). The
in-process rig of :mod:`test_redrain_fate` (workers claiming at a fixed rate, pollers killed).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from test_redrain_fate import T, _scene

from punctual.store.memory import MemoryStore


def _ms(seconds: float) -> int:
    return int((T + timedelta(seconds=seconds)).timestamp() * 1000)


def _clocks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ManualClock made from now on (the rig's base clock first)."""
    from punctual.runtime.clock import ManualClock

    clocks: list[ManualClock] = []
    real_init = ManualClock.__init__

    def init(self: ManualClock, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        clocks.append(self)

    monkeypatch.setattr(ManualClock, "__init__", init)
    return clocks


def _failing(method: str, when: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[datetime, int]]:
    """Make the store's ``method`` (of minute 12:00) raise while ``when(value, now)`` (``now``: the
    rig's clock); returns the values it accepted."""
    clocks = _clocks(monkeypatch)
    real = getattr(MemoryStore, method)
    accepted: list[tuple[datetime, int]] = []

    def failing(self: MemoryStore, minute: datetime, group: int, count: int, value: int) -> None:
        if minute == T and when(value, clocks[0].now()):
            raise RuntimeError("throttled")
        accepted.append((minute, value))
        real(self, minute, group, count, value)

    monkeypatch.setattr(MemoryStore, method, failing)
    return accepted


@pytest.mark.parametrize("fails_from_s", [30, -60])
def test_slots_sent_while_the_release_marks_failed_are_not_missed_after_the_pollers_death(
    fails_from_s: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given catch-up `none` jobs, 50 due at 12:00:20 and 300 at 12:00:45, released on time while
    # the minute's release marks fail from 12:00:30 (or from the start: no mark at all), workers
    # claiming 2 a second; the poller killed at 12:00:50, no poller until 12:03's, which drains
    # the minute again, 2 minutes after the slots
    _failing("put_progress", lambda through, now: through > _ms(fails_from_s), monkeypatch)
    early, late = _scene(
        "rate(1 hour)", {"policy": "none"}, [(20, 50), (45, 300)], [-1, 0, 3], (50, 10_000.0), 2.0
    )
    # Then no slot sent on time is recorded MISSED (199 of the 300 were, and their messages were
    # dropped at the claim): its send bound told the re-drain they may have been sent, and it sent
    # copies (the queue drops them) instead of judging them late
    assert (early.ran, early.missed) == (50, 0), early
    assert (late.missed_sent_on_time, late.missed, late.ran, late.copies) == (0, 0, 300, 0), late


def test_a_restart_long_after_its_poller_died_runs_what_it_sent_while_its_marks_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the same jobs and failing marks, the minute's poller killed at 12:00:50 and started again
    # at 12:02:30, every poller down meanwhile: the restart resumes its minute, 105 s after the slots
    _failing("put_progress", lambda through, now: through > _ms(30), monkeypatch)
    _, late = _scene("rate(1 hour)", {"policy": "none"}, [(20, 50), (45, 300)], [-1, 0, 3], (50, 100.0), 2.0)
    # Then every slot it had sent runs, none is MISSED
    assert (late.missed_sent_on_time, late.missed, late.ran) == (0, 0, 300), late


def test_a_poller_whose_send_bound_cannot_move_sends_nothing_past_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the same jobs, the minute's send bound failing to move past 12:00:30 (its release marks
    # fine) until the poller is killed at 12:00:50, no poller until 12:03's
    dead = T + timedelta(seconds=55)  # (the store mends after the kill)
    accepted = _failing("put_sent_bound", lambda bound, now: bound > _ms(30) and now <= dead, monkeypatch)
    early, late = _scene(
        "rate(1 hour)", {"policy": "none"}, [(20, 50), (45, 300)], [-1, 0, 3], (50, 10_000.0), 2.0
    )
    # Then the 12:00:20 slots, under the bound, run; the poller sent none of the 12:00:45 ones (not
    # one entry for them), and the 12:03 poller, knowing no poller sent them, keeps their policy:
    # MISSED, 2 minutes late, never sent
    assert (early.ran, early.missed) == (50, 0), early
    assert (late.entries, late.ran, late.missed, late.missed_sent_on_time) == (0, 0, 300, 0), late
    # And the bound it had was written before its sends
    assert accepted[0][1] <= _ms(30) and all(bound <= _ms(30) for _, bound in accepted[:-1]), accepted


def test_slots_held_by_a_send_bound_that_failed_for_a_while_go_once_it_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the 300 jobs due at 12:00:45, the minute's send bound failing until 12:00:47 (a
    # throttled table), no kill
    _failing("put_sent_bound", lambda bound, now: now < T + timedelta(seconds=47), monkeypatch)
    (late,) = _scene("rate(1 hour)", {"policy": "none"}, [(45, 300)], [0, 1], None, 20.0)
    # Then they are all sent once the bound moves, and run once each
    assert (late.ran, late.missed, late.copies) == (300, 0, 0), late


def test_a_minute_of_releases_moves_its_send_bound_a_few_times_and_an_idle_one_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given 600 jobs, ten due at each second of 12:00, and nothing due at 12:01
    accepted = _failing("put_sent_bound", lambda bound, now: False, monkeypatch)
    fates = _scene("rate(1 hour)", {"policy": "none"}, [(s, 10) for s in range(60)], [0, 1], None, 50.0)
    assert all((f.ran, f.missed) == (10, 0) for f in fates), fates
    # Then the minute's poller moved its bound about once each 5 s of releases (no more than 14
    # writes: a minute of work, 12 and the first and the last), the idle minute's none
    writes = [bound for minute, bound in accepted if minute == T]
    assert 10 <= len(writes) <= 14, writes
    assert not [bound for minute, bound in accepted if minute == T + timedelta(minutes=1)]


def test_slots_a_failed_release_had_sent_are_not_judged_late_again_by_its_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given 300 catch-up `none` jobs due at 12:00:05, released on time, whose next timers cannot be
    # written until 12:01:07 (the table throttled after the sends): the release fails after its
    # sends and the minute's poller retries it at each step, the last one 62 s after the slots;
    # workers claiming 2 a second, so most messages still wait then
    clocks = _clocks(monkeypatch)
    real_put = MemoryStore.put_timers

    def put_timers(self: MemoryStore, timers: Any) -> None:
        if T + timedelta(seconds=5) <= clocks[0].now() < T + timedelta(seconds=67):
            raise RuntimeError("throttled")
        real_put(self, timers)

    monkeypatch.setattr(MemoryStore, "put_timers", put_timers)
    (fates,) = _scene("rate(1 hour)", {"policy": "none"}, [(5, 300)], [0, 1, 2, 3], None, 2.0)
    # Then each retry takes the slots it had sent for maybe sent by then, and sends them again as
    # copies (the queue drops them), not judged late: every slot runs once. (Judged again as of the
    # retry, the 250 slots of the chunks after the first, never sent while the first one's retries
    # failed, were MISSED; here each retry sends the next chunk, all within seconds of 12:00:05.)
    assert (fates.missed_sent_on_time, fates.missed, fates.ran, fates.copies) == (0, 0, 300, 0), fates


def test_slots_whose_sends_failed_keep_their_policy_when_the_retry_goes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the same jobs, the queue refusing every send until 12:01:07 (the release fails before
    # it sent anything)
    import simulation

    real_send = simulation.RecordingQueues.send

    def send(self: Any, queue_url: str, messages: Any) -> Any:
        if self.base.now() < T + timedelta(seconds=67):
            raise RuntimeError("SQS unavailable")
        return real_send(self, queue_url, messages)

    monkeypatch.setattr(simulation.RecordingQueues, "send", send)
    (fates,) = _scene("rate(1 hour)", {"policy": "none"}, [(5, 300)], [0, 1, 2, 3], None, 2.0)
    # Then the retry 62 s on knows none was sent: catch-up `none` records them MISSED, none runs
    assert (fates.ran, fates.missed, fates.entries) == (0, 300, 0), fates


def test_slots_a_request_took_before_it_failed_are_not_judged_late_again_by_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the same jobs, the queue until 12:01:07 taking half of each send of more than ten
    # messages and then failing it, saying which it took (SqsQueues sends its requests of ten side
    # by side: one throttled past its retries fails the send after the others went); workers
    # claiming 2 a second
    import simulation
    from punctual.dispatch.sqs_send import SendFailed

    real_send = simulation.RecordingQueues.send
    taken: set[str] = set()

    def send(self: Any, queue_url: str, messages: Any) -> Any:
        if self.base.now() >= T + timedelta(seconds=67):
            return real_send(self, queue_url, messages)
        went = list(messages)[: len(messages) // 2] if len(messages) > 10 else list(messages)
        real_send(self, queue_url, went)
        taken.update(message.job_id for message in went)
        if len(went) < len(messages):
            raise SendFailed("SQS throttled the rest", went)

    monkeypatch.setattr(simulation.RecordingQueues, "send", send)
    (fates,) = _scene("rate(1 hour)", {"policy": "none"}, [(5, 300)], [0, 1, 2, 3], None, 2.0)
    # Then the slots whose messages went run, each once (a retry 62 s on judged them late again,
    # recorded them MISSED, and the workers dropped their messages); those never sent keep their
    # policy: MISSED
    assert taken, "the failing requests took none"
    assert (fates.missed_sent_on_time, fates.ran) == (0, len(taken)), fates
    assert fates.missed == 300 - len(taken), fates
