"""How a job listing filters and pages (both stores, and the callers that page through them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from punctual.models import MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, Job
from punctual.models.base import label_refusal
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


def tag_filter_refusal(tag: str) -> str | None:
    """Why no job's tag can match the listing filter ``tag`` (a typo, not an empty listing: QA28),
    or None: no key, a key or value longer than a tag's may be (QA29), a control character."""
    key, sep, value = tag.partition("=")
    if not key:
        return "has no key"
    if len(key) > MAX_TAG_KEY_CHARS:
        return f"has a key of {len(key)} characters (a tag key has at most {MAX_TAG_KEY_CHARS})"
    if sep and len(value) > MAX_TAG_VALUE_CHARS:
        return f"has a value of {len(value)} characters (a tag value has at most {MAX_TAG_VALUE_CHARS})"
    return label_refusal(tag)


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
