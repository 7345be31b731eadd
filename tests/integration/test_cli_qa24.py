"""QA24 fixes of the ``punctual`` command against the API handler served on loopback (the fixtures
of test_cli_api.py): bad stored data and bad arguments answered as docs/cli.md says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from api_harness import api as api  # the fixture served needs
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture


def _job(capsys: pytest.CaptureFixture[str], job_id: str) -> dict[str, Any]:
    """The job as ``jobs get -o json`` prints it (indented: a metrics line the in-process API may
    flush to the same stdout is one compact line before it)."""
    code, out, err = run(capsys, "jobs", "get", job_id, "-o", "json")
    assert code == 0, err
    shown: dict[str, Any] = json.loads(out[out.index("{\n") :])
    return shown


def _make_unreadable(served: Served, job_id: str) -> None:
    """The job's stored document as an older, laxer version could have left it (docs/api.md: such
    a job "never breaks a list or a get": the API answers it as {id, state, version, unreadable})."""
    dynamodb = served.api.dynamodb
    for item in dynamodb.scan(TableName=served.api.store.table)["Items"]:
        if "doc" in item and job_id in item["pk"]["S"] + item["sk"]["S"]:
            dynamodb.update_item(
                TableName=served.api.store.table,
                Key={"pk": item["pk"], "sk": item["sk"]},
                UpdateExpression="SET doc = :d",
                ExpressionAttributeValues={":d": {"S": "{not json"}},
            )


def test_an_unreadable_job_is_shown_not_an_internal_error(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = create(capsys, "--name", "good")
    bad = create(capsys, "--name", "bad", "--no-name-check")
    _make_unreadable(served, bad["id"])
    # the listing shows both jobs, the unreadable one marked
    for argv in (["jobs", "list"], ["jobs", "list", "--all"]):
        code, out, err = run(capsys, *argv)
        assert code == 0 and err == "", err
        rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
        assert "good" in rows[good["id"]] and "unreadable" in rows[bad["id"]], out
    # the job itself: its state, version and why, and how to fix it
    code, out, err = run(capsys, "jobs", "get", bad["id"])
    assert code == 0 and err == "", err
    assert "cannot be read by this version" in out and f"--if-match {bad['version']}" in out, out
    # an update that would keep its fields says why it cannot, in one line (exit 2)
    code, out, err = run(capsys, "jobs", "update", bad["id"], "--name", "renamed")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--replace" in err, err
    # and the whole spec from a file replaces it
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({k: good[k] for k in ("name", "schedule", "target")}))
    code, out, err = run(capsys, "jobs", "update", bad["id"], "--file", str(spec), "--replace")
    assert code == 0, err
    assert _job(capsys, bad["id"])["schedule"] == good["schedule"]


@pytest.mark.parametrize("listing", [("jobs", "list"), ("calendars", "list")])
def test_all_pages_and_a_next_token_are_not_both_taken(
    served: Served, capsys: pytest.CaptureFixture[str], listing: tuple[str, str]
) -> None:
    """``--all`` lists from the first page: beside ``--next-token`` the token was ignored (a forged
    one too, exit 0), so a script resuming a listing got every item again."""
    create(capsys)
    code, out, err = run(capsys, *listing, "--all", "--next-token", "forged")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--next-token" in err, err
    assert run(capsys, *listing, "--all")[0] == 0


@pytest.mark.parametrize("suffix", ["?stage=prod", "#prod", "?"])
def test_an_endpoint_with_a_query_or_fragment_is_refused_in_one_line(
    served: Served, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    """The paths went after the endpoint, into its query or fragment: every request asked the API
    for "/" and the command said "404 Not found: no route for GET /" (exit 1)."""
    job = create(capsys)
    code, out, err = run(capsys, "jobs", "get", job["id"], "--endpoint", served.url + suffix)
    assert code == 2 and out == "" and err.count("\n") == 1 and "query or fragment" in err, err
    assert not [e for e in served.events if e["path"] == "/"]  # nothing was sent


@pytest.mark.parametrize(
    ("endpoint", "says"), [("http://[::1", "Invalid IPv6 URL"), ("http://[zz]/", "'zz'")]
)
def test_an_endpoint_that_does_not_parse_is_named(
    served: Served, capsys: pytest.CaptureFixture[str], endpoint: str, says: str
) -> None:
    code, out, err = run(capsys, "jobs", "list", "--endpoint", endpoint)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"punctual: error: endpoint {endpoint.rstrip('/')!r}: ") and says in err, err


@pytest.mark.parametrize("version", ['"1"', "1.5", "true", "[1]"])
def test_a_replace_file_whose_version_is_not_one_is_refused_not_unguarded(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path, version: str
) -> None:
    """``--file --replace`` is guarded by the file's ``version``: one that is not a whole number was
    skipped, so the file replaced the job whatever changed since (a concurrent edit undone)."""
    job = create(capsys)
    assert run(capsys, "jobs", "update", job["id"], "--name", "changed meanwhile")[0] == 0  # version 2
    spec = {k: job[k] for k in ("schedule", "target")}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec)[:-1] + f', "name": "from the file", "version": {version}}}')
    code, out, err = run(capsys, "jobs", "update", job["id"], "--file", str(path), "--replace")
    assert code == 2 and out == "" and err.count("\n") == 1 and "is not a job version" in err, err
    shown = _job(capsys, job["id"])
    assert shown["name"] == "changed meanwhile" and shown["version"] == 2


@pytest.mark.parametrize(
    "endpoint",
    [
        "ftp://deploy:s3cret@api.example.com",
        "http://deploy:s3cret@api.example.com:99999",
        "http://deploy:s3cret@api.example.com/prod?stage=1",
        "http://deploy:s3cret@[::1",
    ],
)
def test_an_endpoint_refused_is_named_without_its_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    """An error names the endpoint without the user and password in it (client._shown), but the
    endpoint's own refusals printed it whole, password and all, into the terminal or a CI log."""
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", endpoint)
    code, out, err = run(capsys, "jobs", "list")
    assert code == 2 and out == "" and err.count("\n") == 1 and "endpoint" in err, err
    assert "s3cret" not in err and "deploy" not in err, err
