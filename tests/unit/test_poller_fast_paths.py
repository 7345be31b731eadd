"""The poller's shortcuts per released slot give what the plain code gives: slot keys, slot
instants and due instants answered from a cache, a timer's shard hashed in line, a rate schedule's
next slot without its helper calls, and a release plan of one slot on time without the
slot-by-slot pass. Each is compared with the plain computation, written out here."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.dispatch.load_forecast import MinuteTally, add_ecs_slot, add_slot
from punctual.models import ACCEPTED, Job
from punctual.store.loads import MinuteLoad
from punctual.timing.schedules.base import END_S, ceil_s, floor_s, from_epoch
from punctual.timing.schedules.periods import RateSchedule
from punctual.timing.slots import (
    ReleasePlan,
    _drop_in_bulk,
    _plan_due,
    _with_cause,
    ceil_second,
    dispatch_instant,
    plan_release,
    schedule_of,
)
from punctual.timing.timers import (
    _DUE_DIGITS,
    SLOT_FMT,
    due_bound,
    from_ms,
    minute_of,
    shard_of,
    slot_instant,
    slot_key,
    sort_key,
)

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
ZONES = [
    UTC,
    ZoneInfo("Europe/Berlin"),
    ZoneInfo("America/New_York"),
    timezone(timedelta(hours=5, minutes=30)),
]

instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.sampled_from(ZONES)
)


def plain_slot_key(instant: datetime) -> str:
    """slot_key as it was: the whole-second UTC instant's text."""
    u = instant.astimezone(UTC)
    if u.year < 1000:
        return u.strftime(SLOT_FMT)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


@settings(max_examples=500, deadline=None)
@given(instant=instants, fold=st.sampled_from([0, 1]))
def test_a_slot_key_is_its_instants_text_in_any_zone_and_fold(instant: datetime, fold: int) -> None:
    instant = instant.replace(fold=fold)
    as_utc = instant.astimezone(UTC)
    # Asked in the zone first, then as UTC (which the cache answers), then in the zone again.
    assert slot_key(instant) == plain_slot_key(instant)
    assert slot_key(as_utc) == slot_key(as_utc) == plain_slot_key(instant)
    assert slot_key(instant) == plain_slot_key(instant)


def test_the_two_passes_of_an_ambiguous_hour_have_their_own_slot_keys() -> None:
    # 02:30 on 2026-10-25 in Berlin happens twice: the two compare equal in their zone (and hash
    # alike), yet are an hour apart. Cached under UTC instants only, each keeps its own key.
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 25, 2, 30, tzinfo=berlin)
    second = first.replace(fold=1)
    assert first == second and hash(first) == hash(second)
    assert slot_key(first) == "2026-10-25T00:30:00Z"
    assert slot_key(second) == "2026-10-25T01:30:00Z"
    assert slot_key(first.astimezone(UTC)) == "2026-10-25T00:30:00Z"
    assert slot_key(second.astimezone(UTC)) == "2026-10-25T01:30:00Z"


def test_a_slot_key_of_a_datetime_subclass_is_its_instants_text() -> None:
    class Instant(datetime):
        pass

    odd = Instant(2026, 11, 30, 10, 0, 5, tzinfo=UTC)
    assert slot_key(odd) == "2026-11-30T10:00:05Z"


@settings(max_examples=500, deadline=None)
@given(
    instant=st.datetimes(
        min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    suffix=st.sampled_from(["", "~m", "~mabc_-1"]),
)
def test_a_slot_instant_read_again_is_the_one_read_first(instant: datetime, suffix: str) -> None:
    key = slot_key(instant) + suffix
    plain = slot_instant.__wrapped__(key)  # type: ignore[attr-defined]
    assert slot_instant(key) == plain and slot_instant(key) == plain
    assert slot_instant(key).tzinfo is plain.tzinfo and slot_instant(key).utcoffset() == plain.utcoffset()


@pytest.mark.parametrize("key", ["", "2026-11-30", "2026-13-01T00:00:00Z", "x~m", "2026-02-30T00:00:00Z"])
def test_a_slot_key_that_does_not_read_is_refused_every_time(key: str) -> None:
    with pytest.raises(ValueError) as plain:
        slot_instant.__wrapped__(key)  # type: ignore[attr-defined]
    for _ in range(2):  # an error is not cached: raised again, the same
        with pytest.raises(ValueError) as cached:
            slot_instant(key)
        assert str(cached.value) == str(plain.value)


@settings(max_examples=500, deadline=None)
@given(ms=st.integers(-(10**12), 10**13))
def test_a_due_instant_read_again_is_the_plain_one(ms: int) -> None:
    plain = datetime.fromtimestamp(ms / 1000, tz=UTC)
    assert from_ms(ms) == plain and from_ms(ms) == plain and from_ms(ms).tzinfo is UTC


@settings(max_examples=500, deadline=None)
@given(tenant=st.text(max_size=20), job_id=st.text(max_size=70), count=st.integers(1, 4096))
def test_a_shard_is_the_stable_hash_of_tenant_and_job(tenant: str, job_id: str, count: int) -> None:
    digest = hashlib.blake2b(f"{tenant}\x1f{job_id}".encode(), digest_size=8).digest()
    assert shard_of(tenant, job_id, count) == int.from_bytes(digest, "big") % count


def plain_rate_next(seconds: int, after: datetime, anchor: datetime) -> datetime | None:
    """RateSchedule.next_after with an anchor, as it was."""
    origin = ceil_s(anchor, "anchor")
    a = floor_s(after, "after")
    k = 0 if origin > a else (a - origin) // seconds + 1
    slot = origin + k * seconds
    return from_epoch(slot) if slot < END_S else None


near_now = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2199, 12, 1), timezones=st.sampled_from(ZONES)
)


@settings(max_examples=500, deadline=None)
@given(seconds=st.integers(1, 10**7), after=near_now, anchor=near_now)
def test_a_rate_schedules_next_slot_is_the_plain_one(seconds: int, after: datetime, anchor: datetime) -> None:
    schedule = RateSchedule("rate(1 minute)", "UTC", None, seconds)
    assert schedule.next_after(after, anchor=anchor) == plain_rate_next(seconds, after, anchor)


@pytest.mark.parametrize("naive", ["after", "anchor", "both"])
def test_a_naive_instant_is_refused_as_before(naive: str) -> None:
    schedule = RateSchedule("rate(1 minute)", "UTC", None, 60)
    after = T0.replace(tzinfo=None) if naive in ("after", "both") else T0
    anchor = T0.replace(tzinfo=None) if naive in ("anchor", "both") else T0
    with pytest.raises(ValueError) as fast:
        schedule.next_after(after, anchor=anchor)
    with pytest.raises(ValueError) as plain:
        plain_rate_next(60, after, anchor)
    assert str(fast.value) == str(plain.value)


# --------------------------------------------------------------------------- release plans


def a_job(
    job_id: str,
    schedule: str,
    jitter: int,
    start: int | None,
    end: int | None,
    zone: str,
    catchup: str = "all",
) -> Job:
    fields: dict[str, Any] = {
        "id": job_id,
        "schedule": schedule,
        "timezone": zone,
        "target": {"type": "http", "url": "https://example.com/hook"},
        "jitter_seconds": jitter,
        "catchup": {"policy": catchup, "window_seconds": 3600},
        "created_at": T0,
        "updated_at": T0,
        "anchor": T0 + timedelta(milliseconds=250),
    }
    if start is not None:
        fields["start_at"] = T0 + timedelta(seconds=start)
    if end is not None:
        fields["end_at"] = T0 + timedelta(seconds=end)
    return Job.model_validate(fields, context=ACCEPTED)


def plain_plan_release(
    job: Job,
    slot: datetime,
    now: datetime,
    due: datetime,
    owed_before: datetime | None,
    stop_before: datetime | None,
    cause: str,
) -> ReleasePlan:
    """plan_release as it was written (every slot through the slot-by-slot pass)."""
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        return ReleasePlan(release=[slot], next_slot=None, chain=False)
    late_before = now - timedelta(seconds=60)
    if owed_before is not None:
        late_before = max(late_before, min(owed_before, now))
    plan = ReleasePlan(chain=stop_before is None)
    current: datetime | None = slot
    if dispatch_instant(job, slot) < late_before:
        current, complete = _drop_in_bulk(job, schedule, slot, plan, min(now, due or now), owed_before)
        if current is not None and stop_before is not None and current >= stop_before:
            current = None
        if not complete or current is None or dispatch_instant(job, current) > now:
            plan.next_slot = current
            return _with_cause(plan, cause)
    return _with_cause(_plan_due(job, schedule, current or slot, now, late_before, stop_before, plan), cause)


@settings(max_examples=400, deadline=None)
@given(
    schedule=st.sampled_from(
        [
            "rate(1 minute)",
            "rate(7 seconds)",
            "rate(1 second)",
            "rate(2 hours)",
            "cron(*/5 * * * ? *)",
            "cron(0 3 * * ? *)",
        ]
    ),
    jitter=st.sampled_from([0, 0, 5, 90, 3600]),
    start=st.one_of(st.none(), st.integers(-3600, 3600)),
    end=st.one_of(st.none(), st.integers(1, 7 * 86400)),
    zone=st.sampled_from(["UTC", "Europe/Berlin"]),
    step=st.integers(0, 400),
    lateness_ms=st.one_of(st.integers(-5000, 70_000), st.integers(70_000, 2 * 3600_000)),
    stop=st.one_of(st.none(), st.integers(0, 7200)),
    owed=st.one_of(st.none(), st.integers(-120, 120)),
    catchup=st.sampled_from(["all", "latest", "none"]),
    cause=st.sampled_from(["", "job paused"]),
    job_id=st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True),
)
def test_a_release_of_one_slot_on_time_is_planned_as_slot_by_slot(
    schedule: str,
    jitter: int,
    start: int | None,
    end: int | None,
    zone: str,
    step: int,
    lateness_ms: int,
    stop: int | None,
    owed: int | None,
    catchup: str,
    cause: str,
    job_id: str,
) -> None:
    try:
        job = a_job(job_id, schedule, jitter, start, end, zone, catchup)
    except ValueError:
        return  # no slot between start_at and end_at
    slots = schedule_of(job).slots(T0 - timedelta(hours=1), anchor=job.anchor, count=step % 7 + 1)
    if not slots:
        return
    slot = slots[-1]
    now = dispatch_instant(job, slot) + timedelta(milliseconds=lateness_ms)
    stop_before = None if stop is None else slot + timedelta(seconds=stop)
    owed_before = None if owed is None else now + timedelta(seconds=owed)
    plan = plan_release(
        job, slot, now, due=now, owed_before=owed_before, stop_before=stop_before, cause=cause
    )
    expected = plain_plan_release(job, slot, now, now, owed_before, stop_before, cause)
    assert plan == expected
    assert plan.release == expected.release and plan.next_slot == expected.next_slot


@settings(max_examples=500, deadline=None)
@given(instant=instants, fold=st.sampled_from([0, 1]))
def test_a_minute_and_a_whole_second_are_the_ones_replace_gives(instant: datetime, fold: int) -> None:
    instant = instant.replace(fold=fold)
    u = instant.astimezone(UTC)
    for made, plain in (
        (minute_of(instant), u.replace(second=0, microsecond=0)),
        (minute_of(u), u.replace(second=0, microsecond=0)),
        (minute_of(u.replace(fold=fold)), u.replace(second=0, microsecond=0, fold=fold)),
    ):
        assert made == plain and made.tzinfo is plain.tzinfo and made.fold == plain.fold
        assert type(made) is type(plain) and repr(made) == repr(plain)
    whole = u.replace(microsecond=0)
    assert ceil_second(instant) == (whole if whole == instant else whole + timedelta(seconds=1))


def test_a_minute_of_a_datetime_subclass_is_what_replace_gives() -> None:
    class Instant(datetime):
        pass

    odd = Instant(2026, 11, 30, 10, 4, 7, 250, tzinfo=UTC)
    assert minute_of(odd) == datetime(2026, 11, 30, 10, 4, tzinfo=UTC)
    assert type(minute_of(odd)) is type(odd.replace(second=0, microsecond=0))


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(-60_000, 5 * 60_000), st.integers(-3, 3), st.booleans(), st.sampled_from(ZONES)
        ),
        max_size=30,
    ),
    head_s=st.one_of(st.floats(0, 60), st.integers(0, 60).map(float)),  # (whole seconds: at the edge too)
)
def test_a_chunks_tally_is_the_loads_added_slot_by_slot(
    steps: list[tuple[int, int, bool, Any]], head_s: float
) -> None:
    tally = MinuteTally()
    plain: dict[datetime, MinuteLoad] = {}
    for offset_ms, count, ecs, zone in steps:
        instant = (T0 + timedelta(milliseconds=offset_ms)).astimezone(zone)
        if ecs:
            tally.add_ecs_slot(instant, count)
            add_ecs_slot(plain, instant, count)
        else:
            tally.add_slot(instant, head_s, count)
            add_slot(plain, instant, head_s, count)
    loads = tally.loads()
    assert bool(tally) == bool(plain)
    assert loads == plain and list(loads) == list(plain)  # the same minutes, in the same order


@settings(max_examples=300, deadline=None)
@given(
    due_ms=st.integers(-(10**14), 10**15),
    tenant=st.text(max_size=8),
    job_id=st.text(max_size=8),
    slot=st.text(max_size=24),
    attempt=st.integers(-5, 10**4),
)
def test_a_sort_key_and_a_due_bound_pad_the_due_to_its_digits(
    due_ms: int, tenant: str, job_id: str, slot: str, attempt: int
) -> None:
    assert sort_key(due_ms, tenant, job_id, slot, attempt) == (
        f"{due_ms:0{_DUE_DIGITS}d}#{tenant}#{job_id}#{slot}#{attempt}"
    )
    assert due_bound(due_ms) == f"{due_ms:0{_DUE_DIGITS}d}"
