"""The re-send watch of one shard group's poller beside the others' backlog in the same queues.

Several shard groups' pollers send to the same short queues, each watching only its own sends.
A backlog of another group's messages the workers are draining holds this poller's messages
too, none of its own is claimed meanwhile, and its watch took that for an idle queue: every
message it had waiting was re-sent (QA 2026-12-07, four groups: up to 3,700 copies a run, each
a claim the workers drop). The queue's own count covers every sender (:mod:`.resend_backlog`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from factories import job as make_job
from punctual.dispatch.polling.queue_counts import BackgroundCount, NotYet
from punctual.dispatch.polling.resend import ResendWatch
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind, message_for
from punctual.models import ExecutionStatus
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from simulation import _claim_record, catch_up_beside_another_tenant

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUEUE = "short"
AFTER_S = 4.0


class Counted(MemoryQueues):
    """Memory queues that say how many messages wait (as SQS's ApproximateNumberOfMessages)."""

    def __init__(self, count: Callable[[], int]) -> None:
        super().__init__(now=lambda: T)
        self.count = count

    def waiting(self, queue_urls: Sequence[str]) -> int:
        return self.count()


def _messages(name: str, count: int) -> list[DispatchMessage]:
    job = make_job(name, "rate(1 second)", now=T - timedelta(hours=1), tenant=name)
    slots = [T - timedelta(seconds=count - i) for i in range(count)]
    return [message_for(job, f"{s:%Y-%m-%dT%H:%M:%SZ}", s, 1, MessageKind.FIRE, T) for s in slots]


def _key(message: DispatchMessage) -> str:
    return f"{message.tenant} {message.slot}"


class TwoGroups:
    """Group A's poller sends ``backlog`` messages at T, group B's ``mine`` just after, to one
    queue; workers take it in order at ``per_second`` (those of ``dead``, by index in the queue,
    are received by a worker that died before its handler: never claimed, not counted waiting);
    each watch checked every 100 ms; the queue counts what waits, ``lag_s`` behind."""

    def __init__(
        self,
        backlog: int,
        mine: int,
        per_second: float,
        dead: frozenset[int] = frozenset(),
        lag_s: float = 0.0,
        read_before_s: float | None = None,
    ) -> None:
        self.store = MemoryStore()
        self.taken = 0
        self.lag_s = lag_s  # the count says what waited this long ago (SQS's may lag)
        self.history: list[tuple[datetime, int]] = []  # (when, how many waited), not yet seen
        self.seen: int | None = None
        self.now = T
        self.stop = T + timedelta(days=1)  # the workers take nothing after it
        self.per_second = per_second
        self.dead = dead
        self.queues = Counted(self.waiting)
        self.a = ResendWatch(self.store, self.queues, [QUEUE], RecordingMetrics(), after_s=AFTER_S)
        self.b = ResendWatch(self.store, self.queues, [QUEUE], RecordingMetrics(), after_s=AFTER_S)
        self.backlog, self.mine = _messages("acme", backlog), _messages("globex", mine)
        if read_before_s is not None:  # each watch read the (then empty) queue that long before
            for watch in (self.a, self.b):
                watch.backlogs.sent(QUEUE, T - timedelta(seconds=read_before_s))
                watch.backlogs.observe(T - timedelta(seconds=read_before_s))
        self.queues.send(QUEUE, self.backlog)
        self.a.sent(QUEUE, self.backlog, T)
        self.queues.send(QUEUE, self.mine)
        self.b.sent(QUEUE, self.mine, T)
        self.copies: list[tuple[float, str, int]] = []  # (seconds after T, _key, messages taken by then)
        self.steady: list[DispatchMessage] = []  # another sender's, one sent each 100 ms tick
        # Each watch checked only when it says it is due (as the poller's loop wakes), not each tick
        self.driven = False

    def waiting(self) -> int:
        limit = self.now - timedelta(seconds=self.lag_s)
        while self.history and self.history[0][0] <= limit:
            self.seen = self.history.pop(0)[1]
        return self.seen if self.seen is not None else len(self.queues.all_messages()) - self.taken

    def run(self, until_s: float, ends_at: datetime | None = None) -> None:
        for tick in range(int(until_s * 10) + 1):
            now = T + timedelta(milliseconds=100 * tick)
            if self.steady:
                self.queues.send(QUEUE, [self.steady.pop(0)])
            queued = self.queues.all_messages()
            while self.taken < len(queued) and T + timedelta(
                seconds=(self.taken + 1) / self.per_second
            ) <= min(now, self.stop):
                if self.taken not in self.dead:
                    _claim_record(self.store, queued[self.taken], now, ExecutionStatus.SUCCEEDED)
                self.taken += 1
            self.now = now
            self.history.append((now, len(queued) - self.taken))
            for watch in (self.a, self.b):
                if self.driven and ((due := watch.next_check()) is None or due > now):
                    continue
                before = len(self.queues.all_messages())
                watch.check(now, ends_at)
                fresh = self.queues.all_messages()[before:]
                self.copies += [(tick / 10, _key(m), self.taken) for m in fresh]


def test_a_backlog_another_group_sent_is_not_a_reason_to_re_send_mine() -> None:
    # Given another group's 80 messages in the queue, then this group's 20 behind them, workers
    # taking 10 a second in order (8 s before the workers reach mine, 10 s before they took all of
    # it; none of mine claimed by then): within the hold on the count (HOLD_PERIODS periods from
    # the first check)
    rig = TwoGroups(backlog=80, mine=20, per_second=10)
    # When both watches check as the workers drain the queue
    rig.run(until_s=40)
    # Then no copy is sent while the workers were still taking what was sent before its original:
    # each such copy only joins the queue's end and is dropped by its claim (before: this group's
    # 20 messages, each sent again up to three times)
    first_mine = 80
    assert [c for c in rig.copies if c[2] <= first_mine] == []


def test_a_watch_checked_only_when_due_reads_the_count_over_its_sends_wait() -> None:
    # Given the same, each watch checked only when it says a check or a count's read is due (as
    # the poller's loop wakes for it)
    rig = TwoGroups(backlog=80, mine=20, per_second=10)
    rig.driven = True
    rig.run(until_s=40)
    # Then no copy either (before: the count was first read at the first check, 4 s after the
    # send, with no fall seen yet, and all 20 of this group's were re-sent then)
    assert [c for c in rig.copies if c[2] <= 80] == []
    # and a message a dead worker holds there is still re-sent
    rig = TwoGroups(backlog=80, mine=1, per_second=10, dead=frozenset({80}))
    rig.driven = True
    rig.run(until_s=40)
    assert [slot for _, slot, _ in rig.copies] == [_key(rig.mine[0])]


def test_a_watch_whose_reads_had_stopped_holds_its_first_unclaimed_message_until_the_count_moves() -> None:
    # Given each watch read the queue 10 s before (its messages then claimed before their checks,
    # so its sends since do not re-arm the reads), then the same backlog and this group's 20
    rig = TwoGroups(backlog=80, mine=20, per_second=10, read_before_s=10.0)
    rig.driven = True
    rig.run(until_s=40)
    # Then no copy while the workers drain what was sent before (CI, stop 62: the first check
    # read the count with no fall seen yet and re-sent the message, one wasted copy in a third of
    # the four-group runs)
    assert [c for c in rig.copies if c[2] <= 80] == []
    # and a message a dead worker holds there is still re-sent, at most two seconds later for the
    # reads it waited on
    rig = TwoGroups(backlog=80, mine=1, per_second=10, dead=frozenset({80}), read_before_s=10.0)
    rig.driven = True
    rig.run(until_s=40)
    [(at, slot, _)] = rig.copies
    assert slot == _key(rig.mine[0])
    assert at <= 80 / 10 + 2 * AFTER_S + 2.0


def test_a_message_a_dead_worker_holds_behind_another_groups_backlog_is_re_sent_once_it_drained() -> None:
    # Given the same backlog, this group's first message received by a worker that died before its
    # handler (in flight: not counted waiting)
    rig = TwoGroups(backlog=200, mine=1, per_second=10, dead=frozenset({200}))
    rig.run(until_s=40)
    # Then it is re-sent, and no later than the backlog drained (20 s) plus the watch's period
    # and its second of re-checks
    [(at, slot, _)] = rig.copies
    assert slot == _key(rig.mine[0])
    assert at <= 200 / 10 + AFTER_S + 1.0


def test_a_dead_held_message_behind_another_groups_backlog_is_re_sent_with_a_count_behind() -> None:
    # Given the same, the queue's count 5 s behind what it holds (SQS's count is approximate)
    lag_s = 5.0
    rig = TwoGroups(backlog=200, mine=1, per_second=10, dead=frozenset({200}), lag_s=lag_s)
    rig.run(until_s=60)
    # Then it is still re-sent, at most the count's lag later than with a count in step
    [(at, slot, _)] = rig.copies
    assert slot == _key(rig.mine[0])
    assert at <= 200 / 10 + lag_s + AFTER_S + 1.0


@pytest.mark.parametrize("level", [50, 200])
def test_a_dead_held_message_in_steady_traffic_is_re_sent_soon_after_the_workers_reached_it(
    level: int,
) -> None:
    # Given another group's 50 (200) messages in front of this group's one, which a worker that
    # died before its handler holds; another sender's steady traffic (10 a second) as the workers
    # take 10 a second, so the count hovers at 50 (200), one higher each odd second (arrivals and
    # departures out of step): it falls by one every two seconds and never reaches 0
    rig = TwoGroups(backlog=level, mine=1, per_second=10, dead=frozenset({level}))
    rig.steady = _messages("initech", 1000)
    real = rig.waiting
    rig.queues.count = lambda: real() + (int((rig.now - T).total_seconds()) % 2)
    rig.run(until_s=60)
    # Then it is re-sent within twice the watch's period (and its second of re-checks) after the
    # workers reached it (5.1 s; 20.1 s), not once the count's falls add up to what waited when it
    # was first held (before: at 108 s, past its poller's end; with 200, not in 250 s) (the falls
    # undercount what the workers take when others send meanwhile)
    reached_s = (level + 1) / 10
    [(at, slot, _)] = rig.copies[:1]
    assert slot == _key(rig.mine[0])
    assert at <= reached_s + 2 * AFTER_S + 1.0


def test_a_count_that_cannot_be_read_re_sends_as_before() -> None:
    # Given a queue whose count fails to read (a throttle)
    rig = TwoGroups(backlog=200, mine=5, per_second=10)

    def fails() -> int:
        raise RuntimeError("throttled")

    rig.queues.count = fails
    rig.run(until_s=4.5)
    # Then this group's messages are re-sent at their first check, as they were without counts
    assert sorted(slot for at, slot, _ in rig.copies if at == AFTER_S) == sorted(_key(m) for m in rig.mine)


def test_a_count_that_stands_for_the_period_re_sends() -> None:
    # Given messages waiting that no worker takes (the count stands at 205)
    rig = TwoGroups(backlog=200, mine=5, per_second=10)
    rig.per_second = 1e-9  # (nobody takes anything)
    rig.run(until_s=10)
    # Then this group's are re-sent once the count stood the watch's period (not held on a
    # backlog nobody drains)
    mine = {_key(m) for m in rig.mine}
    assert {slot for _, slot, _ in rig.copies} >= mine
    assert max(at for at, slot, _ in rig.copies if slot in mine) <= 2 * AFTER_S + 1.0


def test_a_count_that_stops_falling_for_the_period_re_sends() -> None:
    # Given this group's messages behind a backlog the workers drained for 6 s, and then all
    # stopped taking (every worker gone)
    rig = TwoGroups(backlog=200, mine=5, per_second=10)
    rig.stop = T + timedelta(seconds=6)
    rig.run(until_s=15)
    # Then they are held while the count fell, and re-sent once it stood the watch's period (as
    # is what still waits of the other group's, whose own claims stopped too)
    first: dict[str, float] = {}
    for at, key, _ in rig.copies:
        first.setdefault(key, at)
    mine = [first.get(_key(m)) for m in rig.mine]
    assert all(at is not None and 6.0 + AFTER_S <= at <= 6.0 + AFTER_S + 1.0 for at in mine)


def test_the_watchs_end_re_sends_what_still_waits_in_a_draining_backlog() -> None:
    # Given this group's messages waiting behind a backlog the workers drain, the watch ending at
    # T+6 s (its poller's last checks)
    rig = TwoGroups(backlog=200, mine=5, per_second=10)
    rig.run(until_s=6, ends_at=T + timedelta(seconds=6))
    # Then they are re-sent before the watch is gone, rather than never
    assert {_key(m) for m in rig.mine} <= {slot for _, slot, _ in rig.copies}


def test_four_shard_groups_catching_up_over_the_same_queues_send_no_wasted_copy() -> None:
    # Given four shard groups (a poller and watch each) over the same short queue, one tenant's
    # four rate(1 second) jobs owing 420 slots each after 7 minutes with no poller, another
    # tenant's rate(5 seconds) job beside them, workers taking 20 a second in the order sent, the
    # queue counted as SQS does
    got = catch_up_beside_another_tenant(20.0, counted=True, jobs_owing=4, groups=4, minutes=4)
    # Then no copy is sent while the workers were still taking what was sent before its original
    # (no worker dies here: every such copy is a claim dropped in front of later slots; before:
    # 61 to 281 a run)
    assert got.wasted == 0


class _OneLate(BackgroundCount):
    """A count read off the loop, without a thread: each ask answers what the read begun at the ask
    before found then (SQS's count, read a loop late)."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count_now: Callable[[], int] = count
        self._begun: int | None = None

    def ask(self, mark: int) -> tuple[int, int]:
        done, self._begun = self._begun, self._count_now()
        if done is None:
            raise NotYet
        return done, mark


@pytest.mark.parametrize("phase", [0, 1, 2])
def test_a_message_a_dead_worker_holds_as_the_reads_restart_is_held_no_longer_than_the_bound(
    phase: int,
) -> None:
    # Given others' steady traffic on the queue (a count hovering at 50, one fall every 3 s), a
    # watch that read it 10 s before (its messages since claimed before their checks, so its reads
    # stopped), read off the loop (a loop late), and its one message received by a worker that died
    now = T

    def count() -> int:
        return 50 + (0 if int((now - T).total_seconds()) % 3 == phase else 1)

    queues = Counted(count)
    watch = ResendWatch(MemoryStore(), queues, [QUEUE], RecordingMetrics(), after_s=AFTER_S)
    watch.backlogs._reader = lambda url: _OneLate(count)  # type: ignore[method-assign]
    for second in (10, 9):
        now = T - timedelta(seconds=second)
        watch.backlogs.sent(QUEUE, now)
        watch.backlogs.observe(now)
    [dead] = _messages("acme", 1)
    queues.send(QUEUE, [dead])
    watch.sent(QUEUE, [dead], T)
    # When the poller checks as its loop does (every 0.1 s)
    for tick in range(1, 301):
        now = T + timedelta(seconds=tick / 10)
        if watch.check(now):
            break
    # Then it is re-sent within the bound on a hold on the count, HOLD_PERIODS periods from its
    # first check (and a second): the seconds it was held while the reads restarted count (review
    # of 873777c6: its hold on the count started after them, re-sent up to 15 s after its send)
    assert now <= T + timedelta(seconds=AFTER_S + 2 * AFTER_S + 1)
    assert [m.resend for m in queues.all_messages()] == [0, 1]


def test_a_message_a_dead_worker_holds_is_held_once_as_the_reads_restart_however_often_they_do() -> None:
    # Given a count standing at 50 (others' messages, not falling), and a poller's loop busy enough
    # to check only every 6 s (more than a period: each check finds the count's reads stopped,
    # and they restart), and its one message received by a worker that died
    queues = Counted(lambda: 50)
    watch = ResendWatch(MemoryStore(), queues, [QUEUE], RecordingMetrics(), after_s=AFTER_S)
    [dead] = _messages("acme", 1)
    queues.send(QUEUE, [dead])
    watch.sent(QUEUE, [dead], T)
    # When the loop checks at 6 s and 12 s
    resent = [watch.check(T + timedelta(seconds=s)) for s in (6, 12)]
    # Then it is held at most once while the reads restart, and re-sent at the next check (review
    # of 873777c6: held again at each restart, it was never re-sent before the watch's end)
    assert resent == [0, 1]
