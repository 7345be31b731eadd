"""Issue 31, point 3: quotas on bursts, not averages. A tenant's peak of slots due in one second
and in one minute (its jobs' profiles projected onto the day), its running backfills and its
backfilled slots a minute. The store-backed tests run on the in-memory store and on DynamoDB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from factories import job, spec
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.security.peaks import PeakLimits, Profile, job_profile
from punctual.security.tenant_quotas import BackfillQuota, BackfillQuotaError, PeakQuota, PeakQuotaError
from punctual.store.base import JobStore, TenantLimitError
from punctual.timing.timers import TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOURLY = "cron(0 * * * ? *)"


# --------------------------------------------------------------------------- a job's profile


def test_a_daily_job_counts_in_its_minute_of_the_day_only() -> None:
    profile = job_profile(job("j", "cron(30 9 * * ? *)"))
    assert profile.minutes == {9 * 60 + 30: 1} and profile.seconds == {9 * 60 + 30: 1}
    assert (profile.every_minute, profile.every_second) == (0, 0)


def test_an_hourly_job_counts_in_each_hours_minute() -> None:
    profile = job_profile(job("j", HOURLY))
    assert profile.minutes == {h * 60: 1 for h in range(24)}
    assert profile.peak_per_minute() == 1 and profile.peak_per_second() == 1


@pytest.mark.parametrize(
    ("schedule", "per_minute", "per_second"),
    [
        ("rate(1 second)", 60, 1),
        ("delay(20 seconds)", 3, 1),
        ("after(parent)", 1, 1),
    ],
)
def test_frequent_jobs_count_in_every_minute(schedule: str, per_minute: int, per_second: int) -> None:
    profile = job_profile(job("j", schedule))
    assert profile.minutes == {}
    assert (profile.every_minute, profile.every_second) == (per_minute, per_second)


@pytest.mark.parametrize(
    ("schedule", "per_minute", "phases"),
    [
        ("* * * * *", 1, {0: 1}),
        ("cron(0/5 * * * ? *)", 1, {0: 1}),
        ("rate(10 seconds)", 6, {0: 1, 10: 1, 20: 1, 30: 1, 40: 1, 50: 1}),
    ],
)
def test_frequent_jobs_at_a_few_seconds_of_the_minute_keep_them(
    schedule: str, per_minute: int, phases: dict[int, int]
) -> None:
    profile = job_profile(job("j", schedule))
    assert profile.minutes == {} and profile.every_second == 0
    assert (profile.every_minute, profile.phases) == (per_minute, phases)


def test_a_zone_with_dst_counts_both_utc_minutes_and_jitter_moves_the_instant() -> None:
    berlin = job_profile(job("j", "cron(0 9 * * ? *)", timezone="Europe/Berlin"))
    assert set(berlin.minutes) == {7 * 60, 8 * 60}  # 09:00 in summer and in winter
    repeated = job_profile(job("j", "cron(30 2 * * ? *)", timezone="Europe/Berlin", dst={"repeat": "both"}))
    assert {0 * 60 + 30, 1 * 60 + 30} <= set(repeated.minutes)  # 02:30 in summer and in winter
    spread = job_profile(job("j", "cron(0 9 * * ? *)", jitter_seconds=3600))
    assert spread.peak_per_minute() >= 1 and len(spread.minutes) > 1


@pytest.mark.parametrize(
    "schedule",
    ["at(2030-01-01T00:00:00)", "cron(0 0 1 1 ? *)", "cron(0 0 1 1 ? 2030)", "cron(0 12 1 */6 ? *)"],
)
def test_a_slot_a_season_or_more_from_the_next_counts_once(schedule: str) -> None:
    """QA: each sampled window (four, a season apart) found the same next slot of a one-time or
    yearly job and counted it again, so one such job was up to 4 slots of its tenant's peak."""
    profile = job_profile(job("j", schedule))
    assert profile.peak_per_second() == 1 and profile.peak_per_minute() == 1, profile


def test_one_time_jobs_at_one_instant_fill_the_second_quota_exactly(store: JobStore) -> None:
    jobs = service(store, PeakLimits(per_second=4, per_minute=None))
    for _ in range(4):
        jobs.register("tenant-a", spec("at(2030-01-01T00:00:00)"))
    with pytest.raises(PeakQuotaError) as refused:
        jobs.register("tenant-a", spec("at(2030-01-01T00:00:00)"))
    assert refused.value.quota == "maxSlotsPerSecondPerTenant" and "5" in str(refused.value)


def test_profiles_add_and_subtract_without_going_below_zero() -> None:
    a, b = job_profile(job("a", HOURLY)), job_profile(job("b", "rate(10 seconds)"))
    total = Profile().combined(a).combined(b)
    assert total.peak_per_minute() == 7 and total.peak_per_second() == 2  # :00 of a minute: both
    assert Profile.from_doc(total.to_doc()) == total
    assert total.combined(b, -1).combined(a, -1) == Profile()
    assert Profile().combined(a, -1) == Profile()  # a job counted before peaks were: clamps at 0


# --------------------------------------------------------------------------- registration


def service(store: JobStore, limits: PeakLimits, max_jobs: int = 100_000) -> JobService:
    clock = ManualClock(T0)
    return JobService(
        store,
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ("long",)),
        max_jobs_per_tenant=max_jobs,
        peaks=PeakQuota(store, limits),
    )


def test_hourly_crons_at_one_instant_are_refused_past_the_minute_peak(store: JobStore) -> None:
    """The issue's case, scaled down: hourly jobs use almost nothing of the average quota
    (each 1/60 of a trigger a minute) and still all fire at the top of each hour."""
    jobs = service(store, PeakLimits(per_second=None, per_minute=50))
    for _ in range(50):
        jobs.register("tenant-a", spec(HOURLY))

    with pytest.raises(PeakQuotaError) as refused:
        jobs.register("tenant-a", spec(HOURLY))

    assert refused.value.quota == "maxSlotsPerMinutePerTenant" and refused.value.limit == 50
    assert "50 slots due in one minute" in str(refused.value) and "51" in str(refused.value)
    assert len(store.list_jobs("tenant-a", 100).items) == 50
    jobs.register("tenant-b", spec(HOURLY))  # another tenant has its own


def test_jobs_at_different_times_of_day_never_add_up(store: JobStore) -> None:
    jobs = service(store, PeakLimits(per_second=1, per_minute=1))
    for hour in range(24):
        jobs.register("tenant-a", spec(f"cron(15 {hour} * * ? *)"))
    with pytest.raises(PeakQuotaError) as refused:
        jobs.register("tenant-a", spec("cron(15 9 * * ? *)"))
    assert refused.value.quota == "maxSlotsPerSecondPerTenant"


def test_the_second_peak_counts_slots_due_together_and_spreads_minutely_jobs_by_phase(
    store: JobStore,
) -> None:
    jobs = service(store, PeakLimits(per_second=3, per_minute=100))
    for _ in range(3):
        jobs.register("tenant-a", spec("at(2026-12-01T09:00:00)"))
    with pytest.raises(PeakQuotaError) as refused:
        jobs.register("tenant-a", spec("at(2026-12-01T09:00:00)"))
    assert refused.value.quota == "maxSlotsPerSecondPerTenant"
    jobs.register("tenant-a", spec("at(2026-12-01T10:00:00)"))  # another minute of the day
    # Minutely jobs registered at different seconds fire at different seconds of each minute.
    clock = jobs.clock
    assert isinstance(clock, ManualClock)
    for _ in range(3):
        clock.advance(20)
        jobs.register("tenant-b", spec("rate(1 minute)"))
    doc, _ = store.get_peaks("tenant-b")
    assert Profile.from_doc(doc).peak_per_second() == 1


def test_delete_replace_and_a_failed_write_move_the_profile_back(store: JobStore) -> None:
    jobs = service(store, PeakLimits(per_second=None, per_minute=2), max_jobs=3)
    first, _ = jobs.register("tenant-a", spec(HOURLY))
    jobs.register("tenant-a", spec(HOURLY))
    # Full: a third hourly job is refused; moving the first to :30 makes room at :00.
    with pytest.raises(PeakQuotaError):
        jobs.register("tenant-a", spec(HOURLY))
    jobs.replace("tenant-a", first.id, spec("cron(30 * * * ? *)"))
    third, _ = jobs.register("tenant-a", spec(HOURLY))
    # The job quota refuses the next one after its profile was counted: the count goes back.
    with pytest.raises(TenantLimitError):
        jobs.register("tenant-a", spec("cron(45 * * * ? *)"))
    jobs.delete("tenant-a", third.id)
    jobs.register("tenant-a", spec(HOURLY))  # the deleted job's :00 was given back
    doc, _ = store.get_peaks("tenant-a")
    assert Profile.from_doc(doc).peak_per_minute() == 2
    assert 45 not in Profile.from_doc(doc).minutes


def test_recount_rebuilds_the_profile_from_the_tenants_jobs(store: JobStore) -> None:
    jobs = service(store, PeakLimits(per_second=None, per_minute=10))
    for _ in range(3):
        jobs.register("tenant-a", spec(HOURLY))
    store.put_peaks("tenant-a", Profile(every_minute=99).to_doc(), store.get_peaks("tenant-a")[1])

    rebuilt = jobs.recount_peaks("tenant-a")

    assert rebuilt.peak_per_minute() == 3
    assert Profile.from_doc(store.get_peaks("tenant-a")[0]).peak_per_minute() == 3


def test_a_raced_profile_write_is_read_again(store: JobStore) -> None:
    quota = PeakQuota(store, PeakLimits(per_minute=10))
    quota.change("tenant-a", add=job_profile(job("a", HOURLY)))
    doc, version = store.get_peaks("tenant-a")
    assert store.put_peaks("tenant-a", doc or "", version)  # someone else wrote meanwhile
    assert not store.put_peaks("tenant-a", doc or "", version)  # a stale version is refused
    quota.change("tenant-a", add=job_profile(job("b", HOURLY)))
    assert Profile.from_doc(store.get_peaks("tenant-a")[0]).peak_per_minute() == 2


# --------------------------------------------------------------------------- backfills


def test_running_backfills_are_bounded_and_a_lost_end_is_found(store: JobStore) -> None:
    quota = BackfillQuota(store, max_running=2, slots_per_minute=0)
    running = {"j/1", "j/2"}

    quota.join("tenant-a", "j", "1", running.__contains__)
    quota.join("tenant-a", "j", "2", running.__contains__)
    quota.join("tenant-a", "j", "2", running.__contains__)  # a repeated request: still two
    with pytest.raises(BackfillQuotaError) as refused:
        quota.join("tenant-a", "j", "3", running.__contains__)
    assert refused.value.quota == "maxBackfillsPerTenant"
    quota.join("tenant-b", "j", "3", running.__contains__)  # another tenant's

    running.discard("j/1")  # it ended, but its leave was lost (a crash)
    quota.join("tenant-a", "j", "3", running.__contains__)
    assert store.running_backfills("tenant-a") == ["j/2", "j/3"]
    quota.leave("tenant-a", "j", "2")
    assert store.running_backfills("tenant-a") == ["j/3"]


def test_backfilled_slots_a_minute_are_shared_by_all_a_tenants_backfills(store: JobStore) -> None:
    quota = BackfillQuota(store, max_running=0, slots_per_minute=10)

    taken = [quota.take("tenant-a", 4, T0) for _ in range(4)]

    assert taken == [4, 4, 2, 0]
    assert quota.take("tenant-a", 4, T0 + timedelta(minutes=1)) == 4  # a new minute
    assert quota.take("tenant-b", 10, T0) == 10
