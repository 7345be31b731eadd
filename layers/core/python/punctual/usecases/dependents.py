"""A job's ``after(...)`` children as they stand: what a delete of their parent must not strand."""

from __future__ import annotations

from punctual.store.base import JobStore, UnreadableJob, UnreadableJobError
from punctual.timing.schedules import ScheduleError, cached_schedule
from punctual.timing.slots import schedule_of


def raw_parents(found: UnreadableJob) -> tuple[str, ...]:
    """The after(...) parents of a job that cannot be read, as far as its schedule parses."""
    try:
        return cached_schedule(
            str(found.doc.get("schedule")), str(found.doc.get("timezone") or "UTC")
        ).parents
    except (ScheduleError, ValueError):
        return ()


def after_children(store: JobStore, tenant: str, job_id: str) -> list[str]:
    """The ``after(...)`` jobs that name ``job_id`` as a parent and exist (a link whose child is
    gone, or no longer names it, does not count; one that cannot be read counts as it names)."""
    children = []
    for child_id in store.list_dependents(tenant, job_id):
        try:
            child = store.get_job(tenant, child_id)
        except UnreadableJobError as found:
            if job_id in raw_parents(found.job):
                children.append(child_id)
            continue
        if child is not None and job_id in schedule_of(child).parents:
            children.append(child_id)
    return children
