"""``POST /v1/job-batches``: register up to 500 jobs in one request (registration at scale).

Ten million jobs through ``POST /v1/jobs`` is ten million requests: at the stage's default
throttle (100 requests a second) more than a day, at a tenant's default request quota (1,200 a
minute) a week. A batch is one request for up to :data:`BATCH_MAX_JOBS` jobs, checked
concurrently (``PUNCTUAL_API_BATCH_CONCURRENCY``, 16, at once) and stored up to 33 a transaction
with one update of the tenant's counter (:mod:`punctual.usecases.job_groups`; a job with
``after()`` parents or excluded calendars in its own, as ``POST /v1/jobs`` stores it), so
10,000,000 jobs are 20,000 requests: within an hour at 6 a second.

* **Validated per job.** Each job is checked on its own (the same model, SSRF guard, target,
  schedule and quota checks as a single create); a bad one fails alone, with its problem document
  in its result, and the others are registered.
* **Idempotent.** Each job names its id (as ``PUT /v1/jobs/{id}`` with ``If-None-Match: *``):
  repeating a batch, after a timeout or a crash, registers only what is missing. A job that
  exists with the same spec answers ``exists`` (its signing secret is not shown again: rotate it
  if the first reply was lost); with another spec, ``failed`` with a 409 ``conflict``.
* **Parents first.** An ``after()`` job is registered after the batch's jobs it names, in a later
  wave (:func:`waves`), whatever the batch's order.
* **One reply for all.** 200 with a result per job in request order: ``created`` (201, with the
  job and its signing secret, shown once), ``exists`` (200) or ``failed`` (the job's 4xx problem);
  a request that is no batch at all (not an object with 1 to 500 ``jobs``, ids repeated) is a 422.

Throughput beyond one tenant's: each group updates its tenant's counter item in its transaction
(exact quotas: DynamoDB takes about 500 transactional writes a second on one item) and moves its
tenant's peak profile once (one item of up to ~24 KB: about 40 writes a second,
:class:`PeakQuota`) — a single tenant whose jobs fill every minute of the day registers about
1,300 jobs a second (derived, docs/tenants.md); at the defaults a tenant holds at most 100,000
jobs (``maxJobsPerTenant``), so 10 million is many tenants.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from punctual.api import problems
from punctual.api.conditional import in_live_group, own_schedule, refuse_taken_schedule_name
from punctual.api.paging import REPLY_BUDGET_BYTES, carried_bytes
from punctual.api.problems import Problem
from punctual.api.schemas import JobCreated, JobInput
from punctual.api.wiring import Services
from punctual.models import ACCEPTED, PAYLOAD_TOO_LARGE, JobSpec
from punctual.store.base import JobExistsError
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.registration import Made, NewJob

BATCH_PATH = "/v1/job-batches"
BATCH_MAX_JOBS = 500
BATCH_MAX_BODY_BYTES = 5 * 1024 * 1024  # under Lambda's 6 MB synchronous payload
# The reply carries every job back, escaped twice (the reply's JSON, then Lambda's response that
# holds it as a string); the jobs so carried get a listing page's budget, the rest of the reply
# (each job's defaults, ~1 KB) fits in the 1 MB left under Lambda's 6 MB.
BATCH_MAX_CARRIED_BYTES = REPLY_BUDGET_BYTES
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class BatchJob(BaseModel):
    """One job of a batch: the id it is registered at, and its spec (as ``POST /v1/jobs`` takes it)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        pattern=_JOB_ID.pattern,
        description="The job's id, chosen by the caller: a repeated batch registers each id once.",
    )
    job: dict[str, Any] = Field(description="The job spec (validated on its own: a bad one fails alone).")


class BatchInput(BaseModel):
    """Up to 500 jobs to register."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[BatchJob] = Field(
        min_length=1, max_length=BATCH_MAX_JOBS, description="1 to 500 jobs, each at an id of its own."
    )

    @field_validator("jobs")
    @classmethod
    def _unique(cls, jobs: list[BatchJob]) -> list[BatchJob]:
        seen: set[str] = set()
        for job in jobs:
            if job.id in seen:
                raise ValueError(f"job id {job.id!r} appears twice in the batch")
            seen.add(job.id)
        return jobs


class BatchResult(BaseModel):
    """What became of one job of the batch."""

    id: str = Field(description="The job's id, as the batch named it.")
    status: Literal["created", "exists", "failed"] = Field(
        description="created: registered now; exists: registered before with this spec; failed: see problem."
    )
    code: int = Field(description="The HTTP status a single request would have answered: 201, 200 or a 4xx.")
    job: JobCreated | None = Field(
        default=None, description="created: the job, its secret once; exists: the job."
    )
    problem: Problem | None = Field(default=None, description="failed: why, as a problem document.")


class BatchOutput(BaseModel):
    """A result per job, in request order, and the counts."""

    results: list[BatchResult] = Field(description="One per job, in request order.")
    created: int = Field(description="Jobs registered by this request.")
    exists: int = Field(description="Jobs registered before, with the same spec (a repeated batch).")
    failed: int = Field(description="Jobs not registered: each result's problem says why.")


def register(app: Any, ok: Callable[..., Any], tenant_of_request: Callable[[], str]) -> None:
    """Add ``POST /v1/job-batches`` to the API (``ok`` builds its documented responses,
    ``tenant_of_request`` admits the caller as every route does)."""

    @app.post(  # type: ignore[untyped-decorator]
        BATCH_PATH,
        summary="Register up to 500 jobs",
        description=(
            "Each job at the id it names, validated on its own; 200 with a result per job (created, "
            "exists: a repeat of the same spec, or failed with its problem). Repeating a batch "
            "registers only what is missing."
        ),
        responses=ok(200, "A result per job, in request order", BatchOutput, 400, 401, 413, 415, 422),
        tags=["jobs"],
        operation_id="createJobBatch",
    )
    def create_job_batch(body: BatchInput) -> BatchOutput:
        from punctual.api.wiring import services

        return create_batch(services(), tenant_of_request(), body)


def create_batch(services: Services, tenant: str, batch: BatchInput) -> BatchOutput:
    """Register every job of ``batch`` (see the module docstring), in :func:`waves`."""
    jobs = batch.jobs
    _refuse_unanswerable(jobs)
    workers = min(services.settings.api_batch_concurrency, len(jobs))
    found: dict[int, BatchResult] = {}
    planned = waves(jobs)
    stuck = _stuck(jobs, planned)
    with ThreadPoolExecutor(workers, thread_name_prefix="batch") as pool:
        for wave in planned:
            made = list(pool.map(lambda n: _one(services, tenant, n, jobs[n], stuck.get(n)), wave))
            found.update((n, r) for n, r in zip(wave, made, strict=True) if isinstance(r, BatchResult))
            ready = [(n, r) for n, r in zip(wave, made, strict=True) if isinstance(r, _Ready)]
            outcomes = services.jobs.store_prepared([r.new for _, r in ready])
            for (n, r), outcome in zip(ready, outcomes, strict=True):
                found[n] = _stored(services, tenant, jobs[n], r.spec, outcome)
    results = [found[n] for n in range(len(jobs))]
    counts = {
        status: sum(1 for r in results if r.status == status) for status in ("created", "exists", "failed")
    }
    return BatchOutput(results=results, **counts)


def _refuse_unanswerable(jobs: list[BatchJob]) -> None:
    """413 before anything is made when the reply could not carry the jobs back within Lambda's
    6 MB (QA: the 5 MB cap counted the request's bytes; a quote is 4 bytes in Lambda's response,
    a non-ASCII character 7 as ``\\uXXXX``: a batch of 3.8 MB made its jobs and answered 7.7 MB,
    API Gateway's 502, every job made and its signing secret, shown once, lost)."""
    carried = carried_bytes(json.dumps([item.job for item in jobs]))
    if carried > BATCH_MAX_CARRIED_BYTES:
        raise problems.ApiProblem(
            413,
            "payload-too-large",
            "Payload too large",
            f"the batch's jobs take {carried} bytes as its reply carries them back (JSON escaped twice: "
            f"a quote as 4 bytes, a non-ASCII character as 7), more than {BATCH_MAX_CARRIED_BYTES}: "
            "the reply would pass Lambda's 6 MB and be lost; send them in smaller batches",
        )


_AFTER = re.compile(r"^\s*after\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)


def waves(jobs: list[BatchJob]) -> list[list[int]]:
    """The batch's jobs (their indexes) in waves registered one after another: an ``after()`` job
    comes in a wave after every job of the batch it names, so it finds them registered (QA17: all
    at once, a child listed before its parent failed 'parent does not exist', or did not, by the
    threads' timing). Jobs of a cycle among themselves come last, together (each is refused
    naming the cycle, :func:`_refuse_cycle`); the rest of a wave runs concurrently."""
    waiting = _batch_parents(jobs)
    out: list[list[int]] = []
    placed: set[int] = set()
    while len(placed) < len(jobs):
        ready = [n for n in range(len(jobs)) if n not in placed and waiting[n] <= placed]
        if not ready:  # a cycle among the rest
            ready = [n for n in range(len(jobs)) if n not in placed]
        out.append(ready)
        placed.update(ready)
    return out


def _batch_parents(jobs: list[BatchJob]) -> dict[int, set[int]]:
    """Each job's (index) parents among the batch's other jobs, as its ``after()`` names them."""
    index = {job.id: n for n, job in enumerate(jobs)}
    waiting: dict[int, set[int]] = {}
    for n, job in enumerate(jobs):
        schedule = job.job.get("schedule")
        named = _AFTER.match(schedule) if isinstance(schedule, str) else None
        parents = [part.strip() for part in named.group(1).split(",")] if named else []
        waiting[n] = {index[p] for p in parents if p in index and index[p] != n}
    return waiting


class _Stuck(NamedTuple):
    waits_on: tuple[str, ...]  # the job's parents it waits on in the cycle's wave
    group: str  # the ids of that wave's jobs that wait on one another, quoted, for the message


def _stuck(jobs: list[BatchJob], planned: list[list[int]]) -> dict[int, _Stuck]:
    """The jobs of :func:`waves`' last wave that wait on jobs of that wave (a cycle, or a job after
    one), each with the ids of those it waits on; none when the batch has no cycle."""
    last = set(planned[-1]) if planned else set()
    parents = _batch_parents(jobs)
    waiting = {
        n: tuple(jobs[p].id for p in sorted(parents[n] & last)) for n in sorted(last) if parents[n] & last
    }
    group = ", ".join(repr(jobs[n].id) for n in waiting)
    return {n: _Stuck(waits_on, group) for n, waits_on in waiting.items()}


def _refuse_cycle(services: Services, tenant: str, stuck: _Stuck) -> None:
    """422 naming the cycle when a parent the job waits on (:func:`_stuck`) is not stored (QA: each
    was refused as 'parent job ... does not exist', the parent right there in the batch); a parent
    stored already (a batch repeated) lets the job be registered as any other."""
    missing = [p for p in stuck.waits_on if services.store.get_job(tenant, p) is None]
    if missing:
        raise InvalidJobError(
            f"after(): parent job {missing[0]!r} is a job of this batch that waits in a cycle "
            f"({stuck.group} wait on one another), so it is not registered; break the cycle"
        )


class _Ready(NamedTuple):
    new: NewJob  # checked, built and counted: stored with the wave's others (store_prepared)
    spec: JobSpec


def _one(
    services: Services, tenant: str, index: int, item: BatchJob, stuck: _Stuck | None = None
) -> BatchResult | _Ready:
    """One job of the batch checked and prepared (a bad one answered); one that can be stored in
    a group with others (no ``after()`` parents, no calendars) is returned ready, any other
    stored now in its own transaction."""
    try:
        given = JobInput.model_validate(item.job)
        spec = in_live_group(services, tenant, own_schedule(given.spec(), item.id))
        services.check_spec(spec)
        if stuck is not None:
            _refuse_cycle(services, tenant, stuck)
        refuse_taken_schedule_name(services, tenant, item.id)
        new = services.jobs.prepare(tenant, spec, item.id, paused=given.paused)
        if new.groupable:
            return _Ready(new, spec)
        job, secret = services.jobs.write_prepared(new)
    except ValidationError as exc:
        prefix = f"jobs.{index}.job."  # as the envelope's own fields are named (jobs.2.id)
        pairs = problems.field_errors(exc.errors())
        errors = [(prefix + field, message) for field, message in pairs]
        too_large = [m for field, m in pairs if field == "payload" and PAYLOAD_TOO_LARGE in m]
        if too_large:  # the code a single create answers (POST /v1/jobs: 413)
            body = problems.problem_body(413, "payload-too-large", "Payload too large", too_large[0], errors)
        else:
            body = problems.problem_body(
                422, "validation", "Invalid job", f"jobs.{index}.job is not a valid job", errors
            )
        return BatchResult(
            id=item.id, status="failed", code=body["status"], problem=Problem.model_validate(body)
        )
    except JobExistsError:
        return _existing(services, tenant, item, spec)
    except Exception as exc:
        return _failed(item, exc)
    return _stored(services, tenant, item, spec, (job, secret))


def _stored(
    services: Services, tenant: str, item: BatchJob, spec: JobSpec, outcome: Made | Exception
) -> BatchResult:
    """What became of a job stored with its wave's others (:meth:`JobService.store_prepared`)."""
    if isinstance(outcome, JobExistsError):
        return _existing(services, tenant, item, spec)
    if isinstance(outcome, Exception):
        return _failed(item, outcome)
    return BatchResult(id=item.id, status="created", code=201, job=JobCreated.made(*outcome))


def _existing(services: Services, tenant: str, item: BatchJob, spec: JobSpec) -> BatchResult:
    """A job at the item's id exists: the same spec is a repeat (``exists``), another a conflict."""
    try:
        current = services.jobs.get(tenant, item.id)
    except Exception as exc:  # deleted meanwhile, or unreadable
        return _failed(item, exc)
    fields = set(JobSpec.model_fields)
    if current.model_dump(include=fields) == JobSpec.model_validate(
        spec.model_dump(), context=ACCEPTED
    ).model_dump(include=fields):
        shown = JobCreated.made(current)
        return BatchResult(id=item.id, status="exists", code=200, job=shown)
    body = problems.problem_body(
        409,
        "conflict",
        "Conflict",
        f"job {item.id!r} exists with another spec (this batch's is not registered)",
    )
    return BatchResult(id=item.id, status="failed", code=409, problem=Problem.model_validate(body))


def _failed(item: BatchJob, exc: Exception) -> BatchResult:
    """The job failed for ``exc``: its problem document, as a single request would answer."""
    body = problems.item_problem(exc)
    return BatchResult(id=item.id, status="failed", code=body["status"], problem=Problem.model_validate(body))
