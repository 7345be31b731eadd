"""The REST API: Powertools' resolver with one function per route.

Routes read the caller's tenant, call a job use case (:class:`~punctual.usecases.jobs.JobService`)
or the store (execution history), and shape the reply. Errors are raised, never
answered here: :mod:`punctual.api.problems` maps them. Request and response bodies are
validated against the models (``enable_validation``), which also produce the OpenAPI
document served at ``/v1/openapi.json`` and committed as ``openapi.json``.
"""

import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import quote, unquote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.models import Server
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from punctual.api import batch, idempotent, problems, schedule_routes
from punctual.api.conditional import (
    calendar_version,
    create_at,
    creating_at_a_version,
    job_version,
    keeping_schedule,
    must_create,
    own_schedule,
)
from punctual.api.history import SINCE, UNTIL, window_of, window_page
from punctual.api.openapi_doc import SIGV4, finished_document
from punctual.api.paging import within_reply
from punctual.api.path_params import JOB_ID_RE, backfill_id_of, calendar_name_of, job_id_of
from punctual.api.problems import Problem
from punctual.api.resolver import PunctualResolver, base_url
from punctual.api.schemas import (
    AlertList,
    AlertOut,
    BackfillOut,
    BackfillRequest,
    CalendarInput,
    CalendarOut,
    CalendarPage,
    ExecutionOut,
    ExecutionPage,
    JobCreated,
    JobInput,
    JobOut,
    JobPage,
    ListedState,
    TriggerAccepted,
    UnreadableJobOut,
)
from punctual.api.tenancy import tenant_of
from punctual.api.wiring import services
from punctual.execution.records import covering_range, slot_of_range
from punctual.models import (
    CALENDAR_NAME_RULE,
    Execution,
    ExecutionStatus,
    Job,
    JobState,
)
from punctual.store.base import UnreadableJobError
from punctual.store.listing import tag_filter_refusal
from punctual.timing.timers import MANUAL_MARK, is_slot_key, slot_key_of
from punctual.usecases.job_errors import JobNotFoundError

API_TITLE = "Punctual"
API_VERSION = "1.0.0"
MAX_PAGE = 100
MAX_PREVIEW = 100

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="Makes a retried request safe: the same key answers the first request's reply.",
    ),
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        max_length=64,
        description=(
            'The version the change expects, as ETag gives it: "3" (or 3, W/"3"; * for any), or a list'
            ' ("3", "4": any of them).'
        ),
        examples=['"3"'],
    ),
]
IfNoneMatch = Annotated[
    str | None,
    Header(alias="If-None-Match", max_length=8, description='"*": create the job at this id (412 if any).'),
]
CalendarIfNoneMatch = Annotated[
    str | None,
    Header(
        alias="If-None-Match", max_length=8, description='"*": create the calendar only (412 if it exists).'
    ),
]
JobId = Annotated[
    str,
    Path(
        description="The job's id, as POST /v1/jobs answered it.",
        examples=["3f2a9c0e5b7d4e1f8a6b2c9d0e1f2a3b"],
    ),
]
SlotKey = Annotated[
    str,
    Path(
        description=(
            "The slot key, URL-encoded (2026-11-30T09%3A32%3A00Z); its instant in another RFC 3339"
            " form names it too (2026-11-30T10%3A32%3A00%2B01%3A00, 2026-11-30T09%3A32%3A00.000Z)."
        ),
        examples=["2026-11-30T09%3A32%3A00Z"],
    ),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size, 1-100.")]
NextToken = Annotated[
    # No max_length here: a token that is too long is a 400 like any other token it did not issue
    # (api/paging.py), not the validator's 422.
    str | None, Query(description="The next_token of the previous page (opaque; at most 2,048 characters).")
]


app = PunctualResolver(
    enable_validation=True, response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR
)
problems.install(app)


def _problem(*statuses: int) -> dict[int, OpenAPIResponse]:
    return {
        status: {
            "description": HTTPStatus(status).phrase,
            "content": {problems.PROBLEM_JSON: {"model": Problem}},
        }
        for status in statuses
    }


def _ok(status: int, description: str, model: Any, *errors: int) -> dict[int, OpenAPIResponse]:
    success: dict[int, OpenAPIResponse] = {
        status: {"description": description, "content": {"application/json": {"model": model}}}
    }
    return {**success, **_problem(*errors)}


def _tenant() -> str:
    """The caller's tenant, counted against its per-minute request quota (429 beyond it)."""
    svc = services()
    tenant = tenant_of(app.current_event.raw_event, svc.settings.local_mode)
    svc.admit(tenant)
    return tenant


def _location(*segments: str) -> str:
    """The absolute URL of a resource, as the caller reaches this API (stage included)."""
    return base_url(app.current_event.raw_event) + "/v1/" + "/".join(quote(s, safe="") for s in segments)


def _job_reply(
    job: JobOut | UnreadableJobOut, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=job,
        headers={"ETag": f'"{job.version}"', **(headers or {})},
    )


# --------------------------------------------------------------------------- jobs

batch.register(app, _ok, _tenant)  # POST /v1/job-batches (punctual.api.batch)


@app.post(
    "/v1/jobs",
    summary="Register a job",
    description=(
        "Returns 201 with the job; an HTTP target's signing secret is in this reply only. With "
        "state PAUSED in the body the job is stored paused (nothing fires until it is resumed)."
    ),
    responses=_ok(201, "The job was registered", JobCreated, 400, 401, 409, 413, 415, 422),
    tags=["jobs"],
    operation_id="createJob",
)
def create_job(body: JobInput, idempotency_key: IdempotencyKey = None) -> Response[JobCreated]:
    tenant = _tenant()
    svc = services()
    spec = own_schedule(body.spec(), None)  # (a new id: no schedule's)
    svc.check_spec(spec)
    job, secret = idempotent.create_job(
        svc, tenant, spec, idempotency_key, app.lambda_context, paused=body.paused
    )
    created = JobCreated.made(job, secret)
    return _job_reply(created, 201, {"Location": _location("jobs", job.id)})


@app.get(
    "/v1/jobs",
    summary="List jobs",
    description="The caller's jobs ordered by id, filtered by state and tag (key or key=value).",
    responses=_ok(200, "A page of jobs", JobPage, 400, 401, 422),
    tags=["jobs"],
    operation_id="listJobs",
)
def list_jobs(
    state: Annotated[
        ListedState | None, Query(description="Only jobs in this state (deleted jobs are not listed).")
    ] = None,
    tag: Annotated[str | None, Query(max_length=400, description="key, or key=value")] = None,
    limit: Limit = 50,
    next_token: NextToken = None,
) -> JobPage:
    tenant = _tenant()
    # A filter no job's tag can match is a typo, not an empty listing (QA28: 200, no job); an empty
    # one too, not the whole listing (QA31: ?tag= listed every job, unfiltered)
    if tag is not None and (refusal := tag_filter_refusal(tag)):
        raise problems.invalid("tag", f"tag must be key or key=value; {tag!r} {refusal}")
    svc = services()
    scope = svc.tokens.scope(tenant, "jobs", {"state": state, "tag": tag or None})
    cursor = svc.tokens.decode(next_token, scope)
    page = svc.jobs.list_jobs(tenant, limit, cursor, JobState(state) if state else None, tag or None)
    items: list[JobOut | UnreadableJobOut] = [JobOut.of(job) for job in page.items]
    items += [UnreadableJobOut.of(job) for job in page.unreadable]
    kept, cursor = within_reply(sorted(items, key=lambda job: job.id), page.cursor, lambda job: job.id)
    return JobPage(items=kept, next_token=svc.tokens.encode(cursor, scope))


@app.get(
    "/v1/jobs/<job_id>",
    summary="Get a job",
    description=(
        "The job with its version in ETag. A stored job this version cannot read is answered as "
        "UnreadableJobOut (unreadable: true, with the reason): replace or delete it."
    ),
    responses=_ok(200, "The job", JobOut | UnreadableJobOut, 401, 404),
    tags=["jobs"],
    operation_id="getJob",
)
def get_job(job_id: JobId) -> Response[JobOut | UnreadableJobOut]:
    tenant, job = _tenant(), job_id_of(job_id)
    try:
        return _job_reply(JobOut.of(services().jobs.get(tenant, job)))
    except UnreadableJobError as exc:
        return _job_reply(UnreadableJobOut.of(exc.job))


@app.put(
    "/v1/jobs/<job_id>",
    summary="Replace a job's spec",
    description=(
        "The body is a whole spec; a job as GET returns it may be sent back edited (its output-only "
        "fields are ignored). With If-Match, the job must still be at that version (else 412). A "
        "stored job that cannot be read is fixed this way. With If-None-Match: *, the job is created "
        "at this id (201) unless one exists (412)."
    ),
    responses={
        **_ok(
            200,
            "The job, at its new version (with signing_secret, once, when it made the job's first secret)",
            JobOut | JobCreated,
            *(400, 401, 404, 409, 412, 413, 415, 422),
        ),
        **_ok(201, "The job was created at this id (If-None-Match: *)", JobCreated),
    },
    tags=["jobs"],
    operation_id="replaceJob",
)
def replace_job(
    job_id: JobId, body: JobInput, if_match: IfMatch = None, if_none_match: IfNoneMatch = None
) -> Response[JobCreated | JobOut]:  # JobCreated first: a created job's reply keeps its signing_secret
    tenant = _tenant()
    svc = services()
    spec = body.spec()
    svc.check_spec(spec)
    if if_none_match is not None:
        if not JOB_ID_RE.match(unquote(job_id)):  # a job to create here: the id is the input at fault
            raise problems.invalid(
                "path.job_id", "job id must be 1-64 characters of letters, digits, '-' and '_'"
            )
        must_create(if_none_match, "job at this id")  # (its 400 first)
        creating_at_a_version(job_id_of(job_id), if_match)
        job, secret = create_at(svc, tenant, job_id_of(job_id), spec, if_none_match, paused=body.paused)
        created = JobCreated.made(job, secret)
        return _job_reply(created, 201, {"Location": _location("jobs", job.id)})
    expected = job_version(svc, tenant, job_id_of(job_id), if_match)
    spec = keeping_schedule(svc, tenant, job_id_of(job_id), spec)
    job, secret = svc.jobs.replace_made(tenant, job_id_of(job_id), spec, expected)
    # a webhook's first secret, once: then the reply is a created job's (else the job, as before)
    return _job_reply(JobCreated.made(job, secret) if secret else JobOut.of(job))


@app.delete(
    "/v1/jobs/<job_id>",
    summary="Delete a job",
    description=(
        "No slot fires after this; its history stays readable (marked job_deleted) until it expires. "
        "With If-Match, the job must still be at that version (else 412). A parent that after(...) jobs "
        "name is not deleted (409 naming them): delete or change them first."
    ),
    responses={204: {"description": "Deleted"}, **_problem(400, 401, 404, 409, 412)},
    tags=["jobs"],
    operation_id="deleteJob",
)
def delete_job(job_id: JobId, if_match: IfMatch = None) -> Response[None]:
    tenant = _tenant()
    svc = services()
    svc.jobs.delete(tenant, job_id_of(job_id), job_version(svc, tenant, job_id_of(job_id), if_match))
    return Response(status_code=204, content_type=None, body=None)


@app.post(
    "/v1/jobs/<job_id>/pause",
    summary="Pause a job",
    description="No slot fires while paused; pausing a paused job changes nothing.",
    responses=_ok(200, "The paused job", JobOut, 400, 401, 404, 409, 412),
    tags=["jobs"],
    operation_id="pauseJob",
)
def pause_job(job_id: JobId, if_match: IfMatch = None) -> Response[JobOut]:
    tenant = _tenant()
    expected = job_version(services(), tenant, job_id_of(job_id), if_match)
    return _job_reply(JobOut.of(services().jobs.pause(tenant, job_id_of(job_id), expected)))


@app.post(
    "/v1/jobs/<job_id>/resume",
    summary="Resume a paused job",
    description="Slots missed while paused follow the job's catch-up policy.",
    responses=_ok(200, "The enabled job", JobOut, 400, 401, 404, 409, 412),
    tags=["jobs"],
    operation_id="resumeJob",
)
def resume_job(job_id: JobId, if_match: IfMatch = None) -> Response[JobOut]:
    tenant = _tenant()
    expected = job_version(services(), tenant, job_id_of(job_id), if_match)
    return _job_reply(JobOut.of(services().jobs.resume(tenant, job_id_of(job_id), expected)))


@app.post(
    "/v1/jobs/<job_id>/rotate-secret",
    summary="Rotate an HTTP job's webhook signing secret",
    description=(
        "Returns the job with its new signing secret, shown once. The previous secret keeps signing "
        "(each request carries both signatures) until the next rotation, or until a call with "
        "drop_previous=true ends it (that call makes no new secret). Either takes effect within "
        "seconds, not at once: a slot released just before runs with the job as it was released, "
        "and is signed as it was (the old secret alone, for up to 6 s after a rotation)."
    ),
    responses=_ok(200, "The job and its new secret", JobCreated, 400, 401, 404, 409, 412, 422),
    tags=["jobs"],
    operation_id="rotateSigningSecret",
)
def rotate_secret(
    job_id: JobId,
    drop_previous: Annotated[
        bool, Query(description="End the previous secret's signing now (no new secret).")
    ] = False,
    if_match: IfMatch = None,
) -> Response[JobCreated]:
    tenant = _tenant()
    expected = job_version(services(), tenant, job_id_of(job_id), if_match)
    job, secret = services().jobs.rotate_secret(tenant, job_id_of(job_id), drop_previous, expected)
    return _job_reply(JobCreated.made(job, secret))


@app.post(
    "/v1/jobs/<job_id>/trigger",
    summary="Run a job now",
    description=(
        "Queues an extra slot with its own key. With Idempotency-Key, a retried request names the "
        "same slot and queues nothing more."
    ),
    responses=_ok(202, "The run was queued", TriggerAccepted, 401, 404, 409, 422),
    tags=["jobs"],
    operation_id="triggerJob",
)
def trigger_job(job_id: JobId, idempotency_key: IdempotencyKey = None) -> Response[TriggerAccepted]:
    tenant = _tenant()
    job = job_id_of(job_id)
    slot = idempotent.trigger_job(services(), tenant, job, idempotency_key, app.lambda_context)
    return Response(
        status_code=202,
        content_type="application/json",
        body=TriggerAccepted(job_id=job, slot=slot),
        headers={"Location": _location("jobs", job, "executions", slot)},
    )


# --------------------------------------------------------------------------- executions


@app.get(
    "/v1/jobs/<job_id>/executions",
    summary="A job's history",
    description=(
        "Newest slot first; filter by status (a filtered page examines at most 2,000 records: it may "
        "be short, even empty, while next_token goes on) and by the slots' instants (since, until). "
        "A deleted job's history stays readable until it expires (job_deleted: true)."
    ),
    responses=_ok(200, "A page of executions", ExecutionPage, 400, 401, 404, 422),
    tags=["executions"],
    operation_id="listExecutions",
)
def list_executions(
    job_id: JobId,
    status: Annotated[ExecutionStatus | None, Query(description="Only executions in this status.")] = None,
    limit: Limit = 50,
    next_token: NextToken = None,
    since: Annotated[str | None, Query(max_length=64, description=SINCE)] = None,
    until: Annotated[str | None, Query(max_length=64, description=UNTIL)] = None,
) -> ExecutionPage:
    tenant = _tenant()
    svc = services()
    job = job_id_of(job_id)
    window = window_of(since, until)
    created = _job_created(tenant, job)
    deleted = created is None
    scope = svc.tokens.scope(tenant, f"executions:{job}", {"status": status, **window.scope()})
    cursor = svc.tokens.decode(next_token, scope)
    page = window_page(svc.store, tenant, job, limit, cursor, status, window, _live_at())
    if deleted and not page.items and cursor is None and not _has_history(tenant, job):
        raise problems.not_found(f"job {job!r} not found")
    items = [ExecutionOut.of(execution, _of_a_deleted_job(execution, created)) for execution in page.items]
    kept, cursor = within_reply(items, page.cursor, lambda record: record.slot)
    return ExecutionPage(items=kept, next_token=svc.tokens.encode(cursor, scope), job_deleted=deleted)


# A job at an id: when it was created, the version its spec dates from, and (read once, when a
# record's version asks for it) the version it was created at (:meth:`JobStore.first_version`)
Incarnation = tuple[datetime, int, Callable[[], int]]


def _incarnation(tenant: str, job: Job) -> Incarnation:
    first = cache(lambda: services().store.first_version(tenant, job.id))
    return job.created_at, job.spec_since, first


def _job_created(tenant: str, job_id: str) -> Incarnation | None:
    """When the job at this id was created, the version its spec dates from and its first version;
    None when there is none (its history is kept until it expires). A job that cannot be read
    counts as existing since ever."""
    try:
        job = services().jobs.get(tenant, job_id)
    except JobNotFoundError:
        return None
    except UnreadableJobError:
        return datetime.min.replace(tzinfo=UTC), 0, lambda: 0
    return _incarnation(tenant, job)


def _of_a_deleted_job(execution: Execution, created: Incarnation | None) -> bool:
    """Whether ``execution`` belongs to a job that was deleted: there is no job at its id, or the
    one there is a job re-created at the id of a deleted one (as an EventBridge schedule deleted and
    created again under its name) and the record is the deleted job's
    (:meth:`~punctual.models.Execution.shown_as_an_earlier_jobs`)."""
    return created is None or execution.shown_as_an_earlier_jobs(*created)


def _has_history(tenant: str, job_id: str) -> bool:
    return bool(services().store.list_executions(tenant, job_id, 1, None, None, live_at=_live_at()).items)


def _live_at() -> int:
    """Now, for reads of records with a TTL: one whose TTL passed is gone (DynamoDB deletes it lazily,
    up to days later; the history is readable "until it expires")."""
    return int(services().jobs.clock.now().timestamp())


@app.get(
    "/v1/jobs/<job_id>/executions/<slot>",
    summary="One execution, with every attempt",
    description=(
        "The slot key is URL-encoded in the path (2026-11-30T09%3A32%3A00Z). A deleted job's "
        "executions stay readable until they expire (job_deleted: true). A slot that is one of a "
        "MISSED range record's answers that record, as its own (range_slot: the range's first slot)."
    ),
    responses=_ok(200, "The execution", ExecutionOut, 401, 404),
    tags=["executions"],
    operation_id="getExecution",
)
def get_execution(job_id: JobId, slot: SlotKey) -> ExecutionOut:
    tenant = _tenant()
    job = job_id_of(job_id)
    asked = unquote(slot)
    slot_key = slot_key_of(asked) or asked  # its instant written as RFC 3339 otherwise names it too
    known = is_slot_key(slot_key)
    execution = services().store.get_execution(tenant, job, slot_key, _live_at()) if known else None
    if execution is None and known:
        return _in_a_missed_range(tenant, job, slot_key)
    if execution is None:  # (not a slot: no record can have it, but say what a slot key is)
        raise problems.not_found(
            f"{slot_key[:80]!r} is not a slot key: its UTC instant, as 2026-11-30T02:00:00Z"
        )
    return ExecutionOut.of(execution, _of_a_deleted_job(execution, _job_created(tenant, job)))


def _in_a_missed_range(tenant: str, job_id: str, slot: str) -> ExecutionOut:
    """A slot with no record of its own that a MISSED range record stands for: that record, as the
    slot's (``range_slot`` names the range's first slot, its key); else 404 (QA23: a slot inside a
    range answered 404 "no execution" though the history counts it MISSED)."""
    missed = covering_range(services().store, tenant, job_id, slot, _live_at())
    job = found = None
    if missed is not None:
        with contextlib.suppress(JobNotFoundError, UnreadableJobError):  # (judged without it)
            job = services().jobs.get(tenant, job_id)
        found = slot_of_range(job, missed, slot)
    if missed is None or found is None:
        later = (
            " (yet: a run-now slot's record is written once a worker takes it)" if MANUAL_MARK in slot else ""
        )
        raise problems.not_found(f"no execution of job {job_id!r} for slot {slot[:80]!r}{later}")
    created = _incarnation(tenant, job) if job is not None else _job_created(tenant, job_id)
    return ExecutionOut.of(found, _of_a_deleted_job(found, created), range_slot=missed.slot)


# --------------------------------------------------------------------------- alerts


@app.get(
    "/v1/jobs/<job_id>/alerts",
    summary="A job's last alerts",
    description=(
        "The alerts its rules raised, newest slot first: one per slot and condition (recovered: one "
        "per failure streak, keyed on and listed by the streak's first slot), each with what became of "
        "every rule's delivery. The rules themselves are the job's `alerts` field. A deleted job's "
        "alerts stay readable until they expire (job_deleted: true; so are they once a job is "
        "created again at its id)."
    ),
    responses=_ok(200, "The job's last alerts", AlertList, 400, 401, 404, 422),
    tags=["alerts"],
    operation_id="listAlerts",
)
def list_alerts(job_id: JobId, limit: Limit = 50) -> AlertList:
    tenant = _tenant()
    job = job_id_of(job_id)
    created = _job_created(tenant, job)
    alerts = services().store.list_alerts(tenant, job, limit, _live_at())
    if not alerts and created is None:
        raise problems.not_found(f"job {job!r} not found")
    # (QA28: a job created again at the id listed the deleted job's alerts as its own, unmarked)
    items = [
        AlertOut.of(alert, created is None or alert.shown_as_an_earlier_jobs(created[0])) for alert in alerts
    ]
    return AlertList(items=items, job_deleted=created is None)


# --------------------------------------------------------------------------- schedules

schedule_routes.register(app, _ok, _tenant)  # preview, a job's upcoming slots (punctual.api.schedule_routes)


CalendarName = Annotated[
    str,
    Path(description="The calendar's name: " + CALENDAR_NAME_RULE + ".", examples=["public-holidays"]),
]


def _calendar_reply(
    calendar: CalendarOut, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=calendar,
        headers={"ETag": f'"{calendar.version}"', **(headers or {})},
    )


@app.put(
    "/v1/calendars/<name>",
    summary="Create or replace a calendar",
    description=(
        "Whole days, in the calendar's time zone, on which the jobs that exclude this calendar do not fire."
        " 201 when created, 200 when replaced (its version is one more); with If-Match, the calendar must"
        " still be at that version (else 412); with If-None-Match: *, it must not exist (else 412)."
        " A change applies to every job that uses it from the next slot."
    ),
    responses={
        **_ok(200, "The calendar, replaced", CalendarOut, 400, 401, 409, 412, 413, 415, 422),
        201: {
            "description": "The calendar, created",
            "content": {"application/json": {"model": CalendarOut}},
        },
    },
    tags=["calendars"],
    operation_id="putCalendar",
)
def put_calendar(
    name: CalendarName,
    body: CalendarInput,
    if_match: IfMatch = None,
    if_none_match: CalendarIfNoneMatch = None,
) -> Response[CalendarOut]:
    tenant = _tenant()
    calendar_name = calendar_name_of(name)
    expected = calendar_version(services(), tenant, calendar_name, if_match)
    only = must_create(if_none_match, "calendar")
    existing = if_match is not None and if_match.strip() == "*"
    calendar, created = (
        services().calendar_service().put(tenant, calendar_name, body.spec(), expected, only, existing)
    )
    headers = {"Location": _location("calendars", calendar_name)} if created else None
    return _calendar_reply(CalendarOut.of(calendar), 201 if created else 200, headers)


@app.get(
    "/v1/calendars",
    summary="List calendars",
    description="The caller's calendars ordered by name.",
    responses=_ok(200, "A page of calendars", CalendarPage, 400, 401, 422),
    tags=["calendars"],
    operation_id="listCalendars",
)
def list_calendars(limit: Limit = 50, next_token: NextToken = None) -> CalendarPage:
    tenant = _tenant()
    svc = services()
    scope = svc.tokens.scope(tenant, "calendars", {})
    cursor = svc.tokens.decode(next_token, scope)
    page = svc.calendar_service().list_calendars(tenant, limit, cursor)
    return CalendarPage(
        items=[CalendarOut.of(c) for c in page.items], next_token=svc.tokens.encode(page.cursor, scope)
    )


@app.get(
    "/v1/calendars/<name>",
    summary="Get a calendar",
    description="The calendar with its version in ETag.",
    responses=_ok(200, "The calendar", CalendarOut, 401, 404, 422),
    tags=["calendars"],
    operation_id="getCalendar",
)
def get_calendar(name: CalendarName) -> Response[CalendarOut]:
    tenant = _tenant()
    return _calendar_reply(
        CalendarOut.of(services().calendar_service().get(tenant, calendar_name_of(name, stored=True)))
    )


@app.delete(
    "/v1/calendars/<name>",
    summary="Delete a calendar",
    description="409 naming the jobs while jobs exclude it. With If-Match, it must still be at that version.",
    responses={204: {"description": "Deleted"}, **_problem(400, 401, 404, 409, 412, 422)},
    tags=["calendars"],
    operation_id="deleteCalendar",
)
def delete_calendar(name: CalendarName, if_match: IfMatch = None) -> Response[None]:
    tenant = _tenant()
    calendar = calendar_name_of(name, stored=True)
    expected = calendar_version(services(), tenant, calendar, if_match)
    services().calendar_service().delete(tenant, calendar, expected)
    return Response(status_code=204, content_type=None, body=None)


# --------------------------------------------------------------------------- backfills

BackfillId = Annotated[str, Path(description="The backfill's id, as POST .../backfill answered it.")]


@app.post(
    "/v1/jobs/<job_id>/backfill",
    summary="Backfill a past range",
    description=(
        "Runs every slot of the job's schedule in [start, end) that has no execution yet, exactly once,"
        " a few at a time (max_parallel), through the same ledger as scheduled slots. The same request"
        " again (or at the same time) answers the same backfill and runs nothing new (one for the same range"
        " with another include_dependants is 409). Slots on a day of a calendar the job excludes are not run"
        " (409 when such a calendar is missing). A range of more slots than the deployment allows is 422."
    ),
    responses=_ok(202, "The backfill was started (or already exists)", BackfillOut, 400, 401, 404, 409, 422),
    tags=["backfills"],
    operation_id="backfillJob",
)
def backfill_job(job_id: JobId, body: BackfillRequest) -> Response[BackfillOut]:
    tenant = _tenant()
    job = job_id_of(job_id)
    runner = services().backfill_runner()
    backfill = runner.start(tenant, job, body.start, body.end, body.include_dependants, body.max_parallel)
    return Response(
        status_code=202,
        content_type="application/json",
        body=BackfillOut.of(backfill, runner.progress(backfill)),
        headers={"Location": _location("jobs", job, "backfills", backfill.id)},
    )


@app.get(
    "/v1/jobs/<job_id>/backfills/<backfill_id>",
    summary="A backfill's progress",
    description="Its state and its slots counted by status.",
    responses=_ok(200, "The backfill", BackfillOut, 401, 404),
    tags=["backfills"],
    operation_id="getBackfill",
)
def get_backfill(job_id: JobId, backfill_id: BackfillId) -> BackfillOut:
    tenant = _tenant()
    runner = services().backfill_runner()
    backfill = runner.get(tenant, job_id_of(job_id), backfill_id_of(backfill_id))
    return BackfillOut.of(backfill, runner.progress(backfill))


@app.delete(
    "/v1/jobs/<job_id>/backfills/<backfill_id>",
    summary="Cancel a backfill",
    description=(
        "No more of its slots are sent, and those sent but not started are dropped; slots that started"
        " run to their end. 409 when it is done already."
    ),
    responses=_ok(200, "The cancelled backfill", BackfillOut, 401, 404, 409),
    tags=["backfills"],
    operation_id="cancelBackfill",
)
def cancel_backfill(job_id: JobId, backfill_id: BackfillId) -> BackfillOut:
    tenant = _tenant()
    runner = services().backfill_runner()
    backfill = runner.cancel(tenant, job_id_of(job_id), backfill_id_of(backfill_id))
    return BackfillOut.of(backfill, runner.progress(backfill))


# --------------------------------------------------------------------------- the document


@app.get(
    "/v1/openapi.json",
    summary="This API's OpenAPI document",
    description="This document, with `servers` naming the URL the caller reached it at.",
    responses={200: {"description": "The OpenAPI 3 document"}},
    tags=["meta"],
    operation_id="getOpenApiDocument",
)
def openapi_json() -> dict[str, Any]:
    server = {"url": base_url(app.current_event.raw_event), "description": "this deployment"}
    return {**openapi_document(), "servers": [server]}


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of :data:`app` (the committed ``openapi.json`` is this, pretty-printed)."""
    text = app.get_openapi_json_schema(
        title=API_TITLE,
        version=API_VERSION,
        description=(
            "Punctual: a serverless, distributed job scheduler. Errors are RFC 9457 problem details "
            "(application/problem+json). In the cloud every request is signed with SigV4; the caller's "
            "IAM principal is the tenant."
        ),
        servers=[Server(url="http://127.0.0.1:8080", description="local mode")],
        security_schemes={"sigv4": SIGV4},
        security=[{"sigv4": []}],
    )
    return finished_document(text)


def openapi_text() -> str:
    """The document as committed in ``openapi.json`` (two-space indent, trailing newline)."""
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # python -m punctual.api.app > openapi.json
    import sys

    sys.stdout.write(openapi_text())
