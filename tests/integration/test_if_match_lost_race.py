"""A change whose ``If-Match`` matched when read but lost the write to another writer is a 412.

QA (multi-Region): the same ``PUT`` with ``If-Match: "1"`` sent to two Regions' APIs at once
answered one 200 and one 409 ("changed meanwhile"), where docs/api.md and RFC 9110 say a stale
``If-Match`` is 412 with the current version. The route reads the job at the listed version; the
conditional write that follows is the same precondition, and another writer moved the job in
between. Here the other writer is a replace slipped in just before the API's own write.
"""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import ApiClient, job_spec
from api_harness import api as api  # the fixture

from punctual.store.dynamo import DynamoStore


def race_the_next_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's next job write finds the job one version further (another Region's write landed)."""
    original = DynamoStore.replace_job
    armed = [True]

    def replace_job(self: DynamoStore, job: Any, expected_version: int, *args: Any, **kwargs: Any) -> None:
        if armed and armed.pop():
            other = self.get_job(job.tenant, job.id)
            assert other is not None
            original(self, other.model_copy(update={"version": other.version + 1}), other.version)
        original(self, job, expected_version, *args, **kwargs)

    monkeypatch.setattr(DynamoStore, "replace_job", replace_job)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("PUT", "", job_spec(name="mine")), ("POST", "/pause", None), ("POST", "/rotate-secret", None)],
)
def test_an_if_match_that_loses_the_write_is_412_naming_the_version(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, method: str, path: str, body: Any
) -> None:
    job = api.create(job_spec(target={"type": "http", "url": "https://hooks.example.com/x"}))
    race_the_next_write(monkeypatch)

    reply = api.call(method, f"/v1/jobs/{job['id']}{path}", body, {"If-Match": '"1"'})

    assert reply.status == 412, reply
    assert reply.problem["current_version"] == 2
    assert reply.headers["ETag"] == '"2"'


def test_a_lost_write_the_if_match_still_lists_stays_a_409(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = api.create()
    race_the_next_write(monkeypatch)

    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(name="mine"), {"If-Match": '"1", "2"'})

    assert reply.status == 409, reply


def test_without_if_match_a_lost_write_stays_a_409(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    job = api.create()
    race_the_next_write(monkeypatch)

    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(name="mine"))

    assert reply.status == 409, reply
