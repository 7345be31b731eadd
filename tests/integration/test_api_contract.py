"""The API keeps its contract under hostile and careless input (issue 17).

Each test names the finding it covers; each failed before the fix.
"""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest
from api_harness import ACCOUNT, ALICE, ALICE_ID, ApiClient, LambdaContext, http_spec, job_spec, rest_event
from api_harness import api as api  # the fixture

from local.api_gateway import LocalApiServer
from punctual.api import wiring
from punctual.models import Execution, ExecutionStatus

STAGE_URL = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def listed(api: ApiClient) -> list[dict[str, Any]]:
    reply = api.call("GET", "/v1/jobs")
    assert reply.status == 200, reply
    items: list[dict[str, Any]] = reply.body["items"]
    return items


# --------------------------------------------------------------------------- finding 1


@pytest.mark.parametrize("depth", [200, 254, 400])
def test_a_deep_payload_is_refused_and_stores_nothing(api: ApiClient, depth: int) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(payload=nested(depth)))
    assert reply.status == 422
    assert "nested more than 32 levels" in reply.problem["detail"] + json.dumps(reply.problem["errors"])
    assert listed(api) == []


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_payload_deeper_than_the_json_parser_goes_is_422(api: ApiClient, depth: int) -> None:
    target = json.dumps(job_spec()["target"])
    body = f'{{"schedule": "rate(1 hour)", "target": {target}, "payload": {"[" * depth}{"]" * depth}}}'
    reply = api.call("POST", "/v1/jobs", raw=body)
    assert reply.status == 422 and "nested too deeply" in reply.problem["detail"]
    assert listed(api) == []


def test_a_stored_job_the_model_cannot_read_degrades_alone(api: ApiClient) -> None:
    # Given a tenant with two jobs, one of them written by an older, laxer model
    good = api.create(name="good")
    bad = api.create(name="bad")
    item = api.dynamodb.get_item(
        TableName="punctual-api-test", Key={"pk": {"S": f"job#{_alice()}#{bad['id']}"}, "sk": {"S": "job"}}
    )["Item"]
    doc = json.loads(item["doc"]["S"])
    doc["payload"] = nested(250)  # what finding 1 let in
    doc["target"] = {**doc["target"], "queue_arn": "not-an-arn"}
    for key in ({"pk": {"S": f"job#{_alice()}#{bad['id']}"}, "sk": {"S": "job"}},
                {"pk": {"S": f"tenant#{_alice()}"}, "sk": {"S": f"job#{bad['id']}"}}):  # fmt: skip
        api.dynamodb.update_item(
            TableName="punctual-api-test",
            Key=key,
            UpdateExpression="SET doc = :d",
            ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
        )
    # When the tenant lists its jobs and gets the broken one
    items = {job["id"]: job for job in listed(api)}
    got = api.call("GET", f"/v1/jobs/{bad['id']}")
    # Then the good job is whole and the broken one is marked, with its reason and version
    assert items[good["id"]]["name"] == "good"
    assert items[bad["id"]]["unreadable"] is True and items[bad["id"]]["version"] == 1
    assert got.status == 200 and got.body["unreadable"] is True and got.headers["ETag"] == '"1"'
    assert "payload" in got.body["reason"] or "target" in got.body["reason"]
    # And it can be fixed with PUT, or deleted
    assert api.call("POST", f"/v1/jobs/{bad['id']}/pause").status == 409
    fixed = api.call("PUT", f"/v1/jobs/{bad['id']}", job_spec(name="fixed"), headers={"If-Match": '"1"'})
    assert fixed.status == 200 and fixed.body["version"] == 2 and fixed.body["name"] == "fixed"
    assert api.call("DELETE", f"/v1/jobs/{bad['id']}").status == 204
    assert [job["id"] for job in listed(api)] == [good["id"]]


def test_an_unreadable_job_can_be_deleted_without_being_fixed(api: ApiClient) -> None:
    job = api.create()
    api.dynamodb.update_item(
        TableName="punctual-api-test",
        Key={"pk": {"S": f"job#{_alice()}#{job['id']}"}, "sk": {"S": "job"}},
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": "{not json"}},
    )
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["unreadable"] is True
    assert api.call("DELETE", f"/v1/jobs/{job['id']}").status == 204
    assert api.call("GET", f"/v1/jobs/{job['id']}").status == 404


def _alice() -> str:
    """Alice's tenant: her principal's unique id, as API Gateway names the caller."""
    return ALICE_ID


IDENTITY = {"userArn": ALICE, "user": ALICE_ID, "caller": ALICE_ID, "accountId": ACCOUNT}


# --------------------------------------------------------------------------- finding 2


def test_a_body_that_is_not_utf8_is_400(api: ApiClient) -> None:
    event = rest_event("POST", "/v1/jobs", "x")
    event["body"], event["isBase64Encoded"] = base64.b64encode(b'{"name": "\xff\xfe"}').decode(), True
    out = api.handler.handler(event, LambdaContext())
    assert out["statusCode"] == 400
    assert "not UTF-8" in json.loads(out["body"])["detail"]
    assert listed(api) == []


# --------------------------------------------------------------------------- finding 3


@pytest.mark.parametrize(
    "body",
    [
        '{"schedule": "rate(1 hour)", "target": %s, "payload": {"x": NaN}}',
        '{"schedule": "rate(1 hour)", "target": %s, "payload": [Infinity]}',
        '{"schedule": "rate(1 hour)", "target": %s, "timeout_seconds": true}',
        '{"schedule": "rate(1 hour)", "target": %s, "payload": {"k": "\\ud800"}}',
    ],
)
def test_values_json_cannot_carry_faithfully_are_422_not_changed(api: ApiClient, body: str) -> None:
    target = json.dumps(job_spec()["target"])
    reply = api.call("POST", "/v1/jobs", raw=body % target)
    assert reply.status == 422, reply
    assert listed(api) == []


@pytest.mark.parametrize("header", ["Host", "webhook-signature"])
def test_reserved_target_headers_are_422_naming_the_header(api: ApiClient, header: str) -> None:
    spec = http_spec(
        target={"type": "http", "url": "https://hooks.example.com/run", "headers": {header: "x"}}
    )
    reply = api.call("POST", "/v1/jobs", spec)
    assert reply.status == 422
    assert reply.fields() == ["target.headers"]
    assert f"header {header!r} is reserved" in reply.problem["errors"][0]["message"]


# --------------------------------------------------------------------------- finding 4


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", "/v1/jobs", "GET, HEAD, POST, OPTIONS"),
        ("POST", "/v1/jobs/abc", "DELETE, GET, HEAD, PUT, OPTIONS"),
        ("TRACE", "/v1/schedules/preview", "GET, HEAD, OPTIONS"),
    ],
)
def test_a_method_a_path_does_not_take_is_405_with_allow(
    api: ApiClient, method: str, path: str, allow: str
) -> None:
    reply = api.call(method, path)
    assert reply.status == 405
    assert reply.headers["Allow"] == allow
    assert reply.problem["title"] == "Method not allowed"


def test_head_is_get_without_a_body_and_options_lists_the_methods(api: ApiClient) -> None:
    job = api.create()
    out = api.handler.handler(rest_event("HEAD", f"/v1/jobs/{job['id']}"), LambdaContext())
    assert out["statusCode"] == 200 and out["body"] == ""
    assert {**out.get("headers", {}), **{k: v[-1] for k, v in out["multiValueHeaders"].items()}}[
        "ETag"
    ] == '"1"'
    options = api.call("OPTIONS", "/v1/jobs")
    assert options.status == 204 and options.headers["Allow"] == "GET, HEAD, POST, OPTIONS"


def _raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_local_server_answers_every_method_as_the_api_does(api: ApiClient) -> None:
    with LocalApiServer(api.handler.handler, identity=IDENTITY) as server:
        for method in ("TRACE", "PROPFIND", "CONNECT"):
            raw = _raw_request(
                server.url, f"{method} /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            head = raw.split(b"\r\n\r\n", 1)[0].decode()
            assert head.startswith("HTTP/1.1 405"), head
            assert "Allow: GET, HEAD, POST, OPTIONS" in head
            assert "text/html" not in head
        garbage = _raw_request(server.url, b"NOT A REQUEST\r\n\r\n")
        assert b"text/html" not in garbage and b'"status": 400' in garbage


# --------------------------------------------------------------------------- finding 5


def test_what_get_returns_can_be_put_back(api: ApiClient) -> None:
    created = api.create(**http_spec(name="v1"))
    got = api.call("GET", f"/v1/jobs/{created['id']}").body
    edited = {**got, "name": "v2", "version": 99, "state": "PAUSED", "signing_secret": "whsec_x"}
    reply = api.call("PUT", f"/v1/jobs/{created['id']}", edited, headers={"If-Match": '"1"'})
    assert reply.status == 200, reply
    assert (reply.body["name"], reply.body["version"], reply.body["state"]) == ("v2", 2, "ENABLED")


def test_a_created_job_can_be_posted_again_as_a_new_job(api: ApiClient) -> None:
    created = api.create()
    again = api.call("POST", "/v1/jobs", created)
    assert again.status == 201 and again.body["id"] != created["id"]


def test_output_only_fields_are_read_only_in_the_document() -> None:
    from punctual.api.app import openapi_document

    schemas = openapi_document()["components"]["schemas"]
    request = schemas["JobInput"]["properties"]
    for name in ("id", "version", "created_at", "next_fire_at", "signing_secret"):
        assert request[name]["readOnly"] is True, name
        assert schemas["JobOut"]["properties"].get(name, {"readOnly": True})["readOnly"] is True
    assert "readOnly" not in request["schedule"]
    # state is an input of a create (PAUSED: created paused), ignored by a replace
    assert "readOnly" not in request["state"] and "On a create, PAUSED" in request["state"]["description"]


# --------------------------------------------------------------------------- finding 7


def test_location_is_absolute_and_keeps_the_stage(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec())
    assert reply.headers["Location"] == f"{STAGE_URL}/v1/jobs/{reply.body['id']}"
    run = api.call("POST", f"/v1/jobs/{reply.body['id']}/trigger")
    assert run.headers["Location"].startswith(f"{STAGE_URL}/v1/jobs/{reply.body['id']}/executions/")


def test_served_document_names_the_server_it_was_reached_at(api: ApiClient) -> None:
    assert api.call("GET", "/v1/openapi.json").body["servers"] == [
        {"url": STAGE_URL, "description": "this deployment"}
    ]
    custom = api.call("GET", "/v1/openapi.json", headers={"Host": "jobs.example.com"})
    assert custom.body["servers"][0]["url"] == "https://jobs.example.com/prod"


def test_location_in_local_mode_is_the_loopback_url(api: ApiClient) -> None:
    with LocalApiServer(api.handler.handler, identity=IDENTITY) as server:
        from punctual_cli.client import PunctualClient

        reply = PunctualClient(server.url).request("POST", "/v1/jobs", job_spec())
        assert reply.headers["Location"] == f"{server.url}/v1/jobs/{reply.body['id']}"
        served = PunctualClient(server.url).request("GET", "/v1/openapi.json").body
        assert served["servers"][0]["url"] == server.url


# --------------------------------------------------------------------------- finding 8


def test_listing_deleted_jobs_is_refused(api: ApiClient) -> None:
    reply = api.call("GET", "/v1/jobs?state=DELETED")
    assert reply.status == 422 and reply.fields() == ["query.state"]


# --------------------------------------------------------------------------- finding 9


def test_a_deleted_jobs_history_stays_readable_marked_deleted(api: ApiClient) -> None:
    # Given a job with one execution, then deleted
    job = api.create()
    svc = wiring.services()
    execution = Execution(
        job_id=job["id"],
        tenant=_alice(),
        slot="2026-11-30T02:00:00Z",
        scheduled_at="2026-11-30T02:00:00Z",  # type: ignore[arg-type]
        status=ExecutionStatus.SUCCEEDED,
    )
    svc.store.save_execution(execution, None, 2_000_000_000)
    assert api.call("DELETE", f"/v1/jobs/{job['id']}").status == 204
    # When its history is read by id
    page = api.call("GET", f"/v1/jobs/{job['id']}/executions")
    one = api.call("GET", f"/v1/jobs/{job['id']}/executions/2026-11-30T02%3A00%3A00Z")
    # Then it is there, marked as the history of a deleted job
    assert page.status == 200 and page.body["job_deleted"] is True
    assert [e["slot"] for e in page.body["items"]] == ["2026-11-30T02:00:00Z"]
    assert one.status == 200 and one.body["job_deleted"] is True
    # And a job that never existed is still a 404, as is another tenant's deleted job
    assert api.call("GET", "/v1/jobs/never-existed/executions").status == 404
    other = f"arn:aws:iam::{ACCOUNT}:user/bob"  # another principal, so another tenant
    assert api.call("GET", f"/v1/jobs/{job['id']}/executions", user=other).status == 404


# --------------------------------------------------------------------------- finding 10


def test_every_operation_parameter_and_field_of_the_document_is_described() -> None:
    from punctual.api.app import openapi_document

    document = openapi_document()
    missing: list[str] = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not operation.get("summary") or not operation.get("description"):
                missing.append(f"{method.upper()} {path}")
            missing += [
                f"{method.upper()} {path} {p['name']}"
                for p in operation.get("parameters", [])
                if not p.get("description")
            ]
    for name, schema in document["components"]["schemas"].items():
        if not schema.get("description"):
            missing.append(name)
        missing += [
            f"{name}.{prop}"
            for prop, sub in schema.get("properties", {}).items()
            if not sub.get("description")
        ]
    assert missing == []


def test_the_main_documents_carry_examples_that_validate() -> None:
    from punctual.api.app import openapi_document
    from punctual.api.problems import Problem
    from punctual.api.schemas import ExecutionOut, JobInput, JobOut

    schemas = openapi_document()["components"]["schemas"]
    for name, model in (
        ("JobInput", JobInput),
        ("JobOut", JobOut),
        ("ExecutionOut", ExecutionOut),
        ("Problem", Problem),
    ):
        [example] = schemas[name]["examples"]
        model.model_validate(example)  # an example that would be refused teaches the wrong thing
    for field in ("schedule", "timezone", "payload", "tags"):
        assert schemas["JobInput"]["properties"][field]["examples"], field
