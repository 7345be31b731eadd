"""The API's path parameters, checked: a job id, a calendar name, a backfill id (404 or 422 naming
the problem before anything is read)."""

from __future__ import annotations

import re
from urllib.parse import unquote

from punctual.api import problems
from punctual.models import CALENDAR_NAME_RE, CALENDAR_NAME_RULE

JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # a job to create
_STORED_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\n?\Z")  # an older rule's $ let a final newline in
_STORED_CALENDAR_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # an older rule let dots alone in
_BACKFILL_ID_RE = re.compile(r"^[0-9a-f]{20}\Z")


def job_id_of(raw: str) -> str:
    job_id = unquote(raw)
    if not _STORED_JOB_ID_RE.match(job_id):  # (an id stored under an older rule is still reached)
        raise problems.not_found(f"job {job_id[:80]!r} not found")
    return job_id


def calendar_name_of(raw: str, stored: bool = False) -> str:
    """The path's calendar name; ``stored``: one to read or delete, which may be a name an older
    rule let in (dots alone)."""
    name = unquote(raw)
    if not (CALENDAR_NAME_RE.fullmatch(name) or (stored and _STORED_CALENDAR_NAME_RE.fullmatch(name))):
        raise problems.invalid("path.name", f"calendar name {name[:80]!r}: {CALENDAR_NAME_RULE}")
    return name


def backfill_id_of(raw: str) -> str:
    backfill = unquote(raw)
    if not _BACKFILL_ID_RE.match(backfill):
        raise problems.not_found(f"backfill {backfill[:80]!r} not found")
    return backfill
