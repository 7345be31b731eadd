"""EventBridge Scheduler API gaps QA found, with an unmodified boto3 ``scheduler`` client:

* an ``at()`` schedule's ``StartDate``/``EndDate`` (ignored, as the service ignores them) were not
  returned by GetSchedule, which returns them as given;
* tag keys with the reserved ``aws:`` prefix were taken by CreateScheduleGroup and TagResource;
* a ``ScheduleExpression`` with leading or trailing whitespace was taken (Punctual's own ``/v1``
  still takes it: its ``schedule`` field is not this check);
* a ``MaxResults`` of more than 12 digits was "not an integer" (QA23), not out of range.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from api_harness import ApiClient, job_spec
from api_harness import api as api  # the fixture
from test_scheduler_api import _code as _error
from test_scheduler_api import _request
from test_scheduler_api import client as client  # the fixture

from punctual.api.scheduler.mapping import job_id_of

AT = "at(2030-01-01T00:00:00)"


# --------------------------------------------------------------------------- at() dates


def test_an_at_schedule_returns_its_start_and_end_date_as_given(client: Any, api: ApiClient) -> None:
    # Both outside the at() instant and in the wrong order: the service ignores them, and echoes them.
    start, end = datetime(2031, 1, 1, tzinfo=UTC), datetime(2029, 6, 1, 12, 30, 15, 700000, tzinfo=UTC)
    client.create_schedule(**_request("once", ScheduleExpression=AT, StartDate=start, EndDate=end))

    got = client.get_schedule(Name="once")
    assert got["StartDate"] == start
    assert got["EndDate"] == end.replace(microsecond=0)  # whole seconds, as the service keeps them
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'once')}").body
    assert job["start_at"] is None and job["end_at"] is None  # still ignored: the at() slot fires

    client.update_schedule(**_request("once", ScheduleExpression=AT, EndDate=start))
    got = client.get_schedule(Name="once")
    assert "StartDate" not in got and got["EndDate"] == start  # the update's, not the create's

    client.update_schedule(**_request("once", ScheduleExpression=AT))
    got = client.get_schedule(Name="once")
    assert "StartDate" not in got and "EndDate" not in got


def test_a_schedule_changed_from_at_shows_its_own_dates_only(client: Any) -> None:
    client.create_schedule(
        **_request("moved", ScheduleExpression=AT, EndDate=datetime(2031, 1, 1, tzinfo=UTC))
    )
    client.update_schedule(**_request("moved", StartDate=datetime(2030, 1, 1, tzinfo=UTC)))

    got = client.get_schedule(Name="moved")
    assert got["StartDate"] == datetime(2030, 1, 1, tzinfo=UTC) and "EndDate" not in got


# --------------------------------------------------------------------------- reserved tag keys


@pytest.mark.parametrize("key", ["aws:team", "AWS:team", "Aws:cost-center"])
def test_tag_keys_with_the_aws_prefix_are_refused(client: Any, key: str) -> None:
    code, message = _error(client.create_schedule_group, Name="g1", Tags=[{"Key": key, "Value": "v"}])
    assert code == "ValidationException"
    assert key in message and "aws:" in message and "reserved" in message
    assert _error(client.get_schedule_group, Name="g1")[0] == "ResourceNotFoundException"

    arn = client.create_schedule_group(Name="g2", Tags=[{"Key": "team", "Value": "data"}])["ScheduleGroupArn"]
    code, message = _error(
        client.tag_resource,
        ResourceArn=arn,
        Tags=[{"Key": "owner", "Value": "x"}, {"Key": key, "Value": "v"}],
    )
    assert code == "ValidationException" and key in message
    assert client.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "data"}]


def test_tag_keys_that_only_contain_aws_are_taken(client: Any) -> None:
    tags = [{"Key": "team-aws:x", "Value": "aws:value"}, {"Key": "awsome", "Value": "v"}]
    arn = client.create_schedule_group(Name="g3", Tags=tags)["ScheduleGroupArn"]
    client.tag_resource(ResourceArn=arn, Tags=[{"Key": "aws-team", "Value": "v"}])

    keys = [tag["Key"] for tag in client.list_tags_for_resource(ResourceArn=arn)["Tags"]]
    assert keys == ["aws-team", "awsome", "team-aws:x"]


# --------------------------------------------------------------------------- expression whitespace


@pytest.mark.parametrize(
    "expression",
    ["rate(5 minutes) ", " rate(5 minutes)", "cron(0 12 * * ? *)\n", "\tat(2030-01-01T00:00:00)"],
)
def test_an_expression_with_whitespace_around_it_is_refused(client: Any, expression: str) -> None:
    code, message = _error(client.create_schedule, **_request("ws", ScheduleExpression=expression))
    assert code == "ValidationException"
    assert (
        "Invalid Schedule Expression" in message and repr(expression) in message and "whitespace" in message
    )
    assert _error(client.get_schedule, Name="ws")[0] == "ResourceNotFoundException"

    client.create_schedule(**_request("ws"))
    code, message = _error(client.update_schedule, **_request("ws", ScheduleExpression=expression))
    assert code == "ValidationException" and "whitespace" in message
    assert client.get_schedule(Name="ws")["ScheduleExpression"] == "rate(5 minutes)"


def test_v1_keeps_taking_its_schedule_as_before(api: ApiClient) -> None:
    # Punctual's own API is not the scheduler API: its schedule field is unchanged by the check above.
    created = api.call("POST", "/v1/jobs", job_spec(schedule="rate(5 minutes) "))
    assert created.status == 201 and created.body["schedule"] == "rate(5 minutes) "


@pytest.mark.parametrize(
    ("given", "expected"), [("99999999999999", "at most 100"), ("-99999999999999", "at least 1")]
)
def test_a_huge_max_results_is_out_of_range_not_no_integer(api: ApiClient, given: str, expected: str) -> None:
    # (QA23: "MaxResults must be an integer", of an integer with more than 12 digits)
    reply = api.call("GET", f"/schedules?MaxResults={given}")
    assert (reply.status, reply.body) == (400, {"Message": f"MaxResults must be {expected}"})
    assert api.call("GET", "/schedules?MaxResults=1e3").body == {"Message": "MaxResults must be an integer"}
