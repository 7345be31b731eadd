"""The ``punctual`` command where a careless or unlucky use could lose data or leak it (QA,
2026-12-05, black-box): a calendar put with no days, an edited file put back over a change made
meanwhile, a redirect to another host, an endpoint that is not the API, Ctrl-C, and an output that
cannot be written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

from punctual_cli import cli
from punctual_cli.client import PunctualClient


class _Answer(BaseHTTPRequestHandler):
    """Answers every request with the server's ``answer`` (status, headers, body); records them."""

    def do_GET(self) -> None:
        server: Any = self.server
        server.seen.append(dict(self.headers.items()))
        status, headers, body = server.answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _server(status: int, headers: dict[str, str], body: bytes) -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.seen, server.answer = [], (status, headers, body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Any]:
    yield from _server(200, {"Content-Type": "application/json"}, b'{"items": [], "next_token": null}')


def test_a_calendar_put_with_no_days_is_refused(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "calendars", "put", "freeze", "--date", "2026-12-24")[0] == 0
    # It put an empty calendar over freeze's days: its jobs then fired on them
    code, out, err = run(capsys, "calendars", "put", "freeze")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--empty" in err, err
    assert served.api.call("GET", "/v1/calendars/freeze").body["dates"] == ["2026-12-24"]
    assert run(capsys, "calendars", "put", "freeze", "--empty")[0] == 0
    assert served.api.call("GET", "/v1/calendars/freeze").body["dates"] == []


def test_an_edited_file_put_back_does_not_undo_a_change_made_meanwhile(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given a job read into a file (jobs get -o json > job.json), and another change meanwhile
    job = create(capsys)
    code, out, _ = run(capsys, "jobs", "get", job["id"], "--output", "json")
    document = json.loads(out)
    assert run(capsys, "jobs", "update", job["id"], "--name", "renamed by a colleague")[0] == 0
    # When the file, edited, is put back as the whole spec
    document["description"] = "my edit"
    path = tmp_path / "job.json"
    path.write_text(json.dumps(document))
    code, _, err = run(capsys, "jobs", "update", job["id"], "--file", str(path), "--replace")
    # Then it is refused (412: the file's version is not the job's), and the colleague's change stays
    assert (code == 1 and "412" in err) or "version" in err, err
    assert served.api.call("GET", f"/v1/jobs/{job['id']}").body["name"] == "renamed by a colleague"


def test_a_redirect_is_not_followed(
    served: Served, capsys: pytest.CaptureFixture[str], elsewhere: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read followed a redirect to another host with the tenant header and the SigV4 credentials
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}/v1/jobs"
    for redirecting in _server(302, {"Location": target}, b""):
        monkeypatch.setenv("PUNCTUAL_ENDPOINT", f"http://127.0.0.1:{redirecting.server_address[1]}")
        code, out, err = run(capsys, "jobs", "list", "--tenant", "acme")
        assert code == 1 and out == "" and "redirect" in err and "not followed" in err, err
        assert elsewhere.seen == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [((200, {"Content-Type": "text/html"}, b"<html>a login page</html>"), "is not Punctual's API")],
)
def test_an_endpoint_that_is_not_the_api_is_named_not_an_internal_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, answer: Any, expected: str
) -> None:
    for server in _server(*answer):
        monkeypatch.setenv("PUNCTUAL_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        code, out, err = run(capsys, "jobs", "list")
        assert code == 1 and out == "" and expected in err and "internal error" not in err, err


def test_ctrl_c_and_an_output_that_cannot_be_written_are_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(PunctualClient, "request", interrupted)
    code, _, err = run(capsys, "jobs", "list", "--endpoint", "http://127.0.0.1:9")
    assert code == 130 and err == "punctual: interrupted\n", err  # (a traceback)

    class Full:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

    monkeypatch.setattr(cli.sys, "stdout", Full())
    code = cli.main(["next", "rate(1 hour)", "--count", "2"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "the output could not be written" in err, err


def test_a_closed_standard_output_is_an_output_error_not_an_internal_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA26: started with stdout closed (`punctual ... >&-`), Python has no sys.stdout: the first
    # write was "internal error: AttributeError: 'NoneType' object has no attribute 'write'"
    monkeypatch.setattr(cli.sys, "stdout", None)
    code = cli.main(["next", "rate(1 hour)", "--count", "2"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "the output could not be written" in err, err
    assert "internal error" not in err and "standard output is closed" in err, err


def test_update_flags_do_what_they_say_or_are_refused(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("freeze", "holidays"):
        assert run(capsys, "calendars", "put", name, "--date", "2026-12-24")[0] == 0
    job = create(capsys, "--exclude-calendar", "freeze")
    # --exclude-calendar adds, as --tag does (it dropped the job's other calendars: they fired)
    assert run(capsys, "jobs", "update", job["id"], "--exclude-calendar", "holidays")[0] == 0
    stored = served.api.call("GET", f"/v1/jobs/{job['id']}").body
    assert stored["exclude_calendars"] == ["freeze", "holidays"]
    # --http-method changes a webhook's method; refused where there is no webhook (it was dropped)
    assert run(capsys, "jobs", "update", job["id"], "--http-method", "PUT")[0] == 0
    assert served.api.call("GET", f"/v1/jobs/{job['id']}").body["target"]["method"] == "PUT"
    code, _, err = run(
        capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--lambda-arn",
        "arn:aws:lambda:us-east-1:123456789012:function:f", "--http-method", "DELETE",
    )  # fmt: skip
    assert code == 2 and "--http-method is for a webhook" in err, err
    # --replace without --file, and an update of nothing, are refused (a new version for nothing)
    assert run(capsys, "jobs", "update", job["id"], "--replace")[0] == 2
    code, _, err = run(capsys, "jobs", "update", job["id"])
    assert code == 2 and "nothing to change: give a flag" in err, err
    # a flag whose value the job has already says so (QA24: "give a flag" to one who gave it)
    schedule = served.api.call("GET", f"/v1/jobs/{job['id']}").body["schedule"]
    code, out, err = run(capsys, "jobs", "update", job["id"], "--schedule", schedule)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"nothing to change: job {job['id']} already has what the flags give" in err, err
    # a text payload and back to JSON (the Content-Type --payload-text added made it a 422)
    assert run(capsys, "jobs", "update", job["id"], "--payload-text", "ping <slot>")[0] == 0
    code, _, err = run(capsys, "jobs", "update", job["id"], "--payload", '{"a": 2}')
    assert code == 0, err
    stored = served.api.call("GET", f"/v1/jobs/{job['id']}").body
    assert stored["payload"] == {"a": 2} and "Content-Type" not in stored["target"]["headers"]


def test_a_tenant_with_a_control_character_is_refused_as_input(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "jobs", "list", "--tenant", "qa\nx")
    assert code == 2 and out == "" and "control character" in err, err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--bogus"], "--bogus is not a flag of punctual"),
        (["jobs", "--bogus"], "--bogus is not a flag of punctual jobs"),
        (["--endpoint", "http://127.0.0.1:9", "jobs", "list"], "--endpoint goes after the verb"),
    ],
)
def test_a_misplaced_or_unknown_flag_is_named(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    # QA: only "the following arguments are required: COMMAND"
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and named in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["runs", "list", "--status", "FAILED"], "the following arguments are required: JOB\n"),
        (["jobs", "get", "-o", "json"], "the following arguments are required: JOB\n"),
        (["jobs", "list", "--state", "BOGUS"], "(choose from 'ENABLED', 'PAUSED', 'COMPLETED')\n"),
        (["jobs", "list", "-o", "yaml"], "(choose from 'table', 'json')\n"),
        (["jobs", "get", "-ojson"], "the following arguments are required: JOB\n"),
    ],
)
def test_a_flag_in_its_place_gets_no_hint_that_it_is_not(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    # QA24: "--status is not a flag of punctual runs list", "--state goes after the verb"
    code, out, err = run(capsys, *argv, "--endpoint", "http://127.0.0.1:9")
    assert code == 2 and out == "" and err.endswith(said) and err.count("\n") == 1, err
    assert "after the verb" not in err and "is not a flag" not in err, err


def test_a_blank_tenant_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: it acted as the default tenant, and a job created so landed there
    monkeypatch.setenv("PUNCTUAL_TENANT", " ")
    code, _, err = run(capsys, "jobs", "list", "--endpoint", "http://127.0.0.1:9")
    assert code == 2 and "blank" in err, err


def test_a_malformed_slot_and_an_empty_tag_filter_are_input_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # QA: the API's 404 (exit 1) for a slot that is no slot key; an empty --tag listed every job
    code, out, err = run(capsys, "runs", "get", "job-1", "not-a-slot", "--endpoint", "http://127.0.0.1:9")
    assert code == 2 and out == "" and "is not a slot key" in err, err
    code, _, err = run(capsys, "jobs", "list", "--tag", "", "--endpoint", "http://127.0.0.1:9")
    assert code == 2 and "--tag" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", "-x1"],
        ["runs", "get", "-x1", "2026-11-30T02:00:00Z"],
        ["jobs", "get", "-x1"],
        ["jobs", "pause", "-x1"],
    ],
)
def test_a_job_id_that_starts_with_a_dash_is_told_to_go_after_two_dashes(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """QA32: an id may start with '-' (as an EventBridge schedule's name may); argparse reads it as a
    flag, and the error was 'the following arguments are required: JOB' for a command that gave
    it (or, with a slot after it, that the slot was no job id)."""
    code, out, err = run(capsys, *argv, "--endpoint", "http://127.0.0.1:9")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "-x1 is read as a flag: put -- before an id that starts with '-' (-- -x1)" in err, err
