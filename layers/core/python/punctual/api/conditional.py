"""Conditional requests: ``If-Match`` and ``If-None-Match``.

``PUT /v1/jobs/{id}`` with ``If-None-Match: *`` creates the job at an id the caller chose:
HTTP's conditional create, the job is registered at that id when the tenant has none there,
else the answer is 412 and nothing changes. A caller that derives the id from its own request
(a declared job's CloudFormation provider: stack, logical id and request id) creates exactly one
job however often the request is repeated or retried, crash or not.

``If-Match`` names the version a change expects (a job's or a calendar's, as ``ETag`` gives it),
or a list of them (RFC 9110: the change goes ahead when any of them is the current one).
"""

from __future__ import annotations

from collections.abc import Callable

from punctual.api.if_match import BadIfMatchError, if_match_versions
from punctual.api.problems import ApiProblem
from punctual.api.scheduler.mapping import DEFAULT_GROUP, GROUP_TAG, job_id_of, refreshed_block
from punctual.api.wiring import Services
from punctual.delivery.targets.payload import is_schedule_job
from punctual.models import Job, JobSpec, JobState
from punctual.store.base import JobExistsError, UnreadableJobError
from punctual.usecases.job_errors import JobConflictError, PreconditionFailedError


def must_create(if_none_match: str | None, what: str) -> bool:
    """Whether a ``PUT`` may only create (``If-None-Match: *``); 400 naming the header for any
    other value (``what``: what it creates)."""
    if if_none_match is None:
        return False
    if if_none_match.strip() != "*":
        raise ApiProblem(
            400,
            "invalid-if-none-match",
            "Invalid If-None-Match",
            f'If-None-Match takes "*" only: create the {what} unless one exists',
            [("header.If-None-Match", 'not "*"')],
        )
    return True


def listed_versions(if_match: str | None) -> list[int] | None:
    """The versions ``If-Match`` lists: ``"3"`` (or ``3``, ``W/"3"``), or a comma-separated list of
    them (``"3", "4"``); None when it is absent or ``*`` (no precondition).

    Raises
    ------
    ApiProblem
        400 naming the header when an entry is not a version.
    """
    try:
        return if_match_versions(if_match)
    except BadIfMatchError:
        raise ApiProblem(
            400,
            "invalid-if-match",
            "Invalid If-Match",
            'If-Match must carry a version as returned in ETag, e.g. "3" (or a list of them: "3", "4")',
            [("header.If-Match", "not a version or a list of versions")],
        ) from None


def expected_version(if_match: str | None, current: Callable[[], int | None]) -> int | None:
    """The version a change guarded by ``If-Match`` must find stored (None: no precondition).

    One version: that one. A list: the listed version the resource is at now (``current`` reads
    it; None when there is none), so the change's own conditional write goes ahead only if it is
    still at it; when none is, the first listed, which the change refuses (412; 404 when there is
    no such resource) unless the resource reached that version meanwhile, when it matches.
    """
    versions = listed_versions(if_match)
    if versions is None or len(set(versions)) == 1:
        return None if versions is None else versions[0]
    now = current()
    return now if now in versions else versions[0]


def job_version(services: Services, tenant: str, job_id: str, if_match: str | None) -> int | None:
    """:func:`expected_version` of a change to job ``job_id`` (an unreadable stored job's too)."""

    def current() -> int | None:
        try:
            job = services.store.get_job(tenant, job_id)
        except UnreadableJobError as exc:
            return exc.job.version
        return None if job is None else job.version

    return expected_version(if_match, current)


def calendar_version(services: Services, tenant: str, name: str, if_match: str | None) -> int | None:
    """:func:`expected_version` of a change to calendar ``name``."""

    def current() -> int | None:
        found = services.store.get_calendar(tenant, name)
        return None if found is None else found.version

    return expected_version(if_match, current)


def creating_at_a_version(job_id: str, if_match: str | None) -> None:
    """Refuse an ``If-Match`` beside ``If-None-Match: *`` (a create at ``job_id``): it asks for a
    job at a version, the create that there be none, so both never hold (RFC 9110 13.2.2; QA: it was
    ignored, even ``banana``, and the job created, where a calendar's ``PUT`` answers 412 or 400).

    Raises
    ------
    ApiProblem
        400 naming the header when it is neither versions nor ``*``.
    PreconditionFailedError
        412 when there is one.
    """
    if if_match is None:
        return
    listed_versions(if_match)
    raise PreconditionFailedError(
        f"If-Match asks that job {job_id!r} exist at a version, If-None-Match: * that it not exist: "
        "both cannot hold (leave If-Match out to create it)",
        None,
    )


def create_at(
    services: Services, tenant: str, job_id: str, spec: JobSpec, if_none_match: str, paused: bool = False
) -> tuple[Job, str | None]:
    """Register ``spec`` as ``job_id`` (``paused``: stored paused); return the job and its signing
    secret (shown once).

    Raises
    ------
    ApiProblem
        400 when ``If-None-Match`` is anything but ``*``.
    PreconditionFailedError
        412 when the tenant has a job at ``job_id`` (a deleted one's record included).
    """
    must_create(if_none_match, "job at this id")
    refuse_taken_schedule_name(services, tenant, job_id)
    spec = in_live_group(services, tenant, own_schedule(spec, job_id))
    try:
        return services.jobs.register(tenant, spec, job_id, paused=paused)
    except JobExistsError:
        raise PreconditionFailedError(f"job {job_id!r} exists (If-None-Match: *)", None) from None


def refuse_taken_schedule_name(services: Services, tenant: str, job_id: str) -> None:
    """409 when the schedule ``default/<job_id>`` of the EventBridge Scheduler API exists.

    A job the caller names (``PUT`` with ``If-None-Match: *``, an item of ``POST /v1/job-batches``)
    is the ``default`` group's schedule named by its id, as CreateSchedule refuses a name a /v1 job
    holds. Without this a /v1 job created after that schedule was a second ``default/<id>``, with the
    same ARN, in ListSchedules; GetSchedule, UpdateSchedule and DeleteSchedule reached the first only.
    """
    try:
        held = services.store.get_job(tenant, job_id_of(DEFAULT_GROUP, job_id))
    except UnreadableJobError:  # a schedule's job that cannot be read still holds its name
        raise JobConflictError(_TAKEN.format(job_id=job_id)) from None
    if held is not None and held.state is not JobState.DELETED:
        raise JobConflictError(_TAKEN.format(job_id=job_id))


_TAKEN = (
    "job id {job_id!r} is the name of the schedule default/{job_id} (EventBridge Scheduler API): "
    "a /v1 job at that id would be a second schedule of that name; choose another id or delete the schedule"
)


def own_schedule(spec: JobSpec, job_id: str | None) -> JobSpec:
    """``spec`` without a ``scheduler`` block that is not job ``job_id``'s (None: an id yet to be
    made, which no block names), nor the group tag that came with it.

    The block is an EventBridge schedule's identity (group, name, ARN), held by the one job whose
    id it makes (:func:`job_id_of`). A GET's body of such a job sent to create or replace another
    job (``POST``, a batch item, ``PUT`` at another id: QA21) stored a second job with the same
    identity: ListSchedules listed the schedule twice, a DeleteSchedule left a phantom no call
    reached, and DeleteScheduleGroup deleted the copies, which were /v1 jobs. Read from such a body,
    the block is output (as its ``id`` and ``version`` are), and is left out.

    A job created at an id of a schedule's job's form (``sch-`` and 32 hex digits) must be that
    schedule (its own block): else 409. The id is how a run knows its job is a schedule's, whose
    ``Target.Input`` has only the service's context attributes filled in
    (:func:`punctual.delivery.targets.payload.is_schedule_job`)."""
    owned = _owned(spec, job_id)
    if job_id is not None and owned.scheduler is None and is_schedule_job(job_id):
        # (a schedule's job is known by its id's form: its payload is rendered as the service does)
        raise JobConflictError(
            f"job id {job_id!r} has the form of a schedule's job id (EventBridge Scheduler API:"
            " sch- and 32 hex digits); choose another id"
        )
    return owned


def _owned(spec: JobSpec, job_id: str | None) -> JobSpec:
    """:func:`own_schedule` of a job that exists or may exist (a ``PUT`` replacing it: its own block
    is kept by :func:`keeping_schedule`)."""
    block = spec.scheduler
    if block is None:
        return spec
    if job_id is not None and job_id == job_id_of(block.group, block.name):
        if spec.tags.get(GROUP_TAG) == block.group:
            return spec
        # its group's tag, which lists it in its group, kept whatever tags the body gives (QA21: a
        # GET, tags edited, PUT dropped it: the schedule was left out of its group's list and delete)
        return spec.model_copy(update={"tags": {**spec.tags, GROUP_TAG: block.group}})
    tags = {key: value for key, value in spec.tags.items() if not (key == GROUP_TAG and value == block.group)}
    return spec.model_copy(update={"scheduler": None, "tags": tags})


def in_live_group(services: Services, tenant: str, spec: JobSpec) -> JobSpec:
    """``spec``, when the schedule it is (if any) is in a group that exists and is not being
    deleted; else 409 (QA21: a schedule's GET body PUT back at its id after its group was deleted
    ran, listed, in a group GetSchedule and DeleteSchedule could not find)."""
    block = spec.scheduler
    if block is None or block.group == DEFAULT_GROUP:
        return spec
    group = services.store.get_group(tenant, block.group)
    if group is None or group.state != "ACTIVE":
        raise JobConflictError(
            f"scheduler: the schedule group {block.group!r} does not exist (or is being deleted):"
            " create the group first, or leave the scheduler block out for a plain job"
        )
    return spec


def keeping_schedule(services: Services, tenant: str, job_id: str, spec: JobSpec) -> JobSpec:
    """``spec`` for a ``PUT`` replacing job ``job_id``: a job that is an EventBridge schedule stays
    that schedule (its group, name and ARN; its group's tag, which lists it in its group), unless
    the body says which schedule it is itself (a GET's body sent back does; another job's block is
    left out, :func:`_owned`). The block's copies of ``Target.Arn``, ``Input``, the window
    and a start given at once follow what the replace makes the job do (:func:`refreshed_block`)."""
    spec = _owned(spec, job_id)
    try:
        current = services.store.get_job(tenant, job_id)
    except UnreadableJobError:
        current = None
    block = spec.scheduler
    if block is not None:
        spec = in_live_group(services, tenant, spec)
    elif current is None or current.scheduler is None:
        return spec
    else:
        block = current.scheduler
        spec = spec.model_copy(update={"tags": {**spec.tags, GROUP_TAG: block.group}})
    start_at = current.start_at if current is not None else spec.start_at
    return spec.model_copy(update={"scheduler": refreshed_block(block, spec, start_at)})
