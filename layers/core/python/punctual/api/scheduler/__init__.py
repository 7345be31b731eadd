"""EventBridge Scheduler's API (REST-JSON, 2021-06-30) on Punctual: an unmodified boto3
``scheduler`` client, the AWS CLI or an SDK works against Punctual by changing the endpoint.

Served by the API function beside ``/v1``: :class:`~punctual.api.app.PunctualResolver` hands
every request under ``/schedules``, ``/schedule-groups`` and ``/tags/`` to :func:`handle`.

* :mod:`.model` — botocore's service model: routes, input shapes and their limits, read at run
  time, so every member is checked as the service documents it;
* :mod:`.mapping` — a schedule is a job (group + name → job id; members → JobSpec and back);
* :mod:`.operations` — the twelve operations, schedule groups in the store (per tenant, with
  the implicit ``default`` group);
* :mod:`.fields` — every input member: supported, accepted, or refused by name;
* :mod:`.errors` — errors as botocore parses them (status, ``x-amzn-ErrorType``, ``Message``);
* :mod:`.arns` — ARNs in the deployment's account and region.

Who calls: the same tenant as ``/v1`` (:func:`punctual.api.tenancy.tenant_of`): behind API
Gateway the IAM principal of the SigV4 signature (signed for ``execute-api``: see
``punctual_cli.scheduler``); in local mode ``X-Punctual-Tenant``, else the access key id the
request was signed with, so ``boto3.client("scheduler", endpoint_url=..., aws_access_key_id="e2e")``
acts for tenant ``e2e``. Each request counts against the tenant's API quota (ThrottlingException).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from punctual.api.problems import ApiProblem, RateLimitedError, shed_load
from punctual.api.scheduler import model
from punctual.api.scheduler.arns import Place
from punctual.api.scheduler.errors import (
    SchedulerError,
    conflict,
    error_reply,
    invalid,
    not_found,
    ok_reply,
    quota,
)
from punctual.api.scheduler.fields import INPUT_FIELDS
from punctual.api.scheduler.mapping import service_wording
from punctual.api.scheduler.model import serves
from punctual.api.scheduler.operations import OPERATIONS, Request
from punctual.api.tenancy import tenant_of
from punctual.api.wiring import services
from punctual.store.base import (
    ConflictError,
    ItemTooLargeError,
    JobExistsError,
    TenantLimitError,
    TransactionConflictError,
    UnreadableJobError,
)
from punctual.timing.schedules import ScheduleError
from punctual.usecases.job_errors import (
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    PreconditionFailedError,
)

logger = logging.getLogger(__name__)

MAX_BODY_CHARS = 512 * 1024

__all__ = ["INPUT_FIELDS", "handle", "serves"]


def _request_id(event: Mapping[str, Any], context: Any) -> str:
    found = getattr(context, "aws_request_id", None) or (event.get("requestContext") or {}).get("requestId")
    return str(found or uuid.uuid4())


def _domain(exc: Exception) -> SchedulerError | None:
    """The service error of a domain error (None: not one of them)."""
    if isinstance(exc, SchedulerError):
        return exc
    if isinstance(exc, TenantLimitError):  # named as the docs name it (QA: the quota was not)
        return quota(f"{exc} (quota {exc.quota})")
    if isinstance(exc, InvalidJobError | ScheduleError | ItemTooLargeError):
        return invalid(service_wording(str(exc), getattr(exc, "field", None)))
    if isinstance(exc, JobNotFoundError):
        return not_found(str(exc))
    if isinstance(exc, JobExistsError):
        return conflict(str(exc))
    if isinstance(exc, JobConflictError | PreconditionFailedError | ConflictError):
        return conflict(str(exc))
    if isinstance(exc, UnreadableJobError):
        return conflict(f"the stored job cannot be read ({exc}); replace it with UpdateSchedule")
    if isinstance(exc, TransactionConflictError) or (isinstance(exc, ClientError) and shed_load(exc)):
        # The service model's retryable error: boto3 retries it, after Retry-After (QA22: DynamoDB
        # throttling was an InternalServerException).
        busy = (
            "another request was changing the same items"
            if isinstance(exc, TransactionConflictError)
            else "storage is throttling requests"
        )
        return SchedulerError(
            "ThrottlingException",
            f"{busy}; nothing was changed, retry shortly",
            {"Retry-After": str(getattr(exc, "retry_after_s", 1))},
        )
    if isinstance(exc, RateLimitedError):
        return SchedulerError("ThrottlingException", str(exc), {"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, ApiProblem):
        code = "AccessDeniedException" if exc.status in (401, 403) else "ValidationException"
        return SchedulerError(code, exc.detail)
    return None


def handle(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Answer one API Gateway REST proxy event addressed to the scheduler API.

    Never raises: every failure is an error reply, an unexpected one InternalServerException
    (logged with its traceback, never sent).
    """
    request_id = _request_id(event, context)
    try:
        method = str(event.get("httpMethod") or "").upper()
        path = str(event.get("path") or "")
        body = event.get("body")
        if isinstance(body, str) and len(body) > MAX_BODY_CHARS:
            raise invalid(f"the request body has more than {MAX_BODY_CHARS} bytes")
        found = model.route(method, path)
        if found is None:
            raise not_found(f"no such resource: {path[:120]}")
        operation, uri = found
        svc = services()
        tenant = tenant_of(event, svc.settings.local_mode)
        svc.admit(tenant)
        values = model.read_input(operation, event, uri)
        reply = OPERATIONS[operation](Request(svc, tenant, Place.of(event, svc.settings.arn_region)), values)
        return ok_reply(reply, request_id)
    except Exception as exc:
        error = _domain(exc)
        if error is None:
            logger.exception("scheduler API: unexpected error")
            error = SchedulerError(
                "InternalServerException", "Internal error; the request id names it in the logs."
            )
        return error_reply(error, request_id)
