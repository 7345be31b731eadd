"""``punctual_cli.scheduler.client``: botocore's scheduler client, signed for execute-api."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from punctual_cli import scheduler


class _Raw:
    def stream(self, **_: Any) -> Any:
        yield b'{"ScheduleGroups": []}'


def test_requests_are_signed_for_execute_api_in_the_endpoints_region() -> None:
    session = boto3.session.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    client = scheduler.client("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", session=session)
    sent: list[Any] = []

    def capture(request: Any, **_: Any) -> AWSResponse:
        sent.append(request)
        return AWSResponse(request.url, 200, {"Content-Type": "application/json"}, _Raw())

    client.meta.events.register_first("before-send.scheduler", capture)
    assert client.list_schedule_groups()["ScheduleGroups"] == []
    auth = sent[0].headers["Authorization"].decode()
    assert "/eu-west-1/execute-api/aws4_request" in auth, auth
    assert sent[0].url == "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/schedule-groups"
    # A plain client signs for the service itself
    plain = session.client("scheduler", region_name="eu-west-1", endpoint_url="http://127.0.0.1:1")
    plain.meta.events.register_first("before-send.scheduler", capture)
    plain.list_schedule_groups()
    assert "/eu-west-1/scheduler/aws4_request" in sent[1].headers["Authorization"].decode()
