"""QA31: an unknown time zone that is a place misspelt, in another case, with a space for its ``_``
or a city alone is refused naming the place it likely meant (it was only "unknown time zone")."""

from __future__ import annotations

import pytest

from punctual.timing.schedules import ScheduleError, parse_schedule
from punctual_cli import cli


@pytest.mark.parametrize(
    ("tz", "meant"),
    [
        ("Europe/Berlim", "Europe/Berlin"),
        ("europe/berlin", "Europe/Berlin"),
        ("America/New York", "America/New_York"),
        ("Berlin", "Europe/Berlin"),
        ("utc", "UTC"),
        ("Asia/Kolkatta", "Asia/Kolkata"),
    ],
)
def test_an_unknown_zone_names_the_place_it_likely_meant(tz: str, meant: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("0 9 * * *", tz)
    assert str(caught.value) == f"timezone: unknown time zone '{tz}'; did you mean {meant}?"


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "Europe", "../etc/passwd", "Posixrules"])
def test_no_guess_where_no_place_is_close(tz: str) -> None:
    """Nothing close (a directory, a path, another planet) is only unknown; a name that is no place
    (``posixrules``, ``posix/...``) is never the guess."""
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("0 9 * * *", tz)
    assert str(caught.value) == f"timezone: unknown time zone '{tz}'"


def test_the_cli_says_it_in_its_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", "http://127.0.0.1:9")  # never reached: --tz is refused first
    code = cli.main(
        [
            "jobs",
            "create",
            "--schedule",
            "0 9 * * *",
            "--tz",
            "Europe/Berlim",
            "--http-url",
            "https://x.example",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err == (
        "punctual: error: argument --tz: unknown time zone 'Europe/Berlim'; did you mean Europe/Berlin?\n"
    ), err
