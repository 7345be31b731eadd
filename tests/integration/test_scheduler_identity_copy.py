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
from scheduler_harness import scheduler_client

from punctual.api.scheduler.mapping import GROUP_TAG
from punctual.models import SchedulerIdentity

TARGET = {"Arn": "arn:aws:sqs:us-east-1:123456789012:q", "RoleArn": "arn:aws:iam::123456789012:role/r"}


def schedule_job(api: ApiClient) -> tuple[Any, dict[str, Any]]:
    """Schedule g/n, made through the Scheduler API; the client and the job's GET body."""
    scheduler = scheduler_client(api)
    scheduler.create_schedule_group(Name="g")
    scheduler.create_schedule(
        Name="n",
        GroupName="g",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=TARGET,
    )
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
