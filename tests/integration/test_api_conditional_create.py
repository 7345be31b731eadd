"""``PUT /v1/jobs/{id}`` with ``If-None-Match: *``: a job created at an id the caller chose, once."""

from __future__ import annotations

from api_harness import BOB, ApiClient, job_spec
from api_harness import api as api  # the fixture

CREATE = {"If-None-Match": "*"}


def test_a_conditional_put_creates_the_job_once(api: ApiClient) -> None:
    # When a job is put at a chosen id, If-None-Match: *
    first = api.call("PUT", "/v1/jobs/cfn-0123abcd", job_spec(), headers=CREATE)
    # Then it is created there, as POST would create it
    assert first.status == 201 and first.body["id"] == "cfn-0123abcd" and first.body["version"] == 1
    assert first.headers["Location"].endswith("/v1/jobs/cfn-0123abcd")
    # And the same request again changes nothing: 412, the job as it was
    again = api.call("PUT", "/v1/jobs/cfn-0123abcd", job_spec(name="other"), headers=CREATE)
    assert again.status == 412
    got = api.call("GET", "/v1/jobs/cfn-0123abcd").body
    assert got["name"] == "nightly report" and got["version"] == 1
    assert len(api.call("GET", "/v1/jobs").body["items"]) == 1
    # And another tenant has ids of its own
    assert api.call("PUT", "/v1/jobs/cfn-0123abcd", job_spec(), headers=CREATE, user=BOB).status == 201


def test_a_put_without_the_header_still_only_replaces(api: ApiClient) -> None:
    assert api.call("PUT", "/v1/jobs/cfn-missing", job_spec()).status == 404
    reply = api.call("PUT", "/v1/jobs/cfn-missing", job_spec(), headers={"If-None-Match": '"3"'})
    assert reply.status == 400 and reply.body["type"].endswith("invalid-if-none-match")
    assert api.call("GET", "/v1/jobs/cfn-missing").status == 404


def test_a_conditional_put_of_a_webhook_job_shows_its_signing_secret_once(api: ApiClient) -> None:
    hook = job_spec(target={"type": "http", "url": "https://hooks.example.com/run"})
    # When a webhook job is created at a chosen id
    created = api.call("PUT", "/v1/jobs/cfn-hook", hook, headers=CREATE)
    # Then its signing secret is in the reply, as POST's JobCreated has it: the only time it is shown
    assert created.status == 201 and created.body["signing_secret"].startswith("whsec_")
    assert "signing_secret" not in api.call("GET", "/v1/jobs/cfn-hook").body
    assert "signing_secret" not in api.call("PUT", "/v1/jobs/cfn-hook", hook).body  # a replace: none


def test_if_match_beside_if_none_match_is_evaluated_not_ignored(api: ApiClient) -> None:
    """QA: a PUT with If-None-Match: * created the job whatever If-Match said (a version, `*`, even
    `banana`), where a calendar's PUT answers 412 / 400. Both cannot hold (RFC 9110 13.2.2: If-Match
    asks for the job at a version, If-None-Match: * that there be none), so it is a 412, a malformed
    If-Match a 400 naming it, and nothing is created."""
    for if_match, status in (('"1"', 412), ("*", 412), ("banana", 400)):
        headers = {**CREATE, "If-Match": if_match}
        reply = api.call("PUT", "/v1/jobs/both-headers", job_spec(), headers=headers)
        assert reply.status == status, (if_match, reply)
        if status == 400:
            assert reply.fields() == ["header.If-Match"], reply.problem
        assert api.call("GET", "/v1/jobs/both-headers").status == 404
    # And with the job there, still 412, the job untouched
    assert api.call("PUT", "/v1/jobs/both-headers", job_spec(), headers=CREATE).status == 201
    both = {**CREATE, "If-Match": '"1"'}
    assert api.call("PUT", "/v1/jobs/both-headers", job_spec(name="x"), headers=both).status == 412
    assert api.call("GET", "/v1/jobs/both-headers").body["name"] == "nightly report"
