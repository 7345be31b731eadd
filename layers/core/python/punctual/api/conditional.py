"""``PUT /v1/jobs/{id}`` with ``If-None-Match: *``: create the job at an id the caller chose.

HTTP's conditional create: the job is registered at that id when the tenant has none there,
else the answer is 412 and nothing changes. A caller that derives the id from its own request
(a declared job's CloudFormation provider: stack, logical id and request id) creates exactly one
job however often the request is repeated or retried, crash or not.
"""

from __future__ import annotations

from punctual.api.problems import ApiProblem
from punctual.api.scheduler.mapping import GROUP_TAG
from punctual.api.wiring import Services
from punctual.models import Job, JobSpec
from punctual.store.base import JobExistsError, UnreadableJobError
from punctual.usecases.job_errors import PreconditionFailedError


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


def create_at(
    services: Services, tenant: str, job_id: str, spec: JobSpec, if_none_match: str
) -> tuple[Job, str | None]:
    """Register ``spec`` as ``job_id``; return the job and its signing secret (shown once).

    Raises
    ------
    ApiProblem
        400 when ``If-None-Match`` is anything but ``*``.
    PreconditionFailedError
        412 when the tenant has a job at ``job_id`` (a deleted one's record included).
    """
    must_create(if_none_match, "job at this id")
    try:
        return services.jobs.register(tenant, spec, job_id)
    except JobExistsError:
        raise PreconditionFailedError(f"job {job_id!r} exists (If-None-Match: *)", None) from None


def keeping_schedule(services: Services, tenant: str, job_id: str, spec: JobSpec) -> JobSpec:
    """``spec`` for a ``PUT`` replacing job ``job_id``: a job that is an EventBridge schedule stays
    that schedule (its group, name and ARN; its group's tag, which lists it in its group), unless
    the body says which schedule it is itself (a GET's body sent back does)."""
    if spec.scheduler is not None:
        return spec
    try:
        current = services.store.get_job(tenant, job_id)
    except UnreadableJobError:
        return spec
    if current is None or current.scheduler is None:
        return spec
    tags = {**spec.tags, GROUP_TAG: current.scheduler.group}
    return spec.model_copy(update={"scheduler": current.scheduler, "tags": tags})
