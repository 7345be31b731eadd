"""Reads that may be behind, and the strongly consistent read that decides before anything is dropped.

An eventually consistent read costs half a strongly consistent one and may answer an item as it
was a moment ago (DynamoDB: "usually" within a second). The core reads jobs and calendars that
way on its hot paths, and never drops, excludes or calls stale anything on such an answer
alone: when the cheap answer would drop something, it reads strongly consistently and decides
on that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from punctual.store.base import CalendarRepository
from punctual.usecases.calendars import Calendar

CalendarKey = tuple[str, str]


def read_calendars(
    store: CalendarRepository,
    keys: Iterable[CalendarKey],
    would_drop: Callable[[dict[CalendarKey, Calendar]], bool],
) -> dict[CalendarKey, Calendar]:
    """The calendars of ``keys``: eventually consistent, unless that answer ``would_drop`` a slot
    (or lacks a calendar asked for, which may be one created a moment ago): then strongly."""
    wanted = set(keys)
    found = store.batch_get_calendars(wanted, consistent=False)
    if len(found) < len(wanted) or would_drop(found):
        return store.batch_get_calendars(wanted, consistent=True)
    return found
