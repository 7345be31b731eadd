"""Dependent schedules: ``after(job[, job...])`` fires for a slot once every parent succeeded for it."""

from __future__ import annotations

import re
from datetime import datetime

from punctual.timing.schedules.base import Schedule, shorten
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.errors import ScheduleError

__all__ = ["MAX_CHAIN_DEPTH", "MAX_PARENTS", "AfterSchedule", "parse_after"]

_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A job and its links to its parents are one DynamoDB transaction (at most 100 items): the job,
# its listing, the tenant counter and two items per parent, twice over when a replace moves them,
# and two per calendar use changed; a write over 100 is refused, naming why (422).
MAX_PARENTS = 20
# How many after() jobs a chain holds at most, one after the other: a parent's slot that did not
# run is recorded that far down (punctual.execution.unrun_children), so a deeper chain is refused.
MAX_CHAIN_DEPTH = 16


class AfterSchedule(Schedule):
    """``after(job[, job...])``: fires for slot S when every parent succeeded for S.

    It has no time slots of its own: :meth:`next_after` and :meth:`slots` raise
    :class:`ScheduleError` (rather than return ``None``, which would read as "this job
    is finished").
    """

    kind = "after"

    def __init__(
        self, expression: str, timezone: str, dst: DstOptions | None, parents: tuple[str, ...]
    ) -> None:
        super().__init__(expression, timezone, dst)
        self.parents = parents

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """Always raises: ``after(...)`` jobs fire when their parents succeed."""
        raise ScheduleError("after(...) jobs fire when their parents succeed")

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """Always raises, as :meth:`next_after`."""
        raise ScheduleError("after(...) jobs fire when their parents succeed")


def parse_after(expression: str, body: str, timezone: str, dst: DstOptions | None) -> AfterSchedule:
    parents = tuple(p.strip() for p in body.split(","))
    if parents == ("",):
        raise ScheduleError("after: expected at least one parent job id, e.g. after(extract)")
    if len(parents) > MAX_PARENTS:
        raise ScheduleError(f"after: at most {MAX_PARENTS} parent jobs ({len(parents)} given)")
    seen: set[str] = set()
    for parent in parents:
        if not _JOB_ID.fullmatch(parent):
            raise ScheduleError(f"after: invalid job id '{shorten(parent)}' (use 1-64 of A-Z a-z 0-9 _ -)")
        if parent in seen:
            raise ScheduleError(f"after: job id '{parent}' is listed twice")
        seen.add(parent)
    return AfterSchedule(expression, timezone, dst, parents)
