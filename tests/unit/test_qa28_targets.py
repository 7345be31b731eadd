"""QA (qa28, targets): what a run sends to its target, and what registration lets through."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from test_qa17_delivery import _ctx, _service

from factories import job as make_job
from factories import spec
from punctual.delivery.targets.aws_services import SqsTargetAdapter
from punctual.delivery.targets.base import Outcome
from punctual.execution.dead_letters import dead_letter_attributes
from punctual.models import DeadLetterQueue, Execution, ExecutionStatus, SqsTarget
from punctual.usecases.job_errors import InvalidJobError

A = "123456789012"
QUEUE = f"arn:aws:sqs:us-east-1:{A}:orders"
SQS_URL = "https://sqs.us-east-1.amazonaws.com"
# What SQS takes in a message body (SendMessage: anything else is InvalidMessageContents)
SQS_TAKES = re.compile("[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*")


class _Sqs:
    """An SQS client that refuses a body as SQS does, and keeps what it takes (moto takes any)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.meta = type("Meta", (), {"endpoint_url": "https://sqs.us-east-1.amazonaws.com"})()

    def send_message(self, QueueUrl: str, MessageBody: str, **_: Any) -> dict[str, Any]:
        assert SQS_TAKES.fullmatch(MessageBody), f"InvalidMessageContents: {MessageBody!r}"
        self.bodies.append(MessageBody)
        return {"MessageId": "m-1"}


def test_a_json_payload_holding_a_noncharacter_reaches_an_sqs_queue() -> None:
    """QA: a JSON payload whose text held U+FFFE or U+FFFF was sent raw (JSON escapes only the
    control characters), and SQS refuses such a body: every slot FAILED, never retried. The body
    escapes them now; it reads back as the same JSON."""
    sqs = _Sqs()
    payload = {"note": "end\uffff", "mark\ufffe": ["\x01", "caf\u00e9 \U0001f600"]}
    result = SqsTargetAdapter(lambda service, *args, **kwargs: sqs).invoke(
        SqsTarget(queue_arn=QUEUE), payload, _ctx()
    )
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert [json.loads(body) for body in sqs.bodies] == [payload]


@pytest.mark.parametrize("text", ["bell\x07", "nul\x00here", "end\uffff", "\ufffe"])
@pytest.mark.parametrize("where", ["target", "dead_letter"])
def test_a_text_payload_sqs_refuses_is_refused_at_registration(text: str, where: str) -> None:
    """QA: an sqs job (or any job with a dead-letter queue, whose body is the payload) with a text
    payload holding a character SQS refuses in a message was taken (201), and every SendMessage
    then failed: InvalidMessageContents. Registration names the character now."""
    extra: dict[str, Any] = (
        {"target": {"type": "sqs", "queue_arn": QUEUE}}
        if where == "target"
        else {"dead_letter": {"queue_arn": QUEUE}}
    )
    with pytest.raises(InvalidJobError, match=r"cannot be sent to .*U\+") as refused:
        _service().register("t", spec(payload=text, **extra))
    assert refused.value.field == "payload"
    # What SQS takes is taken: tab, newline, carriage return, any other text, and JSON (escaped)
    _service().register("t", spec(payload="a\tb\r\nc caf\u00e9 \U0001f600", **extra))
    _service().register("t", spec(payload={"text": text}, **extra))


def test_a_dead_letter_s_attributes_hold_only_what_sqs_takes() -> None:
    """QA28: a failed slot's error (a receiver's answer, recorded before its summary was cleaned)
    went into ERROR_MESSAGE as it was: SQS refuses an attribute value holding a NUL, so the dead
    letter was never sent (DeadLettersFailed)."""
    job = make_job("job-1", dead_letter=DeadLetterQueue(queue_arn=QUEUE))
    failed = Execution(
        job_id="job-1",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=datetime(2026, 11, 30, 10, tzinfo=UTC),
        status=ExecutionStatus.FAILED,
        error="HTTP 500: \x1b[2J\x00boom\uffff",
    )
    attributes = dead_letter_attributes(job, failed, datetime(2026, 11, 30, 10, 5, tzinfo=UTC))
    assert all(SQS_TAKES.fullmatch(value["StringValue"]) for value in attributes.values())
    assert attributes["ERROR_MESSAGE"]["StringValue"] == "HTTP 500: \ufffd[2J\ufffdboom\ufffd"


def _sqs_answering(status: int, query_error: str, shape: str) -> Any:
    """A real boto3 SQS client whose request gets the answer SQS sends for an error (its JSON
    protocol, with the query-compatible code botocore reads from ``x-amzn-query-error``)."""
    client = boto3.client(
        "sqs", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s", endpoint_url=SQS_URL
    )

    def answer(request: Any, **_: Any) -> AWSResponse:
        body = json.dumps({"__type": f"com.amazonaws.sqs#{shape}", "message": "KMS throttled"}).encode()
        headers = {
            "x-amzn-query-error": f"{query_error};Sender",
            "Content-Type": "application/x-amz-json-1.0",
        }
        return AWSResponse(request.url, status, headers, _Raw(body))

    client.meta.events.register_first("before-send.sqs", answer)
    return client


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Any:
        yield self.data


def test_sqs_throttling_its_kms_key_is_retried_not_final() -> None:
    """QA28: SQS answers KMS throttling of an encrypted queue (KmsThrottled, HTTP 400) with the
    query-compatible code KMS.ThrottlingException, which botocore reports; the adapter knew only
    the shape's name, so the slot ended FAILED at once, without a retry (the scheduler's own sends
    already retried it: punctual.dispatch.queues)."""
    client = _sqs_answering(400, "KMS.ThrottlingException", "KmsThrottled")
    result = SqsTargetAdapter(lambda service, *args, **kwargs: client).invoke(
        SqsTarget(queue_arn=QUEUE), {}, _ctx()
    )
    assert "KMS.ThrottlingException" in result.summary
    assert result.outcome is Outcome.RETRYABLE
    # while a key the queue cannot use is the job's configuration: final
    client = _sqs_answering(400, "KMS.DisabledException", "KmsDisabled")
    result = SqsTargetAdapter(lambda service, *args, **kwargs: client).invoke(
        SqsTarget(queue_arn=QUEUE), {}, _ctx()
    )
    assert result.outcome is Outcome.PERMANENT


SNS = {"type": "sns", "topic_arn": f"arn:aws:sns:us-east-1:{A}:reports"}
BUS = {"type": "eventbridge", "event_bus_arn": f"arn:aws:events:us-east-1:{A}:event-bus/default"}
MACHINE = {"type": "stepfunctions", "state_machine_arn": f"arn:aws:states:us-east-1:{A}:stateMachine:report"}


@pytest.mark.parametrize(
    ("target", "payload", "service"),
    [
        (SNS, "x" * 262_000, "SNS Publish"),  # within the 256 KB a job holds; not with its attributes
        (BUS, {"rows": "x" * 262_120}, "an EventBridge entry"),  # with its time, source and detail-type
        (MACHINE, {"keys": ["<job_id>:<slot>" * 6] * 2_500}, "a Step Functions input"),  # once filled in
    ],
    ids=["sns", "eventbridge", "stepfunctions"],
)
def test_a_payload_the_service_could_never_take_is_refused_at_registration(
    target: dict[str, Any], payload: Any, service: str
) -> None:
    """QA28: a payload within the 256 KB a job may hold was taken (201) for an SNS, EventBridge or
    Step Functions target whose request it made larger than the service's 256 KiB (SNS counts the
    slot's message attributes, an EventBridge entry its source and detail-type, and placeholders
    grow once filled in): every slot then failed for good. Registration names the service now."""
    with pytest.raises(InvalidJobError, match=f"{service}.* over its 262,144") as refused:
        _service().register("t", spec(target=target, payload=payload))
    assert refused.value.field == "payload"


@pytest.mark.parametrize(
    ("target", "payload"),
    [
        (SNS, "x" * 261_900),
        (BUS, {"rows": "x" * 262_000}),
        (MACHINE, {"keys": ["<job_id>:<slot>" * 6] * 1_800}),
    ],
    ids=["sns", "eventbridge", "stepfunctions"],
)
def test_a_large_payload_the_service_takes_is_taken(target: dict[str, Any], payload: Any) -> None:
    _service().register("t", spec(target=target, payload=payload))
