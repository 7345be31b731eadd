"""The job use cases on the in-memory store: validation at registration, versions, triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from factories import spec
from punctual.dispatch.queues import MemoryQueues
from punctual.models import JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.schedules import parse_schedule
from punctual.timing.timers import Lane, TimerLayout
from punctual.usecases.job_errors import (
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    PreconditionFailedError,
)
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def env() -> tuple[JobService, MemoryStore, MemoryQueues, ManualClock]:
    clock = ManualClock(T0)
    store = MemoryStore()
    queues = MemoryQueues(now=clock.now)
    service = JobService(store, queues, clock, TimerLayout(4, 2, 180), QueueRouting(("short",), ("long",)))
    return service, store, queues, clock


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://0x7f.1/",
        "http://localhost:8080/",
        "http://10.0.0.5/",
    ],
)
def test_forbidden_webhook_urls_are_refused_before_storing(env, url) -> None:  # type: ignore[no-untyped-def]
    service, store, _, _ = env
    with pytest.raises(InvalidJobError) as refused:
        service.register("t", spec(target={"type": "http", "url": url}))
    assert refused.value.field == "target.url"
    assert store.list_jobs("t", 10).items == []


def test_allow_list_opens_exactly_what_it_names(env) -> None:  # type: ignore[no-untyped-def]
    service, *_ = env
    service.allow_cidrs = ("127.0.0.0/8",)
    job, _ = service.register("t", spec(target={"type": "http", "url": "http://127.0.0.1:9000/hook"}))
    assert job.state is JobState.ENABLED
    with pytest.raises(InvalidJobError):
        service.register("t", spec(target={"type": "http", "url": "http://10.0.0.1/"}))


def test_eventbridge_payload_must_be_an_object(env) -> None:  # type: ignore[no-untyped-def]
    service, *_ = env
    target = {
        "type": "eventbridge",
        "event_bus_arn": "arn:aws:events:us-east-1:123456789012:event-bus/default",
    }
    with pytest.raises(InvalidJobError, match="JSON object"):
        service.register("t", spec(target=target, payload=[1, 2]))
    service.register("t", spec(target=target, payload={"k": 1}))


@pytest.mark.parametrize(
    "schedule", ["rate(999999999 minutes)", "rate(100000 days)", "delay(999999999 hours)"]
)
def test_a_period_past_the_last_year_says_so(env, schedule) -> None:  # type: ignore[no-untyped-def]
    """QA: it said only 'schedule has no slot after <now>', of a schedule that has one, in 3926."""
    service, *_ = env
    with pytest.raises(
        InvalidJobError, match="first comes due after 2199, the last year a schedule fires in"
    ):
        service.register("t", spec(schedule))


def test_one_time_job_in_the_past_is_refused(env) -> None:  # type: ignore[no-untyped-def]
    service, *_ = env
    with pytest.raises(InvalidJobError, match="no future slot"):
        service.register("t", spec("at(2020-01-01T00:00:00)"))


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"schedule": "cron(0 0 * * ? 1970-1971)"}, "year range ends in 1971"),
        (
            {"schedule": "at(2020-01-01T00:00:00)"},
            "at(2020-01-01T00:00:00) is not after 2026-11-30T10:00:00Z",
        ),
        (  # QA26: its local time read as after now ("at(2026-11-30T15:00:00) is not after
            # 2026-11-30T10:00:00Z"): the instant compared is named, in UTC
            {"schedule": "at(2026-11-30T15:00:00)", "timezone": "Asia/Tokyo"},
            "at(2026-11-30T15:00:00) in Asia/Tokyo (2026-11-30T06:00:00Z) is not after 2026-11-30T10:00:00Z",
        ),
        (
            {"schedule": "cron(30 2 29 3 ? 2026)", "timezone": "Europe/Berlin", "dst": {"gap": "skip"}},
            "never fires after 2026-11-30T10:00:00Z",
        ),
        (
            {"schedule": "cron(0 0 29 2 ? *)", "end_at": "2027-12-31T00:00:00Z"},
            "no slot before end_at 2027-12-31T00:00:00Z: its next is 2028-02-29T00:00:00Z",
        ),
        (
            {"schedule": "rate(1 hour)", "end_at": "2026-11-30T10:30:00Z"},
            "no slot before end_at 2026-11-30T10:30:00Z: its next is 2026-11-30T11:00:00Z",
        ),
    ],
)
def test_a_schedule_without_a_future_slot_is_refused_saying_why(env, fields, says) -> None:  # type: ignore[no-untyped-def]
    """Not one message for every case ("a one-time instant in the past, or end_at passed" for a cron
    whose years are over): the author is told what keeps the job from ever firing."""
    service, store, _, _ = env
    with pytest.raises(InvalidJobError, match=r"no (future )?slot") as refused:
        service.register("t", spec(**fields))
    assert says in str(refused.value)
    assert store.list_jobs("t", 10).items == []
    job, _ = service.register("t", spec("rate(1 hour)"), job_id="kept")
    with pytest.raises(InvalidJobError) as replaced:
        service.replace("t", "kept", spec(**fields))
    kept = store.get_job("t", "kept")  # the job as it was
    assert says in str(replaced.value) and (kept.version, kept.schedule) == (job.version, job.schedule)


def test_registration_writes_the_first_timer_in_the_right_lane(env) -> None:  # type: ignore[no-untyped-def]
    service, store, _, _ = env
    soon, _ = service.register("t", spec("rate(30 seconds)"))
    later, _ = service.register("t", spec("cron(0 12 * * ? *)"))
    assert soon.next_fire_at == T0 + timedelta(seconds=30)
    assert later.next_fire_at == T0.replace(hour=12)
    near = [t for s in range(2) for t in store.query_timers(Lane.NEAR, T0, s)]
    far = [t for s in range(4) for t in store.query_timers(Lane.FAR, T0.replace(hour=12), s)]
    assert [t.job_id for t in near] == [soon.id] and [t.job_id for t in far] == [later.id]


@pytest.mark.parametrize("micros", [0, 1, 123_456, 999_999])
def test_a_rate_jobs_first_slot_is_n_after_its_registration_whatever_the_fraction_of_its_second(
    env,  # type: ignore[no-untyped-def]
    micros: int,
) -> None:
    """The registration instant is not a slot: the first is N later (rounded up to the second), as
    the preview shows it, not at once when the job was registered part-way through a second; a
    schedule change re-anchors the same way."""
    service, _, _, clock = env
    clock.set(T0 + timedelta(microseconds=micros))
    anchor = T0 + timedelta(seconds=1 if micros else 0)
    job, _ = service.register("t", spec("rate(1 hour)"))
    assert job.next_fire_at == anchor + timedelta(hours=1)
    assert job.next_fire_at == parse_schedule("rate(1 hour)", "UTC").slots(clock.now(), None, 1)[0]  # preview
    clock.set(T0 + timedelta(minutes=1, microseconds=micros))
    changed = service.replace("t", job.id, spec("rate(2 hours)"))
    assert changed.next_fire_at == anchor + timedelta(minutes=1, hours=2)
    # start_at is a slot itself
    started, _ = service.register("t", spec("rate(1 hour)", start_at=(T0 + timedelta(minutes=5)).isoformat()))
    assert started.next_fire_at == T0 + timedelta(minutes=5)


def test_dependencies_must_exist_and_never_cycle(env) -> None:  # type: ignore[no-untyped-def]
    service, store, _, _ = env
    service.register("t", spec("rate(1 hour)"), job_id="a")
    service.register("t", spec("after(a)"), job_id="b")
    assert store.list_dependents("t", "a") == ["b"]
    with pytest.raises(InvalidJobError, match="does not exist"):
        service.register("t", spec("after(nope)"))
    with pytest.raises(InvalidJobError, match="cycle: a -> b -> a"):
        service.replace("t", "a", spec("after(b)"))
    with pytest.raises(InvalidJobError, match="itself"):
        service.replace("t", "a", spec("after(a)"))
    service.delete("t", "b")
    assert store.list_dependents("t", "a") == []


def test_versions_guard_every_change(env) -> None:  # type: ignore[no-untyped-def]
    service, *_ = env
    job, _ = service.register("t", spec("rate(1 minute)"))
    with pytest.raises(PreconditionFailedError) as stale:
        service.replace("t", job.id, spec("rate(2 minutes)"), expected_version=7)
    assert stale.value.current_version == 1
    paused = service.pause("t", job.id, expected_version=1)
    assert (paused.state, paused.version, paused.next_fire_at) == (JobState.PAUSED, 2, None)
    assert service.pause("t", job.id).version == 2  # pausing a paused job changes nothing
    resumed = service.resume("t", job.id)
    assert (resumed.state, resumed.version) == (JobState.ENABLED, 3)
    service.delete("t", job.id, expected_version=3)
    with pytest.raises(JobNotFoundError):
        service.get("t", job.id)
    with pytest.raises(JobNotFoundError):
        service.pause("t", job.id)


def test_completed_jobs_cannot_be_resumed_only_replaced(env) -> None:  # type: ignore[no-untyped-def]
    service, store, _, _ = env
    job, _ = service.register("t", spec("rate(1 minute)"))
    store.replace_job(store.get_job("t", job.id).model_copy(update={"state": JobState.COMPLETED}), 1)
    with pytest.raises(JobConflictError):
        service.resume("t", job.id)
    assert service.replace("t", job.id, spec("rate(5 minutes)")).state is JobState.ENABLED


@pytest.mark.parametrize("pause_after_s", [0, 0.001])
def test_a_job_paused_as_it_is_created_owes_no_slot_at_its_creation_instant(env, pause_after_s) -> None:  # type: ignore[no-untyped-def]
    """Created on a slot's instant (its first slot is the next one) and paused in the same instant
    (EventBridge's CreateSchedule with State DISABLED): its resume owed that instant's slot, which
    was never scheduled, and ran it."""
    from punctual.timing.slots import resume_start

    service, store, _, clock = env
    clock.set(datetime(2026, 11, 30, 10, 0, tzinfo=UTC))
    job, _ = service.register("t", spec("cron(* * * * ? *)"))
    assert job.next_fire_at == datetime(2026, 11, 30, 10, 1, tzinfo=UTC)
    clock.advance(pause_after_s)
    service.pause("t", job.id)
    assert resume_start(store.get_job("t", job.id)) == datetime(2026, 11, 30, 10, 1, tzinfo=UTC)


def test_trigger_sends_an_extra_slot_with_its_own_identity(env) -> None:  # type: ignore[no-untyped-def]
    service, _, queues, _ = env
    job, _ = service.register("t", spec("rate(1 hour)"))
    slot = service.trigger("t", job.id, request_key="req-1")
    assert slot.startswith("2026-11-30T10:00:00Z~m")
    assert service.trigger("t", job.id, request_key="req-1") == slot
    assert service.trigger("t", job.id, request_key="req-2") != slot
    sent = queues.all_messages("short")
    assert [m.kind for m in sent] == ["manual", "manual"]  # the repeat was deduplicated
    with pytest.raises(JobNotFoundError):
        service.trigger("other-tenant", job.id)


def test_run_now_slots_of_one_second_sort_in_the_order_they_were_asked_for(env) -> None:  # type: ignore[no-untyped-def]
    # The history lists slots by key, newest first: three triggers in one second were listed in
    # the order of their random tokens
    service, _, _, clock = env
    job, _ = service.register("t", spec("rate(1 hour)"))
    slots = []
    for ms, key in ((5, "a"), (250, "b"), (999, "c")):  # their tokens' hashes sort c, b, a
        clock.set(datetime(2026, 11, 30, 10, 0, 7, ms * 1000, tzinfo=UTC))
        slots.append(service.trigger("t", job.id, request_key=key))
    assert sorted(slots) == slots
    assert all(slot.startswith("2026-11-30T10:00:07Z~m") and len(slot) == 34 for slot in slots)


@pytest.mark.parametrize("name", ["Punctual-Tenant", "punctual-tenant"])
def test_the_tenant_header_is_refused_at_registration_and_replace(
    env: tuple[JobService, MemoryStore, MemoryQueues, ManualClock], name: str
) -> None:
    service, store, _, _ = env
    target = {"type": "http", "url": "https://example.com/hook", "headers": {name: "someone-else"}}
    with pytest.raises(InvalidJobError, match="is reserved") as caught:
        service.register("acme", spec(target=target))
    assert caught.value.field == "target.headers"
    job, _ = service.register("acme", spec())
    with pytest.raises(InvalidJobError, match="is reserved"):
        service.replace("acme", job.id, spec(alerts=[{"on": ["failed"], "target": target}]))
    assert store.get_job("acme", job.id).version == job.version  # type: ignore[union-attr]


@pytest.mark.parametrize("same", ["rate(600 seconds)", "rate(10 minutes)", "rate( 10  minutes )"])
def test_an_equivalent_rate_keeps_the_jobs_grid(env, same: str) -> None:  # type: ignore[no-untyped-def]
    """The anchor restarts only when the slots change: ``rate(10 minutes)`` written as ``rate(600
    seconds)`` has the same slots (QA23: the expression's text was compared, and the grid moved to
    the replace's instant). A different period still re-anchors."""
    service, _, _, clock = env
    job, _ = service.register("t", spec("rate(10 minutes)"))
    clock.set(T0 + timedelta(minutes=3))
    kept = service.replace("t", job.id, spec(same))
    assert kept.anchor == job.anchor
    assert kept.next_fire_at == T0 + timedelta(minutes=10)
    moved = service.replace("t", job.id, spec("rate(601 seconds)"))
    assert moved.next_fire_at == T0 + timedelta(minutes=3, seconds=601)


def test_a_completed_jobs_name_description_and_tags_can_be_edited(env) -> None:  # type: ignore[no-untyped-def]
    """QA23: a PUT of a COMPLETED at() job that changed only its name was 422 "no future slot": the
    replace re-enabled it, and a one-time job past its instant has none. A metadata-only edit (name,
    description, tags) keeps it COMPLETED, nothing resurrected; any other change still re-enables
    it, refused when it would never fire."""
    service, store, _, clock = env
    job, _ = service.register("t", spec("at(2026-11-30T10:05:00)", name="once"))
    done = store.get_job("t", job.id).model_copy(update={"state": JobState.COMPLETED, "next_fire_at": None})
    store.replace_job(done, done.version)
    clock.set(T0 + timedelta(hours=1))

    edited = service.replace("t", job.id, spec("at(2026-11-30T10:05:00)", name="renamed", tags={"team": "a"}))

    assert (edited.state, edited.name, edited.tags) == (JobState.COMPLETED, "renamed", {"team": "a"})
    assert edited.next_fire_at is None
    assert store.get_job("t", job.id).state is JobState.COMPLETED
    with pytest.raises(InvalidJobError, match="no future slot"):
        service.replace("t", job.id, spec("at(2026-11-30T10:05:00)", name="renamed", timeout_seconds=60))
    again = service.replace("t", job.id, spec("at(2026-11-30T12:00:00)", name="renamed"))
    assert again.state is JobState.ENABLED  # a new instant: it runs again


def test_a_paused_jobs_reason_stays_through_a_replace(env) -> None:  # type: ignore[no-untyped-def]
    """QA23: any replace of a paused job dropped its state_reason (why it was paused: its target
    asked, say), while the job stayed paused."""
    service, store, _, _ = env
    job, _ = service.register("t", spec("rate(5 minutes)", name="n"))
    service.pause("t", job.id, reason="the target answered 410 Gone: never call again")
    edited = service.replace("t", job.id, spec("rate(5 minutes)", name="n", description="still paused"))
    assert edited.state is JobState.PAUSED
    assert store.get_job("t", job.id).state_reason == "the target answered 410 Gone: never call again"


def test_a_replace_that_drops_the_recovered_rule_ends_the_failure_streak(env) -> None:  # type: ignore[no-untyped-def]
    """QA23: a job failing (its streak open) lost its recovered rule in a replace; successes then
    checked no streak (only jobs with the rule read it), so the rule added back later sent a
    ``recovered`` for failures long recovered. The replace that drops the rule ends the streak."""
    service, store, _, _ = env
    rule = {"on": ["recovered"], "target": {"type": "http", "url": "https://alerts.example.com/hook"}}
    job, _ = service.register("t", spec("rate(5 minutes)", alerts=[rule]))
    store.open_streak("t", job.id, "2026-11-30T10:00:00Z", 0)  # a failed slot joined its streak
    service.replace("t", job.id, spec("rate(5 minutes)", alerts=[rule], description="kept"))
    assert store.get_streak("t", job.id) is not None  # the rule stays: so does the streak
    service.replace("t", job.id, spec("rate(5 minutes)"))
    assert store.get_streak("t", job.id) is None
