"""punctual.timing.instants writes exactly the text the seven formatters it replaced wrote.

The reference expressions below are the bodies those functions had (schedules, the
tick, queue messages, execution history, API fields, payload placeholders); every
instant here is aware, as every instant the runtime formats is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.timing.instants import (
    InstantError,
    format_instant,
    format_instant_adaptive,
    format_instant_ms,
    parse_rfc3339,
)

ZONES = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=2)),
        timezone(timedelta(hours=-9, minutes=-30)),
        timezone(timedelta(hours=14)),
    ]
)
INSTANTS = st.builds(
    lambda moment, zone: moment.replace(tzinfo=UTC).astimezone(zone),
    st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30)),
    ZONES,
)


@given(INSTANTS)
def test_seconds_are_what_strftime_and_the_schedule_formatter_gave(instant: datetime) -> None:
    u = instant.astimezone(UTC)
    assert format_instant(instant) == u.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert format_instant(instant) == (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"
    )


@given(INSTANTS)
def test_milliseconds_are_what_queue_messages_and_history_gave(instant: datetime) -> None:
    expected = instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert format_instant_ms(instant) == expected


@given(INSTANTS)
def test_adaptive_is_what_the_api_and_payloads_gave(instant: datetime) -> None:
    spec = "seconds" if instant.microsecond == 0 else "milliseconds"
    api = instant.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")
    payload = instant.astimezone(UTC).replace(tzinfo=None).isoformat(timespec=spec) + "Z"
    assert format_instant_adaptive(instant) == api == payload


def test_naive_instants_are_read_as_utc() -> None:
    naive = datetime(2026, 3, 29, 1, 30, 0, 250_000)
    assert format_instant(naive) == "2026-03-29T01:30:00Z"
    assert format_instant_ms(naive) == "2026-03-29T01:30:00.250Z"
    assert format_instant_adaptive(naive) == "2026-03-29T01:30:00.250Z"


@given(INSTANTS)
def test_every_format_parses_back_to_its_instant(instant: datetime) -> None:
    assert parse_rfc3339(format_instant(instant)) == instant.replace(microsecond=0)
    assert parse_rfc3339(format_instant_ms(instant)) == instant.replace(
        microsecond=instant.microsecond // 1000 * 1000
    )


@pytest.mark.parametrize("text", ["", "tomorrow", "2026-13-01T00:00:00Z", "x" * 65])
def test_text_that_is_no_instant_is_refused_quoting_it(text: str) -> None:
    with pytest.raises(InstantError, match="invalid instant"):
        parse_rfc3339(text)


def test_lower_case_t_and_z_are_rfc_3339_too() -> None:
    """RFC 3339 section 5.6: "T" and "Z" may be lower case."""
    assert parse_rfc3339("2026-01-01t09:00:00z") == parse_rfc3339("2026-01-01T09:00:00Z")
