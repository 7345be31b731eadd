"""A job document a newer version wrote (a rollback: fields added since, in the target, a policy)
is read by this version without what it does not know, never as unreadable, which stops the job
(QA17, an upgrade and rollback across 120 commits: two new fields of a scheduler identity made
the old version show such jobs unreadable, and they stopped firing until the roll-forward).
A document with another fault is still unreadable, naming it."""

from __future__ import annotations

import json
from typing import Any

from api_harness import ALICE_ID, ApiClient, http_spec
from api_harness import api as api  # the fixture

from punctual.models.base import without_unknown_fields
from punctual.store.dynamo.calendar_schema import calendar_key

TABLE = "punctual-api-test"


def _rewrite(api: ApiClient, job_id: str, change: Any) -> None:
    """Rewrite the job's stored document (its item and its listing) through ``change(doc)``."""
    keys = ({"pk": {"S": f"job#{ALICE_ID}#{job_id}"}, "sk": {"S": "job"}},
            {"pk": {"S": f"tenant#{ALICE_ID}"}, "sk": {"S": f"job#{job_id}"}})  # fmt: skip
    for key in keys:
        item = api.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]
        doc = json.loads(item["doc"]["S"])
        change(doc)
        api.dynamodb.update_item(
            TableName=TABLE,
            Key=key,
            UpdateExpression="SET doc = :d",
            ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
        )


def _newer(doc: dict[str, Any]) -> None:
    doc["target"]["signature_scheme"] = "v2"  # inside a union member (target.http.*)
    doc["retry"]["on_status"] = [500, 503]
    doc["catchup"]["burst"] = {"limit": 3}
    doc["brand_new"] = True  # a top-level one (the job ignored those already)


def test_a_newer_versions_job_is_read_without_what_this_one_does_not_know(api: ApiClient) -> None:
    job = api.create(http_spec(name="newer", schedule="rate(1 hour)", retry={"max_attempts": 5}))
    _rewrite(api, job["id"], _newer)

    got = api.call("GET", f"/v1/jobs/{job['id']}")
    listed = api.call("GET", "/v1/jobs").body["items"]

    assert got.status == 200 and "unreadable" not in got.body
    assert (
        got.body["retry"]["max_attempts"] == 5
        and got.body["target"]["url"] == "https://hooks.example.com/run"
    )
    assert [(j["id"], j.get("unreadable")) for j in listed] == [(job["id"], None)]
    # and it is a job like any other: paused and resumed
    assert api.call("POST", f"/v1/jobs/{job['id']}/pause").status == 200
    assert api.call("POST", f"/v1/jobs/{job['id']}/resume").status == 200


def test_a_document_with_another_fault_is_still_unreadable(api: ApiClient) -> None:
    job = api.create(http_spec(name="broken", schedule="rate(1 hour)"))

    def broken(doc: dict[str, Any]) -> None:
        _newer(doc)
        doc["retry"]["max_attempts"] = "many"

    _rewrite(api, job["id"], broken)
    got = api.call("GET", f"/v1/jobs/{job['id']}")

    assert got.status == 200 and got.body["unreadable"] is True and "max_attempts" in got.body["reason"]


def test_only_unknown_fields_are_taken_away() -> None:
    data = {"a": {"b": 1, "x": 2}, "items": [{"y": 1, "keep": 2}]}
    errors = [
        {"type": "extra_forbidden", "loc": ("a", "x")},
        {"type": "extra_forbidden", "loc": ("items", 0, "y")},
    ]
    assert without_unknown_fields(data, errors) == {"a": {"b": 1}, "items": [{"keep": 2}]}
    assert data == {"a": {"b": 1, "x": 2}, "items": [{"y": 1, "keep": 2}]}  # a copy
    assert without_unknown_fields(data, [*errors, {"type": "int_parsing", "loc": ("a", "b")}]) is None
    assert without_unknown_fields(data, []) is None


def test_a_newer_versions_calendar_is_read_without_what_this_one_does_not_know(api: ApiClient) -> None:
    put = api.call(
        "PUT",
        "/v1/calendars/freeze",
        {"timezone": "UTC", "ranges": [{"start": "2030-01-01", "end": "2030-01-05"}]},
    )
    assert put.status == 201
    key = calendar_key(ALICE_ID, "freeze")
    item = api.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]
    doc = json.loads(item["doc"]["S"])
    doc["ranges"][0]["label"] = "winter freeze"  # a field a newer version added to a day range
    api.dynamodb.update_item(
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
    )

    got = api.call("GET", "/v1/calendars/freeze")

    assert got.status == 200 and got.body["ranges"] == [{"start": "2030-01-01", "end": "2030-01-05"}]


def test_this_versions_writes_keep_a_newer_versions_fields(api: ApiClient) -> None:
    """Review: one pause wrote the document back without them, for good."""
    job = api.create(http_spec(name="newer", schedule="rate(1 hour)", retry={"max_attempts": 5}))
    _rewrite(api, job["id"], _newer)

    def stored() -> dict[str, Any]:
        key = {"pk": {"S": f"job#{ALICE_ID}#{job['id']}"}, "sk": {"S": "job"}}
        doc: dict[str, Any] = json.loads(api.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]["doc"]["S"])
        return doc

    assert api.call("POST", f"/v1/jobs/{job['id']}/pause").status == 200
    assert api.call("POST", f"/v1/jobs/{job['id']}/resume").status == 200
    after = stored()
    assert after["state"] == "ENABLED" and after["version"] == 3
    assert after["target"]["signature_scheme"] == "v2"
    assert after["retry"]["on_status"] == [500, 503] and after["catchup"]["burst"] == {"limit": 3}


def test_a_replace_or_a_job_created_again_at_the_id_writes_no_kept_field(api: ApiClient) -> None:
    """Review: an http target's field went into the sqs target that replaced it, and a job
    created again at a deleted job's id took the deleted job's fields."""

    def stored(job_id: str) -> dict[str, Any]:
        key = {"pk": {"S": f"job#{ALICE_ID}#{job_id}"}, "sk": {"S": "job"}}
        doc: dict[str, Any] = json.loads(api.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]["doc"]["S"])
        return doc

    replaced = api.create(http_spec(name="t", schedule="rate(1 hour)"))
    _rewrite(api, replaced["id"], _newer)
    sqs = {"type": "sqs", "queue_arn": "arn:aws:sqs:us-east-1:123456789012:reports"}
    assert api.call("PUT", f"/v1/jobs/{replaced['id']}", http_spec(name="t", target=sqs)).status == 200
    assert "signature_scheme" not in stored(replaced["id"])["target"]
    assert "on_status" not in stored(replaced["id"])["retry"]  # the user's spec, as sent

    created = {"If-None-Match": "*"}
    assert api.call("PUT", "/v1/jobs/same", http_spec(name="old"), headers=created).status == 201
    _rewrite(api, "same", _newer)
    assert api.call("GET", "/v1/jobs/same").status == 200  # read (its fields kept) in this process
    assert api.call("DELETE", "/v1/jobs/same").status == 204
    assert api.call("PUT", "/v1/jobs/same", http_spec(name="new"), headers=created).status == 201
    again = stored("same")
    assert "signature_scheme" not in again["target"] and "on_status" not in again["retry"]
