"""A key given twice in one object of a request body is refused with 422 naming it, and nothing is
stored (QA30: ``{"schedule": "rate(1 hour)", "schedule": "rate(1 minute)", ...}`` created the job
with the second schedule, 201, as if the first were never written: which one the caller meant is
unknown, and a replace could change what it did not mean to)."""

from __future__ import annotations

import json

from api_harness import ApiClient, job_spec
from api_harness import api as api  # the fixture


def test_a_key_given_twice_is_refused_naming_it_and_nothing_is_stored(api: ApiClient) -> None:
    target = json.dumps(job_spec()["target"])
    body = f'{{"schedule": "rate(1 hour)", "schedule": "rate(1 minute)", "target": {target}}}'
    reply = api.call("POST", "/v1/jobs", raw=body)
    assert reply.status == 422, reply.body
    assert "'schedule'" in reply.problem["detail"] and "twice" in reply.problem["detail"]
    assert api.call("GET", "/v1/jobs").body["items"] == []


def test_a_key_twice_deep_in_the_payload_is_refused_and_a_replace_changes_nothing(api: ApiClient) -> None:
    created = api.call("POST", "/v1/jobs", job_spec(payload={"report": "daily"}))
    assert created.status == 201, created.body
    job = created.body
    spec = {k: v for k, v in job.items() if k in job_spec()}
    text = json.dumps({**spec, "payload": {"report": "daily"}})
    twice = text.replace('"report": "daily"', '"report": "daily", "report": "weekly"')
    reply = api.call("PUT", f"/v1/jobs/{job['id']}", raw=twice, headers={"If-Match": f'"{job["version"]}"'})
    assert reply.status == 422 and "'report'" in reply.problem["detail"], reply.body
    after = api.call("GET", f"/v1/jobs/{job['id']}").body
    assert after["payload"] == {"report": "daily"} and after["version"] == job["version"]


def test_the_same_key_in_two_objects_is_fine(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(payload={"a": {"id": 1}, "b": {"id": 2}}))
    assert reply.status == 201, reply.body
