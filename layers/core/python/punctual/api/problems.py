"""RFC 9457 problem details: the one place where an exception becomes an HTTP answer.

Every error the API sends is ``application/problem+json`` with ``type``, ``title``,
``status`` and ``detail``; validation problems add ``errors``, a list of
``{"field": "target.url", "message": "..."}``. Routes raise domain errors
(:mod:`punctual.usecases.jobs`, :mod:`punctual.store.base`) or :class:`ApiProblem`; the handlers
registered by :func:`install` map them. Nothing else in the API builds an error reply,
and no reply ever carries a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as SdkConnectionError
from pydantic import BaseModel, ConfigDict, Field

from punctual.api.if_match import BadIfMatchError, if_match_versions
from punctual.dispatch.queues import THROTTLE_CODES
from punctual.models import PAYLOAD_TOO_LARGE, JobSpec
from punctual.security.tenant_quotas import BurstQuotaError
from punctual.store.base import (
    ItemTooLargeError,
    JobExistsError,
    LayoutMismatchError,
    TenantLimitError,
    TransactionConflictError,
    TransactionTooLargeError,
    TriggerRateLimitError,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.dynamo.conflicts import RETRIED_CODES as CONFLICT_CODES
from punctual.store.outcomes import may_have_landed, storage_failed
from punctual.timing.schedules import ScheduleError
from punctual.usecases.job_errors import (
    ChangeMadeError,
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    PreconditionFailedError,
)

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:punctual:problem:"

logger = logging.getLogger(__name__)


class FieldError(BaseModel):
    """One invalid input: where it is and what is wrong with it."""

    field: str = Field(description="Dotted path of the input, e.g. `target.url`, `query.limit`.")
    message: str = Field(
        description="What is wrong with it.", examples=["url must start with http:// or https://"]
    )


class Problem(BaseModel):
    """An RFC 9457 problem details document."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "urn:punctual:problem:validation",
                    "title": "Invalid request",
                    "status": 422,
                    "detail": "1 invalid input(s); see errors",
                    "errors": [{"field": "target.url", "message": "url must start with http:// or https://"}],
                }
            ]
        }
    )

    type: str = Field(description="A URI naming the kind of problem, e.g. `urn:punctual:problem:validation`.")
    title: str = Field(description="A short summary of the kind of problem.", examples=["Invalid request"])
    status: int = Field(description="The HTTP status code.", examples=[422])
    detail: str = Field(description="What went wrong in this request, for people.")
    errors: list[FieldError] | None = Field(
        default=None, description="Validation problems only: every invalid input."
    )
    current_version: int | None = Field(
        default=None, description="Precondition problems only: the job's current version."
    )
    quota: str | None = Field(
        default=None,
        description="Quota problems only: the quota reached (`maxJobsPerTenant`, "
        "`maxTriggersPerMinutePerTenant`, `apiRequestsPerMinutePerTenant`).",
    )


class ApiProblem(Exception):
    """A problem the API layer itself finds (paging token, headers, caller identity, size).

    Parameters
    ----------
    status
        The HTTP status.
    slug
        The last part of the problem ``type`` URI.
    title, detail
        Short summary, and this occurrence's explanation.
    errors
        ``(field, message)`` pairs for validation problems.
    headers
        Extra response headers (``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        errors: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.errors = list(errors)
        self.headers = dict(headers or {})


def not_found(detail: str) -> ApiProblem:
    """A 404 problem."""
    return ApiProblem(404, "not-found", "Not found", detail)


def invalid(field: str, message: str) -> ApiProblem:
    """A 422 validation problem about one input."""
    return ApiProblem(422, "validation", "Invalid request", message, [(field, message)])


def problem_body(
    status: int,
    slug: str,
    title: str,
    detail: str,
    errors: Iterable[tuple[str, str]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The JSON document of a problem (``errors`` only when given)."""
    body: dict[str, Any] = {"type": TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = [{"field": field, "message": message} for field, message in errors]
    body.update({key: value for key, value in extra.items() if value is not None})
    return body


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str,
    errors: Iterable[tuple[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> Response[Any]:
    """A Powertools response carrying a problem document."""
    return Response(
        status_code=status,
        content_type=PROBLEM_JSON,
        body=json.dumps(problem_body(status, slug, title, detail, errors, **extra)),
        headers=dict(headers or {}),
    )


def failed_here(status: int, body: str | None) -> bool:
    """Whether a reply is the API's own failure, for its ``ApiFailures`` count (and alarm): a 500 (a
    bug or an AWS error, logged with its traceback) or the 503 ``misconfigured``. Not a 503
    ``busy`` (throttled or unreached storage: nothing was done, the client sends it again) nor a
    504 ``storage-timeout``, the load's and not the service's."""
    if status == int(HTTPStatus.INTERNAL_SERVER_ERROR):
        return True
    if status != int(HTTPStatus.SERVICE_UNAVAILABLE) or not body:
        return False
    try:
        kind = json.loads(body).get("type")
    except (ValueError, AttributeError):
        return False
    return bool(kind == TYPE_PREFIX + "misconfigured")


def proxy_problem(
    status: int, slug: str, title: str, detail: str, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A complete API Gateway proxy reply, for answers given before the resolver runs."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": PROBLEM_JSON, **(headers or {})},
        "multiValueHeaders": {},
        "body": json.dumps(problem_body(status, slug, title, detail)),
        "isBase64Encoded": False,
    }


# --------------------------------------------------------------------------- validation paths


def _field_path(loc: Sequence[Any]) -> str:
    """``("body", "target", "http", "url")`` → ``target.url``; query/header/path keep their prefix."""
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "response"):
        parts = parts[1:]
    # A discriminated union inserts the tag ("http") between the field and its members.
    cleaned: list[str] = []
    for i, part in enumerate(parts):
        if i > 0 and parts[i - 1] == "target" and part in _TARGET_TAGS:
            continue
        if part.startswith("function-") or part.startswith("function-after["):
            continue
        cleaned.append(part)
    return ".".join(cleaned) or "body"


_TARGET_TAGS = frozenset({"http", "lambda", "sqs", "sns", "eventbridge", "stepfunctions", "ecs"})


def _message(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg") or error.get("type") or "invalid value")
    # pydantic prefixes messages of validators with "Value error, ".
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return " ".join(message.split())[:500]


_SPEC_FIELDS = frozenset(JobSpec.model_fields)


def _model_level(field: str, message: str) -> tuple[str, str]:
    """A whole-spec check names its field first (``schedule: ...``, ``end_at must ...``): use it."""
    if field != "body":
        return field, message
    head, sep, rest = message.partition(": ")
    if sep and head in _SPEC_FIELDS:
        return head, rest
    first = message.split(" ", 1)[0]
    return (first, message) if first in _SPEC_FIELDS else (field, message)


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(field, message)`` pairs from pydantic/Powertools error entries, without duplicates."""
    out: list[tuple[str, str]] = []
    for error in errors:
        pair = _model_level(_field_path(error.get("loc", ())), _message(error))
        if pair not in out:
            out.append(pair)
    return out


# --------------------------------------------------------------------------- the handlers


def _api_problem(exc: ApiProblem) -> Response[Any]:
    return problem_response(
        exc.status, exc.slug, exc.title, exc.detail, exc.errors or None, headers=exc.headers
    )


def _request_invalid(exc: RequestValidationError) -> Response[Any]:
    errors = list(exc.errors())
    if any(error.get("type") == "json_invalid" for error in errors):
        reason = next((e.get("ctx", {}).get("error") for e in errors if e.get("type") == "json_invalid"), "")
        return problem_response(
            400,
            "malformed-json",
            "Malformed JSON",
            f"the request body is not valid JSON{': ' + str(reason) if reason else ''}",
        )
    pairs = field_errors(errors)
    too_large = [m for field, m in pairs if field == "payload" and PAYLOAD_TOO_LARGE in m]
    if too_large:
        # The job payload is the one input with a size limit of its own (256 KB).
        return problem_response(413, "payload-too-large", "Payload too large", too_large[0], pairs)
    return problem_response(
        422, "validation", "Invalid request", f"{len(pairs)} invalid input(s); see errors", pairs
    )


def _media_type(exc: RequestUnsupportedContentType) -> Response[Any]:
    return problem_response(
        415, "unsupported-media-type", "Unsupported media type", "send the body as application/json"
    )


def _invalid_job(exc: InvalidJobError) -> Response[Any]:
    return problem_response(422, "validation", exc.title, str(exc), [(exc.field or "body", str(exc))])


def _invalid_schedule(exc: ScheduleError) -> Response[Any]:
    return problem_response(422, "validation", "Invalid schedule", str(exc), [("expression", str(exc))])


def _not_found(exc: JobNotFoundError) -> Response[Any]:
    return problem_response(404, "not-found", "Not found", str(exc))


def _precondition(exc: PreconditionFailedError) -> Response[Any]:
    headers = {"ETag": f'"{exc.current_version}"'} if exc.current_version is not None else {}
    return problem_response(
        412,
        "precondition-failed",
        "Precondition failed",
        str(exc),
        headers=headers,
        current_version=exc.current_version,
    )


def _conflict(exc: Exception) -> Response[Any]:
    return problem_response(409, "conflict", "Conflict", str(exc) or "the job changed meanwhile")


def _conflict_or_stale(app: APIGatewayRestResolver) -> Any:
    """:func:`_conflict`, but a 412 when the request's ``If-Match`` lost a race to another write.

    The route checks ``If-Match`` against the job it reads; the conditional write that follows is
    the same precondition evaluated again. When another writer (another Region's API, a poller)
    moved the job to a version the header does not list between the two, the change was refused
    for a stale ``If-Match``: RFC 9110 and docs/api.md answer that 412 with the current version,
    not 409 (QA, multi-Region: the same ``If-Match`` PUT in two Regions at once, one 409)."""

    def handle(exc: Exception) -> Response[Any]:
        cause = exc if isinstance(exc, VersionConflictError) else exc.__cause__
        header = app.current_event.get_header_value("If-Match", default_value="", case_sensitive=False) or ""
        try:
            listed = set(if_match_versions(header) or ())
        except BadIfMatchError:  # (the route refused such a header before any write)
            listed = set()
        current = getattr(cause, "current_version", None)
        stale_now = listed and current is not None and current not in listed
        if isinstance(cause, VersionConflictError) and stale_now:
            stale = PreconditionFailedError(f"{exc} (it is at version {current} now)", current)
            return _precondition(stale)
        return _conflict(exc)

    return handle


def _unreadable(exc: UnreadableJobError) -> Response[Any]:
    return problem_response(
        409,
        "job-unreadable",
        "Job cannot be read",
        f'{exc}; replace it (PUT, If-Match: "{exc.job.version}") or delete it',
    )


def _job_limit(exc: TenantLimitError) -> Response[Any]:
    # 409, not 429: waiting does not help, deleting jobs (or raising the limit) does.
    if isinstance(exc, BurstQuotaError):  # peaks and backfills (punctual.security.tenant_quotas)
        detail = f"{exc}; {exc.hint} ({exc.quota}, cdk.json)"
        return problem_response(409, exc.problem_type, exc.title, detail, quota=exc.quota)
    if isinstance(exc, TriggerRateLimitError):
        return problem_response(
            409,
            "trigger-quota-reached",
            "Trigger quota reached",
            f"{exc}; give jobs longer periods, delete jobs you no longer need, or ask the operator to "
            "raise maxTriggersPerMinutePerTenant (cdk.json)",
            quota=exc.quota,
        )
    return problem_response(
        409,
        "job-limit-reached",
        "Job limit reached",
        f"tenant quota maxJobsPerTenant is {exc.limit if exc.limit is not None else 'reached'}: {exc}; "
        "delete jobs you no longer need, or ask the operator to raise maxJobsPerTenant (cdk.json)",
        quota=exc.quota,
    )


class RateLimitedError(Exception):
    """The tenant made ``limit`` API requests in the current minute already (429)."""

    quota = "apiRequestsPerMinutePerTenant"

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(
            f"tenant quota apiRequestsPerMinutePerTenant is {limit} requests per minute; "
            f"retry in {retry_after_s} s"
        )
        self.limit = limit
        self.retry_after_s = retry_after_s


def _rate_limited(exc: RateLimitedError) -> Response[Any]:
    return problem_response(
        429,
        "rate-limited",
        "Too many requests",
        str(exc),
        headers={"Retry-After": str(exc.retry_after_s)},
        quota=exc.quota,
    )


def _idempotency_reuse(exc: IdempotencyValidationError) -> Response[Any]:
    return problem_response(
        422,
        "idempotency-key-reused",
        "Idempotency-Key reused",
        "this Idempotency-Key was used with a different request body; use a new key for a new request",
        [("header.Idempotency-Key", "already used with a different body")],
    )


def _idempotency_busy(exc: IdempotencyAlreadyInProgressError) -> Response[Any]:
    return problem_response(
        409,
        "request-in-progress",
        "Request in progress",
        "a request with this Idempotency-Key is still being processed; retry shortly",
        headers={"Retry-After": "1"},
    )


def _idempotency_store(exc: IdempotencyPersistenceLayerError) -> Response[Any]:
    # Powertools wraps the error of the key's record (written first, before any work): a throttled
    # DynamoDB is a 503 with Retry-After as for any other write (nothing was done), not a 500.
    cause = exc.__cause__
    return _aws_error(cause) if isinstance(cause, ClientError) else _unexpected(exc)


def _bad_response(exc: ResponseValidationError) -> Response[Any]:
    logger.error("response does not match the OpenAPI document: %s", exc.errors())
    return _internal()


_SHED_REASONS = frozenset({"None", "ThrottlingError", "TransactionConflict", "ProvisionedThroughputExceeded"})


def shed_load(exc: ClientError) -> bool:
    """Whether DynamoDB or SQS refused ``exc``'s request for load: nothing was done, and the same
    request a moment later can succeed (the API's 503, the scheduler API's ThrottlingException)."""
    code = _code(exc)
    reasons = {str(r.get("Code") or "None") for r in exc.response.get("CancellationReasons", [])}
    # A transaction cancelled only for load (throttled, or another transaction on an item): the
    # same, nothing was written (a failed condition is the caller's to read, never this).
    shed = code == "TransactionCanceledException" and reasons and reasons <= _SHED_REASONS
    # Another writer on an item through every retry, or one not retried (the Idempotency-Key's record,
    # written by Powertools' own client: QA22, another Region writing the same key's record was a 500)
    return code in THROTTLE_CODES or code in CONFLICT_CODES or bool(shed)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _busy(detail: str, retry_after_s: object = 1) -> Response[Any]:
    """503 with Retry-After: nothing was done, and the same request a moment later can succeed."""
    return problem_response(503, "busy", "Service busy", detail, headers={"Retry-After": str(retry_after_s)})


# KMS calls the API makes (sealing a webhook's signing secret under its tenant's data key), and the
# errors KMS documents as transient, to be retried: throttling, an internal error, a dependency's
# timeout. A job's secret is sealed before the job is written; a keyed create's reply after it,
# and its retry with the key answers the job the first attempt made.
_KMS_OPERATIONS = frozenset({"Encrypt", "Decrypt", "GenerateDataKey"})
_KMS_TRANSIENT = frozenset({"KMSInternalException", "DependencyTimeoutException", *THROTTLE_CODES})


def _storage_failed(exc: ClientError) -> Response[Any]:
    # DynamoDB's own failure (HTTP 500: "retry it"), through the SDK's retries. A read changed
    # nothing; a write may or may not have been applied, as one that got no answer (QA29: both
    # answered 500 "internal error", which a client neither retries nor reads as "maybe done").
    logger.warning("storage failed (%s): %s", exc.operation_name, exc)
    if may_have_landed(exc):
        return _maybe_done("storage failed while taking the request")
    return _busy("storage failed to answer a read; nothing was changed, retry shortly")


def _aws_error(exc: ClientError) -> Response[Any]:
    if storage_failed(exc):
        return _storage_failed(exc)
    if exc.operation_name in _KMS_OPERATIONS and _code(exc) in _KMS_TRANSIENT:
        # (QA24: KMSInternalException and DependencyTimeoutException answered 500, and a KMS
        # throttle 'storage is throttling')
        logger.warning("answering 503: %s", exc)
        return _busy("KMS, which seals webhook signing secrets, is throttled or unavailable; retry shortly")
    if shed_load(exc):
        # DynamoDB or SQS is shedding load: a retry after a moment will succeed.
        return _busy("storage is throttling requests; retry shortly")
    logger.exception("AWS error in the API")
    return _internal()


def _unreached(exc: SdkConnectionError) -> Response[Any]:
    # The SDK could not connect to DynamoDB or SQS, through its retries: nothing reached them.
    logger.warning("answering 503: %s", exc)
    return _busy("storage could not be reached; nothing was changed, retry shortly")


def _unanswered(exc: HTTPClientError) -> Response[Any]:
    # A request reached DynamoDB or SQS and got no answer (a read timeout, a connection dropped),
    # through the SDK's retries: a write may have been made. 504, as API Gateway answers a timed-out
    # integration, never the 503 that says nothing was done (a client sends any 503 again).
    logger.warning("answering 504: %s", exc)
    return _maybe_done("storage did not answer in time")


def _maybe_done(what: str) -> Response[Any]:
    """504: storage took the request and gave no outcome; a change may have been made."""
    return problem_response(
        504,
        "storage-timeout",
        "Storage timed out",
        f"{what}; the request may have been done: read before repeating a change",
    )


def _change_made(exc: ChangeMadeError) -> Response[Any]:
    logger.warning("answering 504: %s", exc, exc_info=exc.__cause__)
    return _maybe_done(str(exc))


def _too_large(exc: ItemTooLargeError) -> Response[Any]:
    # The job fits every field's limit but not DynamoDB's item limit, counted in bytes.
    return problem_response(
        413, "job-too-large", "Job too large", str(exc), [(exc.field or "body", str(exc))]
    )


def _too_many_items(exc: TransactionTooLargeError) -> Response[Any]:
    return problem_response(422, "validation", "Invalid request", str(exc), [("body", str(exc))])


def _contended(exc: TransactionConflictError) -> Response[Any]:
    # Another transaction held an item this request writes, through every retry: nothing was
    # written, and the same request a moment later goes through.
    logger.warning("answering 503: %s", exc)
    return _busy(
        "another request was changing the same items; nothing was changed, retry shortly", exc.retry_after_s
    )


def _misconfigured(exc: LayoutMismatchError) -> Response[Any]:
    # The deployment's shard counts differ from the table's: nothing is written until fixed.
    logger.error("refusing to write timers: %s", exc)
    return problem_response(
        503,
        "misconfigured",
        "Service misconfigured",
        "the scheduler's configuration does not match its stored data; nothing was changed,"
        " and the error was logged for the operator",
    )


def _unexpected(exc: Exception) -> Response[Any]:
    # A bug or an outage: logged with its traceback, answered without one.
    logger.exception("unhandled error in the API")
    return _internal()


def item_problem(exc: Exception) -> dict[str, Any]:
    """The problem document ``exc`` answers as (one job of a batch: :mod:`punctual.api.batch`)."""
    handlers: tuple[tuple[type[Exception] | tuple[type[Exception], ...], Any], ...] = (
        (ApiProblem, _api_problem),
        (InvalidJobError, _invalid_job),
        (ScheduleError, _invalid_schedule),
        (JobNotFoundError, _not_found),
        (PreconditionFailedError, _precondition),
        ((JobConflictError, VersionConflictError, JobExistsError), _conflict),
        (TenantLimitError, _job_limit),
        (UnreadableJobError, _unreadable),
        (TransactionConflictError, _contended),
        (TransactionTooLargeError, _too_many_items),
        (LayoutMismatchError, _misconfigured),
        (ClientError, _aws_error),
        (SdkConnectionError, _unreached),
        (HTTPClientError, _unanswered),
    )
    for kinds, handler in handlers:
        if isinstance(exc, kinds):
            body: dict[str, Any] = json.loads(handler(exc).body)
            return body
    # Anything else is this job's 500 (logged with its traceback), not the batch's: the others'
    # results (a created job's signing secret, shown once) still reach the caller.
    unexpected: dict[str, Any] = json.loads(str(_unexpected(exc).body))
    return unexpected


def install(app: APIGatewayRestResolver) -> None:
    """Register every exception handler of the API on ``app``."""

    def _no_route(exc: NotFoundError) -> Response[Any]:
        event = app.current_event
        return problem_response(
            404, "not-found", "Not found", f"no route for {event.http_method} {event.path}"
        )

    app.exception_handler(ApiProblem)(_api_problem)
    app.exception_handler(RequestValidationError)(_request_invalid)
    app.exception_handler(RequestUnsupportedContentType)(_media_type)
    app.exception_handler(InvalidJobError)(_invalid_job)
    app.exception_handler(ScheduleError)(_invalid_schedule)
    app.exception_handler(JobNotFoundError)(_not_found)
    app.exception_handler(PreconditionFailedError)(_precondition)
    app.exception_handler([JobConflictError, VersionConflictError, JobExistsError])(_conflict_or_stale(app))
    app.exception_handler(TenantLimitError)(_job_limit)
    app.exception_handler(UnreadableJobError)(_unreadable)
    app.exception_handler(RateLimitedError)(_rate_limited)
    app.exception_handler(IdempotencyValidationError)(_idempotency_reuse)
    app.exception_handler(IdempotencyAlreadyInProgressError)(_idempotency_busy)
    app.exception_handler(IdempotencyPersistenceLayerError)(_idempotency_store)
    app.not_found(_no_route)
    app.exception_handler(ResponseValidationError)(_bad_response)
    app.exception_handler(ClientError)(_aws_error)
    app.exception_handler(SdkConnectionError)(_unreached)
    app.exception_handler(HTTPClientError)(_unanswered)
    app.exception_handler(LayoutMismatchError)(_misconfigured)
    app.exception_handler(TransactionConflictError)(_contended)
    app.exception_handler(ItemTooLargeError)(_too_large)
    app.exception_handler(TransactionTooLargeError)(_too_many_items)
    app.exception_handler(ChangeMadeError)(_change_made)
    app.exception_handler(Exception)(_unexpected)


def _internal() -> Response[Any]:
    return problem_response(
        int(HTTPStatus.INTERNAL_SERVER_ERROR),
        "internal",
        "Internal error",
        "the request could not be completed; it was logged",
    )
