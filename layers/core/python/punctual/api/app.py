"""The REST API: Powertools' resolver with one function per route.

Routes read the caller's tenant, call a job use case (:class:`~punctual.jobs.JobService`)
or the store (execution history), and shape the reply. Errors are raised, never
answered here: :mod:`punctual.api.problems` maps them. Request and response bodies are
validated against the models (``enable_validation``), which also produce the OpenAPI
document served at ``/v1/openapi.json`` and committed as ``openapi.json``.
"""

import json
import re
from functools import cache
from http import HTTPStatus
from typing import Annotated, Any
from urllib.parse import quote, unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn, Server
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.api import idempotent, problems
from punctual.api.problems import ApiProblem, Problem
from punctual.api.schemas import (
    ExecutionOut,
    ExecutionPage,
    JobCreated,
    JobOut,
    JobPage,
    SchedulePreview,
    TriggerAccepted,
)
from punctual.api.tenancy import tenant_of
from punctual.api.wiring import services
from punctual.models import MAX_PAYLOAD_BYTES, ExecutionStatus, JobSpec, JobState
from punctual.schedules import ScheduleError, parse_instant, parse_schedule, validate_timezone

API_TITLE = "Punctual"
API_VERSION = "1.0.0"
# The job payload may be 256 KB; the rest of a spec (name, tags, headers) gets 64 KB more.
MAX_BODY_BYTES = MAX_PAYLOAD_BYTES + 64 * 1024
MAX_PAGE = 100
MAX_PREVIEW = 100
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SLOT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z(~[A-Za-z0-9_-]{1,64})?$")

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
    Header(alias="If-Match", max_length=64, description='The job version the change expects, e.g. "3".'),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size, 1-100.")]
NextToken = Annotated[
    str | None, Query(max_length=2048, description="The next_token of the previous page (opaque).")
]


def _header(event: dict[str, Any], name: str) -> str | None:
    for key, value in (event.get("headers") or {}).items():
        if key.lower() == name:
            return str(value)
    return None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("", "application/json") or (media.startswith("application/") and media.endswith("+json"))


class PunctualResolver(APIGatewayRestResolver):
    """The resolver, refusing oversized and non-JSON bodies before anything parses them."""

    def resolve(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        if not isinstance(event, dict):
            return super().resolve(event, context)
        body = event.get("body")
        if isinstance(body, str) and len(body) > MAX_BODY_BYTES:
            # Length in characters is a lower bound of the bytes; base64 bodies are larger still.
            return problems.proxy_problem(
                413,
                "payload-too-large",
                "Payload too large",
                f"the request body has more than {MAX_BODY_BYTES} bytes "
                f"(a job payload may have {MAX_PAYLOAD_BYTES})",
            )
        content_type = _header(event, "content-type")
        if content_type is not None and not body:
            # An empty body has no media type: never let a form or multipart parser near it.
            event = {
                **event,
                "headers": {
                    k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"
                },
                "multiValueHeaders": {
                    k: v
                    for k, v in (event.get("multiValueHeaders") or {}).items()
                    if k.lower() != "content-type"
                },
            }
        elif content_type is not None and not _is_json(content_type):
            return problems.proxy_problem(
                415,
                "unsupported-media-type",
                "Unsupported media type",
                f"send the body as application/json, not {content_type[:80]!r}",
            )
        return super().resolve(event, context)


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


def _job_id(raw: str) -> str:
    job_id = unquote(raw)
    if not _JOB_ID_RE.match(job_id):
        raise problems.not_found(f"job {job_id[:80]!r} not found")
    return job_id


def _expected_version(if_match: str | None) -> int | None:
    """``If-Match: "3"`` (or ``3``, ``W/"3"``) → 3; absent or ``*`` → no precondition."""
    if if_match is None or if_match.strip() == "*":
        return None
    text = if_match.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 12:
        raise ApiProblem(
            400,
            "invalid-if-match",
            "Invalid If-Match",
            'If-Match must carry a job version as returned in ETag, e.g. "3"',
            [("header.If-Match", "not a job version")],
        )
    return int(text)


def _job_reply(job: JobOut, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=job,
        headers={"ETag": f'"{job.version}"', **(headers or {})},
    )


# --------------------------------------------------------------------------- jobs


@app.post(
    "/v1/jobs",
    summary="Register a job",
    description="Returns 201 with the job; an HTTP target's signing secret is in this reply only.",
    responses=_ok(201, "The job was registered", JobCreated, 400, 401, 409, 413, 415, 422),
    tags=["jobs"],
)
def create_job(spec: JobSpec, idempotency_key: IdempotencyKey = None) -> Response[JobCreated]:
    tenant = _tenant()
    svc = services()
    svc.check_spec(spec)
    job, secret = idempotent.create_job(svc, tenant, spec, idempotency_key, app.lambda_context)
    created = JobCreated.model_validate({**JobOut.of(job).model_dump(), "signing_secret": secret})
    return _job_reply(created, 201, {"Location": f"/v1/jobs/{job.id}"})


@app.get(
    "/v1/jobs",
    summary="List jobs",
    description="The caller's jobs ordered by id, filtered by state and tag (key or key=value).",
    responses=_ok(200, "A page of jobs", JobPage, 400, 401, 422),
    tags=["jobs"],
)
def list_jobs(
    state: Annotated[JobState | None, Query()] = None,
    tag: Annotated[str | None, Query(max_length=400, description="key, or key=value")] = None,
    limit: Limit = 50,
    next_token: NextToken = None,
) -> JobPage:
    tenant = _tenant()
    svc = services()
    scope = svc.tokens.scope(tenant, "jobs", {"state": state, "tag": tag or None})
    cursor = svc.tokens.decode(next_token, scope)
    page = svc.jobs.list_jobs(tenant, limit, cursor, state, tag or None)
    return JobPage(
        items=[JobOut.of(job) for job in page.items], next_token=svc.tokens.encode(page.cursor, scope)
    )


@app.get(
    "/v1/jobs/<job_id>",
    summary="Get a job",
    responses=_ok(200, "The job", JobOut, 401, 404),
    tags=["jobs"],
)
def get_job(job_id: str) -> Response[JobOut]:
    return _job_reply(JobOut.of(services().jobs.get(_tenant(), _job_id(job_id))))


@app.put(
    "/v1/jobs/<job_id>",
    summary="Replace a job's spec",
    description="With If-Match, the job must still be at that version (else 412).",
    responses=_ok(200, "The job, at its new version", JobOut, 400, 401, 404, 409, 412, 413, 415, 422),
    tags=["jobs"],
)
def replace_job(job_id: str, spec: JobSpec, if_match: IfMatch = None) -> Response[JobOut]:
    tenant = _tenant()
    svc = services()
    svc.check_spec(spec)
    expected = _expected_version(if_match)
    return _job_reply(JobOut.of(svc.jobs.replace(tenant, _job_id(job_id), spec, expected)))


@app.delete(
    "/v1/jobs/<job_id>",
    summary="Delete a job",
    responses={204: {"description": "Deleted"}, **_problem(400, 401, 404, 409, 412)},
    tags=["jobs"],
)
def delete_job(job_id: str, if_match: IfMatch = None) -> Response[None]:
    tenant = _tenant()
    services().jobs.delete(tenant, _job_id(job_id), _expected_version(if_match))
    return Response(status_code=204, content_type=None, body=None)


@app.post(
    "/v1/jobs/<job_id>/pause",
    summary="Pause a job",
    description="No slot fires while paused; pausing a paused job changes nothing.",
    responses=_ok(200, "The paused job", JobOut, 400, 401, 404, 409, 412),
    tags=["jobs"],
)
def pause_job(job_id: str, if_match: IfMatch = None) -> Response[JobOut]:
    tenant = _tenant()
    expected = _expected_version(if_match)
    return _job_reply(JobOut.of(services().jobs.pause(tenant, _job_id(job_id), expected)))


@app.post(
    "/v1/jobs/<job_id>/resume",
    summary="Resume a paused job",
    description="Slots missed while paused follow the job's catch-up policy.",
    responses=_ok(200, "The enabled job", JobOut, 400, 401, 404, 409, 412),
    tags=["jobs"],
)
def resume_job(job_id: str, if_match: IfMatch = None) -> Response[JobOut]:
    tenant = _tenant()
    expected = _expected_version(if_match)
    return _job_reply(JobOut.of(services().jobs.resume(tenant, _job_id(job_id), expected)))


@app.post(
    "/v1/jobs/<job_id>/rotate-secret",
    summary="Rotate an HTTP job's webhook signing secret",
    description=(
        "Returns the job with its new signing secret, shown once. The previous secret keeps signing "
        "(each request carries both signatures) until the next rotation, or until a call with "
        "drop_previous=true ends it (that call makes no new secret)."
    ),
    responses=_ok(200, "The job and its new secret", JobCreated, 400, 401, 404, 409, 412, 422),
    tags=["jobs"],
)
def rotate_secret(
    job_id: str, drop_previous: Annotated[bool, Query()] = False, if_match: IfMatch = None
) -> Response[JobCreated]:
    tenant = _tenant()
    expected = _expected_version(if_match)
    job, secret = services().jobs.rotate_secret(tenant, _job_id(job_id), drop_previous, expected)
    return _job_reply(JobCreated.model_validate({**JobOut.of(job).model_dump(), "signing_secret": secret}))


@app.post(
    "/v1/jobs/<job_id>/trigger",
    summary="Run a job now",
    description=(
        "Queues an extra slot with its own key. With Idempotency-Key, a retried request names the "
        "same slot and queues nothing more."
    ),
    responses=_ok(202, "The run was queued", TriggerAccepted, 401, 404, 409, 422),
    tags=["jobs"],
)
def trigger_job(job_id: str, idempotency_key: IdempotencyKey = None) -> Response[TriggerAccepted]:
    tenant = _tenant()
    job = _job_id(job_id)
    slot = idempotent.trigger_job(services(), tenant, job, idempotency_key, app.lambda_context)
    return Response(
        status_code=202,
        content_type="application/json",
        body=TriggerAccepted(job_id=job, slot=slot),
        headers={"Location": f"/v1/jobs/{job}/executions/{quote(slot, safe='')}"},
    )


# --------------------------------------------------------------------------- executions


@app.get(
    "/v1/jobs/<job_id>/executions",
    summary="A job's history",
    description="Newest slot first; filter by status.",
    responses=_ok(200, "A page of executions", ExecutionPage, 400, 401, 404, 422),
    tags=["executions"],
)
def list_executions(
    job_id: str,
    status: Annotated[ExecutionStatus | None, Query()] = None,
    limit: Limit = 50,
    next_token: NextToken = None,
) -> ExecutionPage:
    tenant = _tenant()
    svc = services()
    job = svc.jobs.get(tenant, _job_id(job_id)).id  # 404 for a job the caller does not have
    scope = svc.tokens.scope(tenant, f"executions:{job}", {"status": status})
    cursor = svc.tokens.decode(next_token, scope)
    page = svc.store.list_executions(tenant, job, limit, cursor, status)
    return ExecutionPage(
        items=[ExecutionOut.of(execution) for execution in page.items],
        next_token=svc.tokens.encode(page.cursor, scope),
    )


@app.get(
    "/v1/jobs/<job_id>/executions/<slot>",
    summary="One execution, with every attempt",
    description="The slot key is URL-encoded in the path (2026-11-30T09%3A32%3A00Z).",
    responses=_ok(200, "The execution", ExecutionOut, 401, 404),
    tags=["executions"],
)
def get_execution(job_id: str, slot: str) -> ExecutionOut:
    tenant = _tenant()
    job = _job_id(job_id)
    slot_key = unquote(slot)
    execution = services().store.get_execution(tenant, job, slot_key) if _SLOT_RE.match(slot_key) else None
    if execution is None:
        raise problems.not_found(f"no execution of job {job!r} for slot {slot_key[:80]!r}")
    return ExecutionOut.of(execution)


# --------------------------------------------------------------------------- schedules


@app.get(
    "/v1/schedules/preview",
    summary="Preview a schedule's next slots",
    description="For UIs: the next `count` slots of an expression, as a job registered now would see them.",
    responses=_ok(200, "The next slots", SchedulePreview, 401, 422),
    tags=["schedules"],
)
def preview_schedule(
    expression: Annotated[str, Query(min_length=1, max_length=256)],
    timezone: Annotated[str, Query(min_length=1, max_length=64)] = "UTC",
    count: Annotated[int, Query(ge=1, le=MAX_PREVIEW)] = 5,
    after: Annotated[str | None, Query(max_length=64, description="RFC 3339; default: now")] = None,
) -> SchedulePreview:
    try:
        validate_timezone(timezone)
    except ScheduleError as exc:
        raise problems.invalid("query.timezone", str(exc)) from None
    try:
        start = parse_instant(after) if after is not None else services().jobs.clock.now()
    except ScheduleError as exc:
        raise problems.invalid("query.after", str(exc)) from None
    try:
        schedule = parse_schedule(expression, timezone, now=start)
    except ScheduleError as exc:
        raise problems.invalid("query.expression", str(exc)) from None
    if schedule.kind == "after":
        raise problems.invalid(
            "query.expression", "after(...) has no time slots: it fires when its parents succeed"
        )
    return SchedulePreview(expression=expression, timezone=timezone, slots=schedule.slots(start, None, count))


# --------------------------------------------------------------------------- the document


@app.get("/v1/openapi.json", summary="This API's OpenAPI document", tags=["meta"])
def openapi_json() -> dict[str, Any]:
    document: dict[str, Any] = openapi_document()
    return document


SIGV4 = APIKey(
    name="Authorization",
    in_=APIKeyIn.header,
    description="AWS Signature Version 4 (service execute-api); callers are IAM principals.",
)


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
    document: dict[str, Any] = json.loads(text)
    # Powertools documents its own 422/500 shapes; this API answers every error as a problem.
    problem = {"content": {problems.PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for operation in (op for item in document["paths"].values() for op in item.values()):
        responses = operation["responses"]
        responses["422"] = {"description": "Unprocessable Content: invalid input", **problem}
        if operation.get("tags") not in (["meta"], ["schedules"]):  # the routes that know the caller
            responses["429"] = {"description": "Too Many Requests: the tenant's API quota", **problem}
        responses["500"] = {"description": "Internal error (a bug: never expected)", **problem}
        responses.get("204", {}).pop("content", None)  # 204 has no body
    for name in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        document["components"]["schemas"].pop(name, None)
    return document


def openapi_text() -> str:
    """The document as committed in ``openapi.json`` (two-space indent, trailing newline)."""
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # python -m punctual.api.app > openapi.json
    import sys

    sys.stdout.write(openapi_text())
