"""QA22: :class:`PunctualClient` (and the ``punctual`` command on it) sends again what the API
answered 429 or 503 for (nothing was done, ``Retry-After`` says when), and what got no answer when
that can be repeated; nothing else. Against the API handler served on loopback (the fixtures of
test_cli_api.py); the waits are a fake clock's, never slept.

It retried nothing: a script hitting the tenant's request quota (the API's 429 with
``Retry-After``) or a moment of DynamoDB throttling (503, "retry shortly") failed at once.
"""

from __future__ import annotations

import functools
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

from punctual.api import wiring
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual_cli import verb_kit
from punctual_cli.client import ApiError, PunctualClient, UnansweredError
from punctual_cli.retries import RetryPolicy, retry_after

START = datetime(2026, 12, 6, 10, 0, 30, tzinfo=UTC)  # half a minute into the quota's window


class FakeTime:
    """The client's sleeper and monotonic clock; a sleep moves the API's clock as far."""

    def __init__(self, api_clock: ManualClock | None = None) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self.api_clock = api_clock

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.api_clock is not None:
            self.api_clock.advance(seconds)

    def policy(self, **overrides: Any) -> RetryPolicy:
        return RetryPolicy(
            **{"sleep": self.sleep, "clock": lambda: self.now, "rand": lambda: 0.5, **overrides}
        )


def _quota(served: Served, monkeypatch: pytest.MonkeyPatch, per_minute: int) -> ManualClock:
    """The API with a request quota of ``per_minute`` and a clock of its own, at START."""
    monkeypatch.setenv("PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT", str(per_minute))
    clock = ManualClock(START)
    wiring.use_services(
        wiring.build_services(Settings.from_env(), served.api.dynamodb, served.api.sqs, clock=clock)
    )
    return clock


def _answer_first(served: Served, monkeypatch: pytest.MonkeyPatch, *answers: dict[str, Any]) -> None:
    """The API answers ``answers`` (Lambda proxy replies) to the first requests, then itself."""
    handler = served.api.handler
    real, left = handler.handler, list(answers)

    def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if left:
            return left.pop(0)
        reply: dict[str, Any] = real(event, context)
        return reply

    monkeypatch.setattr(handler, "handler", flaky)


def _busy(**headers: str) -> dict[str, Any]:
    body = (
        '{"title": "Service busy", "status": 503, "detail": "storage is throttling requests; retry shortly"}'
    )
    return {
        "statusCode": 503,
        "headers": {"Content-Type": "application/problem+json", **headers},
        "body": body,
    }


def test_a_429_is_sent_again_after_its_retry_after(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a tenant that used its quota of the minute
    fake = FakeTime(_quota(served, monkeypatch, 2))
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    client.list_jobs()
    client.list_jobs()
    # When it asks again, the API answers 429 with Retry-After: the rest of the minute (30 s)
    page = client.list_jobs()
    # Then the client waited that long and the request went through in the next minute
    assert page["items"] == [] and fake.slept == [30.0]
    assert [e["httpMethod"] for e in served.events] == ["GET"] * 4


def test_a_wait_past_the_deadline_is_not_made(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime(_quota(served, monkeypatch, 1))
    client = PunctualClient(endpoint=served.url, retry=fake.policy(deadline_s=20))
    client.list_jobs()
    with pytest.raises(ApiError) as caught:
        client.list_jobs()  # Retry-After: 30, past the 20 s deadline: the 429 at once
    assert caught.value.status == 429 and caught.value.retry_after_s == 30.0 and fake.slept == []


def test_a_503_without_retry_after_backs_off_and_a_create_is_made_once(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API that sheds load twice (503, nothing done, no Retry-After)
    _answer_first(served, monkeypatch, _busy(), _busy())
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    # When a job is created (a POST without an Idempotency-Key: a 503 did nothing)
    job = client.create_job(
        {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    )
    # Then it was sent three times, after backoff with jitter (half of 0.5 s, then of 1 s), once made
    assert fake.slept == [0.25, 0.5]
    assert [j["id"] for j in client.iter_jobs()] == [job["id"]]


def test_retry_after_as_an_http_date_counts_from_the_answers_date(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API's Date is when it answered; this machine's clock may be far off it
    assert (
        retry_after({"Retry-After": "Sun, 06 Dec 2026 10:00:07 GMT", "Date": "Sun, 06 Dec 2026 10:00:00 GMT"})
        == 7
    )
    assert (
        retry_after({"retry-after": "Sun, 06 Dec 2026 09:00:00 GMT", "date": "Sun, 06 Dec 2026 10:00:00 GMT"})
        == 0
    )
    assert retry_after({"Retry-After": "soon"}) is None and retry_after({"Retry-After": "9" * 400}) == float(
        "inf"
    )
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=7), usegmt=True)
    _answer_first(served, monkeypatch, _busy(**{"Retry-After": later}))
    fake = FakeTime()
    assert PunctualClient(endpoint=served.url, retry=fake.policy()).list_calendars()["items"] == []
    assert len(fake.slept) == 1 and 5 <= fake.slept[0] <= 7, fake.slept


@pytest.mark.parametrize(
    ("status", "title"),
    [(404, "Not found"), (409, "Conflict"), (412, "Precondition failed"), (422, "Invalid")],
)
def test_no_other_4xx_is_retried(
    served: Served, monkeypatch: pytest.MonkeyPatch, status: int, title: str
) -> None:
    body = f'{{"title": "{title}", "status": {status}}}'
    answer = {"statusCode": status, "headers": {"Retry-After": "1"}, "body": body}
    _answer_first(served, monkeypatch, answer)
    fake = FakeTime()
    with pytest.raises(ApiError) as caught:
        PunctualClient(endpoint=served.url, retry=fake.policy()).get_job("any")
    assert caught.value.status == status and fake.slept == [] and len(served.events) == 1


def _closed_port() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


def test_no_answer_is_retried_only_for_what_can_be_repeated() -> None:
    endpoint, spec = _closed_port(), {"schedule": "rate(1 hour)", "target": {"type": "sqs", "queue_arn": "x"}}
    calls = {
        "GET": (lambda c: c.get_job("j"), 3),
        "PUT": (lambda c: c.replace_job("j", spec), 3),
        "DELETE": (lambda c: c.delete_job("j"), 3),
        "POST with an Idempotency-Key": (lambda c: c.create_job(spec, idempotency_key="k1"), 3),
        "POST with the client's key": (lambda c: c.create_job(spec), 3),  # QA30: a create always has one
        "pause (a POST)": (lambda c: c.pause_job("j"), 0),
    }
    for name, (call, retries) in calls.items():
        fake = FakeTime()
        with pytest.raises(UnansweredError, match="cannot reach"):
            call(PunctualClient(endpoint=endpoint, timeout_s=1, retry=fake.policy()))
        assert fake.slept == [0.25, 0.5, 1.0][:retries], name
    never = FakeTime()
    with pytest.raises(UnansweredError):
        PunctualClient(endpoint=endpoint, retry=never.policy(max_attempts=1)).get_job("j")
    assert never.slept == []


def test_the_command_retries_then_exits_as_documented(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTime(_quota(served, monkeypatch, 1))
    monkeypatch.setattr(verb_kit, "PunctualClient", functools.partial(PunctualClient, retry=fake.policy()))
    job = create(capsys, "--no-name-check")  # the minute's one request
    # Over the quota: waited for the next minute, done (exit 0)
    code, out, err = run(capsys, "jobs", "get", job["id"], "-o", "json")
    assert code == 0 and err == "" and fake.slept == [30.0]
    # Over it through every try (the next minute's is past the deadline): exit 1, one line, the 429
    monkeypatch.setattr(
        verb_kit, "PunctualClient", functools.partial(PunctualClient, retry=fake.policy(deadline_s=5))
    )
    code, out, err = run(capsys, "jobs", "get", job["id"])
    assert code == 1 and out == "" and err.count("\n") == 1 and err.startswith("punctual: error: 429 "), err


def test_the_duplicate_name_check_after_a_create_does_not_wait(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job is made; the courtesy check's list is over the quota: no wait for it, exit 0
    fake = FakeTime(_quota(served, monkeypatch, 1))
    monkeypatch.setattr(verb_kit, "PunctualClient", functools.partial(PunctualClient, retry=fake.policy()))
    code, out, err = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--name", "n",
                         "--http-url", "https://x.example.com")  # fmt: skip
    assert code == 0 and out.startswith("created job ") and err == "" and fake.slept == [], err


def _lose_first_answer(served: Served, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """The API does the first ``method`` request, and its answer is lost (the connection drops)."""
    handler = served.api.handler
    real, lost = handler.handler, []

    def dropping(event: dict[str, Any], context: Any) -> dict[str, Any]:
        reply: dict[str, Any] = real(event, context)
        if event["httpMethod"] == method and not lost:
            lost.append(reply)
            raise ConnectionResetError("the answer is lost")
        return reply

    monkeypatch.setattr(handler, "handler", dropping)


def test_an_update_whose_answer_was_lost_is_not_sent_again(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sent again, a guarded PUT that was done is a 412 (and a DELETE a 404): a change "made
    # meanwhile" that is the request's own; what was sent and not answered is said as such
    job = create(capsys, "--no-name-check")
    _lose_first_answer(served, monkeypatch, "PUT")
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    spec = {**client.get_job(job["id"]), "description": "changed"}
    with pytest.raises(UnansweredError) as caught:
        client.replace_job(job["id"], spec, if_match=job["version"])
    assert caught.value.status == 0 and fake.slept == [] and "may have been done" in str(caught.value)
    assert "cannot reach" not in str(caught.value)
    assert client.get_job(job["id"])["description"] == "changed"  # it was done
    # A read whose answer was lost is read again
    _lose_first_answer(served, monkeypatch, "GET")
    assert client.get_job(job["id"])["id"] == job["id"] and fake.slept == [0.25]


def test_a_keyed_create_whose_first_request_is_still_running_is_sent_again(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API's 409 "request in progress" (its reply to a request with an Idempotency-Key
    # while the first with that key runs: a client that timed out and sent it again)
    body = (
        '{"type": "urn:punctual:problem:request-in-progress", "title": "Request in progress",'
        ' "status": 409, "detail": "a request with this Idempotency-Key is still being processed"}'
    )
    busy = {"statusCode": 409, "headers": {"Retry-After": "1"}, "body": body}
    _answer_first(served, monkeypatch, busy)
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    spec = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    # When the keyed create is sent, it is sent again after the Retry-After and made once
    job = client.create_job(spec, idempotency_key="k-409")
    assert fake.slept == [1.0] and [j["id"] for j in client.iter_jobs()] == [job["id"]]
    # But the same 409 to a request without a key (a pause) is not retried (it is not that request's)
    _answer_first(served, monkeypatch, busy)
    with pytest.raises(ApiError) as caught:
        PunctualClient(endpoint=served.url, retry=FakeTime().policy()).pause_job(job["id"])
    assert caught.value.status == 409


@pytest.mark.parametrize(
    ("status", "message"), [(502, "Internal server error"), (504, "Endpoint request timed out")]
)
def test_api_gateways_502_and_504_are_a_lost_answer(
    served: Served, monkeypatch: pytest.MonkeyPatch, status: int, message: str
) -> None:
    # API Gateway answers these itself when the API's function crashed or ran out of time: the
    # request may have been done. A read, and a create with an Idempotency-Key (the caller's or,
    # QA30, the client's own), are sent again (it answers the job the first made, if it did); a
    # replace, a pause, are not.
    gateway = {"statusCode": status, "headers": {}, "body": f'{{"message": "{message}"}}'}
    spec = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    _answer_first(served, monkeypatch, gateway)
    made = client.create_job(spec, idempotency_key="k-gw")
    assert fake.slept == [0.25]
    _answer_first(served, monkeypatch, gateway, gateway)
    assert client.get_job(made["id"])["id"] == made["id"] and fake.slept == [0.25, 0.25, 0.5]
    _answer_first(served, monkeypatch, gateway)
    other = client.create_job(spec)  # no key given: the client's
    assert fake.slept == [0.25, 0.25, 0.5, 0.25]
    for call in (lambda: client.pause_job(made["id"]), lambda: client.replace_job(made["id"], spec)):
        _answer_first(served, monkeypatch, gateway)
        with pytest.raises(ApiError) as caught:
            call()
        assert caught.value.status == status and fake.slept == [0.25, 0.25, 0.5, 0.25]
    assert sorted(j["id"] for j in client.iter_jobs()) == sorted([made["id"], other["id"]])


def test_api_gateways_500_for_a_throttled_function_is_sent_again_when_it_can_be_repeated(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA30: API Gateway answers 500 {"message": "Internal server error"} itself when Lambda refuses
    # to invoke the API's function (throttled: its reserved concurrency full), but the client
    # retried nothing, and a create failed with "500 Internal server error". It is also Lambda's
    # service exceptions' answer, the function maybe run (review): sent again as after a 502
    gateway = {"statusCode": 500, "headers": {}, "body": '{"message": "Internal server error"}'}
    spec = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    _answer_first(served, monkeypatch, gateway, gateway)
    made = client.create_job(spec)  # no Idempotency-Key given: the client's own makes it repeatable
    assert fake.slept == [0.25, 0.5] and [j["id"] for j in client.iter_jobs()] == [made["id"]]
    _answer_first(served, monkeypatch, gateway)  # a replace may have been done: not sent again
    with pytest.raises(ApiError) as caught:
        client.replace_job(made["id"], {**spec, "schedule": "rate(2 hours)"})
    assert caught.value.status == 500 and fake.slept == [0.25, 0.5]
    fake.slept.clear()
    # And the API's own 500 (problem details: it ran, and failed) is not sent again
    own = {
        "statusCode": 500,
        "headers": {"Content-Type": "application/problem+json"},
        "body": '{"title": "Internal error", "status": 500, "detail": "see the log"}',
    }
    _answer_first(served, monkeypatch, own)
    with pytest.raises(ApiError) as caught:
        client.create_job(spec)
    assert caught.value.status == 500 and fake.slept == []
    assert len(list(client.iter_jobs())) == 1


@pytest.mark.parametrize("status", [502, 504])
def test_a_batch_whose_answer_was_lost_is_sent_again_and_makes_each_job_once(
    served: Served, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    # QA27: a batch is idempotent by job id (a repeat answers "exists"), but the client did not send
    # it again after API Gateway's 502/504 or a timeout, although the docs say it is safe to repeat
    gateway = {"statusCode": status, "headers": {}, "body": '{"message": "Endpoint request timed out"}'}
    spec = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    fake = FakeTime()
    client = PunctualClient(endpoint=served.url, retry=fake.policy())
    _answer_first(served, monkeypatch, gateway)  # (nothing made: the function never ran)
    reply = client.create_job_batch({"nightly": spec, "hourly": spec})
    assert fake.slept == [0.25] and reply["created"] == 2
    # made, and its answer lost on the way back: sent again, each job answers "exists"
    _lose_first_answer(served, monkeypatch, "POST")
    again = client.create_job_batch({"weekly": spec})
    assert (again["created"], again["exists"]) == (0, 1) and fake.slept == [0.25, 0.25]
    assert sorted(j["id"] for j in client.iter_jobs()) == ["hourly", "nightly", "weekly"]
