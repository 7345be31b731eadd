"""QA22: :class:`PunctualClient` has a call for the API's routes it lacked (a create at a chosen id,
a batch of jobs) and the schedule preview's every parameter (after, calendars, show_excluded).
Against the API handler served on loopback (the fixtures of test_cli_api.py).
"""

from __future__ import annotations

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served
from test_cli_api import served as served  # the fixture

from punctual_cli.client import ApiError, PunctualClient

SPEC = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example.com"}}


def test_a_job_is_created_at_an_id_once(served: Served) -> None:
    client = PunctualClient(served.url)
    made = client.create_job_at("nightly-1", SPEC)
    assert made["id"] == "nightly-1" and made["signing_secret"].startswith("whsec_")
    with pytest.raises(ApiError) as taken:
        client.create_job_at("nightly-1", {**SPEC, "name": "another"})
    assert taken.value.status == 412
    assert client.get_job("nightly-1")["name"] == ""  # the first one, untouched


def test_a_batch_makes_each_id_once(served: Served) -> None:
    client = PunctualClient(served.url)
    first = client.create_job_batch({"b-1": SPEC, "b-2": {**SPEC, "schedule": "cron(0 25 * * ? *)"}})
    assert (first["created"], first["exists"], first["failed"]) == (1, 0, 1)
    again = client.create_job_batch({"b-1": SPEC, "b-3": SPEC})
    assert (again["created"], again["exists"]) == (1, 1)
    assert sorted(j["id"] for j in client.iter_jobs()) == ["b-1", "b-3"]


def test_the_preview_takes_after_calendars_and_show_excluded(served: Served) -> None:
    client = PunctualClient(served.url)
    client.put_calendar("xmas", {"dates": ["2026-12-25"]})
    after = "2026-12-23T12:00:00Z"
    plain = client.preview("cron(0 9 * * ? *)", count=3, after=after)
    assert plain["slots"] == [f"2026-12-{d}T09:00:00Z" for d in (24, 25, 26)]
    skipped = client.preview(
        "cron(0 9 * * ? *)", count=3, after=after, calendars=["xmas"], show_excluded=True
    )
    assert skipped["slots"] == [f"2026-12-{d}T09:00:00Z" for d in (24, 26, 27)]
    assert skipped["excluded"] == ["2026-12-25T09:00:00Z"]


def test_the_preview_takes_a_jobs_dst_options(served: Served) -> None:
    """QA23: the preview's ``dst_gap`` and ``dst_repeat``, as a job's ``dst``."""
    client = PunctualClient(served.url)
    spring = {"timezone": "Europe/Berlin", "count": 1, "after": "2027-03-27T12:00:00Z"}
    assert client.preview("cron(30 2 * * ? *)", **spring)["slots"] == ["2027-03-28T01:00:00Z"]
    skipped = client.preview("cron(30 2 * * ? *)", **spring, dst_gap="skip")
    assert skipped["slots"] == ["2027-03-29T00:30:00Z"]
    autumn = {"timezone": "Europe/Berlin", "count": 2, "after": "2026-10-24T12:00:00Z"}
    both = client.preview("cron(30 2 * * ? *)", **autumn, dst_repeat="both")
    assert both["slots"] == ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]
