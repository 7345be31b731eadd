"""When a job's slots are, and which of them to release: pure functions of the job and ``now``.

Slots are computed from the previous slot and the schedule, never from the clock, so clock
skew moves *when* a slot is released, never *whether* or *how often*.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from punctual.models import CatchupKind, Job, JobSpec
from punctual.timing import schedules
from punctual.timing.fate import fate_note
from punctual.timing.instants import format_instant, format_instant_adaptive, format_instant_ms
from punctual.timing.missed_ranges import SPAN_CAP, MissedRange, drop_in_bulk, span
from punctual.timing.timers import Timer, TimerKind, TimerLayout, slot_instant, slot_key, to_ms

MISSED_AFTER_S = 60  # a slot released later than this is "missed": the catch-up policy decides
# Catch-up releases at most this many slots per timer, then chains on through a near timer due
# now: a long outage drains a job a poll interval at a time, never in one unbounded release.
MAX_RELEASE_PER_TIMER = 30
_ONE_SECOND = timedelta(seconds=1)
_INSTANT = timedelta(microseconds=1)
_MISSED_AFTER = timedelta(seconds=MISSED_AFTER_S)
# Read once: an enum's member read through its class costs several times a global's (the enum
# metaclass's __getattr__ hook); a release makes a fire timer per slot.
_FIRE, _CATCHUP = TimerKind.FIRE, TimerKind.CATCHUP


def ceil_second(instant: datetime) -> datetime:
    """Slots are whole seconds: the first whole second at or after ``instant``."""
    u = instant.astimezone(UTC)
    if u.fold or type(u) is not datetime:  # (the same value either way; replace keeps these as they are)
        whole = u.replace(microsecond=0)
    else:
        whole = u - timedelta(0, 0, u.microsecond)  # replace's value, at half its cost
    return whole if whole == instant else whole + _ONE_SECOND


@lru_cache(maxsize=4096)
def _parse(expression: str, timezone: str, gap: str | None, repeat: str | None) -> schedules.Schedule:
    dst = schedules.DstOptions(gap=gap, repeat=repeat) if (gap or repeat) else None  # type: ignore[arg-type]
    return schedules.cached_schedule(expression, timezone, dst)


def schedule_of(spec: JobSpec) -> schedules.Schedule:
    """The parsed schedule of a job, cached: a poller evaluates the same jobs every minute."""
    dst = spec.dst
    return _parse(spec.schedule, spec.timezone, dst.gap if dst else None, dst.repeat if dst else None)


def same_slots(current: JobSpec, spec: JobSpec) -> bool:
    """Whether ``spec``'s schedule has ``current``'s slots: the same expression, or a ``rate(...)``
    of the same period written otherwise (``rate(600 seconds)`` for ``rate(10 minutes)``; QA23: a
    replace compared the text, and the grid moved to the replace's instant)."""
    if spec.schedule == current.schedule:
        return True
    old, new = schedule_of(current), schedule_of(spec)
    return old.kind == new.kind == "rate" and old.period == new.period


def next_slot(job: Job, after: datetime) -> datetime | None:
    """The job's first slot strictly after ``after``, inside ``start_at``/``end_at``; None if none.

    ``delay(...)`` and ``after(...)`` jobs are not chained by the poller: the first is
    anchored here, later ones come from finish times and parents' successes.
    """
    return _next_slot(job, schedule_of(job), after)


def _next_slot(job: Job, schedule: schedules.Schedule, after: datetime) -> datetime | None:
    """:func:`next_slot` with the job's schedule already looked up."""
    slot = _slot_within_start(job, schedule, after)
    if slot is None or (job.end_at is not None and slot > job.end_at):
        return None
    return slot


def _slot_within_start(job: Job, schedule: schedules.Schedule, after: datetime) -> datetime | None:
    """The job's first slot strictly after ``after`` and not before ``start_at`` (``end_at`` aside)."""
    if schedule.kind == "after":
        return None
    lower = after
    if job.start_at is not None:
        lower = max(lower, ceil_second(job.start_at) - _ONE_SECOND)  # start_at itself may be a slot
    elif schedule.kind == "rate":
        # Anchored at its registration (or its schedule's last change): that instant is not a slot,
        # the first is N later, whatever fraction of its second the job was registered at.
        lower = max(lower, job.anchor)
    return schedule.next_after(lower, anchor=job.anchor)


def no_slot_reason(job: Job, now: datetime) -> str:
    """Why ``job`` has no slot after ``now`` (:func:`first_slot` answered None), for its author."""
    try:  # a cron whose years are past, or which never fires after now: the parser says which
        schedules.parse_schedule(job.schedule, job.timezone, job.dst.options() if job.dst else None, now=now)
    except schedules.ScheduleError as exc:
        return f"schedule has no future slot: {exc}"
    schedule = schedule_of(job)
    unbounded = _slot_within_start(job, schedule, now)
    if unbounded is not None and job.end_at is not None and unbounded > job.end_at:
        return (
            f"schedule has no slot before end_at {format_instant_adaptive(job.end_at)}: its next is"
            f" {format_instant(unbounded)}"
        )
    if schedule.kind == "at":
        instant = schedule.next_after(datetime.min.replace(tzinfo=UTC), anchor=None)
        named = schedule.compared()
        if instant is not None and instant > now and job.start_at is not None and instant < job.start_at:
            return (
                f"schedule has no slot on or after start_at {format_instant_adaptive(job.start_at)}:"
                f" {named} is before it"
            )
        return f"schedule has no future slot: {named} is not after {format_instant(now)}"
    if unbounded is None and job.start_at is not None and job.start_at > now:
        # Slots after now, all before start_at (QA30: a cron whose years end before it was "no slot
        # after <now>", which its next slots contradict)
        earlier = schedule.next_after(now, anchor=job.anchor)
        if earlier is not None:
            return (
                f"schedule has no slot on or after start_at {format_instant_adaptive(job.start_at)}:"
                f" its slots end before it (its next is {format_instant(earlier)})"
            )
    if schedule.period is not None and unbounded is None:  # QA: a rate(N) whose first slot is past 2199
        return (
            f"schedule has no slot after {format_instant(now)}: {job.schedule} first comes due after"
            f" {schedules.MAX_YEAR}, the last year a schedule fires in"
        )
    return f"schedule has no slot after {format_instant(now)}"


def first_slot(job: Job, now: datetime) -> datetime | None:
    """The slot a freshly registered (or resumed) job fires first."""
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        # The first run of a fixed-delay job is the anchor plus the delay.
        slot = schedule.next_after(job.anchor, anchor=job.anchor)
        if slot is not None and slot <= now:
            slot = schedule.next_after(now, anchor=None)
        if slot is not None and job.end_at is not None and slot > job.end_at:
            return None  # QA: past end_at it ran all the same (as a chain's later run never does)
        return slot
    if job.start_at is not None and job.anchor <= now < job.anchor + _ONE_SECOND:
        # Registered in its start_at's second (slots are whole seconds): start_at is a slot
        # (docs/schedules.md), due now (QA26: a start_at of now, a moment before the registration,
        # as clients send it, lost the first occurrence: the first run came a period later)
        return next_slot(job, job.anchor - _INSTANT)
    return next_slot(job, now)


def resume_start(job: Job) -> datetime | None:
    """Where a paused job's chain starts again when it is resumed: the first slot the pause owes.

    That is the first slot at or after the pause (``paused_at``), or ``owed_from`` when earlier:
    a slot due before the pause whose release a poller found only after it
    (:mod:`punctual.dispatch.polling.chains`). None: the schedule has no slot left. Never a slot at
    the job's creation instant: a job paused as it was created (EventBridge's CreateSchedule with
    ``State: DISABLED``) owes only the slots after it, as its first slot was.
    """
    paused_at = job.paused_at
    first = next_slot(job, max(paused_at - _INSTANT, job.created_at)) if paused_at is not None else None
    owed = slot_instant(job.owed_from) if job.owed_from else None
    if first is None or owed is None:
        return first or owed
    return min(first, owed)


def inside_window(job: Job, instant: datetime) -> bool:
    """Whether ``instant`` is inside the job's ``start_at`` .. ``end_at`` (both included)."""
    return (job.start_at is None or instant >= job.start_at) and (job.end_at is None or instant <= job.end_at)


def dispatch_instant(job: Job, slot: datetime) -> datetime:
    """When a slot is released: its nominal instant plus the job's deterministic jitter."""
    if job.jitter_seconds <= 0:
        return slot
    return slot + timedelta(seconds=schedules.jitter_offset_s(job.id, slot, job.jitter_seconds))


# A slot sent outside the pollers (an after(...) child's, a run-now's) is sent again this long
# after its send if no worker has claimed it (longer than a healthy claim: well under a second).
SENT_CHECK_S = 5.0


def sent_check_timer(
    layout: TimerLayout, job: Job, slot: str, now: datetime, after_s: float = SENT_CHECK_S
) -> Timer:
    """The check of a slot a worker or the API sent itself (a CHILD timer, due
    :data:`SENT_CHECK_S` on): its release sends the slot again, in a group and under a
    deduplication id of its own, if no worker has claimed it. The pollers watch what they send
    (:mod:`punctual.dispatch.polling.resend`); this is that watch for what they never sent: a
    worker that dies between receiving a message and its handler leaves it in flight for the
    queue's whole visibility timeout (found by the chaos run: the child of two parents that both
    succeeded never ran). ``after_s`` 0: a slot to send now, that nothing sent yet.

    A check of a slot sent (``after_s`` > 0) keeps, in the timer's ``owner`` (which only LEASE
    timers use otherwise), what its copy needs to stand for the message it checks
    (:class:`CheckedSend`): that message's instant, and the parents the job waited on then."""
    return layout.make(
        now=now,
        due=now + timedelta(seconds=after_s),
        job_id=job.id,
        tenant=job.tenant,
        slot=slot,
        attempt=1,
        kind=TimerKind.CHILD,
        job_version=job.version,
        owner=CheckedSend(now, frozenset(schedule_of(job).parents)).note() if after_s > 0 else None,
    )


def owed_since(job: JobSpec, parents_sent_for: Iterable[str]) -> bool:
    """Whether an ``after(...)`` job replaced since its slot was sent, for a spec that waited on
    ``parents_sent_for``, still owes that slot: it waits on no parent that spec did not (a parent
    the replace added counts from its next success). The claim's rule for the message taken late,
    and the CHILD timer's for its copy."""
    parents = set(schedule_of(job).parents)
    return bool(parents) and parents <= set(parents_sent_for)


@dataclass(frozen=True)
class CheckedSend:
    """The message a CHILD timer checks (:func:`sent_check_timer`): when it was sent (its scheduled
    instant), and the parents its job waited on (an ``after(...)`` job's; none for a run-now slot).
    Kept in the timer's ``owner`` as JSON."""

    at: datetime
    parents: frozenset[str]

    def note(self) -> str:
        return json.dumps([format_instant_ms(self.at), sorted(self.parents)], separators=(",", ":"))

    @classmethod
    def of(cls, timer: Timer) -> CheckedSend | None:
        """What ``timer`` checks; None for a slot nothing sent yet (or a timer an earlier version wrote)."""
        if timer.kind is not TimerKind.CHILD or not timer.owner:
            return None
        try:
            at, parents = json.loads(timer.owner)
            return cls(datetime.fromisoformat(at.replace("Z", "+00:00")), frozenset(map(str, parents)))
        except (ValueError, TypeError, AttributeError):
            return None


def fire_timer(
    layout: TimerLayout,
    job: Job,
    slot: datetime,
    now: datetime,
    *,
    chained: bool = False,
    resumed: bool = False,
) -> Timer:
    """The timer that releases ``slot`` of ``job`` at its dispatch instant. ``chained``: written
    by a release, when an instant already passed makes it a CATCHUP timer, which waits its turn
    behind on-time slots. ``resumed``: the first of a resumed job's chain, whose past slot makes
    it a RESUME timer due now (the slots before it were owed by the pause).

    The timer notes its fate line (:mod:`punctual.timing.fate`): until when its release may wait
    without changing whether its slots run."""
    due = dispatch_instant(job, slot)
    late = due <= now
    kind = TimerKind.RESUME if resumed and late else _CATCHUP if chained and late else _FIRE
    keep_s = fate_keep_s(job, kind)
    # (a FIRE timer held by MISSED_AFTER_S past its due instant notes nothing: its reader's
    # fallback; not one written late, whose due is when it was written)
    plain = kind is _FIRE and not late and keep_s == MISSED_AFTER_S
    note = None if plain else fate_note(to_ms(slot), to_ms(due) + 1000 * keep_s)
    return layout.make(
        now=now,
        due=due,
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(slot),
        attempt=1,
        kind=kind,
        job_version=job.version,
        owner=note,
    )


def fate_keep_s(job: Job, kind: TimerKind) -> int:
    """How long after its first slot's dispatch instant a chain timer of ``kind`` may be released
    without changing whether its slots run (:mod:`punctual.timing.fate`)."""
    if kind is TimerKind.RESUME:
        return 0  # owed by a pause: decided whatever their lateness, and the rest waits behind them
    if job.catchup.policy is CatchupKind.ALL:
        return max(MISSED_AFTER_S, job.catchup.window_seconds)
    return MISSED_AFTER_S


MISSED_BY_LATEST = "catch-up policy latest: a newer slot ran instead"
MISSED_BY_NONE = "catch-up policy none: missed slots are not run"
MISSED_OUTSIDE_WINDOW = "older than the catch-up window"


@dataclass
class ReleasePlan:
    """What one fire timer leads to."""

    release: list[datetime] = field(default_factory=list)  # slots to send, oldest first
    missed: list[tuple[datetime, str]] = field(default_factory=list)  # slots dropped, and why
    ranges: list[MissedRange] = field(default_factory=list)  # long runs of dropped slots, one record each
    next_slot: datetime | None = None  # the slot of the timer to write next (None: the job completes)
    chain: bool = True  # False for delay(...) jobs, which chain from finish times
    # The version the next timer keeps (None: the job's): a replaced spec's chain, caught up under
    # the new spec, stays its old chain (punctual.dispatch.polling.chains, Verdict.REPLACED)
    timer_version: int | None = None

    @property
    def skipped(self) -> int:
        """How many slots the catch-up policy drops."""
        return len(self.missed) + sum(r.count for r in self.ranges)


def plan_release(
    job: Job,
    slot: datetime,
    now: datetime,
    *,
    due: datetime | None = None,
    owed_before: datetime | None = None,
    stop_before: datetime | None = None,
    cause: str = "",
) -> ReleasePlan:
    """Decide which slots to release for a due fire timer of ``slot``.

    Normally that is just ``slot``, and the next timer is the following slot. After an
    outage the slots between ``slot`` and ``now`` are enumerated and the catch-up
    policy applied to those released more than :data:`MISSED_AFTER_S` late: ``all``
    releases every one inside the window, ``latest`` only the newest (and none if a
    slot is on time anyway), ``none`` skips them all. Long runs of slots the policy drops
    are skipped in bulk, one range each (:mod:`punctual.timing.missed_ranges`).

    Parameters
    ----------
    due
        The timer's due instant. Runs are skipped in bulk as of ``min(now, due)``: an earlier
        release of the same timer (lost in a crash) may have sent slots that are late now.
    owed_before
        Slots due before this are late whatever their lateness: a resumed job's, due while it
        was paused (the catch-up policy decides them like slots missed in an outage).
    stop_before
        Plan no slot at or after this (the rest of a chain cut by a pause, whose later slots
        the job's current chain owns); then the plan never completes the job.
    cause
        Put before each reason a slot is dropped for (``"job paused"``).
    """
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        return ReleasePlan(release=[slot], next_slot=None, chain=False)
    late_before = now - _MISSED_AFTER
    if owed_before is not None:
        late_before = max(late_before, min(owed_before, now))
    plan = ReleasePlan(chain=stop_before is None)
    current: datetime | None = slot
    instant = dispatch_instant(job, slot)
    if late_before <= instant <= now and stop_before is None:
        # The usual release, one slot on time: :func:`_plan_due`'s answer when the slot after it
        # is not due yet, without its slot-by-slot pass (the rest take that pass, as before).
        following = _next_slot(job, schedule, slot)
        if following is None or dispatch_instant(job, following) > now:
            plan.release, plan.next_slot = [slot], following
            return _with_cause(plan, cause)
    if instant < late_before:
        current, complete = _drop_in_bulk(job, schedule, slot, plan, min(now, due or now), owed_before)
        if current is not None and stop_before is not None and current >= stop_before:
            current = None
        if not complete or current is None or dispatch_instant(job, current) > now:
            plan.next_slot = current  # cut at the bulk's cap, the end, or nothing due after it yet
            return _with_cause(plan, cause)
    return _with_cause(_plan_due(job, schedule, current or slot, now, late_before, stop_before, plan), cause)


def _plan_due(
    job: Job,
    schedule: schedules.Schedule,
    slot: datetime,
    now: datetime,
    late_before: datetime,
    stop_before: datetime | None,
    plan: ReleasePlan,
) -> ReleasePlan:
    """The slot-by-slot pass of :func:`plan_release`: at most :data:`MAX_RELEASE_PER_TIMER` due slots."""
    due: list[datetime] = []
    instants: list[datetime] = []  # when the chain can send each slot of ``due`` (jitter hashes once)
    current: datetime | None = slot
    while current is not None and len(due) < MAX_RELEASE_PER_TIMER:
        if stop_before is not None and current >= stop_before:
            current = None
            break
        instant = dispatch_instant(job, current)
        if instant > now:
            break
        due.append(current)
        # When the chain could send it: a slot whose jitter puts it before an earlier slot's waits
        # for that one, so it is late only when that is (QA17: with jitter_seconds past 60 s and
        # catch-up none or latest, a chain on time dropped such slots as MISSED)
        instants.append(max(instant, instants[-1]) if instants else instant)
        current = _next_slot(job, schedule, current)
    if not due:  # released early (clock skew): release it anyway, it is this timer's slot
        plan.release, plan.next_slot = [slot], _next_slot(job, schedule, slot)
        return plan
    plan.next_slot = current
    if len(due) == 1 and instants[0] >= late_before:
        # The common case, one slot on time: every policy releases just it.
        plan.release = due
        return plan
    on_time = [s for s, at in zip(due, instants, strict=True) if at >= late_before]
    late = [(s, at) for s, at in zip(due, instants, strict=True) if at < late_before]
    window_start = now - timedelta(seconds=job.catchup.window_seconds)
    in_window = [s for s, at in late if at >= window_start]
    policy = job.catchup.policy
    if policy is CatchupKind.ALL:
        chosen, reason = in_window, MISSED_OUTSIDE_WINDOW  # only slots outside the window are dropped
    elif policy is CatchupKind.LATEST:
        # The newest of the slots due: none of these when the walk stopped at its cap with more
        # due after them (the next release decides among those; QA: a 45-minute outage ran the
        # thirtieth late slot, 10:40, beside the on-time 10:55)
        more_due = (
            len(due) == MAX_RELEASE_PER_TIMER
            and current is not None
            and (stop_before is None or current < stop_before)
            and dispatch_instant(job, current) <= now
        )
        chosen, reason = (in_window[-1:] if not on_time and not more_due else []), MISSED_BY_LATEST
    else:
        chosen, reason = [], MISSED_BY_NONE
    kept, window = set(chosen), set(in_window)
    plan.missed = [(s, reason if s in window else MISSED_OUTSIDE_WINDOW) for s, _ in late if s not in kept]
    plan.release = chosen + on_time
    return plan


def calendar_before_catchup(
    job: Job, plan: ReleasePlan, now: datetime, excluded: Callable[[datetime], bool]
) -> None:
    """Where a job excludes calendars, they decide a late slot before its catch-up policy does
    (``excluded``: whether a slot falls on an excluded day), as if excluded slots were no slots:

    * a slot the policy dropped on an excluded day goes with the release, to be recorded
      EXCLUDED (it would not have run: QA22, it was MISSED, with a ``missed`` alert and event);
    * with ``latest``, when every slot the plan releases is excluded (the newest late slot, or the
      slot due at once), the newest slot it dropped for them runs instead, the newest that runs
      (QA22: a Friday owed by a pause over an excluded weekend was recorded MISSED "a newer slot
      ran instead" and none ran). Not while more slots are due than the plan walked (the next
      release decides among them).

    The slots of a range record (a run of more than 30) are not looked into."""
    held = [slot for slot, _ in plan.missed if excluded(slot)]
    if held:
        plan.missed = [(slot, reason) for slot, reason in plan.missed if not excluded(slot)]
        plan.release = sorted([*held, *plan.release])
    if job.catchup.policy is not CatchupKind.LATEST or not all(excluded(slot) for slot in plan.release):
        return
    if plan.next_slot is not None and dispatch_instant(job, plan.next_slot) <= now:
        return
    dropped = [index for index, (_, reason) in enumerate(plan.missed) if reason.endswith(MISSED_BY_LATEST)]
    if plan.release and dropped:
        newest, _ = plan.missed.pop(dropped[-1])
        plan.release = sorted([newest, *plan.release])


def _drop_in_bulk(
    job: Job,
    schedule: schedules.Schedule,
    slot: datetime,
    plan: ReleasePlan,
    as_of: datetime,
    owed_before: datetime | None,
) -> tuple[datetime | None, bool]:
    """Skip the long runs of slots from ``slot`` on that the catch-up policy drops as of
    ``as_of`` (ranges into ``plan``). Returns the slot the plan goes on from, and False when a
    run was cut at the cap (the plan goes on from there in the next release)."""
    late_before = as_of - timedelta(seconds=MISSED_AFTER_S)
    if owed_before is not None:
        late_before = max(late_before, min(owed_before, as_of))
    window_start = as_of - timedelta(seconds=job.catchup.window_seconds)
    # Jitter only delays a slot: a slot before ``x - jitter`` is surely dispatched before ``x``.
    jitter = timedelta(seconds=job.jitter_seconds)
    period = schedule.period if schedule.kind == "rate" else None

    def step(after: datetime) -> datetime | None:
        return _next_slot(job, schedule, after)

    segments = [(min(window_start, late_before) - jitter, MISSED_OUTSIDE_WINDOW)]
    if job.catchup.policy is CatchupKind.NONE:
        segments.append((late_before - jitter, MISSED_BY_NONE))
    bulk = drop_in_bulk(slot, step, period, job.end_at, segments)
    if bulk.complete and bulk.following is not None and job.catchup.policy is CatchupKind.LATEST:
        # Every late slot in the window but the newest (which the slot-by-slot pass decides).
        late = span(bulk.following, late_before - jitter, step, period, job.end_at, SPAN_CAP)
        if late.complete and late.last is not None:
            more = drop_in_bulk(bulk.following, step, period, job.end_at, [(late.last, MISSED_BY_LATEST)])
            bulk.ranges.extend(more.ranges)
            bulk.following, bulk.complete = more.following, more.complete
    plan.ranges.extend(bulk.ranges)
    return bulk.following, bulk.complete


def _with_cause(plan: ReleasePlan, cause: str) -> ReleasePlan:
    if cause:
        plan.missed = [(s, f"{cause}: {reason}") for s, reason in plan.missed]
        plan.ranges = [replace(r, reason=f"{cause}: {r.reason}") for r in plan.ranges]
    return plan
