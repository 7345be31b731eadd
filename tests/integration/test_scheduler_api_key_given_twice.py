"""QA30 (review of 9b824e73): the EventBridge Scheduler API took a key given twice in one object of
a request body, keeping the last value without a word (the ``/v1`` check runs after the resolver has
handed ``/schedules`` to the Scheduler API). It is the service's 400 ValidationException naming the
key, and nothing is created or changed."""

from __future__ import annotations

from api_harness import ApiClient, Reply
from api_harness import api as api  # the fixture

TARGET = (
    '"Target": {"Arn": "arn:aws:sqs:us-east-1:123456789012:orders",'
    ' "RoleArn": "arn:aws:iam::123456789012:role/scheduler"}'
)


def _refused_naming(reply: Reply, key: str) -> None:
    assert (reply.status, reply.headers["x-amzn-ErrorType"]) == (400, "ValidationException")
    assert f"the key {key!r} is given twice" in reply.body["Message"], reply.body


def test_create_schedule_with_a_key_twice_is_a_validation_exception(api: ApiClient) -> None:
    body = (
        '{"ScheduleExpression": "rate(1 hour)", "ScheduleExpression": "rate(1 minute)",'
        f' "FlexibleTimeWindow": {{"Mode": "OFF"}}, {TARGET}}}'
    )
    _refused_naming(api.call("POST", "/schedules/twice", raw=body), "ScheduleExpression")
    assert api.call("GET", "/schedules/twice").status == 404  # nothing created


def test_a_nested_key_twice_is_refused_and_the_schedule_kept(api: ApiClient) -> None:
    create = f'{{"ScheduleExpression": "rate(1 hour)", "FlexibleTimeWindow": {{"Mode": "OFF"}}, {TARGET}}}'
    assert api.call("POST", "/schedules/kept", raw=create).status == 200
    update = (
        '{"ScheduleExpression": "rate(2 hours)", "FlexibleTimeWindow": {"Mode": "OFF", "Mode": "FLEXIBLE"},'
        f" {TARGET}}}"
    )
    _refused_naming(api.call("PUT", "/schedules/kept", raw=update), "Mode")
    assert api.call("GET", "/schedules/kept").body["ScheduleExpression"] == "rate(1 hour)"  # unchanged


def test_a_key_twice_in_a_json_target_input_is_refused(api: ApiClient) -> None:
    """``Target.Input`` of a Lambda target is a JSON text the payload is made of: its key given
    twice was the payload's last value."""
    target = (
        '"Target": {"Arn": "arn:aws:lambda:us-east-1:123456789012:function:f",'
        ' "RoleArn": "arn:aws:iam::123456789012:role/scheduler",'
        ' "Input": "{\\"report\\": \\"daily\\", \\"report\\": \\"weekly\\"}"}'
    )
    body = f'{{"ScheduleExpression": "rate(1 hour)", "FlexibleTimeWindow": {{"Mode": "OFF"}}, {target}}}'
    _refused_naming(api.call("POST", "/schedules/input", raw=body), "report")
    assert api.call("GET", "/schedules/input").status == 404
