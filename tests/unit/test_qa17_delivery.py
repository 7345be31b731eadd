"""QA (qa17, delivery to targets): jobs that registration took and whose every slot then failed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from factories import spec
from punctual.delivery.targets.aws_services import EventBridgeTargetAdapter
from punctual.delivery.targets.base import Outcome, SlotContext
from punctual.delivery.targets.webhooks import HttpTargetAdapter
from punctual.dispatch.queues import MemoryQueues
from punctual.models import EcsTarget, EventBridgeTarget, HttpTarget, SqsTarget
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

A = "123456789012"
BUS = f"arn:aws:events:us-east-1:{A}:event-bus/default"


class _Events:
    """An EventBridge client that takes every entry PutEvents takes, and keeps them."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.entries.extend(Entries)
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]}


def _ctx() -> SlotContext:
    return SlotContext(
        job_id="job1",
        tenant="t",
        slot="2026-12-05T10:00:00Z",
        scheduled_at=datetime(2026, 12, 5, 10, tzinfo=UTC),
        attempt=1,
        timeout_s=30,
    )


def test_an_eventbridge_job_without_a_payload_puts_an_empty_detail() -> None:
    """QA: registration takes an eventbridge target with no payload (the default, null: only a
    non-object payload is refused), and every slot then FAILED, never retried:
    'eventbridge detail must be a JSON object, the payload is NoneType'. PutEvents needs a
    detail that is a JSON object; with none given the event's detail is the empty object."""
    events = _Events()
    adapter = EventBridgeTargetAdapter(lambda service, *args, **kwargs: events)
    result = adapter.invoke(EventBridgeTarget(event_bus_arn=BUS), None, _ctx())
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert [json.loads(entry["Detail"]) for entry in events.entries] == [{}]


@pytest.mark.parametrize("source", ["aws.ec2", "aws.scheduler", "aws."])
def test_an_eventbridge_source_of_aws_is_refused_at_registration(source: str) -> None:
    """QA: ``source: aws.ec2`` was taken (201); PutEvents refuses every event whose source starts
    with ``aws.`` (AWS's own), so every slot would fail. EventBridge Scheduler's
    ``EventBridgeParameters.Source`` refuses it the same way (pattern ``(?!aws\\.)``)."""
    with pytest.raises(ValidationError, match="aws"):
        EventBridgeTarget(event_bus_arn=BUS, source=source)
    EventBridgeTarget(event_bus_arn=BUS, source="awsome.jobs")  # only the "aws." prefix is AWS's


@pytest.mark.parametrize("group", ["a b", "caf\u00e9", "tab\there", "g\u00a0"])
def test_an_sqs_message_group_sqs_refuses_is_refused_at_registration(group: str) -> None:
    """QA: ``message_group_id: "a b\u00e9"`` was taken (201); SQS takes only alphanumeric
    characters and punctuation in a MessageGroupId (``!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~``), so
    every SendMessage of the job would fail."""
    with pytest.raises(ValidationError, match="message_group_id"):
        SqsTarget(queue_arn=f"arn:aws:sqs:us-east-1:{A}:orders.fifo", message_group_id=group)
    SqsTarget(queue_arn=f"arn:aws:sqs:us-east-1:{A}:orders.fifo", message_group_id="Orders-1.eu/#7~")


class _Redirecting:
    """A receiver on loopback that answers its first request ``307`` with ``Location: <location>``
    and every later one ``200``; it keeps each request line."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.location = b""
        self.lines: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.lines.append(data.split(b"\r\n", 1)[0])
                if len(self.lines) == 1:
                    head = b"HTTP/1.1 307 Moved\r\nLocation: " + self.location
                else:
                    head = b"HTTP/1.1 200 OK"
                conn.sendall(head + b"\r\nContent-Length: 0\r\n\r\n")

    def call(self, location: bytes, follow: bool) -> Any:
        self.location = location
        return HttpTargetAdapter(["127.0.0.0/8"]).invoke(
            HttpTarget(url=f"http://127.0.0.1:{self.port}/hook", follow_redirects=follow), {"a": 1}, _ctx()
        )


@pytest.fixture
def receiver() -> Iterator[_Redirecting]:
    found = _Redirecting()
    yield found
    found.server.close()


@pytest.mark.parametrize("follow", [True, False])
def test_a_redirect_to_a_location_that_is_no_url_fails_the_attempt_and_says_so(
    receiver: _Redirecting, follow: bool
) -> None:
    """QA: a receiver's ``Location: http://[::1`` made the adapter raise ValueError (adapters never
    raise), and the worker recorded "invalid http target: Invalid IPv6 URL" of a valid target."""
    result = receiver.call(b"http://[::1", follow)
    assert result.outcome is Outcome.PERMANENT
    assert "invalid Location" in result.summary


def test_a_redirect_to_a_raw_utf8_location_is_followed_percent_encoded(receiver: _Redirecting) -> None:
    """QA: ``Location: /caf\xc3\xa9`` (raw UTF-8, as some servers send it) made the adapter raise
    UnicodeEncodeError; browsers and ``requests`` follow it to ``/caf%C3%A9``."""
    result = receiver.call("/caf\u00e9".encode(), True)
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert receiver.lines == [b"POST /hook HTTP/1.1", b"POST /caf%C3%A9 HTTP/1.1"]


def _service() -> JobService:
    clock = ManualClock(datetime(2026, 11, 30, 10, tzinfo=UTC))
    return JobService(
        MemoryStore(),
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ("long",)),
    )


ECS = {
    "type": "ecs",
    "cluster_arn": f"arn:aws:ecs:us-east-1:{A}:cluster/jobs",
    "task_definition_arn": f"arn:aws:ecs:us-east-1:{A}:task-definition/export:3",
    "subnets": ["subnet-1"],
    "container_name": "app",
}


def test_an_ecs_payload_no_task_could_carry_is_refused_at_registration() -> None:
    """QA: an ecs job with a 20 KB payload was taken (201), and every slot then FAILED, never
    retried: "payload too large for container overrides (8192 characters in all)" (RunTask's
    limit). A payload that fits once its placeholders are filled in is still taken."""
    service = _service()
    with pytest.raises(InvalidJobError, match="too large for container overrides") as refused:
        service.register("t", spec(runtime="ecs", target=ECS, payload={"x": "a" * 20_000}))
    assert refused.value.field == "payload"
    service.register("t", spec(runtime="ecs", target=ECS, payload={"x": "a" * 7_000, "k": "<job_id>:<slot>"}))
    # shorter once filled in: 900 x "<attempt>" (8,100 characters) is 900 x "1"
    service.register("t", spec(runtime="ecs", target=ECS, payload="<attempt>" * 900))


@pytest.mark.parametrize("follow", [True, False])
def test_a_redirect_s_query_string_stays_out_of_the_record(receiver: _Redirecting, follow: bool) -> None:
    """QA: the record's ``url`` is cut before its query string (it may carry a token), but a
    redirect's Location went into the summary (the execution's error, its events and alerts) and
    ``redirects`` whole: an http-to-https redirect echoes the job's URL, ``?token=`` and all."""
    location = f"http://127.0.0.1:{receiver.port}/next?token=s3cr3t"
    result = receiver.call(location.encode() + b"#frag", follow)
    assert "s3cr3t" not in result.summary + json.dumps(result.detail)
    assert f"127.0.0.1:{receiver.port}/next" in result.summary + json.dumps(result.detail)


def test_the_node_receiver_example_answers_401_only_to_what_fails_verification() -> None:
    """QA: docs/delivery.md's node example caught every error of ``webhook.verify`` as 401; the
    library parses the body as JSON once the signature matched, so every verified request of a
    text-payload job (``--payload-text``) was answered 401, which fails the slot without a retry
    (run with standardwebhooks 1.1.1 from npm against requests Punctual sent)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "delivery.md").read_text()
    code = doc.split("## Receiving a webhook", 1)[1].split("```js\n", 1)[1].split("```", 1)[0]
    catch = code.split("catch", 1)[1].split("const key", 1)[0]
    assert "instanceof WebhookVerificationError" in catch
    assert catch.index("instanceof WebhookVerificationError") < catch.index("sendStatus(401)")


class _Box:
    """A SecretBox whose stored form names the plain text it was made from."""

    def __init__(self) -> None:
        self.made = 0

    def new_secret(self, tenant: str, job_id: str) -> tuple[str, str]:
        self.made += 1
        return f"whsec_{self.made}", f"sealed:whsec_{self.made}"


@pytest.mark.parametrize(
    "change",
    [
        {"target": {"type": "http", "url": "https://example.com/hook"}},
        {"alerts": [{"on": ["failed"], "target": {"type": "http", "url": "https://example.com/alerts"}}]},
    ],
)
def test_a_replace_that_gives_a_job_its_first_webhook_hands_out_the_secret_it_made(
    change: dict[str, Any],
) -> None:
    """QA: a PUT that turned an sqs job into an http one (or gave it an http alert rule) made the
    job a signing secret and threw its plain text away: the reply had ``signing_secret: null``, and
    every request was signed with a secret nobody had (the documented receivers answer it 401, which
    fails the slot without a retry). The replace now hands out the secret it made, once."""
    service = _service()
    service.secrets = _Box()
    sqs = {"type": "sqs", "queue_arn": f"arn:aws:sqs:us-east-1:{A}:orders"}
    job, secret = service.register("t", spec(target=sqs))
    assert secret is None and job.signing_secret_enc is None
    replaced, secret = service.replace_made("t", job.id, spec(**{"target": sqs, **change}))
    assert secret is not None and replaced.signing_secret_enc == f"sealed:{secret}"
    # a replace that keeps the job's secret makes none, and shows none
    again, none = service.replace_made("t", job.id, spec(**{"target": sqs, **change}, name="renamed"))
    assert none is None and again.signing_secret_enc == replaced.signing_secret_enc


@pytest.mark.parametrize("name", [" ", "\x00", "web app", "arn:aws:iam::123456789012:role/x", "caf\u00e9"])
def test_an_ecs_container_name_no_task_definition_can_hold_is_refused(name: str) -> None:
    """QA (API fuzzing): ``container_name: " "`` was taken; ECS container names are letters,
    digits, ``_`` and ``-``, so RunTask would refuse every override naming it."""
    with pytest.raises(ValidationError, match="container_name"):
        EcsTarget.model_validate({**ECS, "container_name": name})
    EcsTarget.model_validate({**ECS, "container_name": "app_1-web"})


def test_a_get_webhook_with_a_payload_is_refused_and_a_stored_one_stays_readable() -> None:
    """QA17: taken, and the payload silently never sent (a GET carries no body)."""
    from punctual.models import ACCEPTED, Job, JobSpec

    body = {
        "schedule": "rate(1 hour)",
        "payload": {"a": 1},
        "target": {"type": "http", "url": "https://e.com/x"},
    }
    body["target"]["method"] = "GET"  # type: ignore[index]
    with pytest.raises(ValidationError, match="payload: a GET request carries no body"):
        JobSpec.model_validate(body)
    JobSpec.model_validate({**body, "payload": None})
    stamp = "2026-12-01T00:00:00Z"
    stored = {**body, "id": "g", "tenant": "t", "created_at": stamp, "updated_at": stamp, "anchor": stamp}
    assert Job.model_validate(stored, context=ACCEPTED).payload == {"a": 1}
