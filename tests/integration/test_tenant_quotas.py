"""Issue 16, point 6: per-tenant quotas on jobs and on scheduled triggers per minute, on both stores."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from factories import spec
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.security.quotas import MICRO, micro_rate, per_minute
from punctual.store.base import JobStore, TenantLimitError, TriggerRateLimitError
from punctual.timing.schedules import parse_schedule
from punctual.timing.timers import TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _service(store: JobStore, max_jobs: int = 1000, max_triggers: int | None = 120) -> JobService:
    clock = ManualClock(T0)
    return JobService(
        store,
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ()),
        max_jobs_per_tenant=max_jobs,
        max_triggers_per_minute=max_triggers,
    )


@pytest.mark.parametrize(
    ("expression", "per_min"),
    [
        ("rate(1 second)", 60.0),
        ("rate(1 minute)", 1.0),
        ("rate(5 minutes)", 0.2),
        ("delay(30 seconds)", 2.0),
        ("* * * * *", 1.0),
        ("cron(0/5 * * * ? *)", 12 * 24 / 1440),
        ("cron(0 9 ? * MON-FRI *)", 1 / 1440),
        ("at(2027-01-01T00:00:00)", 1 / 1440),
    ],
)
def test_a_schedules_rate_is_its_triggers_per_minute(expression: str, per_min: float) -> None:
    rate = micro_rate(parse_schedule(expression, "UTC", now=T0))
    assert rate == pytest.approx(per_min * MICRO, abs=1)


def test_an_after_job_counts_as_its_busiest_parent() -> None:
    rates = {"a": 2 * MICRO, "b": MICRO // 2}
    schedule = parse_schedule("after(a, b)", "UTC", now=T0)
    assert micro_rate(schedule, rates.__getitem__) == 2 * MICRO
    assert micro_rate(schedule) == 1  # parents unknown: at least one micro-trigger


def test_registration_beyond_the_trigger_quota_is_refused_naming_it(store: JobStore) -> None:
    # Given a quota of 120 triggers a minute and a tenant at 60 + 59 already
    service = _service(store)
    service.register("alice", spec("rate(1 second)"))
    service.register("alice", spec("rate(1 minute)", name="x"))
    for _ in range(58):
        service.register("alice", spec("rate(1 minute)"))
    assert store.tenant_trigger_rate("alice") == 119 * MICRO

    # When one more every-second job is registered, then it is refused with the quota's name and value
    with pytest.raises(TriggerRateLimitError) as refused:
        service.register("alice", spec("rate(1 second)"))
    message = str(refused.value)
    assert "maxTriggersPerMinutePerTenant is 120" in message
    assert "would add 60 to 119 already registered" in message
    assert store.list_jobs("alice", 100).items.__len__() == 60  # nothing stored
    # ...and another tenant is not affected; one more per-minute job still fits alice
    service.register("bob", spec("rate(1 second)"))
    service.register("alice", spec("rate(1 minute)"))
    assert store.tenant_trigger_rate("alice") == 120 * MICRO


def test_a_replacement_is_checked_on_its_difference_and_a_deletion_frees_the_rate(store: JobStore) -> None:
    service = _service(store, max_triggers=100)
    fast, _ = service.register("alice", spec("rate(1 second)"))
    slow, _ = service.register("alice", spec("rate(1 minute)"))

    # Speeding a job up past the quota is refused, and nothing changes.
    with pytest.raises(TriggerRateLimitError):
        service.replace("alice", slow.id, spec("rate(1 second)"))
    assert service.get("alice", slow.id).schedule == "rate(1 minute)"
    assert store.tenant_trigger_rate("alice") == 61 * MICRO

    # Slowing one down frees room, which the other then takes.
    service.replace("alice", fast.id, spec("rate(1 minute)"))
    assert store.tenant_trigger_rate("alice") == 2 * MICRO
    service.replace("alice", slow.id, spec("rate(1 second)"))
    assert store.tenant_trigger_rate("alice") == 61 * MICRO

    # Pausing and resuming change nothing; deleting gives the rate back.
    service.pause("alice", slow.id)
    service.resume("alice", slow.id)
    assert store.tenant_trigger_rate("alice") == 61 * MICRO
    service.delete("alice", slow.id)
    service.delete("alice", fast.id)
    assert store.tenant_trigger_rate("alice") == 0


def test_a_single_job_above_the_whole_quota_is_refused(store: JobStore) -> None:
    service = _service(store, max_triggers=30)
    with pytest.raises(TriggerRateLimitError, match="maxTriggersPerMinutePerTenant is 30"):
        service.register("alice", spec("rate(1 second)"))
    assert store.tenant_trigger_rate("alice") == 0


def test_the_job_quota_names_itself(store: JobStore) -> None:
    service = _service(store, max_jobs=2, max_triggers=None)
    service.register("alice", spec())
    service.register("alice", spec())
    with pytest.raises(TenantLimitError) as refused:
        service.register("alice", spec())
    assert not isinstance(refused.value, TriggerRateLimitError)
    assert (refused.value.quota, refused.value.limit) == ("maxJobsPerTenant", 2)


def test_requests_are_counted_per_tenant_and_window(store: JobStore) -> None:
    assert [store.count_request("alice", "2026-11-30T10:00Z", 3, 2_000_000_000) for _ in range(4)] == [
        True,
        True,
        True,
        False,
    ]
    assert store.count_request("bob", "2026-11-30T10:00Z", 3, 2_000_000_000)
    assert store.count_request("alice", "2026-11-30T10:01Z", 3, 2_000_000_000)


def test_rates_read_well_in_messages() -> None:
    assert per_minute(60 * MICRO) == "60"
    assert per_minute(MICRO // 5) == "0.2"
    assert per_minute(695) == "0.000695"
