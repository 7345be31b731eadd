"""A job as it is read: its ``next_fire_at``, derived from the schedule when read (never written
on every fire), passing over the days of the calendars it excludes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from punctual.models import Job, JobState
from punctual.store.base import JobStore
from punctual.timing.slots import dispatch_instant, next_slot, schedule_of
from punctual.usecases.calendars import Calendar, included_slots


class NextFire:
    """Adds ``next_fire_at`` to jobs read from ``store``, as of ``now()``."""

    def __init__(self, store: JobStore, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    def calendars_of(self, jobs: list[Job]) -> dict[tuple[str, str], Calendar]:
        """The calendars ``jobs`` exclude, read once each."""
        keys = {(job.tenant, name) for job in jobs for name in job.exclude_calendars}
        return self.store.batch_get_calendars(keys) if keys else {}

    def excluded_by(
        self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None
    ) -> list[Calendar]:
        """The calendars ``job`` excludes, as they are now (one missing is left out)."""
        if not job.exclude_calendars:
            return []
        found = calendars if calendars is not None else self.calendars_of([job])
        return [found[key] for key in ((job.tenant, n) for n in job.exclude_calendars) if key in found]

    def of(self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None) -> Job:
        """``next_fire_at`` is derived from the schedule when read, never written on every fire;
        slots on a day of a calendar the job excludes are passed over."""
        nxt: datetime | None = None
        if job.state is JobState.ENABLED and schedule_of(job).kind not in ("after", "delay"):
            excluding = self.excluded_by(job, calendars)
            if excluding:
                found = included_slots(lambda t: next_slot(job, t), self.now(), excluding, 1)
                slot = found[0] if found else None
            else:
                slot = next_slot(job, self.now())
            nxt = dispatch_instant(job, slot) if slot else None
        return job.model_copy(update={"next_fire_at": nxt})
