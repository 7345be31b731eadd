"""The twelve operations of EventBridge Scheduler, on Punctual's job model and schedule groups.

Each function takes the request (:class:`Request`) and the input :func:`~.model.read_input`
validated against the service model, and returns the operation's output as the service
shapes it. Domain errors are raised and mapped in :mod:`punctual.api.scheduler` (the package).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from punctual.api.problems import ApiProblem
from punctual.api.scheduler.arns import Place
from punctual.api.scheduler.errors import SchedulerError, conflict, invalid, not_found, quota
from punctual.api.scheduler.mapping import (
    DEFAULT_GROUP,
    GROUP_TAG,
    could_be_job_id,
    group_of,
    instant_ms,
    is_named,
    job_id_of,
    keeping_unexpressed,
    name_of,
    schedule_out,
    service_wording,
    spec_of,
    state_of,
    summary_out,
)
from punctual.api.scheduler.model import epoch
from punctual.api.wiring import Services
from punctual.models import Job, JobSpec, JobState
from punctual.store.base import (
    GroupConflictError,
    GroupExistsError,
    JobExistsError,
    ScheduleGroup,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.listing import LIST_SCAN_BUDGET
from punctual.timing.slots import no_slot_reason
from punctual.usecases.job_errors import (
    JobHasDependentsError,
    JobNotFoundError,
    PreconditionFailedError,
    listed,
)
from punctual.usecases.jobs import replaced_anchor, resumed

MAX_GROUPS_PER_TENANT = 500  # the service's quota of schedule groups per account and region
MAX_TAGS_PER_GROUP = 200
RESERVED_TAG_PREFIX = "aws:"  # the service refuses tag keys with it, in any letter case
DEFAULT_MAX_RESULTS = 100
LIST_READ_PAGE = 100  # jobs read from the store per query while filling a ListSchedules page


@dataclass(frozen=True)
class Request:
    """One call: the services, the caller's tenant, and the account and region ARNs name."""

    services: Services
    tenant: str
    place: Place

    def now(self) -> datetime:
        return instant_ms(self.services.jobs.clock.now())


Operation = Callable[[Request, dict[str, Any]], dict[str, Any]]


# --------------------------------------------------------------------------- helpers


def _active_group(req: Request, name: str) -> None:
    """The group exists and is not being deleted (``default`` always exists)."""
    if name == DEFAULT_GROUP:
        return
    group = req.services.store.get_group(req.tenant, name)
    if group is None:
        raise not_found(f"Schedule group {name} does not exist.")
    if group.state != "ACTIVE":
        raise conflict(f"Schedule group {name} is being deleted.")


def _stored_group(req: Request, name: str) -> ScheduleGroup:
    group = req.services.store.get_group(req.tenant, name)
    if group is None:
        raise not_found(f"Schedule group {name} does not exist.")
    return group


def _find(req: Request, group: str, name: str) -> Job:
    """The schedule ``group/name``: its own job, or (``default`` group) a /v1 job named by its id."""
    store = req.services.store
    job = store.get_job(req.tenant, job_id_of(group, name))
    if job is not None and job.state is not JobState.DELETED:
        return job
    if group == DEFAULT_GROUP and could_be_job_id(name):
        job = store.get_job(req.tenant, name)
        if job is not None and job.state is not JobState.DELETED and is_named(job, group, name):
            return job
    raise not_found(f"Schedule {name} does not exist.")


def _v1_job_named(req: Request, name: str) -> bool:
    """Whether a /v1 job (not a schedule's own) has the id ``name``: the default group's schedule
    of that name (:func:`_find`)."""
    if not could_be_job_id(name):
        return False
    try:
        job = req.services.store.get_job(req.tenant, name)
    except UnreadableJobError:
        return True
    return job is not None and job.state is not JobState.DELETED and is_named(job, DEFAULT_GROUP, name)


def _token(req: Request, route: str, filters: dict[str, object], token: str | None) -> tuple[str, str | None]:
    scope = req.services.tokens.scope(req.tenant, f"scheduler:{route}", filters)
    try:
        return scope, req.services.tokens.decode(token, scope)
    except ApiProblem as exc:
        raise invalid(f"NextToken: {exc.detail}") from None


def _later(previous: datetime, now: datetime) -> datetime:
    """An ``updated_at`` after ``previous`` (it is the version a group's writes are conditional on)."""
    return max(now, previous + timedelta(milliseconds=1))


# --------------------------------------------------------------------------- schedules


def create_schedule(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    group = values.get("GroupName") or DEFAULT_GROUP
    name = values["Name"]
    _active_group(req, group)
    arn = req.place.schedule_arn(group, name)
    spec = spec_of(values, group, arn, req.services.jobs.clock.now())
    job_id = job_id_of(group, name)
    jobs = req.services.jobs
    if group == DEFAULT_GROUP and _v1_job_named(req, name):
        # A /v1 job is the default group's schedule named by its id: the name is taken (two
        # schedules of one ARN, and a delete of one would remove the other).
        raise conflict(f"Schedule {name} already exists.")
    try:
        jobs.register(req.tenant, spec, job_id, paused=values.get("State") == "DISABLED")
    except JobExistsError:
        existing = req.services.store.get_job(req.tenant, job_id)
        token = values.get("ClientToken")
        if existing and token and existing.scheduler and existing.scheduler.client_token == token:
            return {"ScheduleArn": arn}  # a retried request: the same answer
        raise conflict(f"Schedule {name} already exists.") from None
    if group != DEFAULT_GROUP:
        # A group deleted meanwhile listed its schedules before this one existed: take it back.
        current = req.services.store.get_group(req.tenant, group)
        if current is None or current.state != "ACTIVE":
            with suppress(JobNotFoundError):
                jobs.delete(req.tenant, job_id)
            raise conflict(f"Schedule group {group} was deleted meanwhile.")
    return {"ScheduleArn": arn}


def _existing(req: Request, values: dict[str, Any]) -> tuple[str, str, Job]:
    """Group, name and job of the schedule an input names (its group may be being deleted)."""
    group = values.get("GroupName") or DEFAULT_GROUP
    name = values["Name"]
    if group != DEFAULT_GROUP:
        _stored_group(req, group)
    return group, name, _find(req, group, name)


def get_schedule(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    group, name, job = _existing(req, values)
    return schedule_out(job, req.place.schedule_arn(group, name))


def update_schedule(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    group = values.get("GroupName") or DEFAULT_GROUP
    name = values["Name"]
    _active_group(req, group)
    job = _find(req, group, name)
    arn = req.place.schedule_arn(group, name)
    now = req.services.jobs.clock.now()
    spec = keeping_unexpressed(job, spec_of(values, group, arn, now, updated=job))
    disabled = values.get("State") == "DISABLED"
    spec = _keeping_rate_start(job, spec, values, disabled)
    if not disabled and job.state is JobState.PAUSED:
        _check_enabled_runs(req, job, spec, now)
    paused: Job | None = None
    if disabled and job.state is JobState.ENABLED:
        # Paused first: a replace that then fails (throttled) leaves the schedule disabled with its
        # old spec, never enabled with the new one (QA24: the pause, second, was throttled, and the
        # schedule the caller disabled ran on, changed). The replace keeps it paused.
        paused = req.services.jobs.pause(req.tenant, job.id, expected_version=job.version)
    try:
        # A COMPLETED job, which cannot be paused first, is written paused by the replace itself
        # (QA29: enabled with the new spec, then paused: a throttled pause left it to run)
        completed = disabled and job.state is JobState.COMPLETED
        updated = req.services.jobs.replace(req.tenant, job.id, spec, paused=completed)
    except Exception:
        if paused is not None:
            _undo_pause(req, paused)
        raise
    _set_state(req, updated, spec, disabled)
    return {"ScheduleArn": arn}


def _undo_pause(req: Request, paused: Job) -> None:
    """Enable again the job a disabling update paused when its replace then failed: a refused update
    changes nothing (QA26: an expression refused as invalid left the schedule DISABLED for good, and
    the caller, told the update failed, had no reason to look). Only while nothing else wrote it since
    (its version); a failure here leaves it disabled with its old spec, as a throttled replace may."""
    with suppress(Exception):
        req.services.jobs.resume(req.tenant, paused.id, expected_version=paused.version)


STATE_TRIES = 3


def _set_state(req: Request, updated: Job, spec: JobSpec, disabled: bool) -> None:
    """Pause or resume the job just replaced to the update's ``State``, as of its version: a write
    that landed between the two (QA23: a concurrent UpdateSchedule's) is read, and when it is
    another update's spec that one is the newer and its State stands (the last writer wins whole,
    as the service's update is one write); otherwise (an edit of the job's own, a pause by its
    target) the State is applied to what is there."""
    jobs, job = req.services.jobs, updated
    for _ in range(STATE_TRIES):
        try:
            if disabled and job.state is JobState.ENABLED:
                jobs.pause(req.tenant, job.id, expected_version=job.version)
            elif not disabled and job.state is JobState.PAUSED:
                jobs.resume(req.tenant, job.id, expected_version=job.version)
            return
        except (PreconditionFailedError, VersionConflictError):
            job = jobs.get(req.tenant, job.id)
            if job.spec() != updated.spec():
                return  # another update replaced it since: it is the newer, its State included
    raise conflict("The schedule kept changing while it was updated; try again.")


def _keeping_rate_start(job: Job, spec: JobSpec, values: dict[str, Any], disabled: bool) -> JobSpec:
    """A ``rate()`` schedule without ``StartDate`` starts at once when created; an update that
    keeps its expression and zone keeps that start, so its slots stay where they were (QA: every
    update started it again at once: an identical update, re-applied by a deploy pipeline, ran
    the target an extra time). Re-enabling a DISABLED one still starts it at once, as its create
    did: the slots it missed while disabled are not run. A job without ``start_at`` (a ``/v1``
    rate job) keeps counting from its registration (QA23: GetSchedule's answer sent back started
    it at once: one more run, and its slots moved)."""
    if values.get("StartDate") is not None or spec.scheduler is None or not spec.scheduler.started_at_once:
        return spec  # (not a rate schedule started at once)
    if job.state is JobState.PAUSED and not disabled:
        return spec
    if (spec.schedule, spec.timezone) != (job.schedule, job.timezone):
        return spec
    if job.start_at is None:  # its slots count from its anchor, which the replace keeps
        return spec.model_copy(update={"start_at": None})
    if job.scheduler is None or not job.scheduler.started_at_once:
        return spec  # its start was given: an update without one starts it at once, as a create
    if spec.end_at is not None and spec.end_at <= job.start_at:
        return spec
    return spec.model_copy(update={"start_at": job.start_at})


def _check_enabled_runs(req: Request, job: Job, spec: JobSpec, now: datetime) -> None:
    """An update that enables a DISABLED schedule must leave it a slot to run, as a create must
    (QA: a one-time schedule whose time passed while it was DISABLED was taken, showed ENABLED,
    and never ran, nor was it deleted with ``ActionAfterCompletion: DELETE``). Its EndDate passed is
    so too, whatever its slots owed (review of QA30: an ended schedule disabled before its EndDate
    was enabled, and its resume recorded every slot of the disabled period MISSED)."""
    if spec.end_at is not None and spec.end_at <= now:
        raise invalid(
            "EndDate is not in the future: the schedule would never run; it did not run while DISABLED"
        )
    # The spec's fields as they are (models, not dumped dicts: a DST policy dumped broke the
    # schedule's parse, and a cron schedule's enable was a 500 in review)
    fields = {name: getattr(spec, name) for name in type(spec).model_fields}
    candidate = job.model_copy(update={**fields, "anchor": replaced_anchor(job, spec, now)})
    enabled, _ = resumed(candidate, now, req.services.jobs.layout)
    if enabled.state is JobState.COMPLETED:
        reason = service_wording(no_slot_reason(candidate, now))  # (EndDate, not end_at)
        raise invalid(f"{reason}; it did not run while DISABLED")


def delete_schedule(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    _, name, job = _existing(req, values)
    try:
        req.services.jobs.delete(req.tenant, job.id)
    except JobNotFoundError:
        raise not_found(f"Schedule {name} does not exist.") from None
    except JobHasDependentsError as exc:
        raise conflict(f"Schedule {name} cannot be deleted: {_dependents(req, exc.children)}") from None
    return {}


def _dependents(req: Request, children: list[str]) -> str:
    """Which schedules (group/name; a /v1 job by its id) name the refused one in after(...)."""
    shown = []
    for child_id in children[:20]:
        try:
            child = req.services.store.get_job(req.tenant, child_id)
        except UnreadableJobError:
            child = None
        shown.append(f"{group_of(child)}/{name_of(child)}" if child is not None else child_id)
    names = shown + children[20:]  # (only the first 20 are named: the rest are counted)
    return (
        f"schedules {listed(names)} run after it (after(...)): delete them or change their expressions first"
    )


def list_schedules(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    """A full page of the schedules that pass the filters, as the service answers.

    The store filters by group (a tag) only; name prefix, state and deleted jobs are filtered
    here, so the store is read until the page is full. A page stops short (with a NextToken)
    only when :data:`LIST_SCAN_BUDGET` jobs were examined for it: a prefix no name has never
    turns one request into a read of every job of the tenant.
    """
    group: str | None = values.get("GroupName")
    prefix: str = values.get("NamePrefix") or ""
    state: str | None = values.get("State")
    limit: int = values.get("MaxResults") or DEFAULT_MAX_RESULTS
    if group is not None and group != DEFAULT_GROUP:
        _stored_group(req, group)
    scope, cursor = _token(
        req, "schedules", {"group": group, "prefix": prefix or None, "state": state}, values.get("NextToken")
    )
    tag = f"{GROUP_TAG}={group}" if group is not None and group != DEFAULT_GROUP else None

    def wanted(job: Job) -> bool:
        return (
            job.state is not JobState.DELETED
            and (group is None or group_of(job) == group)
            and name_of(job).startswith(prefix)
            and (state is None or state_of(job) == state)
        )

    listed: list[dict[str, Any]] = []
    examined = 0
    while True:
        page = req.services.store.list_jobs(req.tenant, LIST_READ_PAGE, cursor, None, tag)
        examined += page.examined
        matches = [job for job in page.items if wanted(job)]
        taken = matches[: limit - len(listed)]
        listed += [summary_out(job, req.place.schedule_arn(group_of(job), name_of(job))) for job in taken]
        if len(listed) == limit:
            # Full: resume after the last job listed (the listing is ordered by id), if any follows.
            more = len(taken) < len(matches) or page.cursor is not None
            cursor = taken[-1].id if more else None
            break
        cursor = page.cursor
        if cursor is None or examined >= LIST_SCAN_BUDGET:
            break
    out: dict[str, Any] = {"Schedules": listed}
    token = req.services.tokens.encode(cursor, scope)
    if token:
        out["NextToken"] = token
    return out


# --------------------------------------------------------------------------- groups


def _group_out(req: Request, group: ScheduleGroup | None, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"Arn": req.place.group_arn(name), "Name": name, "State": "ACTIVE"}
    if group is not None:
        out.update(
            State=group.state,
            CreationDate=epoch(group.created_at),
            LastModificationDate=epoch(group.updated_at),
        )
    return out


def create_schedule_group(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    name = values["Name"]
    if name == DEFAULT_GROUP:
        raise conflict(f"Schedule group {name} already exists.")
    store = req.services.store
    if len(store.list_groups(req.tenant, MAX_GROUPS_PER_TENANT).items) >= MAX_GROUPS_PER_TENANT - 1:
        raise quota(f"Your account has the most schedule groups it may have ({MAX_GROUPS_PER_TENANT}).")
    now = req.now()
    tags = _tags(values.get("Tags") or [])
    token = values.get("ClientToken")
    try:
        store.create_group(ScheduleGroup(req.tenant, name, now, now, "ACTIVE", tags, token))
    except GroupExistsError:
        existing = store.get_group(req.tenant, name)
        if existing is None or not token or existing.client_token != token:
            raise conflict(f"Schedule group {name} already exists.") from None
    return {"ScheduleGroupArn": req.place.group_arn(name)}


def get_schedule_group(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    name = values["Name"]
    if name == DEFAULT_GROUP:
        return _group_out(req, None, name)
    return _group_out(req, _stored_group(req, name), name)


def list_schedule_groups(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    prefix: str = values.get("NamePrefix") or ""
    limit: int = values.get("MaxResults") or DEFAULT_MAX_RESULTS
    scope, cursor = _token(req, "schedule-groups", {"prefix": prefix or None}, values.get("NextToken"))
    page = req.services.store.list_groups(req.tenant, limit, cursor, prefix or None)
    rows: list[tuple[str, ScheduleGroup | None]] = [(group.name, group) for group in page.items]
    # The implicit default group takes its place in name order.
    after_cursor = cursor is None or cursor < DEFAULT_GROUP
    before_next = page.cursor is None or page.cursor >= DEFAULT_GROUP
    if DEFAULT_GROUP.startswith(prefix) and after_cursor and before_next:
        rows.append((DEFAULT_GROUP, None))
        rows.sort(key=lambda row: row[0])
    more = page.cursor is not None or len(rows) > limit
    rows = rows[:limit]
    out: dict[str, Any] = {"ScheduleGroups": [_group_out(req, group, name) for name, group in rows]}
    token = req.services.tokens.encode(rows[-1][0] if more and rows else None, scope)
    if token:
        out["NextToken"] = token
    return out


def _members(req: Request, group: str) -> list[Job]:
    """The schedules of ``group`` (jobs its tag lists that are its schedules)."""
    members: list[Job] = []
    cursor: str | None = None
    while True:
        page = req.services.store.list_jobs(req.tenant, 100, cursor, None, f"{GROUP_TAG}={group}")
        members.extend(j for j in page.items if group_of(j) == group and j.state is not JobState.DELETED)
        if page.cursor is None:
            return members
        cursor = page.cursor


def delete_schedule_group(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    """Mark the group DELETING, delete its schedules, then the group (a retry finishes a crash's work)."""
    name = values["Name"]
    if name == DEFAULT_GROUP:
        raise invalid("The default schedule group cannot be deleted.")
    store = req.services.store
    group = _stored_group(req, name)
    members = _members(req, name)
    # A schedule of the group that a job outside it runs after: refused before anything is deleted
    # (QA21: the group's other schedules were deleted first, and the group left DELETING)
    inside = {job.id for job in members}
    for job in members:  # (a query each: a listing's job may not carry its dependents count)
        outside = [c for c in store.list_dependents(req.tenant, job.id) if c not in inside]
        if outside:
            raise conflict(f"Schedule group {name} cannot be deleted: {_dependents(req, outside)}")
    if group.state == "ACTIVE":
        deleting = replace(group, state="DELETING", updated_at=_later(group.updated_at, req.now()))
        try:
            store.update_group(deleting, group.updated_at)
        except GroupConflictError:
            raise conflict(f"Schedule group {name} changed meanwhile; try again.") from None
    members = _members(req, name)  # (again: one created before the group was DELETING)
    reason = ""
    ids = [job.id for job in members]
    while ids:  # an after(...) child goes before its parent: passes while they make progress
        refused: list[str] = []
        for job_id in ids:
            try:
                req.services.jobs.delete(req.tenant, job_id)
            except JobNotFoundError:
                pass
            except JobHasDependentsError as exc:
                refused.append(job_id)
                reason = _dependents(req, exc.children)
        if len(refused) == len(ids):
            raise conflict(f"Schedule group {name} cannot be deleted: {reason}")
        ids = refused
    store.delete_group(req.tenant, name)
    return {}


# --------------------------------------------------------------------------- tags


def _tagged_group(req: Request, arn: str) -> str:
    name = req.place.group_of(arn)
    if name is None:
        raise not_found(f"Resource {arn[:300]} does not exist.")
    return name


def _tags(given: list[dict[str, str]]) -> dict[str, str]:
    """The ``Tags`` of CreateScheduleGroup or TagResource; a key with the reserved ``aws:`` prefix
    (any letter case) is refused, as the service does (UntagResource may still remove one)."""
    for tag in given:
        if tag["Key"].lower().startswith(RESERVED_TAG_PREFIX):
            raise invalid(
                f"Tag key {tag['Key'][:128]!r} is not allowed: the prefix aws: is reserved for AWS use"
            )
    return {tag["Key"]: tag["Value"] for tag in given}


def list_tags_for_resource(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    name = _tagged_group(req, values["ResourceArn"])
    if name == DEFAULT_GROUP:
        return {"Tags": []}
    group = _stored_group(req, name)
    return {"Tags": [{"Key": key, "Value": value} for key, value in sorted(group.tags.items())]}


def _retag(req: Request, arn: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, Any]:
    name = _tagged_group(req, arn)
    if name == DEFAULT_GROUP:
        raise invalid("The default schedule group cannot be tagged.")
    group = _stored_group(req, name)
    tags = change(dict(group.tags))
    if len(tags) > MAX_TAGS_PER_GROUP:
        raise invalid(f"A schedule group may have at most {MAX_TAGS_PER_GROUP} tags.")
    changed = replace(group, tags=tags, updated_at=_later(group.updated_at, req.now()))
    try:
        req.services.store.update_group(changed, group.updated_at)
    except GroupConflictError:
        raise conflict(f"Schedule group {name} changed meanwhile; try again.") from None
    return {}


def tag_resource(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    added = _tags(values["Tags"])
    return _retag(req, values["ResourceArn"], lambda tags: {**tags, **added})


def untag_resource(req: Request, values: dict[str, Any]) -> dict[str, Any]:
    removed = set(values["TagKeys"])
    return _retag(
        req, values["ResourceArn"], lambda tags: {k: v for k, v in tags.items() if k not in removed}
    )


OPERATIONS: dict[str, Operation] = {
    "CreateSchedule": create_schedule,
    "GetSchedule": get_schedule,
    "UpdateSchedule": update_schedule,
    "DeleteSchedule": delete_schedule,
    "ListSchedules": list_schedules,
    "CreateScheduleGroup": create_schedule_group,
    "GetScheduleGroup": get_schedule_group,
    "DeleteScheduleGroup": delete_schedule_group,
    "ListScheduleGroups": list_schedule_groups,
    "TagResource": tag_resource,
    "UntagResource": untag_resource,
    "ListTagsForResource": list_tags_for_resource,
}

__all__ = ["OPERATIONS", "Request", "SchedulerError"]
