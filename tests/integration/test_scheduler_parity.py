"""EventBridge Scheduler parity where a client notices, with an unmodified boto3 ``scheduler`` client.

The four differences moto's own EventBridge Scheduler suite showed when ported to Punctual
(issue 34): a ``StartDate`` more than five minutes in the past is refused; ``StartDate`` and
``EndDate`` come back in whole seconds; ``ListSchedules`` with a ``NamePrefix`` answers a full
page; ``Description`` is left out when a schedule has none.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_harness import ACCOUNT, REGION, ApiClient
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client

from punctual.api.scheduler import operations

ROLE = f"arn:aws:iam::{ACCOUNT}:role/scheduler-role"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"
PAST_START = "The StartDate you specify cannot be earlier than 5 minutes ago."


@pytest.fixture
def client(api: ApiClient) -> Any:
    return scheduler_client(api)


def _create(client: Any, name: str, **extra: Any) -> None:
    client.create_schedule(
        Name=name,
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        **extra,
    )


def _error(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    return caught.value.response["Error"]["Code"], caught.value.response["Error"]["Message"]


def test_a_start_date_more_than_five_minutes_ago_is_refused_on_create_and_update(client: Any) -> None:
    now = datetime.now(UTC)
    # A StartDate ten minutes ago: refused as the service refuses it
    code, message = _error(
        client.create_schedule,
        Name="late",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        StartDate=now - timedelta(minutes=10),
    )
    assert (code, message) == ("ValidationException", PAST_START)
    assert client.list_schedules()["Schedules"] == []
    # One minute ago is inside the five minutes the service allows
    _create(client, "recent", StartDate=now - timedelta(minutes=1))
    # UpdateSchedule applies the same rule, and the schedule keeps what it had
    code, message = _error(
        client.update_schedule,
        Name="recent",
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        StartDate=now - timedelta(days=1),
    )
    assert (code, message) == ("ValidationException", PAST_START)
    assert client.get_schedule(Name="recent")["ScheduleExpression"] == "rate(5 minutes)"


def test_a_one_time_schedules_past_start_date_is_ignored_not_refused(client: Any) -> None:
    # The service ignores StartDate for a one-time schedule (API reference): one read back with
    # the StartDate it was given and sent again later, unchanged, must not fail (QA23)
    now = datetime.now(UTC)
    when = (now + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
    old_start = now - timedelta(days=1)
    client.create_schedule(
        Name="once",
        ScheduleExpression=f"at({when})",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        StartDate=old_start,
    )
    shown = client.get_schedule(Name="once")
    client.update_schedule(
        Name="once",
        ScheduleExpression=shown["ScheduleExpression"],
        FlexibleTimeWindow=shown["FlexibleTimeWindow"],
        Target=shown["Target"],
        StartDate=shown["StartDate"],
        Description="sent back",
    )
    assert client.get_schedule(Name="once")["Description"] == "sent back"


def test_start_and_end_dates_come_back_in_whole_seconds(client: Any) -> None:
    start = datetime(2031, 3, 4, 5, 6, 7, 891234, tzinfo=UTC)
    end = datetime(2031, 6, 4, 5, 6, 7, 500000, tzinfo=UTC)
    _create(client, "precise", StartDate=start, EndDate=end)
    got = client.get_schedule(Name="precise")
    assert got["StartDate"] == start.replace(microsecond=0)
    assert got["EndDate"] == end.replace(microsecond=0)
    # UpdateSchedule keeps whole seconds too
    client.update_schedule(
        Name="precise",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        StartDate=start + timedelta(microseconds=1),
    )
    assert client.get_schedule(Name="precise")["StartDate"] == start.replace(microsecond=0)


def test_description_is_left_out_when_none_was_set(client: Any) -> None:
    _create(client, "plain")
    _create(client, "described", Description="the nightly report")
    assert "Description" not in client.get_schedule(Name="plain")
    assert client.get_schedule(Name="described")["Description"] == "the nightly report"


def _pages(client: Any, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        reply = client.list_schedules(**filters, **({"NextToken": token} if token else {}))
        pages.append([s["Name"] for s in reply["Schedules"]])
        token = reply.get("NextToken")
        if token is None:
            return pages


def test_list_schedules_with_a_name_prefix_answers_full_pages(client: Any) -> None:
    # Given 5 schedules named alpha-* among 20 others (ids, not names, order the store)
    for index in range(20):
        _create(client, f"beta-{index}")
    alphas = [f"alpha-{index}" for index in range(5)]
    for name in alphas:
        _create(client, name)
    # When they are listed by prefix, two per page
    pages = _pages(client, NamePrefix="alpha", MaxResults=2)
    # Then every page but the last is full, and each alpha is listed once
    assert [len(page) for page in pages] == [2, 2, 1]
    assert sorted(name for page in pages for name in page) == alphas
    # And a page filled in the middle of what the store read goes on after its last schedule
    first = client.list_schedules(NamePrefix="alpha", MaxResults=4)
    rest = client.list_schedules(NamePrefix="alpha", MaxResults=4, NextToken=first["NextToken"])
    assert len(first["Schedules"]) == 4 and len(rest["Schedules"]) == 1
    assert sorted(s["Name"] for s in first["Schedules"] + rest["Schedules"]) == alphas
    # And the state filter fills pages the same way
    client.update_schedule(
        Name="beta-7",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": QUEUE, "RoleArn": ROLE},
        State="DISABLED",
    )
    assert client.list_schedules(State="DISABLED", MaxResults=1)["Schedules"][0]["Name"] == "beta-7"


def test_a_page_stops_short_only_after_its_scan_budget(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a store read three jobs at a time and a budget of six jobs examined per page
    monkeypatch.setattr(operations, "LIST_READ_PAGE", 3)
    monkeypatch.setattr(operations, "LIST_SCAN_BUDGET", 6)
    for index in range(12):
        _create(client, f"beta-{index}")
    _create(client, "alpha-0")
    # When a prefix few names have is listed, pages may stop short, never losing a schedule
    pages = _pages(client, NamePrefix="alpha", MaxResults=10)
    assert len(pages) > 1 and all(len(page) <= 1 for page in pages)
    assert [name for page in pages for name in page] == ["alpha-0"]
