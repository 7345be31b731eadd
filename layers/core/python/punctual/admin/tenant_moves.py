"""Moving a tenant's jobs to another tenant id (issue 16: principal ARN → unique id), by an operator
(like every operator command, outside the Lambda layer).

Built on the job use cases (:class:`punctual.usecases.jobs.JobService`): each job is registered
under the new tenant before it is deleted under the old one.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field, replace

from punctual.api.tenancy import is_tenant_name
from punctual.models import JobState
from punctual.store.base import CalendarVersionError, GroupExistsError, JobStore
from punctual.store.listing import every_item
from punctual.usecases.job_admission import all_jobs
from punctual.usecases.job_errors import InvalidJobError, JobHasDependentsError
from punctual.usecases.jobs import JobService
from punctual.usecases.registration import signs_webhooks


@dataclass
class MoveReport:
    """What :func:`move_jobs` did: moved ids, new webhook secrets, jobs kept and why."""

    moved: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    kept: list[tuple[str, str]] = field(default_factory=list)


def move_jobs(jobs: JobService, from_tenant: str, to_tenant: str) -> MoveReport:
    """Move every job of ``from_tenant`` to ``to_tenant``, keeping each job's id and spec.

    For the change of tenant identity (issue 16: principal ARN → unique id), run once per
    tenant by an operator. Each job is registered under the new tenant (its next slot
    computed afresh; a paused job stays paused) and only then deleted under the old one, so
    a crash half-way leaves a job in both places, never in neither, and running it again
    finishes the move. A job ``to_tenant`` has another of at its id (another spec) is not
    moved: it is kept, with the reason. Webhook jobs get a new signing secret, bound to the new tenant
    (:attr:`MoveReport.secrets`, to hand to the tenant). A job that cannot be registered
    again (a completed one-time job, one with no future slot) stays where it is, with the
    reason in :attr:`MoveReport.kept`. History (executions) stays under the old identity.
    The tenant's schedule groups and exclusion calendars are copied first (those the new tenant
    has no namesake of; the old ones stay), so each job finds its group and its calendars.

    Raises
    ------
    ValueError
        ``to_tenant`` is ``from_tenant`` (each job would be found "there" and then deleted: every
        job lost, reported moved) or no tenant a caller can be (blank, a shell's trailing newline:
        the jobs would be out of every caller's reach). Nothing is written.
    """
    if not is_tenant_name(to_tenant):
        raise ValueError(
            f"to_tenant {to_tenant!r} is no tenant: 1-256 characters of letters, digits and ._:/@+=,- "
            "(an IAM unique id such as AROA3XFRBF535PLBIFPI4); nothing was moved"
        )
    if to_tenant == from_tenant:
        raise ValueError(
            f"to_tenant {to_tenant!r} is from_tenant: its jobs are already there (moving them onto "
            "themselves would delete them); nothing was moved"
        )
    report = MoveReport()
    other_days = _copy_groups_and_calendars(jobs.store, from_tenant, to_tenant)
    pending = True
    while pending:  # again while progress is made: an after() child may precede its parent
        pending = False
        report.kept.clear()
        for job in all_jobs(jobs.store, from_tenant):
            paused = job.state is JobState.PAUSED
            there = jobs.store.get_job(to_tenant, job.id)
            clash = sorted(set(job.exclude_calendars) & other_days)
            if there is None and clash:
                report.kept.append((job.id, f"{to_tenant}'s calendars {clash} have other days; rename one"))
                continue
            if there is None:
                try:  # paused in the same write: no slot of it fires under the new tenant
                    there, secret = jobs.register(to_tenant, job.spec(), job.id, paused=paused)
                except InvalidJobError as exc:
                    report.kept.append((job.id, str(exc)))
                    continue
                if secret is not None:
                    report.secrets[job.id] = secret
            elif there.spec() != job.spec():
                # (QA22: another job of the new tenant at this id was taken for this one's copy, and
                # this one deleted: its spec was lost, and reported moved)
                report.kept.append((job.id, f"{to_tenant} has another job at this id; move or rename one"))
                continue
            elif signs_webhooks(there) and jobs.secrets is not None and job.id not in report.secrets:
                # A copy a crashed move made: its secret was in that run's report only, handed to
                # nobody (QA24: reported none, and every call was signed with it). A new one, the
                # copy's own still signing beside it (the tenant's, if the job was theirs already).
                there, secret = jobs.rotate_secret(to_tenant, job.id, expected_version=there.version)
                if secret is not None:
                    report.secrets[job.id] = secret
            if paused and there.state is JobState.ENABLED:  # (a crash between a copy and its pause)
                jobs.pause(to_tenant, job.id, reason=job.state_reason)
            try:
                jobs.delete(from_tenant, job.id)
            except JobHasDependentsError as exc:
                report.kept.append((job.id, str(exc)))  # its after() children move first: a later pass
                continue
            report.moved.append(job.id)
            pending = True
    return report


def _copy_groups_and_calendars(store: JobStore, from_tenant: str, to_tenant: str) -> set[str]:
    """The tenant's schedule groups and calendars under ``to_tenant`` too (QA22: a moved schedule of
    a group was out of reach of the scheduler API, its group not being the new tenant's; a job
    excluding a calendar was not moved). Returns the names of the calendars ``to_tenant`` has
    with other days: a job excluding one of them is not moved (it would pass over other days)."""
    other_days: set[str] = set()
    for group in every_item(lambda cursor: store.list_groups(from_tenant, 100, cursor)):
        if group.state == "ACTIVE":
            with suppress(GroupExistsError):  # the new tenant's own group of that name
                store.create_group(replace(group, tenant=to_tenant))
    for calendar in every_item(lambda cursor: store.list_calendars(from_tenant, 100, cursor)):
        try:
            store.put_calendar(calendar.model_copy(update={"tenant": to_tenant, "version": 1}), None)
        except CalendarVersionError:  # the new tenant's own calendar of that name
            theirs = store.get_calendar(to_tenant, calendar.name)
            if theirs is None or theirs.spec() != calendar.spec():
                other_days.add(calendar.name)
    return other_days
