"""The DynamoDB store's hot-path marshalling, made faster, reads and writes what it did before.

A job document and a timer pack are parsed with pydantic's JSON parser instead of ``json.loads``
(the same values: the last of a repeated key, NaN as a float), a pack's slot form is cached (a
pure function of the slot text), a pack read again is unpacked once, and a message carries the
job's stored document when it says what the job read holds. These properties compare each with
the reference it replaced.
"""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.dispatch.queues import job_from_spec, spec_of
from punctual.models import Job, JobState, job_documents
from punctual.models.job_documents import document_of
from punctual.store.base import UnreadableJobError
from punctual.store.dynamo import DynamoStore
from punctual.store.dynamo.keys import _packed_slot, _slot_of_second
from punctual.store.dynamo.timers import _unpacked
from punctual.timing.timers import Lane, Timer, TimerKind, slot_instant, slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def _job(payload: Any, **extra: Any) -> Job:
    return Job.model_validate(
        {
            "id": "job-1",
            "schedule": "rate(5 minutes)",
            "target": {"type": "http", "url": "https://example.com/hook"},
            "payload": payload,
            "created_at": T0,
            "updated_at": T0,
            "anchor": T0,
            **extra,
        }
    )


def _item(job: Job) -> dict[str, Any]:
    store = DynamoStore(None, "t")
    return {"pk": {"S": "job#default#job-1"}, "sk": {"S": "job"}, **store._job_attrs(job)}


def _read_with_json_loads(item: dict[str, Any]) -> Job:
    """How the job item was read before: ``json.loads`` of the document, the item's attributes over it."""
    data = json.loads(item["doc"]["S"])
    data["version"] = int(item["version"]["N"])
    data["state"] = item["state"]["S"]
    for attr, field in (("skipped", "skipped_slots"), ("dependents", "dependents"), ("tpm", "trigger_rate")):
        if attr in item:
            data[field] = int(item[attr]["N"])
    for attr, field in (("secret", "signing_secret_enc"), ("secret_prev", "signing_secret_prev_enc")):
        if attr in item:
            data[field] = item[attr]["S"]
    return Job.model_validate(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=_json,
    version=st.integers(min_value=1, max_value=10**9),
    rate=st.integers(min_value=0, max_value=10**7),
    secret=st.none() | st.text(min_size=1, max_size=10),
)
def test_a_job_item_reads_as_json_loads_read_it(
    payload: Any, version: int, rate: int, secret: str | None
) -> None:
    job = _job(payload, version=version, trigger_rate=rate, signing_secret_enc=secret)
    item = _item(job)
    read = DynamoStore(None, "t")._job_from_item(item)
    assert read == _read_with_json_loads(item) == job


def test_a_repeated_key_reads_as_json_loads_reads_it() -> None:
    item = _item(_job({"a": 1}))
    # A document whose payload repeats a key (written by hand, not by the scheduler): the last wins.
    item["doc"]["S"] = item["doc"]["S"].replace('"payload":{"a":1}', '"payload":{"a":1,"a":[2,3]}')
    read = DynamoStore(None, "t")._job_from_item(item)
    assert read == _read_with_json_loads(item)
    assert read.payload == {"a": [2, 3]}


def test_a_stored_nan_is_unreadable_as_before() -> None:
    item = _item(_job({"a": 1}))
    item["doc"]["S"] = item["doc"]["S"].replace('"payload":{"a":1}', '"payload":{"a":NaN}')
    with pytest.raises(ValueError, match="NaN"):  # the model refuses it, as it did
        _read_with_json_loads(item)
    with pytest.raises(UnreadableJobError, match="NaN"):
        DynamoStore(None, "t")._job_from_item(item)


@pytest.mark.parametrize("doc", ["{not json", "[1, 2]", '"text"'])
def test_a_document_that_is_not_a_json_object_is_unreadable(doc: str) -> None:
    item = _item(_job(None))
    item["doc"]["S"] = doc
    with pytest.raises(UnreadableJobError):
        DynamoStore(None, "t")._job_from_item(item)


def _packed_slot_reference(slot: str) -> str | int:
    """The pack's slot form as computed inline before it was cached."""
    if "~" in slot:
        return slot
    try:
        second = int(slot_instant(slot).timestamp())
    except ValueError:
        return slot
    if second >= 0 and slot_key(datetime.fromtimestamp(second, tz=UTC)) == slot:
        return second
    return slot


_slots = st.one_of(
    st.integers(min_value=-86_400, max_value=10**10).map(
        lambda s: slot_key(datetime.fromtimestamp(s, tz=UTC))
    ),
    st.integers(min_value=0, max_value=10**9).map(
        lambda s: slot_key(datetime.fromtimestamp(s, tz=UTC)) + "~manual"
    ),
    st.sampled_from(["bf-01JDZ", "2026-11-30T10:00:00", "2026-02-30T10:00:00Z", "0999-01-01T00:00:00Z", ""]),
    st.text(max_size=24),
)


@settings(max_examples=300, deadline=None)
@given(slot=_slots)
def test_the_cached_pack_slot_form_is_the_inline_one(slot: str) -> None:
    assert _packed_slot(slot) == _packed_slot_reference(slot)
    assert _packed_slot(slot) == _packed_slot_reference(slot)  # a cached answer too
    packed = _packed_slot(slot)
    if isinstance(packed, int):
        assert _slot_of_second(packed) == slot


@settings(max_examples=100, deadline=None)
@given(
    slots=st.lists(_slots, min_size=1, max_size=30),
    kinds=st.lists(st.sampled_from(list(TimerKind)), min_size=30, max_size=30),
    owner=st.none() | st.text(min_size=1, max_size=8),
)
def test_a_pack_reads_back_the_timers_written(
    slots: list[str], kinds: list[TimerKind], owner: str | None
) -> None:
    due_ms = int((T0 + timedelta(minutes=5)).timestamp() * 1000)
    timers = [
        Timer(
            Lane.NEAR,
            3,
            due_ms + n,
            f"job-{n}",
            f"tenant-{n % 3}",
            slot,
            1 + n % 4,
            kinds[n],
            1 + n % 5,
            owner,
        )
        for n, slot in enumerate(slots)
    ]
    store = DynamoStore(None, "t")
    [pack] = store._timer_rows(timers)
    assert sorted(DynamoStore._timers_from_pack(pack), key=lambda t: t.sk) == sorted(
        timers, key=lambda t: t.sk
    )


def test_a_pack_read_again_is_unpacked_once_and_never_shared_as_a_list() -> None:
    due_ms = int((T0 + timedelta(minutes=5)).timestamp() * 1000)
    timers = [
        Timer(Lane.NEAR, 3, due_ms + n, f"job-{n}", "acme", slot_key(T0), 1, TimerKind.FIRE, 1)
        for n in range(5)
    ]
    store = DynamoStore(None, "t")
    [pack] = store._timer_rows(timers)
    _unpacked.cache_clear()
    first = DynamoStore._timers_from_pack(pack)
    first.clear()  # a caller's list is its own
    again = DynamoStore._timers_from_pack(pack)
    assert again == timers and _unpacked.cache_info().hits == 1
    # The same body under another bucket's key is that bucket's timers, not the cached ones
    other = {**pack, "pk": {"S": pack["pk"]["S"].rsplit("#", 1)[0] + "#4"}}
    assert [t.shard for t in DynamoStore._timers_from_pack(other)] == [4] * 5
    # and another body under the same key is read afresh
    [changed] = store._timer_rows(timers[:4])
    assert DynamoStore._timers_from_pack(changed) == timers[:4]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=_json,
    dependents=st.integers(min_value=0, max_value=50),
    skipped=st.none() | st.integers(min_value=0, max_value=10**6),
    paused_by_attribute=st.booleans(),
    secret=st.none() | st.text(min_size=1, max_size=10),
)
def test_a_message_carries_the_job_read_whichever_document_it_is_made_of(
    payload: Any, dependents: int, skipped: int | None, paused_by_attribute: bool, secret: str | None
) -> None:
    job = _job(payload, version=3, trigger_rate=7, signing_secret_enc=secret)
    item = _item(job)
    item["dependents"] = {"N": str(dependents)}
    if skipped is not None:  # the counter the store keeps beside the document
        item["skipped"] = {"N": str(skipped)}
    if paused_by_attribute:  # an attribute that no longer agrees with the document
        item["state"] = {"S": "PAUSED"}
    read = DynamoStore(None, "t")._job_from_item(item)
    noted = document_of(read)
    agrees = not paused_by_attribute and skipped in (None, 0)
    assert (noted == item["doc"]["S"]) if agrees else noted is None
    # Either way the message carries exactly the job as read
    assert job_from_spec(spec_of(read)) == read
    assert spec_of(read) == spec_of(read.model_copy())  # the same content as a fresh dump


def test_a_noted_document_is_never_used_for_a_changed_job() -> None:
    read = DynamoStore(None, "t")._job_from_item(_item(_job({"n": 1})))
    assert document_of(read) is not None
    paused = read.model_copy(update={"state": JobState.PAUSED})  # a change is a new object
    assert document_of(paused) is None
    assert job_from_spec(spec_of(paused)).state is JobState.PAUSED
    read.payload = {"n": 2}  # and a field replaced in place (the code never does) is seen
    assert document_of(read) is None
    assert job_from_spec(spec_of(read)).payload == {"n": 2}


def test_a_document_holding_what_the_store_keeps_beside_it_is_not_noted() -> None:
    item = _item(_job({"n": 1}))
    item["doc"]["S"] = item["doc"]["S"][:-1] + ',"dependents":4}'  # written by hand
    item["dependents"] = {"N": "2"}
    read = DynamoStore(None, "t")._job_from_item(item)
    assert document_of(read) is None and read.dependents == 2
    assert job_from_spec(spec_of(read)).dependents == 2


def test_a_note_goes_with_its_job() -> None:
    read = DynamoStore(None, "t")._job_from_item(_item(_job({"n": 1})))
    key = id(read)
    assert key in job_documents._NOTES
    del read
    gc.collect()
    assert key not in job_documents._NOTES


@pytest.mark.parametrize(
    "edit",
    [
        lambda doc: doc.replace('"type":"http",', ""),  # an old document: the target's type is implied
        lambda doc: doc.replace('"version":1,', ""),  # no version of its own: the attribute's
        lambda doc: doc.replace('"state":"ENABLED",', '"state":"PAUSED",'),  # the attribute wins
        lambda doc: doc.replace('"tenant":"default",', '"tenant":"default","tenant":"default",'),
        lambda doc: doc[:-1] + ',"trigger_rate":5}',  # what the store keeps beside it, held
        lambda doc: doc[:-1] + ',"newer":1}',  # a newer version's top-level field: ignored
        lambda doc: doc.replace('"method":"POST"', '"method":"POST","newer":1'),  # a nested one
    ],
)
def test_an_item_reads_as_json_loads_read_it_whichever_read_takes_it(edit: Any) -> None:
    item = _item(_job({"n": 1}, trigger_rate=3))
    item["doc"]["S"] = edit(item["doc"]["S"])
    read = DynamoStore(None, "t")._job_from_item(item)
    try:
        reference = _read_with_json_loads(item)
    except ValueError:  # a field this version does not know: read without it
        item["doc"]["S"] = item["doc"]["S"].replace(',"newer":1', "")
        reference = _read_with_json_loads(item)
    assert read == reference and read.trigger_rate == 3
    assert read.model_fields_set >= {"version", "state", "trigger_rate"}
    if document_of(read) is not None:  # carried as it is: it reads back as the same job
        assert job_from_spec(spec_of(read)) == read
