"""The worker's records built without validating their values again equal the validated ones.

A slot's first RUNNING record (``running(None, ...)``), the attempt entry that closes an attempt
(``closed_attempt``) and the ended record (``ended``) take values already of their types as they
are. Over generated messages and records (odd texts, instants in other zones or naive, values of
other types a message read from a queue or an unvalidated copy could hold) each equals what
``model_validate`` / ``model_copy(update=...)`` make: the values and their types, the ``__dict__``
order, the fields set, no extra or private state, the JSON dump; or fails the same way.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from punctual.dispatch.queues import DispatchMessage
from punctual.execution import records
from punctual.execution.records import _message_fields, running
from punctual.models import AttemptRecord, Execution, ExecutionStatus, executions
from punctual.models.executions import typed_execution
from punctual.timing.timers import slot_key

_odd_texts = st.text(max_size=6) | st.sampled_from(['"', "\\\n", "\ud800", "𝄞", ""])
_naive = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1))
_utc = _naive.map(lambda at: at.replace(tzinfo=UTC))
_zoned = st.builds(
    lambda at, zone: at.replace(tzinfo=zone),
    _naive,
    st.sampled_from(
        [timezone(timedelta(hours=2)), timezone(timedelta(0)), ZoneInfo("UTC"), ZoneInfo("Asia/Tokyo")]
    ),
)
_instants = _utc | _zoned
_ODD: list[Any] = [True, 0, 1.0, "2", None, b"x", ExecutionStatus.FAILED]


def _same(fast: BaseModel, slow: BaseModel) -> None:
    """Built the same way: values (and their types), order, fields set, extra and private state."""
    assert fast == slow
    assert list(fast.__dict__.items()) == list(slow.__dict__.items())
    assert [type(v) for v in fast.__dict__.values()] == [type(v) for v in slow.__dict__.values()]
    assert fast.model_fields_set == slow.model_fields_set
    assert type(fast.model_fields_set) is type(slow.model_fields_set)
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _outcome(fast.model_dump_json) == _outcome(slow.model_dump_json)


def _outcome(make: Any) -> tuple[str, Any]:
    try:
        return "ok", make()
    except Exception as exc:  # (the error is what is compared)
        return "error", type(exc)


@st.composite
def messages(draw: st.DrawFn) -> DispatchMessage:
    at = draw(_instants)
    scheduled = draw(st.sampled_from([at.isoformat(), slot_key(at), at.replace(tzinfo=None).isoformat()]))
    message = DispatchMessage(
        tenant=draw(st.sampled_from(["default", "acme"]) | _odd_texts),
        job_id=draw(st.sampled_from(["job-1"]) | _odd_texts),
        slot=draw(st.sampled_from([slot_key(at), slot_key(at) + "~m-1", "odd"])),
        scheduled_at=scheduled,
        attempt=draw(st.integers(1, 200)),
        job_version=draw(st.integers(1, 10**6)),
        kind=draw(st.sampled_from(["fire", "manual", "backfill", "retry"])),
        released_at=at.isoformat(),
        backfill=draw(st.sampled_from(["", "bf-1", "bf-2+", "bf-3.x+"])),
    )
    if draw(st.integers(0, 4)) == 0:  # a value of another type, as a body read from a queue may hold
        name = draw(st.sampled_from(["tenant", "job_id", "slot", "attempt", "job_version"]))
        object.__setattr__(message, name, draw(st.sampled_from(_ODD)))
    return message


def _validated_running(
    message: DispatchMessage, now: datetime, lease_s: int, more: dict[str, Any], owner: str
) -> Execution:
    """The record as running(None, ...) validated it before."""
    fields = _message_fields(message, ExecutionStatus.RUNNING)
    fields.update(
        {
            "status": ExecutionStatus.RUNNING,
            "started_at": now,
            "finished_at": None,
            "error": None,
            "result": None,
            "owner": owner,
            "lease_until": now + timedelta(seconds=lease_s),
            **more,
        }
    )
    return Execution.model_validate(fields)


_MORE = st.fixed_dictionaries(
    {},
    optional={
        "attempt": st.integers(1, 9) | st.sampled_from(_ODD),
        "blocked_by": st.none() | _odd_texts | st.sampled_from(_ODD),
        "error": st.none() | st.sampled_from(_ODD),
        "releases": st.integers(0, 3),
    },
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), _instants | _naive, st.integers(1, 3600), _MORE)
def test_a_first_running_record_is_the_validated_one(
    message: DispatchMessage, now: datetime, lease_s: int, more: dict[str, Any]
) -> None:
    with mock.patch.object(records, "new_owner", return_value="f" * 32):
        fast = _outcome(lambda: running(None, message, now, lease_s, **more))
    slow = _outcome(lambda: _validated_running(message, now, lease_s, more, "f" * 32))
    assert fast[0] == slow[0]
    if fast[0] == "error":
        assert fast == slow
    else:
        _same(fast[1], slow[1])


@settings(max_examples=200, deadline=None)
@given(_utc, st.integers(1, 9), st.booleans())
def test_the_common_first_start_takes_the_typed_path(at: datetime, attempt: int, backfill: bool) -> None:
    # Given a claim's usual first start (a message as the poller sends it, the clock's UTC now)
    message = DispatchMessage(
        tenant="default",
        job_id="job-1",
        slot=slot_key(at),
        scheduled_at=slot_key(at),
        attempt=attempt,
        job_version=3,
        kind="fire",
        released_at=slot_key(at),
        backfill="bf-1+" if backfill else "",
    )
    # Then its record is built from its values as they are, not validated
    with mock.patch.object(Execution, "model_validate", side_effect=AssertionError("validated")):
        record = running(None, message, at, 60, attempt=attempt, blocked_by=None)
    _same(
        record,
        _validated_running(message, at, 60, {"attempt": attempt, "blocked_by": None}, record.owner or ""),
    )


_attempts = st.fixed_dictionaries(
    {"attempt": st.integers(1, 20), "status": st.sampled_from(list(ExecutionStatus))},
    optional={"started_at": _instants, "finished_at": _instants, "error": _odd_texts, "owner": _odd_texts},
).map(AttemptRecord.model_validate)


@st.composite
def running_records(draw: st.DrawFn) -> Execution:
    at = draw(_instants)
    record = Execution(
        job_id="j",
        slot=slot_key(at),
        scheduled_at=at,
        status=ExecutionStatus.RUNNING,
        attempt=draw(st.integers(1, 30)),
        started_at=draw(st.none() | _instants),
        lease_until=draw(st.none() | _instants),
        owner=draw(st.none() | _odd_texts),
        attempts=draw(st.lists(_attempts, max_size=12)),
        error=draw(st.none() | _odd_texts),
        result=draw(st.none() | _odd_texts),
        releases=draw(st.integers(0, 3)),
    )
    if draw(st.integers(0, 3)) == 0:  # a value an unvalidated copy put in
        name = draw(st.sampled_from(["attempt", "started_at", "owner"]))
        record = record.model_copy(update={name: draw(st.sampled_from([*_ODD, datetime(2026, 1, 1)]))})
    return record


def _ended_by_model_copy(
    record: Execution,
    status: ExecutionStatus,
    now: datetime,
    error: str | None,
    attempt_status: ExecutionStatus | None,
    more: dict[str, Any],
) -> Execution:
    """Execution.ended as it was: the attempt validated, the record copied by model_copy."""
    closed = AttemptRecord.model_validate(
        {
            "attempt": record.attempt,
            "status": attempt_status or status,
            "started_at": record.started_at,
            "finished_at": now,
            "error": error,
            "owner": record.owner,
        }
    )
    return BaseModel.model_copy(
        record,
        update={
            "status": status,
            "finished_at": now,
            "lease_until": None,
            "error": error,
            "attempts": Execution.bounded([*record.attempts, closed]),
            **more,
        },
    )


_END_MORE = st.fixed_dictionaries(
    {},
    optional={
        "result": st.none() | _odd_texts,
        "retry_after_s": st.none() | st.floats(0, 100),
        "attempts": st.just([]),
        "finished_at": _instants,
        "not_a_field": st.just(1),
    },
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    running_records(),
    st.sampled_from(list(ExecutionStatus)) | st.sampled_from(["FAILED", 3]),
    _instants | _naive | st.sampled_from(["2026-01-01T00:00:00Z", 5]),
    st.none() | _odd_texts | st.sampled_from(_ODD),
    st.none() | st.sampled_from(list(ExecutionStatus)),
    _END_MORE,
)
def test_an_ended_record_is_the_validated_entry_and_pydantics_copy(
    record: Execution,
    status: Any,
    now: Any,
    error: Any,
    attempt_status: ExecutionStatus | None,
    more: dict[str, Any],
) -> None:
    before = list(record.__dict__.items()), set(record.model_fields_set), list(record.attempts)
    fast = _outcome(lambda: record.ended(status, now, error, attempt_status=attempt_status, **more))
    slow = _outcome(lambda: _ended_by_model_copy(record, status, now, error, attempt_status, more))
    assert fast[0] == slow[0]
    if fast[0] == "error":
        assert fast == slow
    else:
        _same(fast[1], slow[1])
        for mine, theirs in zip(fast[1].attempts, slow[1].attempts, strict=True):
            _same(mine, theirs)
    # And the record ended is left as it was
    assert (list(record.__dict__.items()), record.model_fields_set, record.attempts) == before


@settings(max_examples=300, deadline=None)
@given(running_records(), st.sampled_from(list(ExecutionStatus)), _instants, st.none() | _odd_texts)
def test_a_closed_attempt_is_the_validated_one(
    record: Execution, status: ExecutionStatus, now: datetime, error: str | None
) -> None:
    fast = _outcome(lambda: record.closed_attempt(status, now, error))
    slow = _outcome(
        lambda: AttemptRecord.model_validate(
            {
                "attempt": record.attempt,
                "status": status,
                "started_at": record.started_at,
                "finished_at": now,
                "error": error,
                "owner": record.owner,
            }
        )
    )
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        _same(fast[1], slow[1])
    else:
        assert fast == slow


def test_a_typed_record_takes_every_default_as_validation_does() -> None:
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    fields = {"job_id": "j", "slot": "s", "scheduled_at": at, "status": ExecutionStatus.QUEUED}
    typed, validated = typed_execution(dict(fields)), Execution.model_validate(dict(fields))
    _same(typed, validated)
    other = typed_execution(dict(fields))
    assert other.attempts is not typed.attempts  # each record its own list


def test_the_typed_builds_know_the_models() -> None:
    # The typed builds know the models' fields; a changed model turns them off (every record is
    # then validated) until they follow.
    assert executions._TYPED_BUILDS
