"""Time zones: IANA names checked, and zones seen as segments of constant UTC offset.

Cron and ``at`` slots are found in local wall-clock time and mapped to UTC through the
zone's offset *segments* (the intervals between two offset transitions); the DST
policy (:mod:`~punctual.timing.schedules.dst`) decides what happens at a segment's edge.
"""

from __future__ import annotations

import bisect
import difflib
import zoneinfo
from datetime import date
from functools import lru_cache
from typing import Final

import tzdata  # type: ignore[import-untyped]  # (no stubs: one constant read)

from punctual.timing.schedules.base import EPOCH_ORDINAL, from_epoch, shorten
from punctual.timing.schedules.errors import ScheduleError

__all__ = ["ZONE_DATABASE", "Zone", "check_place", "validate_timezone", "zone_of"]

# Every node reads one zone database: the pinned ``tzdata`` package (requirements.txt), never the
# host's. The Lambda runtime, the ECS image (a slim Debian without /usr/share/zoneinfo) and a
# laptop each have their own or none, and two nodes whose rules for a zone differ would compute
# different slots of the same job: a slot run twice, or never.
zoneinfo.reset_tzpath(to=())
zoneinfo.ZoneInfo.clear_cache()
ZONE_DATABASE: Final = tzdata.IANA_VERSION
# Names a host's database has that are not places: the host's own zone and build artefacts. A new
# job may not name them (check_place); one stored before that rule resolves as it did on AWS, where
# the host's zone is UTC (Lambda's TZ=:UTC) and posixrules is New York's rules.
_NOT_PLACES: Final = frozenset({"localtime", "posixrules", "Factory"})
_LEGACY: Final = {"localtime": "UTC", "posixrules": "America/New_York"}


def validate_timezone(name: str) -> zoneinfo.ZoneInfo:
    """Resolve an IANA time-zone name.

    Parameters
    ----------
    name
        For example ``Europe/Berlin`` or ``UTC``.

    Returns
    -------
    zoneinfo.ZoneInfo

    Raises
    ------
    ScheduleError
        When the name is empty, absurd, or not a known zone.
    """
    if not isinstance(name, str) or not name:
        raise ScheduleError("timezone: empty time zone name")
    if len(name) > 64 or not name.isascii() or not name.isprintable() or name != name.strip():
        raise ScheduleError(f"timezone: invalid time zone name '{shorten(name)}'")
    key = _LEGACY.get(name) or name.removeprefix("posix/").removeprefix("right/")
    try:
        return zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError for malformed keys ("../x"), OSError for directories ("Europe").
        meant = _meant_zone(name)
        hint = f"; did you mean {meant}?" if meant else ""
        raise ScheduleError(f"timezone: unknown time zone '{name}'{hint}") from None


@lru_cache(maxsize=1)
def _places() -> tuple[dict[str, str], dict[str, str]]:
    """The database's places by their lower-case name, and by their city alone where one place
    has it (``berlin``: ``Europe/Berlin``)."""
    places = {
        zone.lower(): zone
        for zone in zoneinfo.available_timezones()
        if zone not in _NOT_PLACES and not zone.startswith(("posix/", "right/"))
    }
    cities: dict[str, list[str]] = {}
    for folded, zone in places.items():
        if "/" in folded:
            cities.setdefault(folded.rsplit("/", 1)[1], []).append(zone)
    return places, {city: zones[0] for city, zones in cities.items() if len(zones) == 1}


def _meant_zone(name: str) -> str | None:
    """The place an unknown zone name was likely meant to be (QA31: ``Europe/berlin``,
    ``America/New York`` and ``Europe/Berlim`` were only "unknown time zone"): the same name in
    another case or with ``_`` for its spaces, a city alone, else one spelled closely; else None."""
    places, cities = _places()
    folded = name.lower().replace(" ", "_")
    if folded in places:
        return places[folded]
    if folded in cities:
        return cities[folded]
    close = difflib.get_close_matches(folded, places, n=1, cutoff=0.8)
    return places[close[0]] if close else None


def check_place(name: str) -> None:
    """Refuse a zone name that is not a place (``localtime``, ``Factory``, ``posixrules``,
    ``posix/...``, ``right/...``): what a new job may name (:func:`validate_timezone` still
    resolves them, for the jobs stored before this rule).

    Raises
    ------
    ScheduleError
        Naming the zone.
    """
    if name in _NOT_PLACES or name.startswith(("posix/", "right/")):
        raise ScheduleError(f"timezone: '{name}' is not an IANA time zone (a place, such as Europe/Berlin)")


_UTC_NAMES: Final = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Zulu", "Zulu", "Universal"})

_YEAR_STARTS: dict[int, int] = {}


def _year_start(year: int) -> int:
    start = _YEAR_STARTS.get(year)
    if start is None:
        start = (date(year, 1, 1).toordinal() - EPOCH_ORDINAL) * 86400
        _YEAR_STARTS[year] = start
    return start


class _YearTransitions:
    """Offset transitions whose instant falls in one UTC year."""

    __slots__ = ("instants", "offset_before", "offsets")

    def __init__(self, offset_before: int, instants: list[int], offsets: list[int]) -> None:
        self.offset_before = offset_before  # offset in force just before the year starts
        self.instants = instants  # first instant with the new offset
        self.offsets = offsets  # the new offset, seconds east of UTC


class Zone:
    """A time zone seen as segments of constant UTC offset.

    zoneinfo does not expose its transitions, so they are found once per zone and UTC
    year by probing the offset daily and bisecting each change to the second, then
    cached. (Two transitions less than a day apart would be missed; tzdata has none
    since 1970.)
    """

    __slots__ = ("_last", "_years", "tz")

    def __init__(self, tz: zoneinfo.ZoneInfo) -> None:
        self.tz = tz
        self._years: dict[int, _YearTransitions] = {}
        # The last segment answered: consecutive calls mostly land in the same one.
        self._last: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)

    def offset_at(self, instant: int) -> int:
        off = from_epoch(instant).astimezone(self.tz).utcoffset()
        assert off is not None  # a ZoneInfo always answers
        return off.days * 86400 + off.seconds

    def _year(self, year: int) -> _YearTransitions:
        info = self._years.get(year)
        if info is not None:
            return info
        start, end = _year_start(year), _year_start(year + 1)
        probe = start - 1
        before = self.offset_at(probe)
        current = before
        instants: list[int] = []
        offsets: list[int] = []
        while probe < end - 1:
            nxt = min(probe + 86400, end - 1)
            off = self.offset_at(nxt)
            if off != current:
                lo, hi = probe, nxt  # offset(lo) == current, offset(hi) != current
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset_at(mid) == current:
                        lo = mid
                    else:
                        hi = mid
                instants.append(hi)
                offsets.append(off)
                current = off
            probe = nxt
        info = _YearTransitions(before, instants, offsets)
        self._years[year] = info
        return info

    def segment(self, instant: int) -> tuple[int, int, int, int, int]:
        """The constant-offset segment holding ``instant``.

        Returns ``(start, offset_before_start, offset, end, offset_from_end)``: the
        offset is ``offset`` on ``[start, end)``. A stretch of more than a year without
        transitions is cut into pseudo-segments whose neighbouring offsets are equal.
        """
        last = self._last
        if last[0] <= instant < last[3] and last[5]:
            return last[0], last[1], last[2], last[3], last[4]
        year = from_epoch(instant).year
        info = self._year(year)
        i = bisect.bisect_right(info.instants, instant)
        if i > 0:
            start, offset = info.instants[i - 1], info.offsets[i - 1]
            before = info.offsets[i - 2] if i > 1 else info.offset_before
        else:
            offset = info.offset_before
            prev = self._year(year - 1)
            if prev.instants:
                start = prev.instants[-1]
                before = prev.offsets[-2] if len(prev.instants) > 1 else prev.offset_before
            else:
                start, before = _year_start(year - 1), offset
        if i < len(info.instants):
            end, after = info.instants[i], info.offsets[i]
        else:
            nxt = self._year(year + 1)
            if nxt.instants:
                end, after = nxt.instants[0], nxt.offsets[0]
            else:
                end, after = _year_start(year + 2), offset
        self._last = (start, before, offset, end, after, 1)
        return start, before, offset, end, after


@lru_cache(maxsize=1024)
def zone_of(name: str) -> Zone | None:
    """The segment view of a zone; ``None`` for UTC (no offsets to apply)."""
    if name in _UTC_NAMES:
        return None
    return Zone(validate_timezone(name))
