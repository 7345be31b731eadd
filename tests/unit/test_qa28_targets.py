"""QA (qa28, targets): what a run sends to its target, and what registration lets through."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from test_qa17_delivery import _ctx, _service

from factories import spec
from punctual.delivery.targets.aws_services import SqsTargetAdapter
from punctual.delivery.targets.base import Outcome
from punctual.models import SqsTarget
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
