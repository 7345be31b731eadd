"""A job's history between two instants (QA32): ``GET /v1/jobs/{id}/executions?since=&until=``.

The history could only be read from its newest record down: a minute job's runs of last night were
hundreds of pages away. The window is of slots (since included, until left out), in any RFC 3339
form; a MISSED range record reaching into it from before is listed with it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import quote

import pytest
from api_harness import ALICE_ID, BOB, ApiClient
from api_harness import api as api  # the fixture
from test_cli_api import Served, run
from test_cli_api import served as served  # the fixture

from punctual.models import Execution, ExecutionStatus

HOURS = [f"2026-11-30T{hour:02d}:00:00Z" for hour in range(10)]
MANUAL = "2026-11-30T05:00:00Z~m0123456789ab"  # a run-now slot in the 05:00 second
RANGE = ("2026-11-29T10:00:00Z", "2026-11-30T00:00:00Z")  # MISSED, 15 slots, the last one 00:00


def _record(api: ApiClient, job_id: str, slot: str, status: ExecutionStatus, **more: Any) -> None:
    at = datetime.fromisoformat(slot.split("~")[0])
    record = Execution(
        job_id=job_id, tenant=ALICE_ID, slot=slot, scheduled_at=at, status=status, finished_at=at, **more
    )
    api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)


@pytest.fixture
def job_id(api: ApiClient) -> str:
    made: str = api.create()["id"]
    # 00:00 has its own record (a backfill ran it), inside the range recorded before
    for slot in HOURS:
        _record(
            api,
            made,
            slot,
            ExecutionStatus.FAILED if slot.startswith("2026-11-30T04") else ExecutionStatus.SUCCEEDED,
        )
    _record(api, made, MANUAL, ExecutionStatus.SUCCEEDED)
    _record(api, made, RANGE[0], ExecutionStatus.MISSED, last_slot=RANGE[1], slot_count=15)
    return made


def _slots(api: ApiClient, job_id: str, query: str) -> list[str]:
    """Every page of the listing, followed."""
    slots: list[str] = []
    token = None
    while True:
        page = api.call(
            "GET", f"/v1/jobs/{job_id}/executions?{query}" + (f"&next_token={quote(token)}" if token else "")
        )
        assert page.status == 200, page
        slots += [item["slot"] for item in page.body["items"]]
        token = page.body["next_token"]
        if token is None:
            return slots


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("since=2026-11-30T03:00:00Z&until=2026-11-30T06:00:00Z", [MANUAL, HOURS[5], HOURS[4], HOURS[3]]),
        # the same window in other zones and forms; until a fraction past 06:00 takes 06:00 in
        (
            "since=2026-11-30T04:00:00%2B01:00&until=2026-11-30T06:00:00.5Z",
            [HOURS[6], MANUAL, *HOURS[5:2:-1]],
        ),
        ("since=2026-11-29T22:00:00-05:00&until=2026-11-30T05:00:00", [HOURS[4], HOURS[3]]),
        ("until=2026-11-30T02:00:00Z", [HOURS[1], HOURS[0], RANGE[0]]),
        ("since=2026-11-30T00:00:00Z&limit=2", [*HOURS[::-1][:4], MANUAL, *HOURS[::-1][4:], RANGE[0]]),
        ("since=2026-11-30T00:00:00.000001Z&limit=3", [*HOURS[::-1][:4], MANUAL, *HOURS[::-1][4:9]]),
        ("since=2026-11-30&status=MISSED", [RANGE[0]]),
        ("since=2026-11-30T00:00:00Z&until=2026-11-30T09:00:00Z&status=FAILED", [HOURS[4]]),
        ("since=2026-11-30T08:00:00Z&limit=2", [HOURS[9], HOURS[8]]),  # a full last page, then none
    ],
)
def test_a_window_lists_the_slots_inside_it_page_by_page(
    api: ApiClient, job_id: str, query: str, expected: list[str]
) -> None:
    assert _slots(api, job_id, query) == expected


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=2026-11-30T06:00:00Z&until=2026-11-30T03:00:00Z", "query.until"),
        ("since=2026-11-30T06:00:00Z&until=2026-11-30T06:00:00Z", "query.until"),
        ("since=", "query.since"),
        ("until=yesterday", "query.until"),
        ("since=0001-01-01T00:00:00%2B01:00", "query.since"),
        ("until=9999-12-31T23:59:59.5Z", "query.until"),  # no next second
    ],
)
def test_a_window_that_is_none_is_a_422_naming_it(
    api: ApiClient, job_id: str, query: str, field: str
) -> None:
    reply = api.call("GET", f"/v1/jobs/{job_id}/executions?{query}")

    assert reply.status == 422 and reply.fields() == [field]


def test_a_token_holds_to_its_window_in_whatever_form_it_is_written(api: ApiClient, job_id: str) -> None:
    first = api.call("GET", f"/v1/jobs/{job_id}/executions?since=2026-11-30T00:00:00Z&limit=3").body
    token = quote(first["next_token"])

    same = api.call(
        "GET", f"/v1/jobs/{job_id}/executions?since=2026-11-30T01:00:00%2B01:00&limit=3&next_token={token}"
    )
    other = api.call("GET", f"/v1/jobs/{job_id}/executions?since=2026-11-30T01:00:00Z&next_token={token}")
    none = api.call("GET", f"/v1/jobs/{job_id}/executions?next_token={token}")

    assert same.status == 200 and [i["slot"] for i in same.body["items"]] == [HOURS[6], MANUAL, HOURS[5]]
    assert other.status == none.status == 400


def test_another_tenant_gets_404_for_a_window_of_the_job(api: ApiClient, job_id: str) -> None:
    reply = api.call("GET", f"/v1/jobs/{job_id}/executions?since=2026-11-30T00:00:00Z", user=BOB)

    assert reply.status == 404


def test_runs_list_takes_a_window(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    made = json.loads(out)["id"]
    for slot in HOURS:
        at = datetime.fromisoformat(slot)
        record = Execution(
            job_id=made, tenant="default", slot=slot, scheduled_at=at, status=ExecutionStatus.SUCCEEDED
        )
        served.api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)

    window = ("--since", "2026-11-30T04:00:00+01:00", "--until", "2026-11-30T05:00:00Z")
    code_page, page, _ = run(capsys, "runs", "list", made, *window, "--limit", "2", "-o", "json")
    code_all, every, _ = run(capsys, "runs", "list", made, *window, "--all")
    code_bad, _, err = run(
        capsys, "runs", "list", made, "--since", "2026-11-30T05:00:00Z", "--until", "2026-11-30T04:00:00Z"
    )

    assert code == code_page == code_all == 0
    assert [item["slot"] for item in json.loads(page)["items"]] == [HOURS[4], HOURS[3]]
    assert [line.split()[0] for line in every.splitlines()[1:]] == HOURS[4:2:-1]
    assert code_bad == 2 and "until" in err and len(err.splitlines()) <= 2


def test_a_window_read_to_its_end_in_a_full_page_says_it_is_the_last(api: ApiClient, job_id: str) -> None:
    full = api.call("GET", f"/v1/jobs/{job_id}/executions?since=2026-11-30T08:00:00Z&limit=2").body
    ranged = api.call("GET", f"/v1/jobs/{job_id}/executions?since=2026-11-29T23:00:00Z&limit=10").body

    assert [item["slot"] for item in full["items"]] == [HOURS[9], HOURS[8]] and full["next_token"] is None
    # ten of the window's own records fill the page: the range reaching 23:00 comes on a page of its own
    assert len(ranged["items"]) == 10 and ranged["next_token"] is not None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("since=0999-01-01T00:00:00Z", [*HOURS[::-1][:4], MANUAL, *HOURS[::-1][4:], RANGE[0]]),
        ("since=0999-01-01T00:00:00Z&limit=4", [*HOURS[::-1][:4], MANUAL, *HOURS[::-1][4:], RANGE[0]]),
        ("until=0999-01-01T00:00:00Z", []),
        ("since=0500-06-01&until=2026-11-30T02:00:00Z", [HOURS[1], HOURS[0], RANGE[0]]),
    ],
)
def test_a_window_edge_before_the_year_1000_sorts_before_every_slot(
    api: ApiClient, job_id: str, query: str, expected: list[str]
) -> None:
    """Review: the edge's key was a slot key's text, whose year before 1000 is not padded
    ('999-01-01T00:00:00Z'), which sorts after every slot of a four-digit year: since=0999-01-01
    listed nothing, until=0999-01-01 everything."""
    assert _slots(api, job_id, query) == expected


def test_a_fraction_of_a_second_far_ahead_still_moves_the_edge_past_its_second(
    api: ApiClient, job_id: str
) -> None:
    """Review: the edge's next whole second was the ceiling of a float timestamp, which holds no
    microsecond past about 2242: since=3000-01-01T00:00:00.000001Z kept the slot of 00:00:00,
    before it, and until=... left that slot out."""
    far = "3000-01-01T00:00:00Z"
    _record(api, job_id, far, ExecutionStatus.SUCCEEDED)

    after = _slots(api, job_id, "since=3000-01-01T00:00:00.000001Z")
    before = _slots(api, job_id, "since=2999-12-31T23:59:59Z&until=3000-01-01T00:00:00.000001Z")

    assert after == [] and before == [far]


def test_an_offset_whose_plus_the_query_string_read_as_a_space_is_still_its_offset(
    api: ApiClient, job_id: str
) -> None:
    """Review: a '+' left unencoded in a query string is a space once API Gateway decodes it, so
    since=2026-11-30T04:00:00+01:00 as docs/api.md writes it (curl, a browser) arrived as
    '2026-11-30T04:00:00 01:00' and was a 422. A space where an offset's sign goes can only be that."""
    plain = _slots(api, job_id, "since=2026-11-30T04:00:00+01:00&until=2026-11-30T06:00:00.5+00:00")
    encoded = _slots(api, job_id, "since=2026-11-30T04:00:00%2B01:00&until=2026-11-30T06:00:00.5%2B00:00")

    assert plain == encoded == [HOURS[6], MANUAL, *HOURS[5:2:-1]]
