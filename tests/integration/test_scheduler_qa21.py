"""The EventBridge Scheduler API after a QA round (QA21, 2026-12-06), with an unmodified boto3
``scheduler`` client: a schedule's ``Target.Input`` reaches its target as written but for the
service's context attributes; GetSchedule shows what the job does after a ``/v1`` edit (and a
read-modify-write UpdateSchedule keeps that edit); UpdateSchedule keeps what the Scheduler API has
no member for; a CreateSchedule retried with its ClientToken after an update answers its ARN.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from api_harness import ACCOUNT, ALICE_ID, REGION, ApiClient, job_spec
from api_harness import api as api  # the fixture
from scheduler_harness import scheduler_client

from punctual.api.scheduler.mapping import job_id_of
from punctual.delivery.targets.base import SlotContext
from punctual.delivery.targets.payload import execution_id, render_payload

ROLE = f"arn:aws:iam::{ACCOUNT}:role/scheduler-role"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"
LAMBDA = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:fn"
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:oncall"
SLOT = "2026-12-06T08:00:00Z"
# What a job's GET answers that a PUT does not take
OUTPUT_ONLY = {
    "id",
    "state",
    "version",
    "created_at",
    "updated_at",
    "next_fire_at",
    "paused_at",
    "state_reason",
    "skipped_slots",
    "signing_secret",
}


@pytest.fixture
def client(api: ApiClient) -> Any:
    return scheduler_client(api)


def _schedule(name: str, **extra: Any) -> dict[str, Any]:
    target = {"Arn": QUEUE, "RoleArn": ROLE, **extra.pop("Target", {})}
    return {
        "Name": name,
        "ScheduleExpression": "rate(5 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": target,
        **extra,
    }


def _ctx(job_id: str) -> SlotContext:
    return SlotContext(
        job_id=job_id,
        tenant=ALICE_ID,
        slot=SLOT,
        scheduled_at=datetime(2026, 12, 6, 8, tzinfo=UTC),
        attempt=2,
        timeout_s=30,
    )


def _v1_edit(api: ApiClient, job_id: str, **changes: Any) -> dict[str, Any]:
    """GET, edit, PUT (docs/api.md), the body the GET answered sent back with ``changes``."""
    got = api.call("GET", f"/v1/jobs/{job_id}")
    body = {key: value for key, value in got.body.items() if key not in OUTPUT_ONLY}
    body.update(changes)
    put = api.call("PUT", f"/v1/jobs/{job_id}", body)
    assert put.status == 200, put.body
    job: dict[str, Any] = put.body
    return job


def _update_as_got(client: Any, name: str, **changes: Any) -> None:
    """UpdateSchedule sending back what GetSchedule answered, with ``changes``."""
    got = client.get_schedule(Name=name)
    kept = ("ScheduleExpression", "ScheduleExpressionTimezone", "FlexibleTimeWindow", "Target", "State")
    client.update_schedule(Name=name, **{**{key: got[key] for key in kept if key in got}, **changes})


# --------------------------------------------------------------------------- Target.Input


def test_a_schedule_input_has_only_the_service_context_attributes_filled_in(
    client: Any, api: ApiClient
) -> None:
    text = "<order><tenant>acme</tenant><slot>3</slot><attempt>1</attempt><job_id/><scheduled_at/></order>"
    attributes = "<aws.scheduler.attempt-number> <aws.scheduler.execution-id> <aws.scheduler.scheduled-time>"
    client.create_schedule(**_schedule("orders", Target={"Input": f"{text}|{attributes}"}))
    job = api.store.get_job(ALICE_ID, job_id_of("default", "orders"))
    assert job is not None
    ctx = _ctx(job.id)
    assert render_payload(job.payload, ctx) == f"{text}|2 {execution_id(ctx)} {SLOT}"


def test_a_v1_job_payload_still_has_punctual_placeholders_filled_in(client: Any, api: ApiClient) -> None:
    job = api.create(job_spec(payload={"slot": "<slot>", "try": "<attempt>"}))
    _update_as_got(
        client, job["id"], Target={**client.get_schedule(Name=job["id"])["Target"], "RoleArn": ROLE}
    )
    stored = api.store.get_job(ALICE_ID, job["id"])
    assert stored is not None and stored.payload == {"slot": "<slot>", "try": "<attempt>"}
    # A /v1 job updated through the Scheduler API is still a /v1 job: its placeholders are its own
    assert render_payload(stored.payload, _ctx(stored.id)) == {"slot": SLOT, "try": "2"}


def test_a_v1_job_is_not_created_at_an_id_of_a_schedule_jobs_form(api: ApiClient) -> None:
    job_id = "sch-" + "0" * 32
    put = api.call("PUT", f"/v1/jobs/{job_id}", job_spec(), headers={"If-None-Match": "*"})
    assert put.status == 409, put.body
    batch = api.call("POST", "/v1/job-batches", {"jobs": [{"id": job_id, "job": job_spec()}]})
    assert batch.body["results"][0]["code"] == 409, batch.body
    assert api.store.get_job(ALICE_ID, job_id) is None


# --------------------------------------------------------------------------- a /v1 edit, read back


def test_get_schedule_shows_the_target_and_input_a_v1_edit_gave(client: Any, api: ApiClient) -> None:
    client.create_schedule(**_schedule("nightly", Target={"Input": "old"}))
    lambda_target = {"type": "lambda", "function_arn": LAMBDA, "role_arn": ROLE}
    _v1_edit(api, job_id_of("default", "nightly"), target=lambda_target, payload={"new": 1})
    target = client.get_schedule(Name="nightly")["Target"]
    assert (target["Arn"], target.get("Input")) == (LAMBDA, '{"new":1}'), target
    assert client.list_schedules()["Schedules"][0]["Target"]["Arn"] == LAMBDA


def test_a_v1_put_without_the_block_shows_its_target(client: Any, api: ApiClient) -> None:
    client.create_schedule(**_schedule("plain"))
    spec = {
        "name": "plain",
        "schedule": "rate(5 minutes)",
        "target": {"type": "sns", "topic_arn": TOPIC, "role_arn": ROLE},
        "payload": "hi",
    }
    assert api.call("PUT", f"/v1/jobs/{job_id_of('default', 'plain')}", spec).status == 200
    target = client.get_schedule(Name="plain")["Target"]
    assert (target["Arn"], target.get("Input")) == (TOPIC, "hi"), target


def test_a_v1_window_and_start_show_in_get_schedule(client: Any, api: ApiClient) -> None:
    client.create_schedule(
        **_schedule("flex", FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 15})
    )
    _v1_edit(api, job_id_of("default", "flex"), jitter_seconds=120, start_at="2030-01-01T00:00:00Z")
    got = client.get_schedule(Name="flex")
    assert got["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 2}, got
    assert got["StartDate"] == datetime(2030, 1, 1, tzinfo=UTC), got  # (the block said: started at once)


def test_an_unchanged_v1_put_keeps_the_input_as_given(client: Any, api: ApiClient) -> None:
    given = '{"arn": "<aws.scheduler.schedule-arn>",  "n": 1}'  # (spacing, an attribute filled in)
    client.create_schedule(**_schedule("kept", Target={"Arn": LAMBDA, "Input": given}))
    _v1_edit(api, job_id_of("default", "kept"), description="edited")
    got = client.get_schedule(Name="kept")
    assert (got["Target"]["Input"], got["Description"]) == (given, "edited"), got


def test_a_read_modify_write_update_keeps_the_v1_edit(client: Any, api: ApiClient) -> None:
    client.create_schedule(**_schedule("rmw"))
    job_id = job_id_of("default", "rmw")
    _v1_edit(
        api, job_id, target={"type": "lambda", "function_arn": LAMBDA, "role_arn": ROLE}, payload={"x": 1}
    )
    _update_as_got(client, "rmw", Description="only the description")
    job = api.call("GET", f"/v1/jobs/{job_id}").body
    assert (job["target"]["type"], job["payload"], job["description"]) == (
        "lambda",
        {"x": 1},
        "only the description",
    )


# --------------------------------------------------------------------------- UpdateSchedule


def test_update_schedule_keeps_what_the_scheduler_api_cannot_express(client: Any, api: ApiClient) -> None:
    alerts = [{"on": ["failed"], "target": {"type": "sns", "topic_arn": TOPIC}}]
    retry = {"max_attempts": 4, "backoff": "fixed", "base_seconds": 5, "max_seconds": 60}
    job = api.create(
        job_spec(timeout_seconds=60, overlap="skip", alerts=alerts, retry=retry, catchup={"policy": "latest"})
    )
    target = {**client.get_schedule(Name=job["id"])["Target"], "RoleArn": ROLE}
    _update_as_got(client, job["id"], Target=target, Description="now described")
    after = api.call("GET", f"/v1/jobs/{job['id']}").body
    for key in ("name", "alerts", "overlap", "timeout_seconds", "payload", "schedule", "timezone"):
        assert after[key] == job[key], (key, job[key], after[key])
    assert after["tags"] == {**job["tags"], "punctual:schedule-group": "default"}
    assert after["description"] == "now described"
    assert (after["retry"]["backoff"], after["retry"]["max_attempts"]) == ("fixed", 4)
    assert after["catchup"]["policy"] == "latest"


@pytest.mark.parametrize(("jitter", "max_age", "window", "age"), [(30, 10, 1, 60), (90, 200000, 2, 86400)])
def test_values_get_schedule_shows_rounded_are_kept_when_sent_back(
    client: Any, api: ApiClient, jitter: int, max_age: int, window: int, age: int
) -> None:
    # Given a /v1 job whose jitter (seconds) and event age (outside 60-86400) GetSchedule rounds
    retry = {"max_attempts": 3, "max_age_seconds": max_age}
    target = {"type": "sqs", "queue_arn": QUEUE, "role_arn": ROLE}
    job = api.create(job_spec(jitter_seconds=jitter, retry=retry, target=target))
    got = client.get_schedule(Name=job["id"])
    assert got["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": window}
    assert got["Target"]["RetryPolicy"]["MaximumEventAgeInSeconds"] == age
    # When an update sends them back as shown, to disable it
    _update_as_got(client, job["id"], State="DISABLED")
    # Then the job keeps its own (QA23: 30 s of jitter became 60, an event age of 10 s 60 s)
    after = api.call("GET", f"/v1/jobs/{job['id']}").body
    assert (after["state"], after["jitter_seconds"], after["retry"]["max_age_seconds"]) == (
        "PAUSED",
        jitter,
        max_age,
    )
    assert after["catchup"] == job["catchup"]
    # and a window the update changes is the update's
    _update_as_got(client, job["id"], FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5})
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["jitter_seconds"] == 300


def test_a_v1_job_without_payload_keeps_none_when_no_input_is_sent_back(client: Any, api: ApiClient) -> None:
    target = {"type": "sqs", "queue_arn": QUEUE, "role_arn": ROLE}
    job = api.create(job_spec(payload=None, target=target))
    assert "Input" not in client.get_schedule(Name=job["id"])["Target"]
    _update_as_got(client, job["id"], State="DISABLED")
    # (QA23: its queue got the message {} from then on, where it had got null)
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["payload"] is None


def test_update_schedule_keeps_the_target_and_dst_options_the_api_has_no_member_for(
    client: Any, api: ApiClient
) -> None:
    # Given a /v1 Lambda job invoked RequestResponse (its function's errors are retried), with a
    # rate budget, DST options and a dead-letter role of its own
    target = {
        "type": "lambda",
        "function_arn": LAMBDA,
        "role_arn": ROLE,
        "invocation_type": "RequestResponse",
    }
    dead_letter = {"queue_arn": f"{QUEUE}-dlq", "role_arn": f"{ROLE}-dlq"}
    job = api.create(
        job_spec(
            target={**target, "rate_budget_per_second": 5.0},
            dst={"gap": "shift", "repeat": "both"},
            dead_letter=dead_letter,
        )
    )
    # When an update sends back what GetSchedule showed, to disable it
    _update_as_got(client, job["id"], State="DISABLED")
    # Then it keeps them (QA23: Event, no budget and the service's skip/first from then on)
    after = api.call("GET", f"/v1/jobs/{job['id']}").body
    assert (after["state"], after["target"], after["dst"]) == ("PAUSED", job["target"], job["dst"])
    assert after["dead_letter"] == dead_letter  # (its role: the dead letter was sent as the target's)
    # and a new expression gets the service's DST rules, as a new schedule does
    _update_as_got(client, job["id"], ScheduleExpression="cron(30 2 * * ? *)")
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["dst"] == {"gap": "skip", "repeat": "first"}


def test_update_schedule_replaces_what_the_scheduler_api_has(client: Any, api: ApiClient) -> None:
    client.create_schedule(
        **_schedule(
            "full",
            Description="first",
            FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 10},
            Target={"DeadLetterConfig": {"Arn": f"{QUEUE}-dlq"}, "Input": "one"},
        )
    )
    client.update_schedule(**_schedule("full", Target={"Input": "two"}))
    got = client.get_schedule(Name="full")
    assert "Description" not in got and got["FlexibleTimeWindow"] == {"Mode": "OFF"}, got
    assert "DeadLetterConfig" not in got["Target"] and got["Target"]["Input"] == "two", got
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'full')}").body
    assert (job["jitter_seconds"], job["catchup"]["window_seconds"]) == (0, 3600)


def test_a_create_retried_with_its_client_token_after_an_update_answers_its_arn(client: Any) -> None:
    first = client.create_schedule(**_schedule("nightly", ClientToken="create-1"))["ScheduleArn"]
    client.update_schedule(**_schedule("nightly", Description="changed by another process"))
    assert client.create_schedule(**_schedule("nightly", ClientToken="create-1"))["ScheduleArn"] == first
    with pytest.raises(client.exceptions.ConflictException):
        client.create_schedule(**_schedule("nightly", ClientToken="another"))
