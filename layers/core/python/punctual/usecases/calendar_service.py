"""Use cases behind ``/v1/calendars``: put (create or replace), get, list, delete.

Every change is a version-checked conditional write, and the version grows by one per change
(the release path names the version an EXCLUDED slot was decided on). A calendar that jobs
exclude is not deleted: the store refuses it while a job is recorded as its user (every job
write records its uses in its own transaction), and the answer names the jobs. A recorded user
whose job is gone or no longer names the calendar (written before job writes carried their uses)
is removed here, conditionally on that job being unchanged, then the delete is tried again.
"""

from __future__ import annotations

from dataclasses import dataclass

from punctual.runtime.clock import Clock
from punctual.store.base import (
    CalendarInUseError,
    CalendarVersionError,
    JobStore,
    Page,
    UnreadableJobError,
)
from punctual.usecases.calendars import Calendar, CalendarSpec
from punctual.usecases.job_errors import JobConflictError, JobNotFoundError, PreconditionFailedError


class CalendarNotFound(JobNotFoundError):
    """No calendar of that name (404)."""


class CalendarInUse(JobConflictError):
    """Jobs exclude the calendar (409, naming them)."""

    def __init__(self, message: str, jobs: list[str]) -> None:
        super().__init__(message)
        self.jobs = jobs


@dataclass
class CalendarService:
    """The calendar use cases of one deployment.

    Parameters
    ----------
    store
        Where calendars (and the jobs that use them) are.
    clock
        The only source of ``now``.
    """

    store: JobStore
    clock: Clock

    def put(
        self,
        tenant: str,
        name: str,
        spec: CalendarSpec,
        expected_version: int | None = None,
        create_only: bool = False,
        replace_only: bool = False,
    ) -> tuple[Calendar, bool]:
        """Create or replace ``name``; returns the calendar and whether it was created.

        With ``expected_version`` the stored calendar must be at it, with ``create_only`` there
        must be none, with ``replace_only`` (``If-Match: *``) there must be one (412 otherwise; a
        create racing another is a 409, as its write finds it).
        """
        now = self.clock.now()
        current = self.store.get_calendar(tenant, name)
        if replace_only and current is None:
            # RFC 9110 13.1.1: If-Match: * is false when there is no current representation (QA: created)
            raise PreconditionFailedError(f"calendar {name!r} does not exist (If-Match: *)", None)
        if expected_version is not None and current is None:
            raise PreconditionFailedError(
                f"calendar {name!r} does not exist, so it is not at version {expected_version}"
                " (leave If-Match out to create it)",
                None,
            )
        if create_only and current is not None:
            raise PreconditionFailedError(f"calendar {name!r} exists (If-None-Match: *)", current.version)
        if expected_version is not None and current is not None and current.version != expected_version:
            raise PreconditionFailedError(
                f"calendar {name!r} is at version {current.version}, not {expected_version}", current.version
            )
        calendar = Calendar(
            **spec.model_dump(),
            name=name,
            tenant=tenant,
            version=(current.version + 1) if current else 1,
            created_at=current.created_at if current else now,
            updated_at=now,
        )
        try:
            self.store.put_calendar(calendar, current.version if current else None)
        except CalendarVersionError as exc:
            now_at = "deleted" if exc.current_version is None else f"now version {exc.current_version}"
            raise JobConflictError(
                f"calendar {name!r} changed meanwhile ({now_at}); read it and try again"
            ) from exc
        return calendar, current is None

    def get(self, tenant: str, name: str) -> Calendar:
        found = self.store.get_calendar(tenant, name)
        if found is None:
            raise CalendarNotFound(f"calendar {name!r} not found")
        return found

    def list_calendars(self, tenant: str, limit: int, cursor: str | None = None) -> Page[Calendar]:
        return self.store.list_calendars(tenant, limit, cursor)

    def delete(self, tenant: str, name: str, expected_version: int | None = None) -> None:
        """Delete ``name`` unless jobs exclude it (409 naming them)."""
        for _ in range(2):
            try:
                self.store.delete_calendar(tenant, name, expected_version)
                return
            except CalendarVersionError as exc:
                if exc.current_version is None:
                    raise CalendarNotFound(f"calendar {name!r} not found") from exc
                raise PreconditionFailedError(
                    f"calendar {name!r} is at version {exc.current_version}, not {expected_version}",
                    exc.current_version,
                ) from exc
            except CalendarInUseError as exc:
                users = self._real_users(tenant, name, exc.jobs)
                if users:
                    raise CalendarInUse(str(CalendarInUseError(name, users)), users) from exc
        raise JobConflictError(f"calendar {name!r} changed meanwhile; try again")

    def _real_users(self, tenant: str, name: str, recorded: list[str]) -> list[str]:
        """Of the recorded users, the jobs that exist and name the calendar. A record whose job is
        gone or no longer names it (left by a write from before job writes carried their uses)
        is removed, conditionally on the job being still as read: a job written meanwhile keeps
        its use (and the delete is refused)."""
        real: list[str] = []
        for job_id in recorded:
            try:
                job = self.store.get_job(tenant, job_id)
            except UnreadableJobError:
                real.append(job_id)  # cannot tell: keep it (fixing the job settles it)
                continue
            if job is not None and name in job.exclude_calendars:
                real.append(job_id)
            elif not self.store.drop_calendar_user(tenant, name, job_id, job.version if job else None):
                real.append(job_id)  # changed meanwhile: it may use the calendar now
        return real
