"""Executions: one run of one slot, its attempts, and the status transitions allowed between them.

Every transition is a conditional write; :data:`TRANSITIONS` is the one table of which are legal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    Field,
)
from pydantic_core import PydanticUndefined

from punctual.models.base import MAX_ATTEMPT_RECORDS, plain_model

_object_setattr = object.__setattr__
# The slots every pydantic model has, set as object.__setattr__ sets them, without its look-up.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__

# The error of a run its worker handed back at shutdown (punctual.execution.lease): it goes on
# as its next attempt.
RELEASED_NOTE = "released: the worker shut down before the run ended"
# A record counts as an earlier job's at the same id (run anew by a backfill) only when it is older
# than the job's creation by more than this: the two instants come from different nodes' clocks.
EARLIER_JOB_MARGIN = timedelta(seconds=60)


class ExecutionStatus(StrEnum):
    """An execution's status: QUEUED, RUNNING, then SUCCEEDED, FAILED, TIMED_OUT, RETRY_WAIT (a retry
    is due), SKIPPED (overlap, or the job was paused), MISSED (catch-up policy or window), EXCLUDED
    (the day is in a calendar the job excludes) or SUPERSEDED (the job's spec changed first)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    RETRY_WAIT = "RETRY_WAIT"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"  # never run: the catch-up policy, its window, or a paused/deleted job (see error)
    EXCLUDED = "EXCLUDED"  # never run: the day is in a calendar the job excludes (error names it)
    # Not run (or not retried) because the job's spec changed first; a release of the slot for
    # the new spec may still run it.
    SUPERSEDED = "SUPERSEDED"

    @property
    def terminal(self) -> bool:
        # A set: a tuple of seven was compared member by member, several times a trigger.
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.SKIPPED,
        ExecutionStatus.MISSED,
        ExecutionStatus.EXCLUDED,
        ExecutionStatus.SUPERSEDED,
    }
)


class IllegalTransition(Exception):
    """A status change the execution state machine does not allow (a bug, never a race)."""

    def __init__(self, old: ExecutionStatus | None, new: ExecutionStatus) -> None:
        super().__init__(f"illegal execution transition {old.value if old else 'none'} -> {new.value}")
        self.old = old
        self.new = new


_S = ExecutionStatus
# A slot started and not ended: waiting for its turn or its retry, or running.
IN_FLIGHT = frozenset({_S.QUEUED, _S.RUNNING, _S.RETRY_WAIT})
# The execution record's state machine: every status a stored status (None: no record yet)
# may be written as next. Every write of a record is checked against it (check_transition).
TRANSITIONS: dict[ExecutionStatus | None, frozenset[ExecutionStatus]] = {
    # MISSED is born as it is: the poller records a slot the catch-up policy or its window drops.
    # EXCLUDED is born as it is too: the poller found the slot's day in an excluded calendar.
    None: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.MISSED, _S.EXCLUDED, _S.SUPERSEDED}),
    # A slot waiting for its turn or its retry is superseded when the job's spec changes first.
    _S.QUEUED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED}),
    # RETRY_WAIT -> FAILED: its retry is not started (due past max_age_seconds, or the job paused).
    _S.RETRY_WAIT: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED, _S.FAILED}),
    # RUNNING -> RUNNING: a heartbeat, or a takeover by a new owner as the next attempt.
    # RUNNING -> SUPERSEDED: a lost run's takeover after the job's spec changed.
    _S.RUNNING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.TIMED_OUT, _S.RETRY_WAIT, _S.SUPERSEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.TIMED_OUT: frozenset(),
    _S.SKIPPED: frozenset(),
    _S.EXCLUDED: frozenset(),
    # MISSED is final for the scheduler (the claim drops any message of the slot); only a
    # backfill, which a user asks for, runs such a slot after all.
    _S.MISSED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED}),
    # A release of the slot for the job's new spec runs it.
    _S.SUPERSEDED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED}),
}


_NOT_RUN = (ExecutionStatus.MISSED, ExecutionStatus.SUPERSEDED)


def check_transition(old: ExecutionStatus | None, new: ExecutionStatus) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is an edge of :data:`TRANSITIONS`."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(old, new)


class _ShallowCopy(BaseModel):
    """``copy.copy`` and ``model_copy`` as pydantic does them, faster.

    The worker copies an execution record twice a trigger (started, ended). Pydantic's
    ``__copy__`` goes through ``copy.copy`` for each of the three dicts and sets, and its
    ``model_copy`` copies the record and then updates the copy; these models have no private
    attributes and keep no extra fields, so the copy is the same made directly.
    """

    def __copy__(self) -> Self:
        cls = type(self)
        m = cls.__new__(cls)
        _object_setattr(m, "__dict__", self.__dict__.copy())
        extra = self.__pydantic_extra__
        _object_setattr(m, "__pydantic_extra__", None if extra is None else extra.copy())
        _object_setattr(m, "__pydantic_fields_set__", self.__pydantic_fields_set__.copy())
        private = getattr(self, "__pydantic_private__", None)
        if private is not None:
            private = {k: v for k, v in private.items() if v is not PydanticUndefined}
        _object_setattr(m, "__pydantic_private__", private)
        return m

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Pydantic's ``model_copy`` (``update`` not validated, its keys added to the fields
        set); a shallow copy with an update is made in one step (~0.3 µs less a copy)."""
        if deep or not update or self.__pydantic_extra__ is not None:
            return super().model_copy(update=update, deep=deep)
        values = self.__dict__.copy()
        values.update(update)
        m = self._typed(values, self.__pydantic_fields_set__ | update.keys())
        private = getattr(self, "__pydantic_private__", None)
        if private is not None:
            private = {k: v for k, v in private.items() if v is not PydanticUndefined}
            _object_setattr(m, "__pydantic_private__", private)
        return m

    @classmethod
    def _typed(cls, values: dict[str, Any], fields_set: set[str]) -> Self:
        """The record ``model_validate`` makes of values already of their fields' types, not
        validated again: ``values`` holds every field, in the model's order (its ``__dict__``),
        ``fields_set`` the names validation was given (the models have no extra fields, no
        private attributes)."""
        m = cls.__new__(cls)
        _set_dict(m, values)
        _set_extra(m, None)
        _set_fields_set(m, fields_set)
        _set_private(m, None)
        return m


class AttemptRecord(_ShallowCopy):
    """One past attempt of an execution, kept in a bounded list on the record."""

    attempt: int
    status: ExecutionStatus
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    error: str | None = None
    owner: str | None = None


class Execution(_ShallowCopy):
    """One slot of one job: the record every attempt of that slot writes to."""

    job_id: str
    tenant: str = "default"
    slot: str  # the slot key, e.g. 2026-11-30T09:32:00Z (manual triggers add ~<id>)
    scheduled_at: AwareDatetime
    attempt: int = 1
    status: ExecutionStatus
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    error: str | None = None
    lease_until: AwareDatetime | None = None
    owner: str | None = None
    job_version: int = 1
    attempts: list[AttemptRecord] = Field(default_factory=list)
    result: str | None = None
    # Attempts a worker handed back on shutdown, or deferred because KMS or STS failed before the
    # call (punctual.execution.finish): they do not count against max_attempts.
    releases: int = 0
    # Overlap: the slot that was still running when this one was SKIPPED or QUEUED. The next
    # slot follows this pointer, so the overlap check reads O(1) items, not the job's history.
    blocked_by: str | None = None
    # Backfill (punctual.backfill): the id of the backfill that ran this slot, and whether its
    # after() dependants run too when it succeeds.
    backfill: str | None = None
    backfill_dependants: bool = False
    # A range record (MISSED): it stands for ``slot_count`` slots, ``slot`` to ``last_slot``.
    last_slot: str | None = None
    slot_count: int = 1
    # RETRY_WAIT: the receiver's Retry-After hint (seconds) its retry instant was computed with, so
    # that a repeat of the attempt's after-effects recomputes the same instant (QA: it left it out)
    retry_after_s: float | None = None
    # A chain repair's MISSED range: when the repair had told of it (alert, children's records,
    # skipped count, events), so that a repair after it tells only of a range left untold
    told_at: AwareDatetime | None = None

    @property
    def first_instant(self) -> datetime:
        """When the slot's first attempt began; for a record never started (MISSED, SKIPPED, ...),
        when it was written (``finished_at``), else its slot's instant."""
        first = self.attempts[0].started_at if self.attempts else self.started_at
        return first or self.finished_at or self.scheduled_at

    def before_job(self, created: datetime) -> bool:
        """Whether this record is older than the job created at ``created``: an earlier job's at
        the same id (a job deleted and created again, as an EventBridge schedule under its name).
        A job has no slot before its creation but the ones it backfills, and those start (or are
        recorded) after it."""
        return self.first_instant < created

    def shown_as_an_earlier_jobs(
        self, created: datetime, spec_since: int, first_version: Callable[[], int]
    ) -> bool:
        """Whether the API and the console show this record as an earlier job's at the id of the job
        created at ``created`` (``job_deleted``): it began (or was written) before that creation,
        and began more than :data:`EARLIER_JOB_MARGIN` before it or was released for a version
        before the job's first (``first_version``: :meth:`JobStore.first_version`; versions never
        repeat across a job id's incarnations). Read only for a record released for an older spec
        than the job's (``spec_since``): one of its current spec is its own. QA32: a run-now started
        just after the creation by a worker whose clock was behind the API's showed as the deleted
        job's (the console hid it); review: so did it, of any job, once the job's spec was edited."""
        if not self.before_job(created):
            return False
        if self.first_instant < created - EARLIER_JOB_MARGIN:
            return True
        return self.job_version < spec_since and self.job_version < first_version()

    def of_an_earlier_job(self, created: datetime) -> bool:
        """Whether this record ended before the job created at ``created`` existed, so that a backfill
        of that job runs its slot anew: its first attempt began (or its slot came) more than
        :data:`EARLIER_JOB_MARGIN` before the creation, so no clock skew between the nodes that
        wrote the two instants makes one of the job's own records look older."""
        return self.status.terminal and self.first_instant < created - EARLIER_JOB_MARGIN

    def left_to_backfill(self, created: datetime) -> bool:
        """Whether a backfill of the job created at ``created`` runs this record's slot: it was not
        run (MISSED, or SUPERSEDED by a spec change first), or it is an earlier job's."""
        return self.status in _NOT_RUN or self.of_an_earlier_job(created)

    @property
    def retry_origin(self) -> datetime:
        """Where ``retry.max_age_seconds`` counts from: the slot's instant, or for a backfilled
        slot (whose instant is long past by design) the start of its first attempt."""
        return self.first_instant if self.backfill else self.scheduled_at

    def closed_attempt(self, status: ExecutionStatus, now: datetime, error: str | None) -> AttemptRecord:
        """The entry of the attempt list that says how this record's current attempt ended:
        the one place an attempt record is made from a running attempt. Its values are the
        record's and the caller's, as a rule already of their types (an int, a status, UTC
        instants, strings): then taken as they are (what validation would leave them), else
        validated."""
        v = self.__dict__
        values = {
            "attempt": v["attempt"],
            "status": status,
            "started_at": v["started_at"],
            "finished_at": now,
            "error": error,
            "owner": v["owner"],
        }
        if (
            _TYPED_BUILDS
            and type(values["attempt"]) is int
            and type(status) is ExecutionStatus
            and utc_instant(now)
            and (values["started_at"] is None or utc_instant(values["started_at"]))
            and (error is None or type(error) is str)
            and (values["owner"] is None or type(values["owner"]) is str)
        ):
            return AttemptRecord._typed(values, set(_ATTEMPT_FIELDS))
        return AttemptRecord.model_validate(values)  # (the same as AttemptRecord(...), a frame less)

    @staticmethod
    def bounded(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
        """``attempts`` bounded as the record keeps them: the first and the latest."""
        if len(attempts) <= MAX_ATTEMPT_RECORDS:
            return attempts
        return [attempts[0], *attempts[-(MAX_ATTEMPT_RECORDS - 1) :]]

    def ended(
        self,
        status: ExecutionStatus,
        now: datetime,
        error: str | None,
        *,
        attempt_status: ExecutionStatus | None = None,
        **more: Any,
    ) -> Execution:
        """This record with its current attempt ended as ``status`` (the slot's status) and
        listed as ``attempt_status`` (default: the same); ``more`` sets further fields. Built, not
        checked: the write (which may be fenced off) checks the transition."""
        closed = self.closed_attempt(attempt_status or status, now, error)
        return self.model_copy(  # (the shallow copy in one step: _ShallowCopy.model_copy)
            update={
                "status": status,
                "finished_at": now,
                "lease_until": None,
                "error": error,
                "attempts": self.bounded([*self.attempts, closed]),
                **more,
            }
        )


_ATTEMPT_FIELDS = frozenset(AttemptRecord.model_fields)


def utc_instant(value: Any) -> bool:
    """Whether ``value`` is a UTC instant as validation leaves one (an ``AwareDatetime`` field
    keeps such a ``datetime`` as it is): every clock's, and every instant read from a ``Z`` text."""
    return type(value) is datetime and value.tzinfo is UTC


def typed_execution(fields: dict[str, Any]) -> Execution:
    """The record ``Execution.model_validate(fields)`` makes, for ``fields`` the caller checked
    are of their types already (a ``str``, an ``int``, a ``bool``, an :class:`ExecutionStatus`, a
    :func:`utc_instant`, None where the field allows it; every required field given): the
    defaults filled in as validation fills them, nothing validated again (validated, should the
    model have changed from what this build knows)."""
    if not _TYPED_BUILDS:
        return Execution.model_validate(fields)
    values = _EXECUTION_DEFAULTS.copy()
    values["attempts"] = []  # (its factory's)
    values.update(fields)
    return Execution._typed(values, set(fields))


# Every field's default in the model's order (a required field's place held by None).
_EXECUTION_DEFAULTS: dict[str, Any] = {
    name: None if field.is_required() or field.default_factory is not None else field.default
    for name, field in Execution.model_fields.items()
}
# The typed builds know the models as they are: an attempt's six fields (closed_attempt gives
# each, in order), the record's required fields (every caller of typed_execution gives them) and
# its one field with a factory. A model changed otherwise: every record is validated, until they
# follow (tests/unit/test_execution_record_builders.py fails meanwhile).
_TYPED_BUILDS = (
    plain_model(Execution)
    and plain_model(AttemptRecord)
    and list(AttemptRecord.model_fields)
    == ["attempt", "status", "started_at", "finished_at", "error", "owner"]
    and {name for name, field in Execution.model_fields.items() if field.is_required()}
    == {"job_id", "slot", "scheduled_at", "status"}
    and {name for name, field in Execution.model_fields.items() if field.default_factory is not None}
    == {"attempts"}
)
