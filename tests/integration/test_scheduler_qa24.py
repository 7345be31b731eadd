"""The EventBridge Scheduler API and ``/v1`` values its input refuses (QA24): GetSchedule shows such a
job as it is, and UpdateSchedule sending it back is a ValidationException naming the member, with
the job left as it was (docs/eventbridge-scheduler.md, "Also differs, known")."""

from __future__ import annotations

import pytest
from api_harness import ACCOUNT, REGION, ApiClient, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client

TARGET = {
    "type": "sqs",
    "queue_arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports",
    "role_arn": f"arn:aws:iam::{ACCOUNT}:role/scheduler-role",
}
SENT_BACK = (
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "Description",
    "State",
    "FlexibleTimeWindow",
    "Target",
)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"schedule": "0 2 * * *"}, "Invalid Schedule Expression 0 2 * * *"),
        ({"schedule": "rate(5 minutes) "}, "whitespace"),
        ({"description": "d" * 600}, "Description must have at most 512 characters"),
    ],
)
def test_a_v1_value_the_service_refuses_is_shown_and_refused_when_sent_back(
    api: ApiClient, given: dict[str, str], says: str
) -> None:
    created = api.call(
        "PUT", "/v1/jobs/nightly", job_spec(target=TARGET, **given), headers={"If-None-Match": "*"}
    )
    assert created.status == 201, created
    client = scheduler_client(api)
    shown = client.get_schedule(Name="nightly")
    field = "ScheduleExpression" if "schedule" in given else "Description"
    assert shown[field] == next(iter(given.values()))
    with pytest.raises(ClientError) as refused:
        client.update_schedule(Name="nightly", **{k: shown[k] for k in SENT_BACK if k in shown})
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert says in refused.value.response["Error"]["Message"]
    after = api.call("GET", "/v1/jobs/nightly").body
    assert after["version"] == created.body["version"] and after[next(iter(given))] == next(
        iter(given.values())
    )
