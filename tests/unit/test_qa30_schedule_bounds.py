"""QA30: a job refused for having no slot names the bound that leaves it none.

A ``cron(...)`` whose year field ends before the job's ``start_at`` (``cron(0 9 * * ? 2030)``
starting in 2031) was refused "schedule has no slot after <now>", which reads as false: the
expression has hundreds of slots after now, just none on or after ``start_at``. The refusal
names ``start_at`` (``StartDate`` through the EventBridge Scheduler API), as it names ``end_at``
when the slots start after it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from api_harness import ApiClient, http_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client


@pytest.mark.parametrize(
    ("schedule", "timezone", "next_slot"),
    [
        ("cron(0 9 * * ? 2030)", "UTC", "2030-01-01T09:00:00Z"),
        ("cron(0 9 ? 12 6L 2029-2030)", "America/New_York", "2029-12-28T14:00:00Z"),
    ],
)
def test_a_cron_ending_before_start_at_is_refused_naming_start_at(
    api: ApiClient, schedule: str, timezone: str, next_slot: str
) -> None:
    reply = api.call(
        "POST", "/v1/jobs", http_spec(schedule=schedule, timezone=timezone, start_at="2031-01-01T12:00:00Z")
    )

    assert reply.status == 422, reply
    message = reply.problem["errors"][0]["message"]
    assert "start_at 2031-01-01T12:00:00Z" in message, message
    assert next_slot in message, message  # its slots come, all before start_at


def test_eventbridge_create_names_the_start_date(api: ApiClient) -> None:
    client = scheduler_client(api)

    with pytest.raises(ClientError) as caught:
        client.create_schedule(
            Name="ends-before-start",
            ScheduleExpression="cron(0 9 * * ? 2030)",
            StartDate=datetime(2031, 1, 1, 12, tzinfo=UTC),
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:sqs:us-east-1:123456789012:q",
                "RoleArn": "arn:aws:iam::123456789012:role/r",
            },
        )

    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "StartDate 2031-01-01T12:00:00Z" in error["Message"], error


@pytest.mark.parametrize(
    ("schedule", "timezone"),
    [
        ("cron(*/5 2 ? 3 1#2 2027)", "America/New_York"),  # the 2 a.m. hour of spring-forward day
        ("cron(* 0 ? 9 1#1 2027-2029)", "America/Santiago"),  # midnight's hour, skipped there
        ("cron(*/10 2 ? 3 SUN#2 *)", "America/New_York"),  # the second Sunday of March, every year
    ],
)
def test_an_expression_whose_times_all_fall_in_dst_gaps_is_refused_saying_so(
    api: ApiClient, schedule: str, timezone: str
) -> None:
    """QA30: a wildcard minute follows real time, so none of these times fires: the refusal was a
    bare "never fires after <now>", that the expression's plain reading contradicts."""
    reply = api.call("POST", "/v1/jobs", http_spec(schedule=schedule, timezone=timezone))

    assert reply.status == 422, reply
    message = reply.problem["errors"][0]["message"]
    assert "never fires after" in message, message
    assert "its remaining local times fall in daylight-saving gaps" in message, message
    assert "wildcard minute or hour" in message, message
