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


def test_jobs_of_a_batch_in_a_cycle_are_refused_as_a_cycle_not_as_missing_parents(api: ApiClient) -> None:
    """QA: x after(y) and y after(x) in one batch each failed 'after(): parent job ... does not
    exist', though the parent was right there in the batch: the answer hid the cycle."""
    body = {
        "jobs": [
            _item("x", "after(y)"),
            _item("y", "after(x)"),
            _item("z", "after(x)"),  # after a job of the cycle: waits on it
            _item("ok", "cron(0 * * * ? *)"),
        ]
    }
    reply = api.call("POST", "/v1/job-batches", body)
    assert reply.status == 200, reply
    by_id = {r["id"]: r for r in reply.body["results"]}
    assert by_id["ok"]["status"] == "created"
    for job_id in ("x", "y", "z"):
        result = by_id[job_id]
        assert (result["status"], result["code"]) == ("failed", 422), result
        detail = result["problem"]["detail"]
        assert "cycle" in detail and "does not exist" not in detail, detail
        assert "'x'" in detail and "'y'" in detail, detail
        assert [e["field"] for e in result["problem"]["errors"]] == ["schedule"], result
        assert api.call("GET", f"/v1/jobs/{job_id}").status == 404
    # And a job whose parent of the batch is stored already is registered after it, as before
    api.call("POST", "/v1/job-batches", {"jobs": [_item("w", "cron(0 * * * ? *)")]})
    api.call("POST", "/v1/job-batches", {"jobs": [_item("y", "after(w)")]})
    again = api.call("POST", "/v1/job-batches", body).body["results"]
    assert [(r["id"], r["status"]) for r in again][:3] == [
        ("x", "created"),
        ("y", "failed"),
        ("z", "created"),
    ]
