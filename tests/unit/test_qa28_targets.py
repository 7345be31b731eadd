"""QA (qa28, targets): what a run sends to its target, and what registration lets through."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
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
