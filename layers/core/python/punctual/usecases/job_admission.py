"""What a job passes before it is stored: the tenant boundary and the webhook guard on every
target, its dependencies (no missing parent, no cycle), its trigger rate, and its tenant's peak
quotas (counted, and taken back when the write fails).

:class:`JobAdmission` is the part of :class:`punctual.usecases.jobs.JobService` that decides
whether a spec may be written; the service does the writing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from punctual.delivery.targets.aws_services import REQUEST_LIMIT_BYTES, request_bytes, sqs_refused_character
from punctual.delivery.targets.base import SlotContext
from punctual.delivery.targets.ecs import MAX_ECS_OVERRIDE_CHARS, OVERRIDES_TOO_LARGE, container_overrides
from punctual.delivery.targets.payload import render_payload
from punctual.delivery.targets.webhooks.guard import BlockedTargetError, guard_url
from punctual.delivery.targets.webhooks.signing import TENANT_HEADER
from punctual.models import (
    EcsTarget,
    EventBridgeTarget,
    HttpTarget,
    Job,
    JobSpec,
    SqsTarget,
    Target,
    header_key,
)
from punctual.security.boundary import Boundary
from punctual.security.peaks import Profile, job_profile
from punctual.security.quotas import micro_rate
from punctual.security.tenant_quotas import PeakQuota
from punctual.store.base import JobStore, UnreadableJob, UnreadableJobError
from punctual.store.listing import every_item
from punctual.timing.schedules.after import MAX_CHAIN_DEPTH
from punctual.timing.slots import schedule_of
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.shared_slots import TIMING_FIELDS, no_shared_slot


def find_cycle(
    job_id: str, parents: tuple[str, ...], lookup: Callable[[str], tuple[str, ...] | None]
) -> list[str] | None:
    """The dependency path that leads from ``parents`` back to ``job_id``, or None.

    ``lookup(id)`` gives a job's own parents (None when the job does not exist).
    """
    stack: list[tuple[str, list[str]]] = [(p, [job_id, p]) for p in parents]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == job_id:
            return path
        if current in seen:
            continue
        seen.add(current)
        for parent in lookup(current) or ():
            stack.append((parent, [*path, parent]))
    return None


def deepest_chain(
    job_id: str,
    parents: tuple[str, ...],
    lookup: Callable[[str], tuple[str, ...] | None],
    children: Callable[[str], list[str]] | None = None,
) -> list[str]:
    """The longest run of ``after()`` jobs, each after the next, through ``job_id`` as ``after(parents)``:
    from its deepest ``after()`` descendant (``children(id)``: the jobs that name ``id``; None, a
    new job: none) up to its highest ``after()`` ancestor. The walks stop past
    :data:`MAX_CHAIN_DEPTH`, enough to refuse (a graph without cycles: checked before)."""
    above: dict[str, list[str]] = {}

    def up(job: str, depth: int) -> list[str]:  # job and the after() jobs above it, job first
        if job not in above:
            own = (lookup(job) or ()) if depth <= MAX_CHAIN_DEPTH else ()
            above[job] = [job, *max((up(p, depth + 1) for p in own), key=len, default=[])] if own else []
        return above[job]

    below: dict[str, list[str]] = {}  # (each job walked once: a path cut short is too deep anyway)

    def down(job: str, depth: int) -> list[str]:  # the after() jobs below job, deepest first
        if children is None or depth > MAX_CHAIN_DEPTH:
            return []
        if job not in below:
            below[job] = max(([*down(c, depth + 1), c] for c in children(job)), key=len, default=[])
        return below[job]

    return [*down(job_id, 1), job_id, *max((up(p, 1) for p in parents), key=len, default=[])]


def all_jobs(store: JobStore, tenant: str) -> list[Job]:
    """Every job of ``tenant``, page after page."""
    return list(every_item(lambda cursor: store.list_jobs(tenant, 100, cursor)))


class JobAdmission:
    """Decides whether a job spec may be written, and counts what its write adds to its tenant.

    Parameters
    ----------
    store
        Read for parents and the tenant's jobs.
    boundary
        The tenant boundary every ARN a job names passes (:mod:`punctual.security.boundary`).
    allow_cidrs
        Addresses the webhook SSRF guard lets through.
    peaks
        The tenant's peak quotas (:mod:`punctual.security.tenant_quotas`); None: not counted.
    """

    def __init__(
        self, store: JobStore, boundary: Boundary, allow_cidrs: tuple[str, ...], peaks: PeakQuota | None
    ) -> None:
        self.store = store
        self.boundary = boundary
        self.allow_cidrs = allow_cidrs
        self.peaks = peaks

    def count_peaks(
        self, tenant: str, job: Job, replaced: Job | UnreadableJob | None
    ) -> tuple[Profile | None, Profile | None]:
        """Move the tenant's peak profile by ``job``'s (less ``replaced``'s); 409 past a limit."""
        if self.peaks is None:
            return None, None
        added = job_profile(job)
        removed = job_profile(replaced) if isinstance(replaced, Job) else None
        self.peaks.change(tenant, add=added, remove=removed)
        return added, removed

    def uncount_peaks(self, tenant: str, added: Profile | None, removed: Profile | None) -> None:
        """Take back :meth:`count_peaks` when the job's own write failed (``added`` None: only the
        replaced job's removal, when the write may have landed or not: both versions counted)."""
        if self.peaks is not None and (added is not None or removed is not None):
            self.peaks.undo(tenant, add=added, remove=removed)

    def recount_peaks(self, tenant: str) -> Profile:
        """Rebuild ``tenant``'s peak profile from its jobs (after a crash between a profile's
        change and the job's write, or for jobs registered before peaks were counted)."""
        if self.peaks is None:
            return Profile()
        return self.peaks.recount(tenant, list(all_jobs(self.store, tenant)))

    def trigger_rate(self, tenant: str, spec: JobSpec) -> int:
        """Micro-triggers per minute the job adds to its tenant's total (:mod:`punctual.security.quotas`)."""

        def parent_rate(parent: str) -> int:
            found = self.store.get_job(tenant, parent)
            return found.trigger_rate if found else 0

        return micro_rate(schedule_of(spec), parent_rate)

    def check_target(self, spec: JobSpec) -> None:
        """Refuse, before anything is stored, what the worker would refuse to call anyway: every
        ARN the job names (target, alert targets, dead-letter queue, events bus) under the tenant
        boundary (:mod:`punctual.security.boundary`), and every webhook URL under the SSRF guard."""
        refusal = self.boundary.first_refusal(spec)
        if refusal is not None:
            raise InvalidJobError(str(refusal), field=refusal.field)
        self._check_one_target(spec.target, "target")
        for index, rule in enumerate(spec.alerts):
            self._check_one_target(rule.target, f"alerts.{index}.target")
        target = spec.target
        if (
            isinstance(target, EcsTarget)
            and spec.payload is not None
            and _ecs_overrides_too_large(spec, target)
        ):
            raise InvalidJobError(f"an ecs target's {OVERRIDES_TOO_LARGE}", field="payload")
        if (
            isinstance(target, EventBridgeTarget)
            and spec.payload is not None
            and not isinstance(spec.payload, dict)
        ):
            raise InvalidJobError(
                "an eventbridge target's payload must be a JSON object (the event detail)", field="payload"
            )
        if spec.payload is not None and (sized := _request_bytes(spec)) is not None:
            raise InvalidJobError(
                f"payload: {sized[0]} would be {sized[1]:,} bytes, over its {REQUEST_LIMIT_BYTES:,}"
                " even with every placeholder at its shortest: every slot would fail",
                field="payload",
            )
        queue = "an sqs target" if isinstance(target, SqsTarget) else ""
        queue = queue or ("a dead-letter queue" if spec.dead_letter else "")
        refused = sqs_refused_character(spec.payload) if queue and isinstance(spec.payload, str) else None
        if refused is not None:
            # SQS refuses the message (InvalidMessageContents): every slot failed (QA28)
            raise InvalidJobError(
                f"payload: {refused!r} (U+{ord(refused):04X}) cannot be sent to {queue}: an SQS message takes"
                " tab, newline, carriage return and characters from U+0020 on (not U+FFFE, U+FFFF)",
                field="payload",
            )

    def _check_one_target(self, target: Target, where: str) -> None:
        if isinstance(target, HttpTarget):
            taken = [name for name in target.headers if header_key(name) == TENANT_HEADER.lower()]
            if taken:
                raise InvalidJobError(
                    f"{where}.headers: header {taken[0]!r} is reserved: Punctual sets it on every request",
                    field=f"{where}.headers",
                )
            try:
                # No DNS here: literal addresses, every spelling of them, and localhost names.
                guard_url(target.url, self.allow_cidrs, resolve=False)
            except BlockedTargetError as exc:
                raise InvalidJobError(f"{where} url refused: {exc.reason}", field=f"{where}.url") from None

    def check_dependencies(
        self,
        tenant: str,
        job_id: str,
        spec: JobSpec,
        now: datetime,
        current: tuple[str, ...] | None = None,
        read: dict[str, int] | None = None,
        parents_read: dict[str, Job] | None = None,
    ) -> tuple[str, ...]:
        """The parents of ``spec`` (a job that is ``after(...)`` them), checked: they exist, make no
        cycle, and share a slot; ``current``: the parents the job has now (a replace that keeps
        them is not judged again: an unrelated edit is never refused). ``read`` gets the version
        of each job the cycle check walked, as it read it; ``parents_read`` each parent as read."""
        parents = schedule_of(spec).parents
        if not parents:
            return ()
        found: list[Job] = []
        for parent in parents:
            if parent == job_id:
                raise InvalidJobError("a job cannot depend on itself")
            job = self.store.get_job(tenant, parent)
            if job is None:
                raise InvalidJobError(f"after(): parent job {parent!r} does not exist")
            found.append(job)
            if parents_read is not None:
                parents_read[parent] = job
        never = None if current is not None and set(current) == set(parents) else no_shared_slot(found, now)
        if never is not None:
            raise InvalidJobError(never, field="schedule")

        def lookup(other: str) -> tuple[str, ...] | None:
            found = self.store.get_job(tenant, other)
            if found is not None and read is not None:
                read[other] = found.version
            return schedule_of(found).parents if found else None

        cycle = find_cycle(job_id, parents, lookup)
        if cycle:
            raise InvalidJobError("dependency cycle: " + " -> ".join(cycle))
        if current is None or set(current) != set(parents):
            self._check_depth(tenant, job_id, parents, lookup, current is not None)
        return parents

    def _check_depth(
        self,
        tenant: str,
        job_id: str,
        parents: tuple[str, ...],
        lookup: Callable[[str], tuple[str, ...] | None],
        replace: bool,
    ) -> None:
        """Refuse a chain of more than :data:`MAX_CHAIN_DEPTH` ``after()`` jobs (QA24: a parent's
        slot that failed or was missed left no record for the jobs below that depth)."""
        read: dict[str, tuple[str, ...] | None] = {}

        def parents_of(other: str) -> tuple[str, ...] | None:
            if other not in read:
                read[other] = lookup(other)
            return read[other]

        def children(parent: str) -> list[str]:  # the jobs that name parent (a link may be stale)
            named = self.store.list_dependents(tenant, parent)
            return [c for c in named if c != job_id and parent in (parents_of(c) or ())]

        chain = deepest_chain(job_id, parents, parents_of, children if replace else None)
        if len(chain) > MAX_CHAIN_DEPTH:
            raise InvalidJobError(
                f"after() chain too deep: {' -> '.join(chain)} ({len(chain)} after() jobs in a row; "
                f"at most {MAX_CHAIN_DEPTH})",
                field="schedule",
            )

    def check_children(self, job: Job, before: Job | None, now: datetime) -> None:
        """Refuse a parent's new spec after which an ``after(...)`` job that names it shares no slot
        with its other parents any more, though it did with ``before`` (the parent as it is: it
        would stay ENABLED and never run again). An edit that leaves its timing as it was is not
        judged, nor a child that shared no slot already."""
        if before is None or before.dependents <= 0:
            return  # the common case: no read
        if all(getattr(job, name) == getattr(before, name) for name in TIMING_FIELDS):
            return
        for child_id in self.store.list_dependents(job.tenant, job.id):
            try:
                child = self.store.get_job(job.tenant, child_id)
            except UnreadableJobError:
                continue
            parents = schedule_of(child).parents if child is not None else ()
            if job.id not in parents:
                continue
            others = [p for p in (self.store.get_job(job.tenant, p) for p in parents if p != job.id) if p]
            never = no_shared_slot([job, *others], now)
            if never is not None and no_shared_slot([before, *others], now) is None:
                raise InvalidJobError(
                    f"after() job {child_id!r} would never run again: {never}", field="schedule"
                )


# The shortest job id, tenant and slot a call can name: what registration renders a payload for
_SHORTEST = SlotContext(
    job_id="j",
    tenant="t",
    slot="2026-01-01T00:00:00Z",
    scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
    attempt=1,
    timeout_s=1,
)


def _request_bytes(spec: JobSpec) -> tuple[str, int] | None:
    """The service and size of a call of the job's SNS, EventBridge or Step Functions target when
    it is over the service's limit even at the shortest (QA28: a payload within the 256 KB a job
    may hold was taken, and SNS, counting the slot's attributes, refused every Publish)."""
    try:
        sized = request_bytes(spec.target, render_payload(spec.payload, _SHORTEST), _SHORTEST)
    except (TypeError, ValueError):
        return None  # the model refuses what is not JSON
    return sized if sized is not None and sized[1] > REQUEST_LIMIT_BYTES else None


def _ecs_overrides_too_large(spec: JobSpec, target: EcsTarget) -> bool:
    """Whether every RunTask of the job would be refused: its container overrides (the
    ``PUNCTUAL_*`` environment, the payload in it) are over ECS's limit even with the shortest job
    id, tenant, slot and container name, every placeholder filled in at its shortest (QA: a 20 KB
    payload was taken, and every slot failed "payload too large for container overrides")."""
    shortest = _SHORTEST
    try:
        overrides = container_overrides(
            shortest, render_payload(spec.payload, shortest), target.container_name or "c"
        )
    except (TypeError, ValueError):
        return False  # the model refuses what is not JSON
    return len(json.dumps(overrides)) > MAX_ECS_OVERRIDE_CHARS
