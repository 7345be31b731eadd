"""UpdateSchedule as a migrated client uses it, with an unmodified boto3 ``scheduler`` client (QA,
2026-12-05, black-box against local mode): an update that keeps a ``rate()`` schedule's
expression keeps its slots; enabling a schedule that has no slot left is refused, as its create
would be; a schedule without ``Target.Input`` sends an empty JSON object, not the text null; GetSchedule's
answer sent back for a ``/v1`` rate job keeps its slots (QA23).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_harness import ACCOUNT, REGION, ApiClient, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client

from punctual.api import wiring
from punctual.api.scheduler.mapping import job_id_of
from punctual.runtime.clock import ManualClock

ROLE = f"arn:aws:iam::{ACCOUNT}:role/scheduler-role"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"
T0 = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
# What GetSchedule answers that UpdateSchedule does not take
OUTPUT_ONLY = {"Arn", "CreationDate", "LastModificationDate", "ResponseMetadata"}


@pytest.fixture
def clock(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    monkeypatch.setenv("PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT", "0")
    wiring.use_services(None)
    manual = ManualClock(T0)
    wiring.services().jobs.clock = manual
    return manual


@pytest.fixture
def client(api: ApiClient, clock: ManualClock) -> Any:
    return scheduler_client(api)


def _put(client: Any, name: str, expression: str, verb: str = "create_schedule", **extra: Any) -> None:
    getattr(client, verb)(
        Name=name,
        ScheduleExpression=expression,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE, **extra.pop("target", {})},
        **extra,
    )


def _job(api: ApiClient, name: str) -> dict[str, Any]:
    body: dict[str, Any] = api.call("GET", f"/v1/jobs/{job_id_of('default', name)}").body
    return body


def _next_fire(api: ApiClient, name: str) -> datetime | None:
    value = _job(api, name)["next_fire_at"]
    return None if value is None else datetime.fromisoformat(value)


def test_an_update_that_keeps_a_rate_expression_keeps_its_slots(
    client: Any, api: ApiClient, clock: ManualClock
) -> None:
    # Given a rate schedule without StartDate, started at once at its create
    _put(client, "hourly", "rate(1 hour)")
    assert _next_fire(api, "hourly") == T0 + timedelta(seconds=1)
    # When, ten minutes on, an update changes its description, and then one changes nothing
    clock.set(T0 + timedelta(minutes=10))
    _put(client, "hourly", "rate(1 hour)", "update_schedule", Description="v2")
    after_edit = _job(api, "hourly")
    _put(client, "hourly", "rate(1 hour)", "update_schedule", Description="v2")
    # Then the schedule keeps its slots: the next is an hour after the first (each update started
    # it again at once: the target ran one more time per update)
    assert datetime.fromisoformat(after_edit["next_fire_at"]) != clock.now() + timedelta(seconds=1)
    assert _next_fire(api, "hourly") in (T0 + timedelta(seconds=1), T0 + timedelta(hours=1, seconds=1))
    assert "StartDate" not in client.get_schedule(Name="hourly")


def test_an_update_that_changes_the_rate_or_enables_it_starts_it_at_once(
    client: Any, api: ApiClient, clock: ManualClock
) -> None:
    _put(client, "hourly", "rate(1 hour)")
    clock.set(T0 + timedelta(minutes=10))
    _put(client, "hourly", "rate(2 hours)", "update_schedule")
    assert _next_fire(api, "hourly") == clock.now() + timedelta(seconds=1)
    # Disabled, then enabled again an hour on: started at once, the slots it missed not run
    _put(client, "hourly", "rate(2 hours)", "update_schedule", State="DISABLED")
    clock.set(T0 + timedelta(hours=3, minutes=10))
    _put(client, "hourly", "rate(2 hours)", "update_schedule", State="ENABLED")
    assert _next_fire(api, "hourly") == clock.now() + timedelta(seconds=1)


def test_enabling_a_one_time_schedule_whose_time_passed_while_disabled_is_refused(
    client: Any, api: ApiClient, clock: ManualClock
) -> None:
    # Given an at() schedule created DISABLED, whose time then passes
    at = "at(2026-12-01T12:00:30)"
    _put(client, "once", at, State="DISABLED", ActionAfterCompletion="DELETE")
    clock.set(T0 + timedelta(minutes=5))
    # When an update enables it, keeping its expression
    with pytest.raises(ClientError) as refused:
        _put(client, "once", at, "update_schedule", State="ENABLED", ActionAfterCompletion="DELETE")
    # Then it is refused as its create would be (it was taken, shown ENABLED, and never ran)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "no future slot" in error["Message"] and "did not run while DISABLED" in error["Message"]
    assert client.get_schedule(Name="once")["State"] == "DISABLED"
    # an update that leaves it DISABLED is still taken, and one with a time ahead enables it
    _put(client, "once", at, "update_schedule", State="DISABLED", Description="kept")
    _put(client, "once", "at(2026-12-01T12:10:00)", "update_schedule", State="ENABLED")
    assert client.get_schedule(Name="once")["State"] == "ENABLED"
    assert _next_fire(api, "once") == datetime(2026, 12, 1, 12, 10, tzinfo=UTC)


def test_enabling_a_one_time_schedule_the_pause_owes_runs_it(
    client: Any, api: ApiClient, clock: ManualClock
) -> None:
    # Given an at() schedule disabled before its time, which then passes (the pause owes it)
    at = "at(2026-12-01T12:00:30)"
    _put(client, "once", at)
    _put(client, "once", at, "update_schedule", State="DISABLED")
    clock.set(T0 + timedelta(minutes=5))
    # When it is enabled again: taken, and its slot runs now (its catch-up window is an hour)
    _put(client, "once", at, "update_schedule", State="ENABLED")
    assert client.get_schedule(Name="once")["State"] == "ENABLED"
    assert _job(api, "once")["state"] == "ENABLED" and _next_fire(api, "once") is not None


def test_a_schedule_without_input_sends_an_empty_json_object(client: Any, api: ApiClient) -> None:
    _put(client, "plain", "rate(1 hour)")
    assert _job(api, "plain")["payload"] == "{}"  # an SQS message body (was the text null)
    assert "Input" not in client.get_schedule(Name="plain")["Target"]
    _put(client, "given", "rate(1 hour)", target={"Input": "hello"})
    assert _job(api, "given")["payload"] == "hello"


def test_refusals_name_the_members_the_caller_sent(client: Any, clock: ManualClock) -> None:
    def refused(expression: str, **extra: Any) -> str:
        with pytest.raises(ClientError) as caught:
            _put(client, "x", expression, **extra)
        assert caught.value.response["Error"]["Code"] == "ValidationException"
        message: str = caught.value.response["Error"]["Message"]
        return message

    # as the service answers it (it was an answer about Punctual's own unix cron)
    assert refused("every 5 minutes") == "Invalid Schedule Expression every 5 minutes."
    assert refused("*/5 * * * *") == "Invalid Schedule Expression */5 * * * *."
    # EndDate, not the job model's end_at; the member a schedule's refusal is about
    message = refused("cron(0 2 1 1 ? *)", EndDate=T0 + timedelta(minutes=10))
    assert message.startswith("ScheduleExpression: schedule has no slot before EndDate"), message
    assert "end_at" not in message
    assert refused("at(2026-12-01T11:00:00)").startswith("ScheduleExpression: schedule has no future slot")


def test_enabling_a_disabled_cron_schedule(client: Any, api: ApiClient, clock: ManualClock) -> None:
    # Review: the check of a schedule's enable dumped its spec, and a cron schedule's DST policy,
    # dumped, broke its parse: every such enable was a 500
    _put(client, "nightly", "cron(0 2 * * ? *)", State="DISABLED")
    clock.set(T0 + timedelta(minutes=5))
    _put(client, "nightly", "cron(0 2 * * ? *)", "update_schedule", State="ENABLED")
    assert client.get_schedule(Name="nightly")["State"] == "ENABLED"
    assert _next_fire(api, "nightly") == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    # one whose EndDate passed while it was DISABLED is refused
    ends = T0 + timedelta(days=2)
    _put(client, "ending", "cron(0 2 * * ? *)", State="DISABLED", EndDate=ends)
    clock.set(T0 + timedelta(days=3))
    with pytest.raises(ClientError) as refused:
        _put(client, "ending", "cron(0 2 * * ? *)", "update_schedule", State="ENABLED", EndDate=ends)
    assert refused.value.response["Error"]["Code"] == "ValidationException"


def _update_as_got(client: Any, name: str) -> None:
    """A read-modify-write UpdateSchedule that modifies nothing: GetSchedule's answer sent back."""
    got = client.get_schedule(Name=name)
    client.update_schedule(**{key: value for key, value in got.items() if key not in OUTPUT_ONLY})


def test_an_unchanged_update_of_a_v1_rate_job_keeps_its_slots(
    client: Any, api: ApiClient, clock: ManualClock
) -> None:
    # Given a /v1 rate job (its slots count from its registration), 40 minutes into its hour
    target = {"type": "sqs", "queue_arn": QUEUE, "role_arn": ROLE}
    job_id = api.create(job_spec(schedule="rate(1 hour)", target=target))["id"]
    assert api.call("GET", f"/v1/jobs/{job_id}").body["next_fire_at"] == "2026-12-01T13:00:05Z"
    clock.set(T0 + timedelta(minutes=40))
    # When a pipeline applies the schedule GetSchedule shows, twice
    _update_as_got(client, job_id)
    _update_as_got(client, job_id)
    # Then its next slot is where it was (QA23: each update started it again at once, as a new
    # schedule's create does: one more run of the target per update, and the slots moved)
    assert api.call("GET", f"/v1/jobs/{job_id}").body["next_fire_at"] == "2026-12-01T13:00:05Z"
    assert "StartDate" not in client.get_schedule(Name=job_id)


def test_two_updates_at_once_leave_one_of_them_whole_state_included(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UpdateSchedule replaces the job, then pauses or resumes it: two at once could leave one
    caller's spec with the other's State (QA23, by reading the code). The State is now applied as
    of the replace's version; a newer update's spec keeps its own State."""
    _put(client, "racy", "rate(5 minutes)", Description="first")
    jobs = wiring.services().jobs
    real_replace = jobs.replace
    inner: list[str] = []

    def replace_then_other_update(*args: Any, **kwargs: Any) -> Any:
        done = real_replace(*args, **kwargs)
        if not inner:  # A's replace landed; B's whole update runs before A sets its State
            inner.append("b")
            _put(client, "racy", "rate(5 minutes)", verb="update_schedule", Description="b", State="ENABLED")
        return done

    monkeypatch.setattr(jobs, "replace", replace_then_other_update)
    # A: a disable with its own description
    _put(client, "racy", "rate(5 minutes)", verb="update_schedule", Description="a", State="DISABLED")
    shown = client.get_schedule(Name="racy")
    # B's update is the newer (it replaced after A): its spec and its State, never a mix
    assert (shown["Description"], shown["State"]) == ("b", "ENABLED")


def test_a_disabling_update_whose_write_is_throttled_leaves_the_schedule_as_it_was_or_disabled(
    client: Any, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disable changes the spec and the state in two writes: the second throttled left the
    schedule enabled with the new spec, running on though its caller disabled it (QA24)."""
    _put(client, "nightly", "cron(0 3 * * ? *)", Description="before")
    jobs = wiring.services().jobs
    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise throttled

    for write in ("pause", "replace"):
        # When a disabling update with a new description meets a throttled write (either)
        with monkeypatch.context() as slow:
            slow.setattr(jobs, write, refuse)
            with pytest.raises(ClientError):
                _put(
                    client,
                    "nightly",
                    "cron(0 3 * * ? *)",
                    "update_schedule",
                    Description="after",
                    State="DISABLED",
                )
        # Then the schedule never runs the new spec enabled: as it was, or disabled
        shown = client.get_schedule(Name="nightly")
        assert (shown["Description"], shown["State"]) != ("after", "ENABLED"), write
    # And the caller's retry applies it whole
    _put(client, "nightly", "cron(0 3 * * ? *)", "update_schedule", Description="after", State="DISABLED")
    shown = client.get_schedule(Name="nightly")
    assert (shown["Description"], shown["State"]) == ("after", "DISABLED")


@pytest.mark.parametrize(
    "expression",
    ["at(2020-01-01T00:00:00)", "cron(0 0 1 1 ? 2020)", "after(no-such-job)"],
)
def test_a_disabling_update_that_is_refused_leaves_the_schedule_as_it_was(
    client: Any, api: ApiClient, expression: str
) -> None:
    """A disable pauses the job before its replace: a replace then refused (ValidationException, not
    retried) left the schedule DISABLED for good, its runs stopped by a request that failed (QA26)."""
    # Given an enabled schedule
    _put(client, "nightly", "cron(0 3 * * ? *)", Description="before")
    before = _job(api, "nightly")
    # When an update disabling it names an expression that is refused
    with pytest.raises(ClientError) as refused:
        _put(client, "nightly", expression, "update_schedule", Description="after", State="DISABLED")
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    # Then it is still enabled, with its spec and its next slot
    shown = client.get_schedule(Name="nightly")
    assert (shown["State"], shown["ScheduleExpression"], shown["Description"]) == (
        "ENABLED",
        "cron(0 3 * * ? *)",
        "before",
    )
    assert _job(api, "nightly")["next_fire_at"] == before["next_fire_at"]
