"""Issue 31, point 6: a page token of any kind the API did not issue to this query answers 400.

Every listing that takes a token is covered (``/v1/jobs``, a job's executions, ``/v1/calendars``,
and the scheduler API's ListSchedules and ListScheduleGroups), with tokens drawn by hypothesis:
non-ASCII text (a ``TypeError`` in ``hmac.compare_digest`` made this a 500), huge ones, binary
(control characters, NUL), near-misses (a real token altered), and another tenant's real token.
The harness asserts that no reply is a 5xx; the test asserts a 400 naming the token.
"""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

import pytest
from api_harness import ALICE, BOB, BOB_ID, ApiClient, Reply, job_spec
from api_harness import api as api  # the fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.api.paging import MAX_TOKEN_CHARS
from punctual.models import Execution, ExecutionStatus


def _routes(job_id: str) -> dict[str, tuple[str, str, bool]]:
    return {
        "jobs": ("/v1/jobs?limit=1", "next_token", False),
        "executions": (f"/v1/jobs/{job_id}/executions?limit=1", "next_token", False),
        "calendars": ("/v1/calendars?limit=1", "next_token", False),
        "ListSchedules": ("/schedules?MaxResults=1", "NextToken", True),
        "ListScheduleGroups": ("/schedule-groups?MaxResults=1", "NextToken", True),
    }


CALENDAR = {"timezone": "UTC", "dates": ["2026-12-25"]}


@pytest.fixture
def world(api: ApiClient) -> dict[str, Any]:
    """Alice's job; two of everything for Bob, and a real next token of his on every route."""
    alices_job = api.create(user=ALICE)["id"]
    bobs_job = api.create(user=BOB)["id"]
    api.create(user=BOB)
    for name in ("one", "two"):
        assert api.call("PUT", f"/v1/calendars/{name}", CALENDAR, user=BOB).status in (200, 201)
        assert api.call("POST", f"/schedule-groups/g-{name}", {}, user=BOB).status == 200
    for name in ("s-one", "s-two"):
        schedule = {
            "ScheduleExpression": "rate(1 hour)",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {
                "Arn": "arn:aws:sqs:us-east-1:123456789012:orders",
                "RoleArn": "arn:aws:iam::123456789012:role/scheduler",
            },
        }
        assert api.call("POST", f"/schedules/{name}", schedule, user=BOB).status == 200
    for slot in ("2026-11-30T09:00:00Z", "2026-11-30T10:00:00Z"):
        record = Execution(
            job_id=bobs_job,
            tenant=BOB_ID,
            slot=slot,
            scheduled_at=slot,  # type: ignore[arg-type]
            status=ExecutionStatus.SUCCEEDED,
        )
        api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)
    bobs: dict[str, str] = {}
    for name, (path, _param, scheduler) in _routes(bobs_job).items():
        reply = api.call("GET", path, user=BOB)
        assert reply.status == 200, (name, reply)
        token = reply.body["NextToken" if scheduler else "next_token"]
        assert token, name
        bobs[name] = token
    return {"alices_job": alices_job, "bobs_tokens": bobs}


def _tokens(bobs: str) -> st.SearchStrategy[str]:
    base64url = string.ascii_letters + string.digits + "-_"
    return st.one_of(
        # Non-ASCII anywhere: the case that answered 500.
        st.text(min_size=1, max_size=64).filter(lambda t: not t.isascii()),
        st.builds(
            lambda a, c: f"{a}.{c}",
            st.text(base64url, max_size=20),
            st.characters(min_codepoint=128, exclude_categories=("Cs",)),
        ),  # no URL carries a lone surrogate
        # Huge: over the limit, with and without the token's shape.
        st.integers(MAX_TOKEN_CHARS + 1, MAX_TOKEN_CHARS * 3).map(lambda n: "A" * n),
        st.integers(MAX_TOKEN_CHARS, MAX_TOKEN_CHARS * 2).map(lambda n: "A" * n + "." + "B" * 43),
        # Binary: bytes as characters, NUL and control characters included.
        st.binary(min_size=1, max_size=200).map(lambda b: b.decode("latin-1")),
        # Shaped like a token, not issued: random payload and MAC.
        st.builds(lambda a, c: f"{a}.{c}", st.text(base64url, max_size=80), st.text(base64url, max_size=60)),
        # Another tenant's real token, as it is and altered by one character.
        st.just(bobs),
        st.integers(0, len(bobs) - 1).map(
            lambda i: bobs[:i] + ("A" if bobs[i] != "A" else "B") + bobs[i + 1 :]
        ),
    )


def _assert_refused(reply: Reply, scheduler: bool, param: str) -> None:
    assert reply.status == 400, reply
    if scheduler:
        assert reply.headers.get("x-amzn-ErrorType", reply.body.get("__type", "")).startswith(
            "ValidationException"
        ) or "ValidationException" in str(reply.body), reply
        assert "NextToken" in str(reply.body) or "next" in str(reply.body).lower(), reply
    else:
        assert reply.fields() == [f"query.{param}"], reply.body


@pytest.mark.parametrize("route", ["jobs", "executions", "calendars", "ListSchedules", "ListScheduleGroups"])
def test_a_hostile_page_token_answers_400(api: ApiClient, world: dict[str, Any], route: str) -> None:
    path, param, scheduler = _routes(world["alices_job"])[route]
    seen: list[int] = []

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(token=_tokens(world["bobs_tokens"][route]))
    def check(token: str) -> None:
        reply = api.call("GET", f"{path}&{param}={quote(token, safe='')}", user=ALICE)
        seen.append(reply.status)
        _assert_refused(reply, scheduler, param)

    check()
    assert seen  # the property ran


def test_the_reported_non_ascii_token_is_a_400_not_a_500(api: ApiClient) -> None:
    """The issue's reproduction, on /v1/jobs: ``é`` in the MAC part."""
    api.create(spec=job_spec())
    reply = api.call("GET", f"/v1/jobs?next_token={quote('eyJjIjoiIn0.é')}")

    assert reply.status == 400
    assert reply.problem["type"].endswith("invalid-next-token")
