"""A job made through the EventBridge Scheduler API carries its schedule's identity (the GET body's
``scheduler`` block: group, name, ARN). Sent to create or replace another job (the get-edit-put
workflow: ``POST``, ``PUT`` at a new id, a batch item, ``PUT`` over another job), the block is
left out, with the group tag that came with it (QA21: the copy was a second schedule of the same
name and ARN; ListSchedules listed it twice, a DeleteSchedule left a phantom, and
DeleteScheduleGroup deleted the user's /v1 copies). A job that holds another's block anyway (written
before) is not that schedule either. Sent back to the schedule's own job, the body keeps it."""

from __future__ import annotations

from typing import Any

from api_harness import ALICE_ID, ApiClient, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client

from punctual.api.scheduler.mapping import GROUP_TAG
from punctual.models import SchedulerIdentity

TARGET = {"Arn": "arn:aws:sqs:us-east-1:123456789012:q", "RoleArn": "arn:aws:iam::123456789012:role/r"}


def create(scheduler: Any, name: str, expression: str = "rate(5 minutes)", **group: str) -> None:
    scheduler.create_schedule(
        Name=name, ScheduleExpression=expression, FlexibleTimeWindow={"Mode": "OFF"}, Target=TARGET, **group
    )


def schedule_job(api: ApiClient) -> tuple[Any, dict[str, Any]]:
    """Schedule g/n, made through the Scheduler API; the client and the job's GET body."""
    scheduler = scheduler_client(api)
    scheduler.create_schedule_group(Name="g")
    create(scheduler, "n", GroupName="g")
    [job] = api.call("GET", "/v1/jobs").body["items"]
    assert job["scheduler"]["group"] == "g" and job["tags"][GROUP_TAG] == "g"
    return scheduler, job


def listed(scheduler: Any, **filters: str) -> list[tuple[str, str]]:
    return [(s["GroupName"], s["Name"]) for s in scheduler.list_schedules(**filters)["Schedules"]]


def test_copies_of_a_schedules_job_are_plain_jobs_the_schedules_group_does_not_take(api: ApiClient) -> None:
    scheduler, original = schedule_job(api)
    posted = api.call("POST", "/v1/jobs", {**original, "name": "copy of n"})
    at_id = api.call("PUT", "/v1/jobs/my-copy", {**original, "name": "copy"}, headers={"If-None-Match": "*"})
    batch = api.call("POST", "/v1/job-batches", {"jobs": [{"id": "batched", "job": original}]})
    assert (posted.status, at_id.status, batch.status) == (201, 201, 200), (posted, at_id, batch)
    for job_id in (posted.body["id"], "my-copy", "batched"):
        copy = api.call("GET", f"/v1/jobs/{job_id}").body
        assert copy.get("scheduler") is None and GROUP_TAG not in copy["tags"], copy
    assert listed(scheduler, GroupName="g") == [("g", "n")]
    scheduler.delete_schedule_group(Name="g")
    for job_id in (posted.body["id"], "my-copy", "batched"):
        assert api.call("GET", f"/v1/jobs/{job_id}").status == 200  # not the group's: kept


def test_a_replace_with_another_jobs_block_leaves_the_job_what_it_was(api: ApiClient) -> None:
    scheduler, original = schedule_job(api)
    api.call("PUT", "/v1/jobs/plain", job_spec(), headers={"If-None-Match": "*"})
    replaced = api.call("PUT", "/v1/jobs/plain", {**job_spec(), "scheduler": original["scheduler"]})
    assert replaced.status == 200 and replaced.body.get("scheduler") is None, replaced
    assert listed(scheduler).count(("g", "n")) == 1
    assert ("default", "plain") in listed(scheduler)


def test_the_schedules_own_get_body_sent_back_keeps_it_the_schedule(api: ApiClient) -> None:
    scheduler, original = schedule_job(api)
    again = api.call("PUT", f"/v1/jobs/{original['id']}", {**original, "payload": {"v": 2}})
    assert again.status == 200 and again.body["scheduler"]["name"] == "n", again
    assert listed(scheduler, GroupName="g") == [("g", "n")]
    got = scheduler.get_schedule(Name="n", GroupName="g")
    assert got["Name"] == "n"


def test_a_stored_job_holding_another_jobs_block_is_not_that_schedule(api: ApiClient) -> None:
    """A copy written before the API left the block out (here: straight into the store)."""
    scheduler, original = schedule_job(api)
    api.call("PUT", "/v1/jobs/old-copy", job_spec(), headers={"If-None-Match": "*"})
    stored = api.store.get_job(ALICE_ID, "old-copy")
    assert stored is not None
    block = SchedulerIdentity.model_validate(original["scheduler"])
    copy = stored.model_copy(
        update={"scheduler": block, "tags": {**stored.tags, GROUP_TAG: "g"}, "version": stored.version + 1}
    )
    api.store.replace_job(copy, stored.version)
    assert listed(scheduler, GroupName="g") == [("g", "n")]
    scheduler.delete_schedule(Name="n", GroupName="g")
    assert listed(scheduler, GroupName="g") == []
    scheduler.delete_schedule_group(Name="g")
    assert api.call("GET", "/v1/jobs/old-copy").status == 200


OUTPUT_ONLY = {"id", "state", "version", "created_at", "updated_at", "next_fire_at", "paused_at"}


def own_body(api: ApiClient, job_id: str) -> dict[str, Any]:
    """A job's GET body without what is output only (the scheduler block kept: it is the job's)."""
    got: dict[str, Any] = api.call("GET", f"/v1/jobs/{job_id}").body
    return {key: value for key, value in got.items() if key not in OUTPUT_ONLY and key != "signing_secret"}


def test_a_schedules_tags_edited_through_v1_keep_it_in_its_group(api: ApiClient) -> None:
    # QA21: GET, tags set, PUT dropped the group's tag: the group's list and delete left it out,
    # and it went on running after its group was deleted
    scheduler, original = schedule_job(api)
    edited = api.call(
        "PUT", f"/v1/jobs/{original['id']}", {**own_body(api, original["id"]), "tags": {"t": "x"}}
    )
    assert edited.status == 200 and edited.body["tags"] == {"t": "x", GROUP_TAG: "g"}, edited
    assert listed(scheduler, GroupName="g") == [("g", "n")]
    scheduler.delete_schedule_group(Name="g")
    assert api.call("GET", f"/v1/jobs/{original['id']}").status == 404
    assert listed(scheduler) == []


def test_a_schedule_put_back_after_its_group_was_deleted_is_refused(api: ApiClient) -> None:
    # QA21: it ran, listed, in a group GetSchedule and DeleteSchedule could not find
    scheduler, original = schedule_job(api)
    saved = own_body(api, original["id"])
    scheduler.delete_schedule_group(Name="g")
    restored = api.call("PUT", f"/v1/jobs/{original['id']}", saved, headers={"If-None-Match": "*"})
    assert restored.status == 409 and "scheduler" in str(restored.body), restored
    assert listed(scheduler) == []


def test_a_refused_group_delete_deletes_nothing(api: ApiClient) -> None:
    # QA21: the group's other schedules were deleted before the refusal, the group left DELETING
    scheduler, original = schedule_job(api)
    create(scheduler, "q", GroupName="g")
    create(scheduler, "outside", f"after({original['id']})")
    try:
        scheduler.delete_schedule_group(Name="g")
        raise AssertionError("the group delete was not refused")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ConflictException", exc.response
        assert "default/outside" in exc.response["Error"]["Message"], exc.response
    assert sorted(listed(scheduler, GroupName="g")) == [("g", "n"), ("g", "q")]
    assert scheduler.get_schedule_group(Name="g")["State"] == "ACTIVE"
    create(scheduler, "new", GroupName="g")
