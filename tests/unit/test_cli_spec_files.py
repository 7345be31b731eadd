"""``punctual jobs create|update --file``: a YAML file reads as the JSON it stands for, and every
file or argument the CLI cannot use is one line and exit status 2, never an internal error."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from punctual_cli import cli
from punctual_cli.api_verbs import _read_spec_file

YAML = """\
schedule: rate(1 hour)
start_at: 2027-01-01T00:00:00Z
target: {type: http, url: "https://hooks.example.com/x"}
payload: {country: NO, answer: yes, t: 12:30, d: 2027-01-01, n: 012, f: 1.5, b: true, z: ~, neg: -3}
alerts: [{on: [failed], target: {type: http, url: "https://hooks.example.com/alert"}}]
"""


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", "http://127.0.0.1:9")  # never reached: the input is refused first
    monkeypatch.setenv("PUNCTUAL_TENANT", "t")


def test_yaml_reads_as_the_json_it_stands_for(tmp_path: Path) -> None:
    """YAML 1.1 would make ``on`` True (the alert rule loses its key), ``NO`` and ``yes`` booleans,
    ``12:30`` the number 750, ``012`` ten, and dates datetime objects JSON cannot carry."""
    path = tmp_path / "job.yaml"
    path.write_text(YAML)
    spec = _read_spec_file(str(path))
    assert spec["start_at"] == "2027-01-01T00:00:00Z"
    assert spec["payload"] == {
        "country": "NO",
        "answer": "yes",
        "t": "12:30",
        "d": "2027-01-01",
        "n": 12,
        "f": 1.5,
        "b": True,
        "z": None,
        "neg": -3,
    }
    assert spec["alerts"] == [
        {"on": ["failed"], "target": {"type": "http", "url": "https://hooks.example.com/alert"}}
    ]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe\x00{", "is not UTF-8 text"),
        (b"schedule: rate(1 hour)\npayload: !!binary aGVsbG8=\n", "JSON cannot carry"),
        (b"schedule: [unclosed\n", "neither JSON nor YAML"),
        (b"- just\n- a list\n", "must hold one job spec (a mapping), not a list"),
        (b"", "must hold one job spec (a mapping), not nothing"),  # QA24: "not NoneType"
        (b"rate(1 hour)\n", "must hold one job spec (a mapping), not the value 'rate(1 hour)'"),
    ],
)
def test_a_file_the_cli_cannot_use_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, says: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    code = cli.main(["jobs", "create", "--file", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.count("\n") == 1 and "internal error" not in err, err


def test_an_empty_id_is_bad_input_not_an_internal_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["runs", "get", "job-1", ""])
    err = capsys.readouterr().err
    assert code == 2 and "must not be empty" in err and "internal error" not in err, err


@pytest.mark.parametrize("expression", ["at(2020-01-01T00:00:00)", "rate(999999999 days)"])
def test_next_of_a_schedule_with_no_slot_left_says_so(
    capsys: pytest.CaptureFixture[str], expression: str
) -> None:
    """As a job of it would be refused (422): one line and exit 2, not an empty answer and 0."""
    code = cli.main(["next", expression, "--after", "2026-12-01T00:00:00Z"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and "has no slot after 2026-12-01T00:00:00Z" in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "list", "--tenant", ""],
        ["jobs", "list", "--endpoint", ""],
        ["jobs", "trigger", "job-1", "--idempotency-key", ""],
    ],
)
def test_an_empty_option_is_refused_not_replaced(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """``--tenant ''`` once meant PUNCTUAL_TENANT, and ``--idempotency-key ''`` no key at all."""
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "must not be empty" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "create", "--file", "/dev/zero"],
        ["calendars", "put", "holidays", "--file", "/dev/zero"],
        ["calendars", "put", "holidays", "--ics", "/dev/zero"],
        ["next", "rate(1 hour)", "--exclude-ics", "/dev/zero"],  # (QA26: read until memory ran out)
    ],
)
def test_an_endless_file_is_refused_in_one_line_not_read_for_ever(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # (QA24: `--file /dev/zero` read until memory ran out)
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "/dev/zero: it is over 10 MB" in err and err.count("\n") == 1, err


def test_a_calendar_file_can_come_from_stdin_as_a_job_spec_can(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (QA24: `calendars put NAME --file -` looked for a file named "-")
    sent: list[dict[str, object]] = []

    def put(self: object, name: str, body: dict[str, object], *_: object) -> dict[str, object]:
        sent.append(body)
        return {"name": name, "version": 1, **body}

    monkeypatch.setattr("punctual_cli.client.PunctualClient.put_calendar", put)
    monkeypatch.setattr("sys.stdin", io.StringIO('{"timezone": "Europe/Paris", "dates": ["2027-01-01"]}'))
    code = cli.main(["calendars", "put", "holidays", "--file", "-", "-o", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert sent[0]["timezone"] == "Europe/Paris" and sent[0]["dates"] == ["2027-01-01"]


def test_the_days_next_skips_can_come_from_stdin_as_every_file_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (QA26: `next --exclude-ics -` looked for a file named "-", as docs/cli.md says none does)
    ics = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(ics))
    argv = [
        "next",
        "cron(0 9 * * ? *)",
        "--after",
        "2026-12-24T12:00:00Z",
        "--count",
        "1",
        "--exclude-ics",
        "-",
    ]
    code = cli.main(argv)
    out = capsys.readouterr()
    assert (code, out.err, out.out) == (0, "", "2026-12-26T09:00:00Z\n")
