"""Use cases behind the API: register, replace, pause, resume, delete, trigger a job.

Each one is a version-checked write. Pause, delete and replace bump the version, so
timers written for the old version become stale and the poller ignores them; resume
and replace write a fresh timer (resume under the job's catch-up policy).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from punctual.delivery.notifications.alerts import end_unwatched_streak
from punctual.dispatch.load_forecast import LoadForecast
from punctual.dispatch.queues import MessageKind, QueuePort, QueueRouting, message_for
from punctual.execution.completion import Completion
from punctual.execution.relinks import check_links
from punctual.models import ACCEPTED, Job, JobSpec, JobState
from punctual.models.jobs import only_labels_differ, replaced, replaced_state, restarted
from punctual.runtime.clock import Clock
from punctual.runtime.observability import NullMetrics
from punctual.security.boundary import Boundary
from punctual.security.ownership import OwnResources
from punctual.security.peaks import Profile, job_profile
from punctual.security.quotas import MICRO
from punctual.security.tenant_quotas import PeakQuota
from punctual.store.base import (
    NO_CALENDAR_USES,
    TOMBSTONE_TTL,
    CalendarUses,
    GraphChangedError,
    GraphRead,
    ItemTooLargeError,
    JobStore,
    Page,
    UnreadableJob,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.dynamo.sizes import check_job_size
from punctual.store.outcomes import may_have_landed
from punctual.timing.slots import (
    ceil_second,
    fire_timer,
    first_slot,
    no_slot_reason,
    resume_start,
    same_slots,
    schedule_of,
)
from punctual.timing.timers import MANUAL_MARK, Timer, TimerLayout, slot_instant, slot_key
from punctual.usecases import job_groups, registration
from punctual.usecases.child_slots import send_owed_children, send_run_now
from punctual.usecases.delay_chains import defer_to_run, settle
from punctual.usecases.dependents import after_children, raw_parents
from punctual.usecases.job_admission import JobAdmission
from punctual.usecases.job_errors import (
    InvalidJobError,
    JobConflictError,
    JobHasDependentsError,
    JobNotFoundError,
    PreconditionFailedError,
    after_the_change,
)
from punctual.usecases.next_fire import NextFire
from punctual.usecases.registration import (
    Made,
    NewJob,
    SecretBox,
    calendars_checked,
    checked_parents,
    first_timer,
    signs_webhooks,
)

DELETE_TRIES = 3  # a delete whose job gained (or lost) an after() link since its check checks again
RESUME_TRIES = 3  # a resume that meets a concurrent write (a poller parking an owed slot) reads again

log = logging.getLogger("punctual.usecases")


SlotRecorder = Callable[[str], str]  # records a keyed run-now slot, gives back the first one recorded


def manual_slot(now: datetime, request_key: str | None) -> str:
    """A run-now slot asked for at ``now``: the same ``request_key`` in the same millisecond names
    the same slot; the API's Idempotency-Key also records it for the key, so a retry names it again.
    Its milliseconds first: the history lists a second's run-now slots in the order they were asked
    for (QA: three in one second were listed in their random tokens' order)."""
    token = hashlib.sha256((request_key or uuid.uuid4().hex).encode()).hexdigest()[:9]
    return f"{slot_key(now)}{MANUAL_MARK}{now.microsecond // 1000:03d}{token}"


def _whole_second(instant: datetime) -> datetime:
    return ceil_second(instant)


def delete_released_parents(store: JobStore, tenant: str, parents: tuple[str, ...], now: datetime) -> None:
    """Parents an after() job no longer names that asked to be deleted once done, and were kept,
    COMPLETED, only while children named them: deleted now when done and no other child names
    them (QA17: the last child's delete or replace left them COMPLETED for good)."""
    for parent_id in parents:
        try:  # best effort, after the change landed: a failure leaves the parent as it was
            parent = store.get_job(tenant, parent_id)
            if parent is not None and parent.state is JobState.COMPLETED and parent.delete_after_completion:
                Completion(store, NullMetrics()).delete_if_done(parent, parent.spec_since, now)
        except Exception:
            log.warning("could not delete job %s, completed and no longer named by a child", parent_id)


def replaced_anchor(current: Job, spec: JobSpec, now: datetime) -> datetime:
    """Where ``current``'s slots count from once ``spec`` replaces it at ``now``: unchanged, unless
    the schedule's slots or its start changed."""
    if spec.start_at != current.start_at or not same_slots(current, spec):
        return _whole_second(spec.start_at or now)
    return current.anchor


def _stand_in(found: UnreadableJob, spec: JobSpec, now: datetime) -> Job:
    """What ``replace`` needs of a job it cannot read: its version, state and secrets.

    The rest comes from the new spec; its creation instant from the stored document when
    that part still parses.
    """
    try:
        created = datetime.fromisoformat(str(found.doc.get("created_at")))
    except ValueError:
        created = now
    state = JobState.PAUSED if found.state == JobState.PAUSED.value else JobState.ENABLED
    return Job(
        **spec.model_dump(),
        id=found.id,
        tenant=found.tenant,
        state=state,
        version=found.version,
        created_at=created if created.tzinfo else now,
        updated_at=now,
        anchor=_whole_second(spec.start_at or now),
        paused_at=now if state is JobState.PAUSED else None,
        signing_secret_enc=found.signing_secret_enc,
        signing_secret_prev_enc=found.signing_secret_prev_enc,
        trigger_rate=found.trigger_rate,
    )


def _check_fires(current: Job, job: Job, timer: Timer | None, now: datetime) -> None:
    """Refuse a replacement after which ``job`` would never fire: enabled with no first timer, or
    paused with a new schedule (its zone, window or DST policy included) that has no slot left
    (resumed, it would never fire). ``after(...)`` jobs have no slots of their own."""
    if schedule_of(job).kind == "after":
        return
    if job.state is JobState.ENABLED and timer is None:
        raise InvalidJobError(no_slot_reason(job, now))
    fields = ("schedule", "timezone", "start_at", "end_at", "dst")
    changed = any(getattr(current, name) != getattr(job, name) for name in fields)
    if job.state is JobState.PAUSED and changed and first_slot(job, now) is None:
        raise InvalidJobError(no_slot_reason(job, now))


def _raw_calendars(found: UnreadableJob) -> tuple[str, ...]:
    """The calendars a job that cannot be read excludes, as far as its document says."""
    names = found.doc.get("exclude_calendars")
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def _fitting(job: Job) -> Job:
    """``job``, its oldest kept chain restarts dropped while it would not fit its item: bookkeeping
    never makes an unchanged spec too large (those old chains' owed slots are forgotten)."""
    while True:
        try:
            check_job_size(job)
            return job
        except ItemTooLargeError:
            if not job.restarts:
                raise
            job = job.model_copy(update={"restarts": job.restarts[1:]})


def _next_version(
    current: Job, update: dict[str, Any], now: datetime, layout: TimerLayout
) -> tuple[Job, list[Timer]]:
    """``current`` with ``update`` at the next version and the same spec, and the first timer of
    its chain (a new version restarts it, as a replace of the identical spec does: a slot due by
    now that no poller released yet stays owed, :mod:`punctual.dispatch.polling.chains`)."""
    job = current.model_copy(
        update={
            **update,
            "version": current.version + 1,
            "spec_version": current.spec_since,
            "updated_at": now,
            "restarts": restarted(
                current, current, now
            ),  # its chain restarts: the old one's due slots are owed
        }
    )
    job = _fitting(job)
    timer = first_timer(layout, job, now) if job.state is JobState.ENABLED else None
    return job, [timer] if timer is not None else []


def _delete_as_read(
    store: JobStore, tenant: str, job_id: str, current: Job | UnreadableJob, now: datetime
) -> None:
    """One delete of the job as read: its links to its parents and its calendar uses go with it,
    a tombstone stays, its failure streak ends; VersionConflictError when its version or its
    dependents count moved."""
    parents = schedule_of(current).parents if isinstance(current, Job) else raw_parents(current)
    calendars = current.exclude_calendars if isinstance(current, Job) else _raw_calendars(current)
    store.delete_job(
        tenant,
        job_id,
        current.version,
        current.trigger_rate,
        parents=parents,
        calendars=CalendarUses(drop=tuple(calendars)),
        tombstone_until=int((now + TOMBSTONE_TTL).timestamp()),
        expected_dependents=current.dependents,
    )
    if isinstance(current, Job):
        end_unwatched_streak(store, current, None)  # not the next job's at this id (QA28)


def _found(store: JobStore, tenant: str, job_id: str, expected_version: int | None) -> Job | UnreadableJob:
    """The stored job, readable or not, at ``expected_version`` (when given)."""
    found: Job | UnreadableJob | None
    try:
        found = store.get_job(tenant, job_id)
    except UnreadableJobError as exc:
        found = exc.job
    if found is None:
        raise JobNotFoundError(f"job {job_id!r} not found")
    if expected_version is not None and found.version != expected_version:
        raise PreconditionFailedError(
            f"job {job_id!r} is at version {found.version}, not {expected_version}", found.version
        )
    return found


def _found_to_delete(
    store: JobStore, tenant: str, job_id: str, expected_version: int | None
) -> Job | UnreadableJob:
    """:func:`_found`, for a delete: an id with no job but a listing (left by a create and a delete
    at once on a table without transactions: listed, yet 404) has that listing removed, and is
    still not found (QA, multi-Region: nothing removed it)."""
    try:
        return _found(store, tenant, job_id, expected_version)
    except JobNotFoundError:
        if store.drop_listing_without_job(tenant, job_id):
            log.warning("job %s/%s: removed a listing that had no job", tenant, job_id)
        raise


def _current(store: JobStore, tenant: str, job_id: str, expected_version: int | None) -> Job:
    """The stored job at ``expected_version`` (when given); UnreadableJobError if unreadable."""
    found = _found(store, tenant, job_id, expected_version)
    if isinstance(found, UnreadableJob):
        raise UnreadableJobError(found)
    return found


# Replaces that give a job a new parent, tried again when another such write lands first (after a
# pause drawn at random up to 20 ms x 2^n, at most 0.5 s: about 2 s in all at worst)
GRAPH_ATTEMPTS = 8
GRAPH_BACKOFF_S, GRAPH_BACKOFF_MAX_S = 0.02, 0.5


def _with_secret(replace: Callable[[], Made]) -> Made:
    """:func:`_checked_again` of a replace that may make the job's first signing secret: a job
    that calls a webhook now (its target, or an alert rule) and had no secret gets one, and its
    plain text is handed out (QA: it was thrown away; nobody could verify the requests)."""
    made: list[str | None] = [None]

    def once() -> Job:
        job, made[0] = replace()
        return job

    return _checked_again(once), made[0]


def _first_secret(secrets: SecretBox | None, spec: JobSpec, job: Job) -> Made:
    """``job`` with a signing secret when it calls a webhook now and has none, and its plain text."""
    if not signs_webhooks(spec) or job.signing_secret_enc or secrets is None:
        return job, None
    plain, stored = secrets.new_secret(job.tenant, job.id)
    return job.model_copy(update={"signing_secret_enc": stored}), plain


def _checked_again(replace: Callable[[], Job]) -> Job:
    """``replace()``, run again from its read while the tenant's dependency graph moved on under
    it (its cycle check may have missed the other write); a 409 if it keeps moving. Concurrent
    such replaces land one at a time: the pauses spread them out (review: twelve at once, with
    five tries and no pause, left seven refused)."""
    for attempt in range(GRAPH_ATTEMPTS - 1):
        try:
            return replace()
        except GraphChangedError:
            time.sleep(random.uniform(0, min(GRAPH_BACKOFF_MAX_S, GRAPH_BACKOFF_S * 2**attempt)))
    try:
        return replace()
    except GraphChangedError as exc:
        raise JobConflictError(f"{exc}; try again") from exc


def resumed(current: Job, now: datetime, layout: TimerLayout) -> tuple[Job, list[Timer]]:
    """A paused job enabled again at ``now``, and the first timer of its chain.

    The chain starts at the first slot the pause owes (:func:`punctual.dispatch.polling.chains.resume_start`):
    the first slot at or after the pause, or an earlier one due before it that was not released.
    When that slot is past, a RESUME timer due now releases it and the poller's catch-up decides
    every slot up to now by the catch-up policy and its window (``all`` runs them, ``latest`` the
    newest, ``none`` records them MISSED, long runs as one range record). delay(...) jobs start
    afresh from now; after(...) jobs have no chain. A job with no slot left is COMPLETED.
    """
    job = current.model_copy(
        update={
            "state": JobState.ENABLED,
            "version": current.version + 1,
            "spec_version": current.spec_since,
            "updated_at": now,
            "state_reason": None,
        }
    )
    kind = schedule_of(job).kind
    if kind == "after":
        return job, []
    fresh = kind == "delay" or current.paused_at is None  # no pause instant to start from
    start = first_slot(job, now) if fresh else resume_start(job)
    if start is None:
        return job.model_copy(update={"state": JobState.COMPLETED, "state_reason": "no slot left"}), []
    return job, [fire_timer(layout, job, start, now, resumed=not fresh)]


class JobService:
    """The job use cases for one deployment.

    Parameters
    ----------
    store, queues
        Storage and queue ports.
    clock
        The only source of ``now``.
    layout
        Where timers go.
    routing
        Which queue a job's messages go to.
    max_jobs_per_tenant
        Registration beyond this is refused.
    secrets
        Makes a webhook signing secret for HTTP targets (None: jobs get none).
    allow_cidrs
        Addresses the webhook SSRF guard lets through.
    own_resources
        Returns the deployment's own resources, which no target may name (called per check:
        the list is loaded once, on first use).
    require_target_role
        Refuse AWS targets that name no ``role_arn``.
    boundary
        The tenant boundary every ARN a job names passes (:mod:`punctual.security.boundary`); default: one
        made of ``own_resources`` and ``require_target_role``.
    peaks
        The tenant's peak quotas (:mod:`punctual.security.tenant_quotas`); None: not counted.
    max_triggers_per_minute
        The tenant's quota of scheduled triggers per minute (None: no quota).
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        layout: TimerLayout,
        routing: QueueRouting,
        max_jobs_per_tenant: int = 100_000,
        secrets: SecretBox | None = None,
        allow_cidrs: tuple[str, ...] = (),
        own_resources: Callable[[], OwnResources] | None = None,
        require_target_role: bool = False,
        max_triggers_per_minute: int | None = None,
        boundary: Boundary | None = None,
        peaks: PeakQuota | None = None,
        forecast: LoadForecast | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.layout = layout
        self.routing = routing
        self.max_jobs = max_jobs_per_tenant
        self.secrets = secrets
        self.own_resources = own_resources or OwnResources
        self.require_target_role = require_target_role
        self.boundary = boundary or Boundary(self.own_resources, require_target_role=require_target_role)
        self.peaks = peaks
        self.max_trigger_rate = None if max_triggers_per_minute is None else max_triggers_per_minute * MICRO
        self.forecast = forecast  # the minute-load ledger the tick reads (punctual.dispatch.load_forecast)
        self.admission = JobAdmission(store, self.boundary, allow_cidrs, peaks)
        self.next_fire = NextFire(store, lambda: self.clock.now())  # the clock may be replaced (tests)

    @property
    def allow_cidrs(self) -> tuple[str, ...]:
        """Addresses the webhook SSRF guard lets through (:attr:`JobAdmission.allow_cidrs`)."""
        return self.admission.allow_cidrs

    @allow_cidrs.setter
    def allow_cidrs(self, cidrs: tuple[str, ...]) -> None:
        self.admission.allow_cidrs = cidrs

    def recount_peaks(self, tenant: str) -> Profile:
        """Rebuild ``tenant``'s peak profile from its jobs (:meth:`JobAdmission.recount_peaks`)."""
        return self.admission.recount_peaks(tenant)

    def _forecast(self, old: Job | None, new: Job | None) -> None:
        """A job's near slots in the minute-load ledger: ``old``'s taken back, ``new``'s added."""
        if self.forecast is not None:
            self.forecast.changed(old, new, self.clock.now())

    # ------------------------------------------------------------------ reading

    def get(self, tenant: str, job_id: str) -> Job:
        job = self.store.get_job(tenant, job_id)
        if job is None:
            raise JobNotFoundError(f"job {job_id!r} not found")
        return self.next_fire.of(job)

    def list_jobs(
        self,
        tenant: str,
        limit: int,
        cursor: str | None = None,
        state: JobState | None = None,
        tag: str | None = None,
    ) -> Page[Job]:
        page = self.store.list_jobs(tenant, limit, cursor, state, tag)
        calendars = self.next_fire.calendars_of(page.items)
        return Page([self.next_fire.of(job, calendars) for job in page.items], page.cursor, page.unreadable)

    # ------------------------------------------------------------------ writing

    def register(
        self, tenant: str, spec: JobSpec, job_id: str | None = None, paused: bool = False
    ) -> tuple[Job, str | None]:
        """Store a new job and its first timer; return it and its signing secret (shown once).

        ``paused`` stores it PAUSED in the same write, with no timer (a schedule created
        DISABLED): no slot can fire before a separate pause would land (:mod:`.registration`).
        """
        return registration.register(self, tenant, spec, job_id, paused)

    def prepare(self, tenant: str, spec: JobSpec, job_id: str | None = None, paused: bool = False) -> NewJob:
        """:meth:`register` but the write: the job checked, built and counted (:mod:`.registration`)."""
        return registration.prepare(self, tenant, spec, job_id, paused)

    def store_prepared(self, news: Sequence[NewJob]) -> list[Made | Exception]:
        """Store :meth:`prepare`'s jobs, a group a transaction where they can be (:mod:`.job_groups`)."""
        return job_groups.store_all(self, news)

    def write_prepared(self, new: NewJob) -> Made:
        """Store one of :meth:`prepare`'s jobs alone (its own transaction, as :meth:`register`)."""
        return registration.write(self, new)

    def replace(
        self,
        tenant: str,
        job_id: str,
        spec: JobSpec,
        expected_version: int | None = None,
        paused: bool = False,
    ) -> Job:
        """Replace the spec, the next slot afresh (no catch-up); an unreadable stored job too (its fix).

        ``paused``: a job the replace would enable (a COMPLETED one given a new schedule) is
        written PAUSED in the same write, with no timer, as a job registered paused; a job that
        cannot be paused first (:meth:`pause` refuses a COMPLETED one) is never enabled with the
        new spec on the way to paused (QA29)."""
        return self.replace_made(tenant, job_id, spec, expected_version, paused)[0]

    def replace_made(
        self, tenant: str, job_id: str, spec: JobSpec, expected: int | None = None, paused: bool = False
    ) -> Made:
        """As :meth:`replace`, with the signing secret it made for the job's first webhook, once."""
        return _with_secret(lambda: self._replace(tenant, job_id, spec, expected, paused))

    def _replace(
        self, tenant: str, job_id: str, spec: JobSpec, expected_version: int | None, paused: bool = False
    ) -> Made:
        found = _found(self.store, tenant, job_id, expected_version)
        now = self.clock.now()
        current = found if isinstance(found, Job) else _stand_in(found, spec, now)
        self.admission.check_target(spec)
        old_parents = schedule_of(current).parents if isinstance(found, Job) else raw_parents(found)
        # A new parent is checked for a cycle against the graph as read now, and the write lands
        # only if no other job gained a parent meanwhile (two such checks could each miss the other)
        gains = set(schedule_of(spec).parents) - set(old_parents)
        version = self.store.dependency_graph(tenant) if gains else None
        walked: dict[str, int] = {}
        parents, parents_read = checked_parents(
            self.admission, tenant, job_id, spec, now, old_parents, walked
        )
        graph = None if version is None else GraphRead(version, {p: walked[p] for p in gains if p in walked})
        anchor = replaced_anchor(current, spec, now)
        # A new spec supersedes what was released for the old one (punctual.execution.versions);
        # the same spec again, or one changing only its labels, supersedes nothing (execution.versions).
        accepted = JobSpec.model_validate(spec.model_dump(), context=ACCEPTED)
        same_spec = isinstance(found, Job) and only_labels_differ(found, accepted)
        job = Job(
            **spec.model_dump(),
            id=job_id,
            tenant=tenant,
            **replaced_state(current, same_spec),
            version=current.version + 1,
            spec_version=current.spec_since if same_spec else current.version + 1,
            owed_from=current.owed_from,  # a pause's owed slot stays owed
            created_at=current.created_at,
            updated_at=now,
            anchor=anchor,
            paused_at=current.paused_at,
            skipped_slots=current.skipped_slots,
            signing_secret_enc=current.signing_secret_enc,
            signing_secret_prev_enc=current.signing_secret_prev_enc,
            trigger_rate=self.admission.trigger_rate(tenant, spec),
        )
        if paused and job.state in (JobState.ENABLED, JobState.COMPLETED):
            # Enabled as of now: its chain ended here (what came due since, a resume owes); never
            # enabled (COMPLETED before): nothing is owed, as a job registered paused. One that stays
            # COMPLETED (its labels alone changed) is paused too: disabled as asked (QA30: a disabled
            # ended schedule showed ENABLED), and its resume finds it has no slot left.
            at = now if current.state is JobState.ENABLED else None
            job = job.model_copy(update={"state": JobState.PAUSED, "paused_at": at})
        # The old chain's slots due by now are owed, on its timing (punctual.dispatch.polling.chains)
        job = job.model_copy(update=replaced(current, job, now))  # (and its allow runs in flight)
        job, secret_plain = _first_secret(self.secrets, spec, job)
        job = _fitting(job)
        timer = first_timer(self.layout, job, now) if job.state is JobState.ENABLED else None
        _check_fires(current, job, timer, now)
        self.admission.check_children(job, found if isinstance(found, Job) else None, now)
        job, timers = defer_to_run(
            self.store, job, [timer] if timer else [], before=current, layout=self.layout
        )  # delay(): a run in flight
        if current.owed_from and job.restarts[-1].timing is not None:
            # A pause's owed slot on a timing the replace moved: back to its chain (its version and
            # timing), which a poller catches up, or records while the job stays paused
            job = job.model_copy(update={"owed_from": None})
            timers.append(fire_timer(self.layout, current, slot_instant(current.owed_from), now))
        old_calendars = current.exclude_calendars if isinstance(found, Job) else _raw_calendars(found)
        uses = CalendarUses.between(old_calendars, spec.exclude_calendars)
        # Every parent is (re)linked, not only new ones: a link an older version lost is repaired.
        removed = tuple(p for p in old_parents if p not in parents)
        check_links(self.store, self.layout, parents_read, parents, now)  # first, as register's
        calendars = self.next_fire.calendars_of([job])  # the reply's: read before the write (QA29)
        changed = self.admission.count_peaks(tenant, job, found)
        try:
            with calendars_checked():
                self._write(
                    job,
                    current.version,
                    timers,
                    previous_trigger_rate=current.trigger_rate,
                    parents_added=parents,
                    parents_removed=removed,
                    calendars=uses,
                    graph=graph,
                )
        except Exception as exc:
            # One that may have landed keeps the new version counted: both counted, never too low
            added, removed_profile = changed
            self.admission.uncount_peaks(tenant, None if may_have_landed(exc) else added, removed_profile)
            raise
        self._forecast(current, job)
        end_unwatched_streak(self.store, current, job)
        with after_the_change(f"job {job.id!r}'s replace"):
            settle(self.store, self.layout, job, now)
            if removed and job.state in (JobState.ENABLED, JobState.PAUSED):
                send_owed_children(self.store, self.layout, job, removed, now)  # remaining parents all ran
            delete_released_parents(self.store, tenant, removed, now)
        return self.next_fire.of(job, calendars), secret_plain

    def pause(
        self, tenant: str, job_id: str, expected_version: int | None = None, reason: str | None = None
    ) -> Job:
        current = _current(self.store, tenant, job_id, expected_version)
        if current.state is JobState.PAUSED:
            return self.next_fire.of(current)
        if current.state is JobState.COMPLETED:
            raise JobConflictError(f"job {job_id!r} is completed; replace it to schedule it again")
        now = self.clock.now()
        job = current.model_copy(
            update={
                "state": JobState.PAUSED,
                "version": current.version + 1,
                "spec_version": current.spec_since,  # the spec does not change
                "updated_at": now,
                "paused_at": now,
                "owed_from": None,
                "state_reason": reason,
            }
        )
        self._write(job, current.version, [])
        self._forecast(current, job)
        return self.next_fire.of(job)

    def resume(self, tenant: str, job_id: str, expected_version: int | None = None) -> Job:
        """Enable again; the slots the pause owes follow the catch-up policy (:func:`resumed`)."""
        for attempt in range(RESUME_TRIES):
            current = _current(self.store, tenant, job_id, expected_version)
            if current.state is JobState.ENABLED:
                return self.next_fire.of(current)
            if current.state is JobState.COMPLETED:
                raise JobConflictError(f"job {job_id!r} is completed; replace it to schedule it again")
            job, timers = defer_to_run(
                self.store,
                *resumed(current, self.clock.now(), self.layout),
                before=current,
                layout=self.layout,
            )
            try:
                self._write(job, current.version, timers)
            except JobConflictError:
                if expected_version is not None or attempt + 1 == RESUME_TRIES:
                    raise
                continue  # a poller recorded a slot the pause owes (a version bump): read it again
            with after_the_change(f"job {job_id!r}'s resume"):
                settle(self.store, self.layout, job, job.updated_at)
            self._forecast(current, job)
            return self.next_fire.of(job)
        raise AssertionError("unreachable")

    def delete(self, tenant: str, job_id: str, expected_version: int | None = None) -> None:
        """Delete the job (one the model cannot read included); its history stays until its TTL.

        Refused while an ``after()`` job names it. The children are checked before the delete's
        transaction, which conditions on the dependents count read with the job: a child linked
        in between fails it, and the check runs again (and names that child)."""
        for attempt in range(1, DELETE_TRIES + 1):
            current = _found_to_delete(self.store, tenant, job_id, expected_version)
            # Children would never fire again, silently: refused, as a calendar in use is
            if children := after_children(self.store, tenant, job_id):
                raise JobHasDependentsError(job_id, children)
            try:
                _delete_as_read(self.store, tenant, job_id, current, self.clock.now())
                break
            except VersionConflictError as exc:
                if exc.current_version == current.version and attempt < DELETE_TRIES:
                    continue  # only its links moved: a child may have been linked since the check
                raise JobConflictError(f"job {job_id!r} changed meanwhile; read it and try again") from exc
        if self.peaks is not None and isinstance(current, Job):
            self.peaks.undo(tenant, add=job_profile(current))  # its slots are no longer due
        if isinstance(current, Job):
            self._forecast(current, None)
            delete_released_parents(self.store, tenant, schedule_of(current).parents, self.clock.now())

    def rotate_secret(
        self, tenant: str, job_id: str, drop_previous: bool = False, expected_version: int | None = None
    ) -> tuple[Job, str | None]:
        """Rotate an HTTP job's webhook signing secret; returns the job and the new secret (once).

        The previous secret keeps signing (both signatures are sent, as Standard Webhooks
        rotation expects) until the next rotation, or until ``drop_previous`` ends it (then no
        new secret is made). The version is bumped (the spec is not), so ``If-Match`` guards a
        rotation and two at once cannot both win (one would hand out a secret that never signs).
        """
        current = _current(self.store, tenant, job_id, expected_version)
        if not signs_webhooks(current) or self.secrets is None:
            raise InvalidJobError(
                "only jobs with an http target or http alerts have a signing secret", field="target"
            )
        now = self.clock.now()
        update: dict[str, Any] = {"signing_secret_prev_enc": None}
        plain = None
        if not drop_previous:
            plain, stored = self.secrets.new_secret(tenant, job_id)
            update = {"signing_secret_enc": stored, "signing_secret_prev_enc": current.signing_secret_enc}
        job, timers = defer_to_run(
            self.store, *_next_version(current, update, now, self.layout), before=current, layout=self.layout
        )
        calendars = self.next_fire.calendars_of([job])  # the reply's: read before the write (QA29)
        self._write(job, current.version, timers)
        with after_the_change(f"job {job.id!r}'s new secret"):
            settle(self.store, self.layout, job, now)
        return self.next_fire.of(job, calendars), plain

    def trigger(
        self, tenant: str, job_id: str, request_key: str | None = None, first_slot: SlotRecorder | None = None
    ) -> str:
        """Run the job now as an extra slot (``manual_slot``); ``first_slot`` records it for the
        request's key and gives back the one recorded first (a retry after the first attempt died).

        Returns the slot key (``<instant>~<id>``), which is the execution's identity.
        """
        job = self.get(tenant, job_id)
        if job.state is JobState.DELETED:
            raise JobNotFoundError(f"job {job_id!r} not found")
        now = self.clock.now()
        slot = manual_slot(now, request_key)
        slot = first_slot(slot) if first_slot is not None else slot
        message = message_for(job, slot, now, 1, MessageKind.MANUAL, now)
        send_run_now(self.store, self.queues, self.routing.queue_for(job), self.layout, job, message, now)
        return slot

    # ------------------------------------------------------------------ helpers

    def _write(
        self,
        job: Job,
        expected_version: int,
        timers: list[Timer],
        previous_trigger_rate: int | None = None,
        parents_added: tuple[str, ...] = (),
        parents_removed: tuple[str, ...] = (),
        calendars: CalendarUses = NO_CALENDAR_USES,
        graph: GraphRead | None = None,
    ) -> None:
        try:
            self.store.replace_job(
                job,
                expected_version,
                timers,
                previous_trigger_rate=previous_trigger_rate,
                max_trigger_rate=self.max_trigger_rate,
                parents_added=parents_added,
                parents_removed=parents_removed,
                calendars=calendars,
                graph=graph,
            )
        except VersionConflictError as exc:
            if exc.current_version is None:
                raise JobNotFoundError(f"job {job.id!r} not found") from exc
            raise JobConflictError(f"job {job.id!r} changed meanwhile; read it and try again") from exc
