"""QA30 review (a76a2e1f): API Gateway's bare 500 ``{"message": "Internal server error"}`` was taken
as "the function never ran" and any request was sent again. AWS gives that body for Lambda service
exceptions too, after the function may have run: a create without an ``Idempotency-Key`` sent again
made a second job. Now the bare 500 is an answer lost (as a 502 or 504): only a request that may be
repeated is sent again, and the client makes a create and a run-now repeatable by sending an
``Idempotency-Key`` of its own when the caller gave none."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served
from test_cli_api import served as served  # the fixture
from test_client_retries import FakeTime

from punctual_cli.client import ApiError, PunctualClient

BARE_500 = {"statusCode": 500, "headers": {}, "body": '{"message": "Internal server error"}'}
SPEC = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}


def _ran_then_500(served: Served, monkeypatch: pytest.MonkeyPatch, method: str) -> list[dict[str, Any]]:
    """The API's function runs the first ``method`` request (it acts), then its answer is lost as
    API Gateway's bare 500; the events the function saw are returned."""
    handler = served.api.handler
    real, seen, lost = handler.handler, [], [True]

    def ran_then_500(event: dict[str, Any], context: Any) -> dict[str, Any]:
        reply: dict[str, Any] = real(event, context)
        if event.get("httpMethod") == method:
            seen.append(event)
            if lost:
                lost.pop()
                return BARE_500
        return reply

    monkeypatch.setattr(handler, "handler", ran_then_500)
    return seen


def _a_job_then_500(
    served: Served, monkeypatch: pytest.MonkeyPatch, method: str
) -> tuple[PunctualClient, dict[str, Any], list[dict[str, Any]]]:
    """A client, a job it made, then the first ``method`` request done and answered a bare 500."""
    client = PunctualClient(endpoint=served.url, retry=FakeTime().policy())
    job = client.create_job(SPEC)
    return client, job, _ran_then_500(served, monkeypatch, method)


def _one_key(sent: list[dict[str, Any]]) -> bool:
    """Whether the two requests sent carry one Idempotency-Key (made by the client)."""
    keys = [
        {k.lower(): v for k, v in (event["headers"] or {}).items()}.get("idempotency-key") for event in sent
    ]
    return len(keys) == 2 and bool(keys[0]) and keys[0] == keys[1]


def test_a_create_the_api_made_then_answered_a_bare_500_makes_one_job(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _ran_then_500(served, monkeypatch, "POST")
    client = PunctualClient(endpoint=served.url, retry=FakeTime().policy())
    made = client.create_job(SPEC)  # no Idempotency-Key given: the client's own answers the first's job
    assert [job["id"] for job in client.iter_jobs()] == [made["id"]]
    assert _one_key(sent)  # the retry carried the first's key
    # Another create is another key: another job
    assert client.create_job(SPEC)["id"] != made["id"] and len(list(client.iter_jobs())) == 2


def test_a_run_now_the_api_accepted_then_answered_a_bare_500_runs_one_slot(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, job, sent = _a_job_then_500(served, monkeypatch, "POST")
    accepted = client.trigger_job(job["id"])
    assert _one_key(sent)  # sent again with the first's key: it names the first's slot, not a second run
    assert client.trigger_job(job["id"])["slot"] != accepted["slot"]  # another call: another run


def test_a_replace_answered_a_bare_500_is_not_sent_again(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, job, sent = _a_job_then_500(served, monkeypatch, "PUT")
    with pytest.raises(ApiError) as caught:
        client.replace_job(job["id"], {**SPEC, "schedule": "rate(2 hours)"})
    assert caught.value.status == 500 and len(sent) == 1  # it may have been done: not done twice
