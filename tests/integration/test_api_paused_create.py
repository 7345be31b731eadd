"""A job created paused (``state: PAUSED`` in a create's body), as EventBridge Scheduler's ``State:
DISABLED`` and a Kubernetes CronJob's ``suspend: true`` create one: stored PAUSED in the create's
own write, with no timer, so no slot can fire before it is resumed. On a replace ``state`` stays
ignored (pause and resume change it)."""

from __future__ import annotations

from typing import Any

from api_harness import ApiClient, job_spec
from api_harness import api as api  # the fixture
from audit_harness import all_timers

EVERY_MINUTE = {"schedule": "rate(1 minute)", "timezone": "UTC"}


def _timers_of(api: ApiClient, job_id: str) -> list[Any]:
    return [timer for timer in all_timers(api.store) if timer.job_id == job_id]


def _assert_paused(api: ApiClient, body: dict[str, Any]) -> None:
    assert body["state"] == "PAUSED" and body["next_fire_at"] is None, body
    assert body["paused_at"] is None  # never enabled: its resume owes nothing from before it
    got = api.call("GET", f"/v1/jobs/{body['id']}").body
    assert got["state"] == "PAUSED" and got["version"] == body["version"]
    assert _timers_of(api, body["id"]) == []  # nothing a poller could release


def test_post_with_state_paused_creates_it_paused_and_resume_starts_it(api: ApiClient) -> None:
    # When a job is created with state PAUSED
    created = api.call("POST", "/v1/jobs", job_spec(**EVERY_MINUTE, state="PAUSED"))
    # Then it is stored paused, with no timer: nothing fires
    assert created.status == 201, created
    _assert_paused(api, created.body)
    # And a resume enables it: its chain starts
    resumed = api.call("POST", f"/v1/jobs/{created.body['id']}/resume")
    assert resumed.status == 200 and resumed.body["state"] == "ENABLED", resumed
    assert resumed.body["next_fire_at"] is not None
    assert len(_timers_of(api, created.body["id"])) == 1


def test_other_states_create_the_job_enabled(api: ApiClient) -> None:
    for state in ("ENABLED", "COMPLETED", None):
        created = api.call("POST", "/v1/jobs", job_spec(**EVERY_MINUTE, state=state))
        assert created.status == 201 and created.body["state"] == "ENABLED", (state, created)
        assert len(_timers_of(api, created.body["id"])) == 1


def test_a_state_that_is_not_one_is_refused_naming_it(api: ApiClient) -> None:
    for state in ("DISABLED", "paused", 3):
        reply = api.call("POST", "/v1/jobs", job_spec(state=state))
        assert reply.status == 422 and reply.fields() == ["state"], (state, reply)
    assert api.call("GET", "/v1/jobs").body["items"] == []  # nothing stored


def test_a_conditional_put_creates_it_paused(api: ApiClient) -> None:
    created = api.call(
        "PUT", "/v1/jobs/cfn-off", job_spec(**EVERY_MINUTE, state="PAUSED"), headers={"If-None-Match": "*"}
    )
    assert created.status == 201, created
    _assert_paused(api, created.body)


def test_a_replace_ignores_state_either_way(api: ApiClient) -> None:
    job = api.create(job_spec(**EVERY_MINUTE, state="PAUSED"))
    # A replace with state ENABLED keeps it paused (resume enables it)
    replaced = api.call("PUT", f"/v1/jobs/{job['id']}", {**job, "name": "v2", "state": "ENABLED"})
    assert replaced.status == 200 and replaced.body["state"] == "PAUSED" and replaced.body["name"] == "v2"
    assert _timers_of(api, job["id"]) == []
    # And a replace of an enabled job with state PAUSED keeps it enabled
    other = api.create(job_spec(**EVERY_MINUTE))
    replaced = api.call("PUT", f"/v1/jobs/{other['id']}", {**other, "state": "PAUSED"})
    assert replaced.status == 200 and replaced.body["state"] == "ENABLED"


def test_an_idempotent_create_repeats_its_paused_job_and_refuses_another_state(api: ApiClient) -> None:
    key = {"Idempotency-Key": "create-off-1"}
    first = api.call("POST", "/v1/jobs", job_spec(**EVERY_MINUTE, state="PAUSED"), headers=key)
    again = api.call("POST", "/v1/jobs", job_spec(**EVERY_MINUTE, state="PAUSED"), headers=key)
    assert first.status == again.status == 201 and again.body["id"] == first.body["id"]
    assert again.body["state"] == "PAUSED"
    # The same key with the job enabled is another request: refused, nothing more stored
    other = api.call("POST", "/v1/jobs", job_spec(**EVERY_MINUTE), headers=key)
    assert 400 <= other.status < 500, other
    assert len(api.call("GET", "/v1/jobs").body["items"]) == 1


def test_a_batch_item_with_state_paused_is_created_paused(api: ApiClient) -> None:
    batch = {
        "jobs": [
            {"id": "off", "job": job_spec(**EVERY_MINUTE, state="PAUSED")},
            {"id": "on", "job": job_spec(**EVERY_MINUTE)},
        ]
    }
    reply = api.call("POST", "/v1/job-batches", batch)
    assert reply.status == 200 and reply.body["created"] == 2, reply
    states = {result["id"]: result["job"]["state"] for result in reply.body["results"]}
    assert states == {"off": "PAUSED", "on": "ENABLED"}
    assert _timers_of(api, "off") == [] and len(_timers_of(api, "on")) == 1
    # Repeating the batch registers nothing more: the paused job is the same spec (exists)
    again = api.call("POST", "/v1/job-batches", batch)
    assert [r["status"] for r in again.body["results"]] == ["exists", "exists"]
