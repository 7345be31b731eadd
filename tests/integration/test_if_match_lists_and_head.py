"""``If-Match`` with a list of ETags and ``HEAD``'s ``Content-Length`` (QA: local mode answered
``If-Match: "3", "4"`` with 400, and ``HEAD`` with ``Content-Length: 0``).

RFC 9110: ``If-Match`` is ``*`` or a list of entity tags, and matches when any of them is the
current one (a repeated field is the same list); a ``HEAD`` answer may carry the
``Content-Length`` the ``GET`` would have. Both in the API handler and through local mode's API
Gateway stand-in.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from api_harness import ACCOUNT, ALICE, ALICE_ID, ApiClient, LambdaContext, http_spec, job_spec, rest_event
from api_harness import api as api  # the fixture

from local.api_gateway import LocalApiServer

IDENTITY = {"userArn": ALICE, "user": ALICE_ID, "caller": ALICE_ID, "accountId": ACCOUNT}
CALENDAR = {"timezone": "UTC", "dates": ["2026-12-25"]}


# --------------------------------------------------------------------------- the API handler


@pytest.mark.parametrize("if_match", ['"1", "2"', '"7", "1"', 'W/"9", "1"', ' "3" ,"1" ', '"1",', '"1", "1"'])
def test_a_list_that_names_the_current_version_matches(api: ApiClient, if_match: str) -> None:
    job = api.create()

    paused = api.call("POST", f"/v1/jobs/{job['id']}/pause", headers={"If-Match": if_match})

    assert paused.status == 200, paused
    assert paused.body["state"] == "PAUSED" and paused.headers["ETag"] == '"2"'


@pytest.mark.parametrize("if_match", ['"5", "6"', '"0", "2", "3"'])
def test_a_list_that_does_not_name_it_is_a_412(api: ApiClient, if_match: str) -> None:
    job = api.create()

    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(name="late"), {"If-Match": if_match})

    assert reply.status == 412
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["name"] == "nightly report"


def test_every_conditional_job_change_takes_a_list(api: ApiClient) -> None:
    job_id = api.create(http_spec())["id"]

    replaced = api.call("PUT", f"/v1/jobs/{job_id}", http_spec(name="v2"), {"If-Match": '"9", "1"'})
    paused = api.call("POST", f"/v1/jobs/{job_id}/pause", headers={"If-Match": '"2", "8"'})
    resumed = api.call("POST", f"/v1/jobs/{job_id}/resume", headers={"If-Match": '"1", "3"'})
    rotated = api.call("POST", f"/v1/jobs/{job_id}/rotate-secret", headers={"If-Match": '"4", "5"'})
    stale = api.call("DELETE", f"/v1/jobs/{job_id}", headers={"If-Match": '"1", "2", "3"'})
    deleted = api.call("DELETE", f"/v1/jobs/{job_id}", headers={"If-Match": '"3", "5"'})

    assert [r.status for r in (replaced, paused, resumed, rotated)] == [200, 200, 200, 200]
    assert rotated.headers["ETag"] == '"5"'
    assert (stale.status, deleted.status) == (412, 204)
    assert api.call("GET", f"/v1/jobs/{job_id}").status == 404


def test_a_list_on_a_missing_job_is_still_a_404(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs/nothing-here/pause", headers={"If-Match": '"1", "2"'})
    assert reply.status == 404


def test_calendar_changes_take_a_list(api: ApiClient) -> None:
    assert api.call("PUT", "/v1/calendars/hol", CALENDAR).status == 201

    missing = api.call("PUT", "/v1/calendars/none", CALENDAR, headers={"If-Match": '"1", "2"'})
    stale = api.call("PUT", "/v1/calendars/hol", CALENDAR, headers={"If-Match": '"2", "3"'})
    replaced = api.call("PUT", "/v1/calendars/hol", CALENDAR, headers={"If-Match": '"3", "1"'})
    stale_delete = api.call("DELETE", "/v1/calendars/hol", headers={"If-Match": '"1", "3"'})
    deleted = api.call("DELETE", "/v1/calendars/hol", headers={"If-Match": '"1", "2"'})

    assert (missing.status, stale.status, replaced.status) == (412, 412, 200)
    assert replaced.headers["ETag"] == '"2"'
    assert (stale_delete.status, deleted.status) == (412, 204)


@pytest.mark.parametrize("if_match", ['"1", *', '"1", x', ",", '"1", "two"'])
def test_a_list_with_an_entry_that_is_not_a_version_is_a_400(api: ApiClient, if_match: str) -> None:
    job = api.create()

    reply = api.call("POST", f"/v1/jobs/{job['id']}/pause", headers={"If-Match": if_match})

    assert reply.status == 400 and reply.fields() == ["header.If-Match"]
    assert "list" in reply.problem["detail"]


def test_a_repeated_if_match_is_one_list(api: ApiClient) -> None:
    job = api.create()

    def pause(*values: str) -> dict[str, Any]:
        event = rest_event("POST", f"/v1/jobs/{job['id']}/pause", None, {"If-Match": values[-1]})
        event["multiValueHeaders"]["If-Match"] = list(values)
        return dict(api.handler.handler(event, LambdaContext()))

    assert pause('"5"', '"6"')["statusCode"] == 412
    assert pause('"1"', '"6"')["statusCode"] == 200  # the first names it (API Gateway's headers: the last)


def test_head_carries_the_length_of_the_get_body(api: ApiClient) -> None:
    job = api.create()
    for path in (f"/v1/jobs/{job['id']}", "/v1/jobs", "/v1/jobs/nothing-here"):
        got = api.handler.handler(rest_event("GET", path), LambdaContext())
        head = api.handler.handler(rest_event("HEAD", path), LambdaContext())

        assert head["statusCode"] == got["statusCode"] and head["body"] == ""
        assert head["multiValueHeaders"]["Content-Length"] == [str(len(got["body"].encode()))]


# --------------------------------------------------------------------------- local mode's gateway


def _send(
    url: str, method: str, path: str, headers: list[tuple[str, str]]
) -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders()
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        connection.close()


def test_the_local_gateway_takes_if_match_lists(api: ApiClient) -> None:
    job_id = api.create()["id"]
    with LocalApiServer(api.handler.handler, identity=IDENTITY) as server:
        listed = _send(server.url, "POST", f"/v1/jobs/{job_id}/pause", [("If-Match", '"3", "1"')])
        stale = _send(server.url, "POST", f"/v1/jobs/{job_id}/resume", [("If-Match", '"1", "3"')])
        repeated = _send(
            server.url, "POST", f"/v1/jobs/{job_id}/resume", [("If-Match", '"2"'), ("If-Match", '"9"')]
        )
        star = _send(server.url, "POST", f"/v1/jobs/{job_id}/pause", [("If-Match", "*")])

    assert listed[0] == 200 and listed[1]["ETag"] == '"2"'
    assert stale[0] == 412
    assert repeated[0] == 200 and json.loads(repeated[2])["state"] == "ENABLED"
    assert star[0] == 200 and star[1]["ETag"] == '"4"'


def test_the_local_gateway_answers_head_with_the_get_length(api: ApiClient) -> None:
    job_id = api.create()["id"]
    with LocalApiServer(api.handler.handler, identity=IDENTITY) as server:
        for path in (f"/v1/jobs/{job_id}", "/v1/jobs?limit=5", "/v1/openapi.json", "/v1/jobs/nothing-here"):
            status, headers, body = _send(server.url, "GET", path, [])
            head_status, head_headers, head_body = _send(server.url, "HEAD", path, [])

            assert head_status == status and head_body == b""
            assert int(head_headers["Content-Length"]) == len(body) > 0, path
            assert head_headers.get("ETag") == headers.get("ETag")
