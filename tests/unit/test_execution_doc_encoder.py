"""The execution record's document, written field by field (``_lean_document``), is pydantic's text.

``record_attributes`` writes a record's document itself for the common shape and leaves anything
unusual to pydantic's ``model_dump_json(exclude_defaults=True, exclude=...)``, the way it was
written before. Over generated records (every status, optional fields set and not, text with
quotes, escapes, control characters, non-ASCII and lone surrogates, instants with microseconds
and in other zones, attempt lists, values of odd types put in by an unvalidated copy) the document
is byte for byte pydantic's, or pydantic's error; the common shape does take the fast path; and
what is written reads back as the record.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.store.dynamo import execution_docs
from punctual.store.dynamo.execution_docs import (
    _at_slot_instant,
    _lean_document,
    execution_from_item,
    record_attributes,
)
from punctual.timing.timers import slot_key

# Text pydantic (serde_json) and json's encoder could write differently: quotes, backslashes, every
# control character, DEL, line and paragraph separators, non-ASCII of every width, lone surrogates.
_ODD = ['"', "\\", "/", "\x7f", "\u2028", "\u2029", "é", "€", "𝄞", "\ud800", "\udfff", "<>&'"]
_odd_texts = st.lists(
    st.sampled_from(_ODD) | st.characters(max_codepoint=0x1F) | st.text(max_size=4), max_size=6
).map("".join)
_plain_texts = st.text(alphabet="abcXYZ019-_:.~ ", max_size=12)
_texts = _plain_texts | _odd_texts | st.text(max_size=8)

_ZONES = [
    UTC,
    UTC,
    UTC,
    timezone(timedelta(0)),
    timezone(timedelta(hours=5, minutes=30)),
    timezone(-timedelta(hours=3, minutes=7, seconds=5)),
    timezone(timedelta(hours=1, microseconds=7)),
    ZoneInfo("Europe/Paris"),
    ZoneInfo("UTC"),
]
_instants = st.builds(
    lambda naive, zone, whole: naive.replace(tzinfo=zone, microsecond=0 if whole else naive.microsecond),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from(_ZONES),
    st.booleans(),
)
_common_instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
_any_instants = _common_instants | _instants
_statuses = st.sampled_from(list(ExecutionStatus))

_attempts = st.builds(
    AttemptRecord,
    attempt=st.integers(min_value=-3, max_value=2**70),
    status=_statuses,
    started_at=st.none() | _any_instants,
    finished_at=st.none() | _any_instants,
    error=st.none() | _texts,
    owner=st.none() | _texts,
)


@st.composite
def records(draw: st.DrawFn) -> Execution:
    """Records of every shape: each optional field left out or set, instants in any zone."""

    def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.none() | strategy

    at = draw(_any_instants)
    fields: dict[str, Any] = {
        "job_id": draw(_texts),
        "slot": draw(st.sampled_from([slot_key(at), slot_key(at) + "~m-1", "odd", ""])),
        "scheduled_at": at,
        "status": draw(_statuses),
    }
    optional: dict[str, Any] = {
        "tenant": st.sampled_from(["default", "acme", ""]) | _texts,
        "attempt": st.integers(min_value=-5, max_value=2**70),
        "started_at": maybe(_any_instants),
        "finished_at": maybe(_any_instants),
        "error": maybe(_texts),
        "lease_until": maybe(_any_instants),
        "owner": maybe(st.sampled_from(["", "0" * 32]) | _texts),
        "job_version": st.integers(min_value=0, max_value=10**12),
        "attempts": st.lists(_attempts, max_size=4),
        "result": maybe(_texts),
        "releases": st.integers(min_value=0, max_value=5),
        "blocked_by": maybe(_texts),
        "backfill": maybe(_texts),
        "backfill_dependants": st.booleans(),
        "last_slot": maybe(_texts),
        "slot_count": st.integers(min_value=0, max_value=10_000),
        "retry_after_s": maybe(st.floats(allow_nan=False, allow_infinity=False, min_value=0)),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            fields[name] = draw(strategy)
    return Execution.model_validate(fields)


@st.composite
def common_records(draw: st.DrawFn) -> Execution:
    """A worker's records on the common path: a RUNNING attempt, and it ended."""
    at = draw(_common_instants).replace(microsecond=0)
    started = at + draw(st.timedeltas(min_value=timedelta(0), max_value=timedelta(minutes=5)))
    running = Execution(
        job_id=draw(_plain_texts),
        tenant=draw(st.sampled_from(["default", "acme"])),
        slot=slot_key(at) + draw(st.sampled_from(["", "~m-1"])),
        scheduled_at=at,
        attempt=draw(st.integers(1, 5)),
        status=ExecutionStatus.RUNNING,
        started_at=started,
        lease_until=started + timedelta(minutes=6),
        owner="f" * 32,
        job_version=draw(st.integers(1, 50)),
    )
    if draw(st.booleans()):
        return running
    status = draw(
        st.sampled_from([ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT])
    )
    error = None if status is ExecutionStatus.SUCCEEDED else draw(_plain_texts)
    return running.ended(status, started + timedelta(seconds=1, microseconds=5), error, result=error)


class _Text(StrEnum):
    DEFAULT = "default"
    OTHER = 'oth"er\n'


class _SubText(str):
    pass


# Values no validated record holds, which an unvalidated copy (``model_copy(update=...)``) could put
# in: of another type, naive or subclassed instants, floats, ints where strings belong.
_ODD_VALUES: dict[str, list[Any]] = {
    "tenant": [_Text.DEFAULT, _Text.OTHER, _SubText("default"), _SubText("x\u2028"), 5, None],
    "job_id": [_Text.OTHER, _SubText("j"), 7, None],
    "attempt": [True, False, 1.0, 2.5, "2", "1", None, 2**80],
    "status": ["RUNNING", "NOPE", 3],
    "started_at": [datetime(2026, 1, 1, 10), "2026-01-01T10:00:00Z", 5],
    "scheduled_at": [datetime(2026, 1, 1, 10), datetime(2026, 1, 1, 10, tzinfo=UTC).date()],
    "error": [5, _Text.OTHER, _SubText("e"), b"bytes", "\ud83d"],
    "owner": ["", 0, False, _SubText(""), "\udc80x"],
    "job_version": [True, 1.0, "1", 0],
    "attempts": [(), [{"attempt": 1, "status": "FAILED"}], ["x"], None],
    "releases": [False, 0.0, 1.5, "0"],
    "backfill_dependants": [0, 1, "yes", None],
    "slot_count": [True, 1.0, "1"],
    "retry_after_s": [0.5, 1e20, 3, float("nan"), float("inf"), 1.0],
    "result": ["", 0],
}


def _pydantic_document(record: Execution) -> str:
    """The document as it was written before: pydantic's dump."""
    exclude = {"slot", "owner"} if record.owner else {"slot"}
    if _at_slot_instant(record):
        exclude.add("scheduled_at")
    return record.model_dump_json(exclude_defaults=True, exclude=exclude)


def _outcome(write: Any, record: Execution) -> tuple[str, Any]:
    """What ``write(record)`` gives: its result, or its error's type."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's warnings about values of unexpected types
        try:
            return "ok", write(record)
        except Exception as exc:  # (the error is what is compared)
            return "error", type(exc)


def _assert_written_as_pydantic_writes(record: Execution) -> None:
    expected = _outcome(_pydantic_document, record)
    got = _outcome(lambda r: record_attributes(r)["doc"]["S"], record)
    assert got == expected
    if expected[0] == "ok" and record.owner:
        assert _outcome(lambda r: record_attributes(r).get("owner"), record) == ("ok", {"S": record.owner})


def test_the_encoder_knows_the_models_fields() -> None:
    # The encoder writes the fields it knows, with the defaults it knows; a changed model turns it
    # off (every record then takes pydantic's dump) until it follows.
    assert execution_docs._FIELDS_AS_WRITTEN


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_every_record_is_written_as_pydantic_writes_it(record: Execution) -> None:
    _assert_written_as_pydantic_writes(record)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.data())
def test_a_record_holding_odd_values_is_written_as_pydantic_writes_it(
    record: Execution, data: st.DataObject
) -> None:
    # Given a record an unvalidated copy put values of other types in
    names = data.draw(st.lists(st.sampled_from(sorted(_ODD_VALUES)), min_size=1, max_size=3, unique=True))
    update = {name: data.draw(st.sampled_from(_ODD_VALUES[name])) for name in names}
    odd = record.model_copy(update=update)
    # Then its document is pydantic's text, or pydantic's error
    _assert_written_as_pydantic_writes(odd)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(common_records())
def test_the_common_records_take_the_fast_path(record: Execution) -> None:
    # Given a worker's record on the common path: written by the encoder, not handed to pydantic
    at_slot = _at_slot_instant(record)
    fast = _lean_document(record, at_slot)
    assert fast is not None
    assert fast == _pydantic_document(record)
    # And it reads back as the record written
    item = {"sk": {"S": f"exec#{record.slot}"}, **record_attributes(record)}
    again = execution_from_item(item)
    assert again == record
    assert again.model_dump() == record.model_dump()


def _instants_of(record: Execution) -> list[datetime]:
    values = [record.scheduled_at, record.started_at, record.finished_at, record.lease_until]
    for attempt in record.attempts:
        values += [attempt.started_at, attempt.finished_at]
    return [value for value in values if value is not None]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_a_record_written_reads_back_the_same(record: Execution) -> None:
    # (pydantic writes a zone's offset in whole minutes: an odd offset's seconds were never kept)
    assume(all(value.utcoffset() % timedelta(minutes=1) == timedelta(0) for value in _instants_of(record)))
    try:
        attributes = record_attributes(record)
    except Exception:  # a lone surrogate: pydantic's error (checked above)
        return
    again = execution_from_item({"sk": {"S": f"exec#{record.slot}"}, **attributes})
    assert again == record
    assert again.model_dump() == record.model_dump()


def test_an_instant_written_again_and_a_new_one_alike_are_written_as_pydantic_does() -> None:
    # The last instants' texts are kept by identity: the same instant, or an equal one, or one in
    # another zone at the same moment, is written as pydantic writes each.
    at = datetime(2026, 11, 30, 10, 0, 1, 5, tzinfo=UTC)
    base = Execution(job_id="j", slot="s", scheduled_at=at, status=ExecutionStatus.RUNNING, started_at=at)
    for started in (
        at,
        at,
        at.astimezone(ZoneInfo("Asia/Kolkata")),
        at + timedelta(0),
        at.replace(microsecond=0),
    ):
        _assert_written_as_pydantic_writes(base.model_copy(update={"started_at": started, "lease_until": at}))


@pytest.mark.parametrize("field", ["job_id", "tenant", "error", "result", "backfill"])
def test_a_lone_surrogate_is_refused_as_pydantic_refuses_it(field: str) -> None:
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    record = Execution(job_id="j", slot="s", scheduled_at=at, status=ExecutionStatus.FAILED)
    odd = record.model_copy(update={field: "x\ud800"})
    assert _outcome(_pydantic_document, odd)[0] == "error"
    _assert_written_as_pydantic_writes(odd)


@pytest.mark.parametrize(
    "update",
    [
        {"error": "another"},
        {"error": None},
        {"finished_at": datetime(2026, 11, 30, 10, 0, 9, tzinfo=UTC)},
        {"started_at": datetime(2026, 11, 30, 10, 0, 0, 1, tzinfo=UTC)},
        {"started_at": None},
    ],
)
def test_an_attempt_entry_repeats_only_what_it_shares_with_its_record(update: dict[str, Any]) -> None:
    # Given an ended record whose attempt entry shares some of its start, end and error, not all
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    running = Execution(
        job_id="j",
        slot=slot_key(at),
        scheduled_at=at,
        status=ExecutionStatus.RUNNING,
        started_at=at,
        owner="o",
    )
    ended = running.ended(ExecutionStatus.FAILED, at + timedelta(seconds=2), "boom").model_copy(update=update)
    # Then its entry is written with its own values, as pydantic writes it
    assert _lean_document(ended, True) == _pydantic_document(ended)


@pytest.mark.parametrize("drop", ["", "error", "attempts", "job_id", "retry_after_s"])
def test_a_record_whose_values_are_not_its_fields_is_written_as_pydantic_writes_it(drop: str) -> None:
    # Given a record an unvalidated copy gave a name that is no field, or whose values lack a field
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    record = Execution(
        job_id="j", slot=slot_key(at), scheduled_at=at, status=ExecutionStatus.RUNNING, started_at=at
    )
    odd = record.model_copy(update={"not_a_field": 1})
    if drop:
        del odd.__dict__[drop]
    # Then its document is pydantic's (which writes the fields alone), or pydantic's error
    _assert_written_as_pydantic_writes(odd)
