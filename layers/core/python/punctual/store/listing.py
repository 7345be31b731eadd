"""How a job listing filters and pages (both stores, and the callers that page through them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from punctual.models import Job
from punctual.store.base import Page

_Item = TypeVar("_Item")

# Jobs (or, under a status filter, execution records) a listing examines a page at most: a rare
# filter's page is short (even empty), with a cursor.
LIST_SCAN_BUDGET = 2000


def tags_match(tags: object, tag: str | None) -> bool:
    """Whether stored tags match a listing's filter: ``key`` matches any value of that tag,
    ``key=value`` matches exactly. ``tags`` as stored: a mapping, or (an unreadable job's
    document) anything else, which matches only no filter."""
    if tag is None:
        return True
    if not isinstance(tags, dict):
        return False
    key, sep, value = tag.partition("=")
    return key in tags and (not sep or str(tags[key]) == value)


def tag_matches(job: Job, tag: str | None) -> bool:
    """Whether ``job`` matches a listing's tag filter (:func:`tags_match`)."""
    return tags_match(job.tags, tag)


def every_item(read: Callable[[str | None], Page[_Item]]) -> Iterator[_Item]:
    """Every item of a listing, page after page: ``read(cursor)`` reads one page."""
    cursor: str | None = None
    while True:
        page = read(cursor)
        yield from page.items
        if page.cursor is None:
            return
        cursor = page.cursor
