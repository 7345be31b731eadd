"""An ``Idempotency-Key`` names the request for the job it was made for: once that job is deleted,
a keyed create makes a job again ("deleted: the key is free", docs/api.md) and a keyed run-now of a
job created again at the id runs it (QA29: both answered the first reply, naming the deleted job,
within the key's day: a 201 for a job that did not exist, a 202 for a slot that never ran)."""

from __future__ import annotations

from api_harness import ApiClient, job_spec
from api_harness import api as api  # the fixture

HTTP = {"type": "http", "url": "https://hooks.example.com/x"}
BODY = job_spec(schedule="cron(0 * * * ? *)", target=HTTP)


def test_a_keyed_create_after_its_job_was_deleted_makes_the_job_again(api: ApiClient) -> None:
    first = api.call("POST", "/v1/jobs", BODY, headers={"Idempotency-Key": "nightly"})
    assert first.status == 201
    job_id = first.body["id"]
    # a retry while the job exists answers it (the same job, the same creation)
    retry = api.call("POST", "/v1/jobs", BODY, headers={"Idempotency-Key": "nightly"})
    assert (retry.status, retry.body["id"], retry.body["created_at"]) == (
        201,
        job_id,
        first.body["created_at"],
    )
    assert api.call("DELETE", f"/v1/jobs/{job_id}").status == 204
    # When the same keyed create is sent again after the delete
    again = api.call("POST", "/v1/jobs", BODY, headers={"Idempotency-Key": "nightly"})
    # Then it made the job again: the reply's job exists
    assert again.status == 201, again
    found = api.call("GET", f"/v1/jobs/{job_id}")
    assert found.status == 200, found
    assert found.body["created_at"] == again.body["created_at"] != first.body["created_at"]
    assert int(again.body["version"]) > int(first.body["version"])
    # and a retry of that one answers it, no third job
    once_more = api.call("POST", "/v1/jobs", BODY, headers={"Idempotency-Key": "nightly"})
    assert (once_more.status, once_more.body["created_at"]) == (201, again.body["created_at"])


def test_a_keyed_trigger_of_a_job_created_again_runs_the_new_job(api: ApiClient) -> None:
    assert api.call("PUT", "/v1/jobs/tj", BODY, headers={"If-None-Match": "*"}).status == 201
    first = api.call("POST", "/v1/jobs/tj/trigger", headers={"Idempotency-Key": "run-1"})
    retry = api.call("POST", "/v1/jobs/tj/trigger", headers={"Idempotency-Key": "run-1"})
    assert first.status == retry.status == 202 and retry.body["slot"] == first.body["slot"]
    assert api.call("DELETE", "/v1/jobs/tj").status == 204
    # a retry after the delete still answers the run the key took
    gone = api.call("POST", "/v1/jobs/tj/trigger", headers={"Idempotency-Key": "run-1"})
    assert gone.status == 202 and gone.body["slot"] == first.body["slot"]
    assert api.call("PUT", "/v1/jobs/tj", BODY, headers={"If-None-Match": "*"}).status == 201
    # When the new job at the id is run now with the same key
    again = api.call("POST", "/v1/jobs/tj/trigger", headers={"Idempotency-Key": "run-1"})
    # Then it is a slot of its own, queued for the new job
    assert again.status == 202 and again.body["slot"] != first.body["slot"], again
    sent = [m for m in api.queued() if m.get("slot") == again.body["slot"]]
    assert sent and sent[0]["job_version"] > 1
    # and its retry names that slot again
    retry = api.call("POST", "/v1/jobs/tj/trigger", headers={"Idempotency-Key": "run-1"})
    assert retry.status == 202 and retry.body["slot"] == again.body["slot"]
