"""A batch registers an ``after()`` job after the batch's jobs it names, whatever their order in
the batch (QA17: a child listed before its parent failed 'parent does not exist', or did not, by
the threads' timing)."""

from __future__ import annotations

from typing import Any

from api_harness import ApiClient, http_spec
from api_harness import api as api  # the fixture

from punctual.api.batch import BatchJob, waves


def _item(job_id: str, schedule: str) -> dict[str, Any]:
    return {"id": job_id, "job": http_spec(schedule=schedule, timezone="UTC")}


def test_children_listed_before_their_parents_are_registered_after_them(api: ApiClient) -> None:
    body = {
        "jobs": [
            _item("grandchild", "after(child)"),
            _item("child", "after(parent, other)"),
            _item("parent", "cron(0 * * * ? *)"),  # (two rate() jobs a second apart share no slot)
            _item("other", "cron(0 * * * ? *)"),
        ]
    }
    reply = api.call("POST", "/v1/job-batches", body)
    assert reply.status == 200, reply
    assert [(r["id"], r["status"]) for r in reply.body["results"]] == [
        ("grandchild", "created"),
        ("child", "created"),
        ("parent", "created"),
        ("other", "created"),
    ]


def test_waves_put_parents_first_and_a_cycle_last() -> None:
    def job(job_id: str, schedule: str) -> BatchJob:
        return BatchJob(id=job_id, job={"schedule": schedule})

    jobs = [
        job("c", "AFTER( b )"),
        job("b", "after(a, outside)"),
        job("a", "cron(0 * * * ? *)"),
        job("x", "after(y)"),
        job("y", "after(x)"),
        job("self", "after(self)"),
        job("odd", 42),  # type: ignore[arg-type]  (not a string: validated on its own later)
    ]
    assert waves(jobs) == [[2, 5, 6], [1], [0], [3, 4]]
