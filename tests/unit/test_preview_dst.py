"""The preview (``GET /v1/schedules/preview``) and ``punctual next`` take a job's ``dst`` options:
``dst_gap`` / ``dst_repeat`` (``--dst-gap`` / ``--dst-repeat``), checked as a job's ``dst`` is (QA23:
a job with ``dst: {gap: skip}`` or ``{repeat: both}`` could be previewed only through its
``upcoming``, once registered)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest

# The API's in-process harness lives beside the integration tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from api_harness import ApiClient
from api_harness import api as api  # the fixture

from punctual_cli import cli

DAILY_0230 = "cron(30 2 * * ? *)"  # Berlin: skipped on 2027-03-28, repeated on 2026-10-25
SPRING = "2027-03-27T12:00:00Z"
AUTUMN = "2026-10-24T12:00:00Z"
CASES = [
    ({}, SPRING, ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]),  # shift: at 03:00 CEST
    ({"gap": "skip"}, SPRING, ["2027-03-29T00:30:00Z", "2027-03-30T00:30:00Z"]),
    ({}, AUTUMN, ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),  # first pass only
    ({"repeat": "both"}, AUTUMN, ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]),
]


def _preview(api: ApiClient, **query: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    reply = api.call("GET", "/v1/schedules/preview?" + urlencode(query))
    return reply.status, reply.body


@pytest.mark.parametrize(("dst", "after", "slots"), CASES)
def test_the_preview_applies_a_jobs_dst_options(api: ApiClient, dst: dict, after: str, slots: list) -> None:  # type: ignore[type-arg]
    query = {f"dst_{name}": value for name, value in dst.items()}
    status, body = _preview(
        api, expression=DAILY_0230, timezone="Europe/Berlin", after=after, count="2", **query
    )
    assert (status, body["slots"]) == (200, slots)


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"dst_gap": "later"}, "query.dst_gap", "gap must be 'shift' or 'skip', got 'later'"),
        ({"dst_repeat": "twice"}, "query.dst_repeat", "repeat must be 'first' or 'both', got 'twice'"),
        (
            {"expression": "at(2027-10-31T02:30:00)", "dst_repeat": "both"},
            "query.dst_repeat",
            "an at() job fires once",
        ),
    ],
)
def test_the_preview_refuses_dst_options_a_job_refuses(
    api: ApiClient, query: dict[str, str], field: str, message: str
) -> None:
    status, body = _preview(api, **{"expression": DAILY_0230, "timezone": "Europe/Berlin", **query})
    assert status == 422
    assert field in str(body) and message in str(body)


@pytest.mark.parametrize(("dst", "after", "slots"), CASES)
def test_next_applies_a_jobs_dst_options(
    capsys: pytest.CaptureFixture[str], dst: dict[str, str], after: str, slots: list[str]
) -> None:
    options = [arg for name, value in dst.items() for arg in (f"--dst-{name}", value)]
    code = cli.main(["next", DAILY_0230, "--tz", "Europe/Berlin", "--after", after, "--count", "2", *options])
    captured = capsys.readouterr()
    assert (code, captured.out.splitlines(), captured.err) == (0, slots, "")


@pytest.mark.parametrize(
    ("expression", "options", "message"),
    [
        (DAILY_0230, ["--dst-gap", "later"], "argument --dst-gap: invalid choice: 'later'"),
        (DAILY_0230, ["--dst-repeat", "twice"], "argument --dst-repeat: invalid choice: 'twice'"),
        ("at(2027-10-31T02:30:00)", ["--dst-repeat", "both"], "--dst-repeat: an at() job fires once"),
    ],
)
def test_next_refuses_dst_options_a_job_refuses(
    capsys: pytest.CaptureFixture[str], expression: str, options: list[str], message: str
) -> None:
    code = cli.main(["next", expression, "--tz", "Europe/Berlin", "--after", AUTUMN, *options])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err.count("\n") == 1 and message in captured.err
