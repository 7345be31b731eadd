"""The storage port: jobs, timers, watermarks, executions and dependency records.

Two implementations share one test suite: :mod:`punctual.store.dynamo` (the real one,
proved under moto) and :mod:`punctual.store.memory` (fast logic tests, local benchmarks).
Every write that can race is conditional; a lost race raises a typed error, never
silently overwrites.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from punctual.models import Alert, AlertCondition, Execution, ExecutionStatus, Job, JobState
from punctual.store.keyring import TenantKeyRepository
from punctual.store.loads import MinuteLoadRepository
from punctual.store.progress import ProgressMark as ProgressMark  # (re-exported)
from punctual.store.progress import ProgressRepository
from punctual.store.progress import progress_of as progress_of  # (re-exported)
from punctual.store.quotas import TenantQuotaRepository
from punctual.store.reservations import BudgetReservationRepository
from punctual.timing.timers import Lane, Timer
from punctual.usecases.backfills import Backfill
from punctual.usecases.calendars import Calendar

# A deleted job's last version stays at its id longer than its timers or messages could matter.
TOMBSTONE_TTL = timedelta(days=400)


class StoreError(Exception):
    """Base of every storage error."""


class ConflictError(StoreError):
    """A conditional write lost: someone else changed the item first."""


class JobExistsError(ConflictError):
    """A job with this id already exists for this tenant."""


class VersionConflictError(ConflictError):
    """The job's version is not the one the caller expected."""

    def __init__(self, message: str, current_version: int | None = None) -> None:
        super().__init__(message)
        self.current_version = current_version


class GraphChangedError(ConflictError):
    """Another write gave a job of the tenant a new parent since the dependency graph was read, or
    a parent the write adds is not the job the check read (a cycle check may be out of date: check
    again)."""


@dataclass(frozen=True)
class GraphRead:
    """What a cycle check read (:meth:`JobRepository.replace_job`): the tenant's dependency graph
    version (:meth:`DependencyRepository.dependency_graph`), and the version of each parent the
    job gains (one deleted and created again at its id since has another, and may name the job)."""

    version: int
    parents: Mapping[str, int] = field(default_factory=dict)


class TenantLimitError(StoreError):
    """The tenant already has as many jobs as it may (``quota`` names the limit, ``limit`` its value)."""

    quota = "maxJobsPerTenant"

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit


class TriggerRateLimitError(TenantLimitError):
    """The job would take the tenant's scheduled triggers per minute past its quota.
    ``limit``, ``current`` and ``added`` are micro-triggers per minute (:mod:`punctual.security.quotas`)."""

    quota = "maxTriggersPerMinutePerTenant"

    def __init__(self, limit: int, current: int | None, added: int) -> None:
        from punctual.security.quotas import per_minute

        have = f"{per_minute(current)} already registered" if current is not None else "what is registered"
        super().__init__(
            f"tenant quota maxTriggersPerMinutePerTenant is {per_minute(limit)} scheduled triggers per"
            f" minute; this job would add {per_minute(added)} to {have}",
            limit,
        )
        self.current = current
        self.added = added


@dataclass(frozen=True)
class UnreadableJob:
    """A stored job that this version's model cannot read (stored by an older, laxer one).

    It is never dropped silently: lists show it with its ``reason``, and it can still be
    replaced (at ``version``) or deleted. ``doc`` is the stored document as far as it parses.
    """

    tenant: str
    id: str
    version: int
    state: str
    reason: str
    doc: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    signing_secret_enc: str | None = field(default=None, repr=False)
    signing_secret_prev_enc: str | None = field(default=None, repr=False)
    trigger_rate: int = 0  # what it counts in its tenant's trigger quota (micro-triggers a minute)
    dependents: int = 0  # after() children linked to it (a delete conditions on the count)


class UnreadableJobError(StoreError, ValueError):
    """Reading one job found an :class:`UnreadableJob` (a ``ValueError``, as pydantic's was)."""

    def __init__(self, job: UnreadableJob) -> None:
        super().__init__(f"stored job {job.id!r} cannot be read: {job.reason}")
        self.job = job


class TransactionConflictError(StoreError):
    """A write kept meeting another transaction on one of its items, through every retry.

    DynamoDB cancels a transaction that touches an item another transaction holds
    (``TransactionCanceledException``, reason ``TransactionConflict``) and refuses a plain write
    to such an item (``TransactionConflictException``); both stores retry that with backoff
    (:mod:`punctual.store.conflicts`) and raise this only when the conflict outlived the retries.
    Nothing of the write happened; the same request a moment later can succeed (the API answers
    503 with ``Retry-After``). It is not a :class:`ConflictError`: no condition failed.
    """

    retry_after_s = 1


class ItemTooLargeError(StoreError, ValueError):
    """A job would be stored in an item over DynamoDB's 400 KB (:mod:`punctual.store.dynamo.sizes`).

    ``field`` names the job's largest part, ``size`` and ``limit`` are bytes. Nothing was stored.
    """

    def __init__(self, message: str, field: str = "", size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.field = field
        self.size = size
        self.limit = limit


class ParentNotFoundError(StoreError):
    """A job write links its ``after(...)`` parent ``parent``, which is gone. Nothing was stored."""

    def __init__(self, parent: str) -> None:
        super().__init__(f"after(): parent job {parent!r} does not exist")
        self.parent = parent


class TransactionTooLargeError(StoreError, ValueError):
    """A job write over one DynamoDB transaction's 100 items (parents and calendars moved at once)."""


class LayoutMismatchError(StoreError):
    """This process's shard counts differ from the ones the table's timers were written with.

    A job's shard is a hash of its tenant and id modulo the shard count, so a process with other
    counts would write timers where no poller reads them and never read the existing ones.
    """


class ExecutionConflictError(ConflictError):
    """An execution record was not in the state the transition expected (``current``: as it is now,
    None when it does not exist)."""

    def __init__(self, message: str, current: Execution | None) -> None:
        super().__init__(message)
        self.current = current


class CalendarVersionError(ConflictError):
    """The calendar is not at the version the caller expected (``current_version``: None when absent)."""

    def __init__(self, message: str, current_version: int | None = None) -> None:
        super().__init__(message)
        self.current_version = current_version


class CalendarInUseError(ConflictError):
    """A calendar that jobs exclude cannot be deleted: ``jobs`` names them."""

    def __init__(self, name: str, jobs: Sequence[str], total: int | None = None) -> None:
        count = max(total or 0, len(jobs))  # ``total``: when ``jobs`` names only the first ones
        shown = ", ".join(jobs[:20]) + (f" and {count - 20} more" if count > 20 else "")
        super().__init__(f"calendar {name!r} is excluded by jobs {shown}: remove it from them first")
        self.name = name
        self.jobs = list(jobs)


class CalendarNotFoundError(StoreError):
    """A job names a calendar the tenant does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"calendar {name!r} does not exist")
        self.name = name


@dataclass(frozen=True)
class Expect:
    """The state an execution write requires; ``None`` fields are not checked."""

    statuses: frozenset[ExecutionStatus] = field(default_factory=frozenset)
    attempt: int | None = None
    owner: str | None = None
    check_owner: bool = False  # compare owner even when it is None (no owner yet)

    def matches(self, current: Execution | None) -> bool:
        if current is None:
            return False
        if self.statuses and current.status not in self.statuses:
            return False
        if self.attempt is not None and current.attempt != self.attempt:
            return False
        return not (self.check_owner or self.owner is not None) or current.owner == self.owner


@dataclass(frozen=True)
class Turn:
    """Whose turn it is to run, for a job whose overlap is ``skip`` or ``queue``.

    One item per job; every change is a conditional write on it, so two slots of one such
    job are never started at once. ``holder`` keeps the turn from its first attempt's start
    until the slot finally ends (a slot waiting for its retry keeps it); ``waiting`` are the
    slots queued behind it (``queue``), handed the turn oldest first.
    """

    holder: str | None = None
    since: datetime | None = None
    waiting: tuple[str, ...] = ()


JobKey = tuple[str, str]  # (tenant, job_id)
ExecutionKey = tuple[str, str, str]  # (tenant, job_id, slot)


T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    items: list[T]
    cursor: str | None  # opaque to callers above the store; None on the last page
    # Jobs of the page that could not be read, in id order among ``items`` (job lists only).
    unreadable: list[UnreadableJob] = field(default_factory=list)
    examined: int = 0  # job lists: the jobs read for the page, filtered out ones included


@dataclass(frozen=True)
class CalendarUses:
    """The calendar-use records a job write changes in its own transaction: the job is recorded
    as a user of each calendar in ``add`` (each must exist, else :class:`CalendarNotFoundError`
    and nothing is written) and no longer of each in ``drop``. So a job that excludes a calendar
    and the record that keeps the calendar from being deleted are written, or not, together."""

    add: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()

    @classmethod
    def between(cls, old: Iterable[str], new: Iterable[str]) -> CalendarUses:
        """From a job that excluded ``old`` to one that excludes ``new``."""
        kept = set(new)
        return cls(tuple(sorted(kept)), tuple(sorted(set(old) - kept)))


NO_CALENDAR_USES = CalendarUses()


class JobRepository(ABC):
    """Jobs: the job, its tenant's listing and counters (job count, trigger rate, API requests)."""

    @abstractmethod
    def create_job(
        self,
        job: Job,
        timer: Timer | None,
        max_jobs: int,
        max_trigger_rate: int | None = None,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
    ) -> None:
        """Store a new job, its first timer, its dependency links and its calendar uses atomically.

        ``job.trigger_rate`` is added to the tenant's total, which may not pass
        ``max_trigger_rate`` (None: no limit). ``parents`` (an ``after(...)`` job's) get the job
        as a dependent in the same transaction (see :meth:`set_dependents`): a job is never
        stored without its links.

        Raises
        ------
        JobExistsError
            A job with the same (tenant, id) exists.
        TenantLimitError
            The tenant already has ``max_jobs`` jobs.
        TriggerRateLimitError
            The tenant's total would pass ``max_trigger_rate``.
        CalendarNotFoundError
            A calendar in ``calendars.add`` does not exist.
        """

    @abstractmethod
    def get_job(self, tenant: str, job_id: str, consistent: bool = True) -> Job | None:
        """The job, or None when it does not exist (or was deleted).

        Raises :class:`UnreadableJobError` for a stored job the model cannot read.

        ``consistent=False`` reads at half the cost and may be a moment behind: callers that
        know the version they expect re-read consistently when it is older.
        """

    @abstractmethod
    def batch_get_jobs(self, keys: Iterable[JobKey], consistent: bool = True) -> dict[JobKey, Job]:
        """Many jobs at once; missing ones are absent from the result."""

    @abstractmethod
    def list_jobs(
        self,
        tenant: str,
        limit: int,
        cursor: str | None = None,
        state: JobState | None = None,
        tag: str | None = None,
    ) -> Page[Job]:
        """A page of the tenant's jobs ordered by id; ``tag`` is ``key`` or ``key=value``.

        ``cursor`` resumes the listing after that job id (the page's own cursor, or the id of
        any job a caller stopped at).

        A job the model cannot read goes to ``Page.unreadable`` (logged), never fails the page.
        """

    @abstractmethod
    def replace_job(
        self,
        job: Job,
        expected_version: int,
        timers: Sequence[Timer] = (),
        *,
        previous_trigger_rate: int | None = None,
        max_trigger_rate: int | None = None,
        parents_added: Sequence[str] = (),
        parents_removed: Sequence[str] = (),
        calendars: CalendarUses = NO_CALENDAR_USES,
        graph: GraphRead | None = None,
    ) -> None:
        """Write ``job`` (already at its new version) if the stored version is ``expected_version``,
        with its calendar uses in the same transaction. With ``graph`` (as a cycle check read it),
        the tenant's graph must still be at its version, and moves on by one, and each parent it
        lists still at its version, in the same transaction.

        With ``previous_trigger_rate`` (the stored job's ``trigger_rate``), the tenant's total
        moves by ``job.trigger_rate - previous_trigger_rate`` in the same write, and may not
        pass ``max_trigger_rate`` when it grows. The job becomes a dependent of
        ``parents_added`` and stops being one of ``parents_removed`` in the same transaction.

        Raises
        ------
        VersionConflictError
            The stored version differs, or the job does not exist.
        TriggerRateLimitError
            The tenant's total would pass ``max_trigger_rate``.
        CalendarNotFoundError
            A calendar in ``calendars.add`` does not exist.
        GraphChangedError
            The tenant's dependency graph, or a parent ``graph`` lists, moved on.
        """

    @abstractmethod
    def first_version(self, tenant: str, job_id: str) -> int:
        """The version a job created at ``job_id`` starts at: past a deleted one's (its tombstone,
        :meth:`delete_job`), else 1; versions, ETags and timers never repeat across incarnations."""

    @abstractmethod
    def delete_job(
        self,
        tenant: str,
        job_id: str,
        expected_version: int | None = None,
        trigger_rate: int = 0,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
        tombstone_until: int | None = None,
        expected_dependents: int | None = None,
    ) -> None:
        """Remove the job (and ``trigger_rate`` from its tenant's total, its calendar uses
        ``calendars.drop`` and its links as a dependent of ``parents``, in one transaction); its
        timers become stale. With ``tombstone_until`` (epoch seconds: :data:`TOMBSTONE_TTL` on),
        its ``expected_version`` stays at the id until then (:meth:`first_version`).
        Raises VersionConflictError on a mismatch, of the version or of ``expected_dependents``
        (its dependents count as read: a child linked since the caller's check fails the delete)."""

    def drop_listing_without_job(self, tenant: str, job_id: str) -> bool:  # docs/multi-region.md
        return False  # a listing with no job at its id removed? (none here: the listing is the jobs)

    @abstractmethod
    def tenant_trigger_rate(self, tenant: str) -> int:
        """The tenant's total of scheduled micro-triggers per minute."""

    @abstractmethod
    def count_request(self, tenant: str, window: str, limit: int, ttl_epoch_s: int) -> bool:
        """Count one API request of ``tenant`` in ``window``; False when ``limit`` were counted already."""

    @abstractmethod
    def add_skipped(self, tenant: str, job_id: str, count: int) -> None:
        """Count slots skipped by the catch-up or overlap policy (best effort, unconditional)."""


class TimerRepository(ProgressRepository):
    """Timers, the shards' watermarks and the pollers' progress marks (:mod:`.progress`)."""

    @abstractmethod
    def put_timers(self, timers: Sequence[Timer]) -> None:
        """Write timer rows, keyed by identity: a repeat writes the same row again (a no-op).

        Of two timers with one key, the one of the newer job version stands, whichever was
        written last: a replaced job's first timer takes the place of the old version's timer
        for the same slot, and never the other way round.
        """

    @abstractmethod
    def query_timers(
        self,
        lane: Lane,
        minute: datetime,
        shard: int,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[Timer]:
        """The bucket's timers with ``from_ms <= due <= to_ms``, in due order (strongly consistent)."""

    @abstractmethod
    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        """How many load timers one bucket holds (:data:`punctual.timing.timers.LOAD_KINDS`: the slots it
        hands to workers; a lease expiry is none), sizing a coming minute's pollers and workers."""

    @abstractmethod
    def get_watermarks(self, lane: Lane, shards: Sequence[int]) -> dict[int, datetime]:
        """Per shard, the oldest minute whose bucket is not known to be drained (absent if never set)."""

    @abstractmethod
    def advance_watermarks(self, lane: Lane, shards: Sequence[int], minute: datetime) -> None:
        """Move each shard's watermark forward to ``minute``; never backward."""


class ExecutionRepository(ABC):
    """Execution records (a slot's attempts, conditionally written) and the per-job turn."""

    @abstractmethod
    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        """Make ``slot`` the holder if the turn is free, already its, or held by ``replacing``
        (a holder found stale); on success it leaves ``waiting``. Returns the turn as it is.
        ``since`` is kept when the holder takes its turn again, else set to ``now``."""

    @abstractmethod
    def wait_for_turn(self, tenant: str, job_id: str, slot: str) -> None:
        """Add ``slot`` to the slots waiting for the turn (idempotent)."""

    @abstractmethod
    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        """If ``slot`` holds the turn, hand it to the oldest waiting slot (returned) or free it."""

    @abstractmethod
    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        """Write the execution record conditionally: ``expect=None`` creates it (it must not exist);
        otherwise the stored record must match ``expect``. ExecutionConflictError carries the current.
        Finding exactly ``execution`` (an owner's) is this write, applied, sent again: it succeeds."""

    @abstractmethod
    def get_execution(
        self, tenant: str, job_id: str, slot: str, live_at: int | None = None
    ) -> Execution | None:
        """``live_at`` (epoch s): a record whose TTL passed then is gone (DynamoDB deletes it lazily)."""

    @abstractmethod
    def batch_get_executions(
        self, keys: Iterable[ExecutionKey], consistent: bool = True
    ) -> dict[ExecutionKey, Execution]: ...

    @abstractmethod
    def list_executions(
        self,
        tenant: str,
        job_id: str,
        limit: int,
        cursor: str | None = None,
        status: ExecutionStatus | None = None,
        newest_first: bool = True,
        live_at: int | None = None,
    ) -> Page[Execution]:
        """A page of the job's history, newest slot first by default."""


class DependencyRepository(ABC):
    """Dependencies: a child's parents' successes per slot, a parent's dependants."""

    @abstractmethod
    def record_parent_success(
        self, tenant: str, child_id: str, slot: str, parent_id: str, ttl_epoch_s: int
    ) -> frozenset[str]:
        """Add ``parent_id`` to the parents that succeeded for (child, slot); return them all."""

    @abstractmethod
    def waiting_child_slots(self, tenant: str, child_id: str, limit: int) -> list[tuple[str, frozenset[str]]]:
        """The newest ``limit`` slots' items: those not dispatched, with the parents that succeeded."""

    @abstractmethod
    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        """Record (``present``) or remove ``child_id`` as a dependent of each parent, and keep
        each parent's ``dependents`` count (a worker finishing a job with none skips the query);
        the count moves only with the link. Job writes carry their links; this is for repairs."""

    @abstractmethod
    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        """The ids of jobs whose schedule is ``after(... parent_id ...)``."""

    @abstractmethod
    def dependency_graph(self, tenant: str) -> int:
        """The tenant's dependency graph version, strongly consistent: a job's write that gives it
        a parent it did not have checks for a cycle against the jobs as read after it, and passes
        it to :meth:`~JobRepository.replace_job` (two such writes cannot both land on one read)."""

    @abstractmethod
    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        """True exactly once per (child, slot): the caller that gets True dispatches it."""


@dataclass
class ScheduleGroup:
    """A tenant's schedule group (EventBridge Scheduler's grouping of schedules, with tags).

    ``state`` is ``ACTIVE``, or ``DELETING`` while its schedules are being deleted.
    """

    tenant: str
    name: str
    created_at: datetime
    updated_at: datetime
    state: str = "ACTIVE"
    tags: dict[str, str] = field(default_factory=dict)
    client_token: str | None = None  # of the request that created it: its retry is answered alike


class GroupExistsError(ConflictError):
    """A schedule group of that name exists already."""


class GroupConflictError(ConflictError):
    """The schedule group is gone, or changed meanwhile (its ``updated_at`` differs)."""


class ScheduleGroupRepository(ABC):
    """Schedule groups, per tenant, listed by name. The implicit ``default`` group is not stored."""

    @abstractmethod
    def create_group(self, group: ScheduleGroup) -> None:
        """Store a new group. Raises :class:`GroupExistsError` if the name is taken."""

    @abstractmethod
    def get_group(self, tenant: str, name: str) -> ScheduleGroup | None: ...

    @abstractmethod
    def list_groups(
        self, tenant: str, limit: int, cursor: str | None = None, prefix: str | None = None
    ) -> Page[ScheduleGroup]:
        """A page of the tenant's groups in name order, those starting with ``prefix`` only."""

    @abstractmethod
    def update_group(self, group: ScheduleGroup, expected_updated_at: datetime) -> None:
        """Write ``group`` (state, tags, updated_at) if it still has ``expected_updated_at``.

        Raises :class:`GroupConflictError` when it is gone or changed meanwhile.
        """

    @abstractmethod
    def delete_group(self, tenant: str, name: str) -> None:
        """Remove the group (no error if it is gone already)."""


@dataclass(frozen=True)
class Streak:
    """A job's failure streak as read: its first failed slot, how many failures joined it, and
    the latest of them (a close is conditional on ``first`` and ``failures`` as read)."""

    first: str
    failures: int
    last: str


class AlertRepository(ABC):
    """Alerts: one record per (job, slot, condition), a job's failure streak, rule throttles. Every
    method is a single conditional write or read, so that an alert is made once however often workers
    die or messages repeat."""

    @abstractmethod
    def create_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        """Create ``alert`` unless (job, key_slot, condition) has another. True: the caller delivers it."""

    @abstractmethod
    def take_over_alert(
        self, alert: Alert, previous_owner: str, stale_before: datetime, ttl_epoch_s: int
    ) -> bool:
        """Write ``alert`` (a new owner's copy of a stored one) if the stored alert is still
        SENDING, held by ``previous_owner``, claimed before ``stale_before`` (its worker died).
        True: the caller delivers what is left of it."""

    @abstractmethod
    def save_alert(self, alert: Alert, ttl_epoch_s: int, owner: str | None = None) -> bool:
        """Write the alert's progress or result if ``alert.owner`` (``owner``: a deleted job's alert's, then
        replaced) still owns it (False: taken over); a SENDING save with a later ``claimed_at`` renews it."""

    @abstractmethod
    def get_alert(
        self, tenant: str, job_id: str, key_slot: str, condition: AlertCondition
    ) -> Alert | None: ...

    @abstractmethod
    def list_alerts(self, tenant: str, job_id: str, limit: int, live_at: int | None = None) -> list[Alert]:
        """A job's alerts, newest slot first, at most ``limit``."""

    @abstractmethod
    def open_streak(self, tenant: str, job_id: str, slot: str, ttl_epoch_s: int) -> str:
        """Count a failure of ``slot`` in the job's streak (opening one at ``slot`` unless the job
        is failing already); returns the streak's first slot."""

    @abstractmethod
    def get_streak(self, tenant: str, job_id: str) -> Streak | None:
        """The job's current failure streak (None: not failing)."""

    @abstractmethod
    def replace_streak(self, tenant: str, job_id: str, expected: Streak, new: Streak | None) -> bool:
        """End the streak (``new`` None) or replace it with ``new``, only if it is still as
        ``expected`` was read (same first slot, no failure joined since). False otherwise."""

    @abstractmethod
    def throttle_alert(
        self, tenant: str, job_id: str, rule: int, now: datetime, interval_s: int, resolves: bool = False,
        since: datetime | None = None,
    ) -> int | None:  # fmt: skip
        """``min_interval_seconds``: None when rule ``rule`` sent within ``interval_s`` before ``now``
        (counted held back), else marked sent and the count held back since (reset); ``resolves``
        (``recovered``): sent anyway once per alert the rule sent since its last resolving one.
        ``since``: a mark made before it (a deleted job's at this id) holds back no count (0)."""


class CalendarRepository(ABC):
    """Exclusion calendars (:mod:`punctual.usecases.calendars`) and the jobs that use each one."""

    @abstractmethod
    def put_calendar(self, calendar: Calendar, expected_version: int | None) -> None:
        """Create (``expected_version`` None: it must not exist) or replace (it must be at
        ``expected_version``) ``calendar``, already at its new version.

        Raises :class:`CalendarVersionError` with the stored version otherwise.
        """

    @abstractmethod
    def get_calendar(self, tenant: str, name: str, consistent: bool = True) -> Calendar | None: ...

    @abstractmethod
    def batch_get_calendars(
        self, keys: Iterable[tuple[str, str]], consistent: bool = False
    ) -> dict[tuple[str, str], Calendar]:
        """Many calendars at once, keyed (tenant, name); missing ones are absent."""

    @abstractmethod
    def list_calendars(self, tenant: str, limit: int, cursor: str | None = None) -> Page[Calendar]:
        """A page of the tenant's calendars ordered by name."""

    @abstractmethod
    def delete_calendar(self, tenant: str, name: str, expected_version: int | None = None) -> None:
        """Delete the calendar if no job uses it (and it is at ``expected_version`` when given).

        Raises
        ------
        CalendarInUseError
            Jobs use it (it names them).
        CalendarVersionError
            It does not exist (``current_version`` None) or is at another version.
        """

    @abstractmethod
    def use_calendars(self, tenant: str, job_id: str, names: Sequence[str], present: bool) -> None:
        """Record (``present``) or remove ``job_id`` as a user of each calendar, on its own (a
        repair; a job write carries its uses in its own transaction, :class:`CalendarUses`).

        Recording is conditional on the calendar existing (:class:`CalendarNotFoundError`).
        """

    @abstractmethod
    def calendar_users(self, tenant: str, name: str) -> list[str]:
        """The ids of the jobs recorded as users of the calendar."""

    @abstractmethod
    def drop_calendar_user(self, tenant: str, name: str, job_id: str, job_version: int | None) -> bool:
        """Remove ``job_id`` as a user of the calendar, only while that job is still as it was
        read: absent (``job_version`` None) or at ``job_version`` (one that does not name the
        calendar). One transaction, so a job written meanwhile keeps its use. False otherwise."""


class BackfillRepository(ABC):
    """Backfill records (:mod:`punctual.usecases.backfills`), one per (job, range)."""

    @abstractmethod
    def create_backfill(self, backfill: Backfill, replacing: Backfill | None = None) -> Backfill:
        """Store ``backfill`` if no record of its id exists (or, with ``replacing``, if the stored
        one is still ``replacing``); return the stored record, whichever request wrote it."""

    @abstractmethod
    def get_backfill(self, tenant: str, job_id: str, backfill_id: str) -> Backfill | None: ...

    @abstractmethod
    def update_backfill(self, backfill: Backfill, expected_revision: int) -> bool:
        """Write ``backfill`` if the stored one is at ``expected_revision``; False when it is not."""


class AuditRepository(ABC):
    """What the chain auditor reads (:mod:`punctual.auditing`): a segment's jobs and running
    backfills, and a job's turn. A job's segment is its far timer shard
    (:meth:`punctual.timing.timers.TimerLayout.shard_for`), so a segment's far timers are its own."""

    @abstractmethod
    def audit_page(
        self, segment: int, segments: int, limit: int, cursor: str | None = None
    ) -> Page[Job | Backfill]:
        """A page of the jobs (every state) and RUNNING backfills of audit segment ``segment`` of
        ``segments``, in key order, eventually consistent; ``cursor`` continues a page.

        A job the model cannot read goes to ``Page.unreadable``, never fails the page.
        """

    @abstractmethod
    def get_turn(self, tenant: str, job_id: str) -> Turn | None:
        """The job's overlap turn (None: it has none), strongly consistent."""


class JobStore(
    JobRepository,
    TimerRepository,
    ExecutionRepository,
    DependencyRepository,
    ScheduleGroupRepository,
    AlertRepository,
    CalendarRepository,
    BackfillRepository,
    AuditRepository,
    TenantQuotaRepository,
    MinuteLoadRepository,
    TenantKeyRepository,
    BudgetReservationRepository,
):
    """Everything Punctual persists, every aggregate on one table. Instants are aware UTC datetimes.

    Each aggregate has its own port (:class:`JobRepository`, :class:`TimerRepository`,
    :class:`ExecutionRepository`, :class:`DependencyRepository`, :class:`ScheduleGroupRepository`)
    and its DynamoDB and in-memory implementations (``store/dynamo/``, ``store/memory/``), run
    through one contract suite (``tests/integration/test_store.py``).
    """
