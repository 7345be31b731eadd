"""UTC instants as text: the formats Punctual writes and the RFC 3339 text it reads.

Every instant Punctual writes is UTC with a ``Z``; which precision depends on where:

=======================  ==============================  ==========================================
function                 example                         written in
=======================  ==============================  ==========================================
:func:`format_instant`   ``2026-03-29T01:00:00Z``        schedule previews and errors, jitter seeds,
                                                         the tick's Step Functions input
:func:`format_instant_   ``2026-03-29T01:00:00.250Z``    dispatch message bodies, the history
ms`                                                      events of dependent jobs
:func:`format_instant_   ``...:00Z`` or ``...:00.250Z``  API fields, payload placeholders
adaptive`                                                (``<scheduled_at>``), ECS environment
=======================  ==============================  ==========================================

Slot keys (:func:`punctual.timing.timers.slot_key`) are whole-second instants too, but they
are keys, encoded (and decoded) by :mod:`punctual.timing.timers`.

A naive datetime is read as UTC; an aware one in any zone is converted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

__all__ = [
    "InstantError",
    "format_instant",
    "format_instant_adaptive",
    "format_instant_ms",
    "from_epoch_us",
    "message_instant",
    "parse_rfc3339",
    "to_epoch_us",
    "to_utc",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

_MAX_TEXT_CHARS = 64
_EXPECTED = "expected RFC 3339 such as 2026-01-01T09:00:00Z"


class InstantError(ValueError):
    """Text that is not an instant; the message is one line and quotes the text."""


def to_epoch_us(instant: datetime) -> int:
    """Whole microseconds since the epoch, exactly (no float on the way)."""
    return (instant - _EPOCH) // _MICROSECOND


def from_epoch_us(epoch_us: int) -> datetime:
    """The aware UTC instant ``epoch_us`` microseconds after the epoch (:func:`to_epoch_us` back)."""
    return _EPOCH + epoch_us * _MICROSECOND


def to_utc(instant: datetime) -> datetime:
    """The same instant in UTC; a naive datetime is taken to be UTC already."""
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


def format_instant(instant: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``: UTC, whole seconds (a sub-second part is dropped).

    Parameters
    ----------
    instant
        An aware datetime (any zone); a naive one is taken to be UTC.

    Returns
    -------
    str
        For example ``2026-03-29T01:00:00Z``.
    """
    u = to_utc(instant)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def format_instant_ms(instant: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ``: UTC, always with milliseconds (microseconds dropped)."""
    return to_utc(instant).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_instant_adaptive(instant: datetime) -> str:
    """UTC with a ``Z``: whole seconds (``...:00Z``), or milliseconds when there are any (``...:00.250Z``)."""
    u = to_utc(instant)
    spec = "milliseconds" if u.microsecond else "seconds"
    return u.isoformat(timespec=spec).replace("+00:00", "Z")


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 / ISO 8601 instant into an aware UTC datetime.

    Parameters
    ----------
    text
        ``2026-01-01T09:00:00Z``, ``2026-01-01T10:00:00+01:00``; a value without an
        offset (``2026-01-01T09:00:00``) is taken to be UTC. Surrounding whitespace
        is ignored; at most 64 characters.

    Returns
    -------
    datetime
        Aware, in UTC; sub-second parts are kept.

    Raises
    ------
    InstantError
        When the text is not an instant.
    """
    if not isinstance(text, str):
        raise InstantError(f"invalid instant {text!r}: expected a string")
    stripped = text.strip()
    shown = stripped if len(stripped) <= 40 else stripped[:37] + "..."
    if not stripped or len(stripped) > _MAX_TEXT_CHARS:
        raise InstantError(f"invalid instant '{shown}': {_EXPECTED}")
    try:
        # 3.11's fromisoformat takes a trailing Z and most ISO 8601 forms.
        parsed = datetime.fromisoformat(stripped.upper())  # RFC 3339 allows a lower-case "t" and "z"
    except ValueError:
        raise InstantError(f"invalid instant '{shown}': {_EXPECTED}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise InstantError(f"invalid instant '{shown}': out of range") from None


@lru_cache(maxsize=1024)
def _message_instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def message_instant(text: str) -> datetime:
    """``datetime.fromisoformat(text.replace("Z", "+00:00"))``: an instant a dispatch message
    carries (its ``scheduled_at``, ``released_at``), as a worker's claim reads it. Cached: a
    worker reads each of a message's instants more than once (whether it is early, whether its
    job may be trusted, its record), and the messages of one release share a release instant
    and those of many jobs a slot's. A datetime is immutable, so the same one may stand for
    every equal text. Anything but a ``str`` is read as before (its error raised as before)."""
    if type(text) is str:
        return _message_instant(text)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
