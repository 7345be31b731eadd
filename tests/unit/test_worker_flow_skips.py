"""The steps the worker's per-message flow skips for the common message change nothing.

A first attempt with no record takes :data:`NEW_SLOT` without asking ``decide_claim``; only a
backfill's or a child's message is asked whether it is not to run; ``late`` is not asked
without a release delay; a job no ``after()`` job waits on sends no dependants, and an overlap
``allow`` job passes no turn; the results are built with their fields set at once; a run is
registered with the lease keeper without a context object. Each test holds the skipped step
(or the slow form) to what the skip assumes of it, so that a change to that step which would
make the skip wrong fails here.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_harness import Rig
from factories import job as make_job
from punctual.delivery.notifications import Notifier
from punctual.delivery.notifications.events import EventPublisher, MemoryEventSink
from punctual.delivery.targets.base import SlotContext
from punctual.dispatch.queues import DispatchMessage, MessageKind, spec_of
from punctual.execution import claim as claim_module
from punctual.execution import sqs as sqs_module
from punctual.execution import worker as worker_module
from punctual.execution.after import AfterEffects
from punctual.execution.decisions import FRESH_KINDS, NEW_SLOT, decide_claim
from punctual.execution.ports import (
    Delivery,
    FinishResult,
    HandleResult,
    MemoryFailureSink,
    WorkerConfig,
    finish_result,
    handle_result,
)
from punctual.execution.records import Ledger
from punctual.execution.turns import Turns
from punctual.models import Execution, ExecutionStatus, Overlap
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings
from punctual.runtime.stop_signal import StopSignal
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
KINDS = [
    MessageKind.FIRE,
    MessageKind.RETRY,
    MessageKind.TAKEOVER,
    MessageKind.MANUAL,
    MessageKind.CHILD,
    MessageKind.TURN,
    MessageKind.CHECK,
    MessageKind.ALERT,
    MessageKind.BACKFILL,
    "unknown",
]
HOOK = {"type": "http", "url": "https://hooks.example.com/a"}
ALERTS = [
    [],
    [{"on": ["failed"], "target": HOOK}],
    [{"on": ["late"], "late_after_seconds": 1, "target": HOOK}],
    [
        {"on": ["failed", "late"], "late_after_seconds": 30, "target": HOOK},
        {"on": ["missed"], "target": HOOK},
    ],
]
statuses = st.sampled_from(list(ExecutionStatus))
records = st.builds(
    Execution,
    job_id=st.just("job-1"),
    tenant=st.just("default"),
    slot=st.sampled_from([slot_key(T0), slot_key(T0) + "~run-1"]),
    scheduled_at=st.just(T0),
    status=statuses,
    attempt=st.integers(1, 5),
    backfill=st.sampled_from([None, "bf-1"]),
    backfill_dependants=st.booleans(),
    finished_at=st.sampled_from([None, T0]),
)


def _message(kind: str, attempt: int, resend: int = 0, backfill: str = "") -> DispatchMessage:
    return DispatchMessage(
        "default",
        "job-1",
        slot_key(T0),
        "2026-11-30T10:00:00Z",
        attempt,
        1,
        kind,
        resend=resend,
        backfill=backfill,
    )


class _Untouchable:
    """Anything read of it fails the test: the step it stands in for was not to read anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"read {name}")


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([ExecutionStatus.SUCCEEDED, ExecutionStatus.RETRY_WAIT, None]),
    st.booleans(),
    st.sampled_from([None, T0]),
    st.sampled_from(["succeeded", "superseded", "duplicate"]),
    st.sampled_from([None, 0, 30]),
)
def test_results_built_at_once_equal_their_constructors(
    status: ExecutionStatus | None, flag: bool, retry_at: datetime | None, outcome: str, after_s: int | None
) -> None:
    record = Execution(
        job_id="j", tenant="t", slot=slot_key(T0), scheduled_at=T0, status=ExecutionStatus.SUCCEEDED
    )
    pairs: list[tuple[Any, Any]] = [
        (finish_result(status, flag, record, retry_at), FinishResult(status, flag, record, retry_at)),
        (finish_result(status, flag, None), FinishResult(status, flag, None)),
        (handle_result(outcome, flag, after_s, record), HandleResult(outcome, flag, after_s, record)),
        (handle_result(outcome, flag), HandleResult(outcome, flag)),
    ]
    for fast, slow in pairs:
        assert type(fast) is type(slow)
        assert fast == slow and repr(fast) == repr(slow)
        if fast.execution is None:  # (a record is not hashable)
            assert hash(fast) == hash(slow)
        assert list(fast.__dict__.items()) == list(slow.__dict__.items())  # every field, in order
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.execution = None


def test_every_status_outcome_is_its_value() -> None:
    for status in ExecutionStatus:
        assert worker_module._OUTCOMES[status] == status.value
        assert type(worker_module._OUTCOMES[status]) is type(status.value)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(KINDS),
    st.integers(1, 50),
    st.booleans(),
    st.integers(1, 10),
    st.floats(0, 10**6),
    st.sampled_from(["", "bf-1"]),
)
def test_a_fresh_message_with_no_record_is_a_new_slot(
    kind: str, attempt: int, redelivered: bool, max_attempts: int, max_age_s: float, backfill: str
) -> None:
    """The claim takes NEW_SLOT for a fresh message with no record without asking decide_claim:
    decide_claim must answer exactly that."""
    message = _message(kind, attempt, backfill=backfill)
    fresh = attempt == 1 or kind in FRESH_KINDS
    decision = decide_claim(None, message, T0, max_attempts, max_age_s, redelivered, message_is_lease=True)
    if fresh:
        assert decision is NEW_SLOT
    else:
        assert decision.action is not NEW_SLOT.action


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([k for k in KINDS if k not in claim_module._MAYBE_NOT_TO_RUN]),
    st.integers(1, 5),
    st.integers(0, 3),
    st.sampled_from([(), ("holidays",)]),
    st.sampled_from(["", "bf-1"]),
)
def test_only_a_backfill_or_a_child_is_asked_whether_it_is_not_to_run(
    kind: str, attempt: int, resend: int, calendars: tuple[str, ...], backfill: str
) -> None:
    """The claim asks not_to_run only for the kinds it may drop: for any other it must return
    None without reading anything."""
    job = make_job(exclude_calendars=list(calendars))
    message = _message(kind, attempt, resend=resend, backfill=backfill)
    assert claim_module.not_to_run(_Untouchable(), job, message, None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("alerts", ALERTS)
def test_late_does_nothing_without_a_release_delay(alerts: list[dict[str, Any]]) -> None:
    """The claim does not ask late() when it has no release delay (not a first attempt, a job
    without rules, a backfill or a turn): late() must do nothing then."""
    job = make_job(alerts=alerts)
    sink = MemoryEventSink()
    notifier = Notifier(EventPublisher(sink), _Untouchable())  # type: ignore[arg-type]
    record = Execution(
        job_id=job.id, tenant=job.tenant, slot=slot_key(T0), scheduled_at=T0, status=ExecutionStatus.RUNNING
    )
    with mock.patch("punctual.delivery.notifications.log") as logged:
        notifier.late(job, record, None)
    assert logged.mock_calls == [] and sink.events == []


def _after_effects(store: Any, metrics: RecordingMetrics) -> AfterEffects:
    config = WorkerConfig()
    ledger = Ledger(store, ManualClock(T0), config)
    turns = Turns(store, _Untouchable(), lambda job: "q")  # type: ignore[arg-type]
    return AfterEffects(
        ledger,
        _Untouchable(),
        lambda job: "q",
        turns,
        metrics,
        MemoryFailureSink(),
        _Untouchable(),
        None,  # type: ignore[arg-type]
    )


@settings(max_examples=200, deadline=None)
@given(records, st.integers(-3, 0), st.sampled_from(list(Overlap)))
def test_a_job_no_job_waits_on_sends_no_dependants(
    record: Execution, dependents: int, overlap: Overlap
) -> None:
    """after.apply sends dependants only for a job with dependents: with none, sending them must
    read, write and count nothing."""
    metrics = RecordingMetrics()
    after = _after_effects(_Untouchable(), metrics)
    after.dispatch_dependants(make_job(dependents=dependents, overlap=overlap), record, T0)
    assert dict(metrics.values) == {}


@settings(max_examples=200, deadline=None)
@given(records.filter(lambda record: record.status.terminal), st.integers(0, 3))
def test_an_allow_job_passes_no_turn(record: Execution, dependents: int) -> None:
    """after.apply passes the turn on only for a skip or queue job: an allow job's pass_on must
    read and write nothing."""
    turns = Turns(_Untouchable(), _Untouchable(), lambda job: "q")  # type: ignore[arg-type]
    turns.pass_on(make_job(overlap=Overlap.ALLOW, dependents=dependents), record, T0)


def test_a_run_is_registered_while_it_runs_and_not_after_it_raised() -> None:
    """The worker registers a claimed run with the lease keeper for the run and its finish, and
    removes it whatever happens (as the ``with`` block it replaces did)."""
    rig = Rig(MemoryStore(), ManualClock(T0))
    seen: list[int] = []
    worker = rig.worker()
    job = rig.add_job()
    original = worker.run

    def run(claim: Any) -> Any:
        seen.append(len(worker.live))
        return original(claim)

    worker.run = run
    assert worker.process(rig.message(job, T0)).outcome == "SUCCEEDED"
    assert seen == [1] and len(worker.live) == 0

    def finish(claim: Any, result: Any) -> Any:
        seen.append(len(worker.live))
        raise RuntimeError("finish failed")

    worker.finish = finish
    with pytest.raises(RuntimeError):
        worker.process(rig.message(job, T0 + timedelta(minutes=1)))
    assert seen == [1, 1, 1] and len(worker.live) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["default", "other", "Default"]),
    st.sampled_from(["job-1", "job-2", "job-10"]),
    st.integers(1, 3),
    st.sampled_from(["default", "other"]),
    st.sampled_from(["job-1", "job-2"]),
    st.integers(1, 3),
)
def test_a_carried_job_is_used_only_when_it_is_the_messages_own(
    tenant: str, job_id: str, version: int, sent_tenant: str, sent_id: str, sent_version: int
) -> None:
    """The carried job is the message's when its tenant, id and version are the message's (each
    compared in turn, where a tuple of the three was compared)."""
    carried = make_job(job_id, tenant=tenant, version=version)
    message = DispatchMessage(
        sent_tenant, sent_id, slot_key(T0), "2026-11-30T10:00:00Z", 1, sent_version,
        released_at="2026-11-30T10:00:00.000Z", spec=spec_of(carried),
    )  # fmt: skip
    got = claim_module.carried_job(message, T0 + timedelta(seconds=1))
    own = (tenant, job_id, version) == (sent_tenant, sent_id, sent_version)
    assert got == (carried if own else None)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=8),
    st.text(max_size=8),
    st.sampled_from([slot_key(T0), slot_key(T0) + "~run-1"]),
    st.datetimes(timezones=st.just(UTC)),
    st.integers(1, 200),
    st.floats(0, 3600),
    st.sampled_from([(), ("a",), ("a", "b")]),
)
def test_a_runs_context_built_at_once_equals_its_constructor(
    job_id: str,
    tenant: str,
    slot: str,
    at: datetime,
    attempt: int,
    timeout_s: float,
    secrets: tuple[str, ...],
) -> None:
    """The run's SlotContext is built with its __dict__ set at once: every field of the
    constructor's, in its order (a field added to SlotContext, or a __post_init__, fails here)."""
    cancel = StopSignal()

    def heartbeat() -> bool:
        return True

    fast = worker_module.slot_context(
        job_id, tenant, slot, at, attempt, timeout_s, secrets, heartbeat, cancel
    )
    slow = SlotContext(
        job_id=job_id, tenant=tenant, slot=slot, scheduled_at=at, attempt=attempt, timeout_s=timeout_s,
        signing_secrets=secrets, heartbeat=heartbeat, cancel=cancel,
    )  # fmt: skip
    assert type(fast) is SlotContext and fast == slow and repr(fast) == repr(slow)
    assert list(fast.__dict__.items()) == list(slow.__dict__.items())
    assert fast.heartbeat is heartbeat and fast.cancel is cancel
    assert fast.idempotency_key == slow.idempotency_key and not fast.cancelled
    for cls in (SlotContext, FinishResult, HandleResult):  # what made_at_once assumes of them
        assert not hasattr(cls, "__post_init__") and "__slots__" not in vars(cls)
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.attempt = 2  # type: ignore[misc]


class _Cipher:
    """Stands in for the KMS cipher: a stored secret 'decrypts' to itself and its binding."""

    def __init__(self, settings: Any) -> None:
        pass

    def decrypt(self, stored: str, binding: dict[str, str]) -> str:
        return f"{stored}|{binding['tenant']}|{binding['job']}"


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([None, "", "enc-a"]),
    st.sampled_from([None, "", "enc-b", "enc-a"]),
    st.sampled_from(["j1", "j2"]),
)
def test_a_job_without_secrets_signs_with_none_and_one_with_them_as_before(
    current: str | None, previous: str | None, job_id: str
) -> None:
    """The run's secrets: a job with no stored secret gets () at once; any other decrypts as the
    one expression did (current first, then the previous one, the empty ones left out)."""
    with mock.patch("punctual.security.signing_secrets.SecretCipher", _Cipher):
        secrets_of = worker_module.default_signing_secrets(Settings())
    job = make_job(job_id, signing_secret_enc=current, signing_secret_prev_enc=previous)
    binding = {"tenant": job.tenant, "job": job.id}
    expected = tuple(_Cipher(None).decrypt(s, binding) for s in (current, previous) if s)
    assert secrets_of(job) == expected


_queue_names = st.sampled_from(
    ["punctual-short-0.fifo", "punctual-short-1.fifo", "punctual-long.fifo", "other"]
)
_hosts = st.sampled_from(
    ["https://sqs.eu-west-1.amazonaws.com/123456789012/", "http://127.0.0.1:4566/000000000000/"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_hosts, _queue_names, st.sampled_from(["", "/"])), max_size=3),
    st.lists(st.tuples(_hosts, _queue_names, st.sampled_from(["", "/"])), max_size=2),
    _queue_names,
    st.sampled_from(
        ["arn:aws:sqs:eu-west-1:123456789012:", "arn:aws:sqs:us-east-1:000000000000:", "not:an:arn"]
    ),
    st.booleans(),
)
def test_a_records_queue_url_kept_is_the_one_worked_out(
    short: list[tuple[str, str, str]],
    long: list[tuple[str, str, str]],
    name: str,
    prefix: str,
    as_lists: bool,
) -> None:
    """A record's queue URL is worked out once per ARN and configuration, then kept: the same URL
    (or the same error) as queue_url_for_arn every time, whatever was kept before."""
    short_urls = [host + queue + end for host, queue, end in short]
    long_urls = [host + queue + end for host, queue, end in long]
    config: Any = WorkerConfig(
        short_queue_urls=short_urls if as_lists else tuple(short_urls),  # type: ignore[arg-type]
        long_queue_urls=long_urls if as_lists else tuple(long_urls),  # type: ignore[arg-type]
    )
    arn = prefix + name
    try:
        expected: Any = sqs_module.queue_url_for_arn(arn, [*short_urls, *long_urls])
    except ValueError as exc:
        expected = type(exc)
    for _ in range(2):  # worked out, then kept
        try:
            got: Any = sqs_module.queue_url_of(arn, config)
        except ValueError as exc:
            got = type(exc)
        assert got == expected


def test_a_records_delivery_is_built_as_its_constructor_builds_it() -> None:
    config = WorkerConfig(short_queue_urls=("https://sqs.eu-west-1.amazonaws.com/1/punctual-short-0.fifo",))
    seen: list[Any] = []

    class Stub:
        def __init__(self) -> None:
            self.config, self.metrics, self.queues = config, RecordingMetrics(), None

        def process(
            self, message: Any, delivery: Any, time_left_s: Any = None, *, settle: bool = True
        ) -> Any:
            seen.append(delivery)
            return HandleResult("SUCCEEDED", True)

        def after_error(self, *args: Any) -> bool:
            return True

    body = _message(MessageKind.FIRE, 1).to_body()
    for count, attributes in (("3", {"ApproximateReceiveCount": "3"}), ("1", {})):
        record = {
            "messageId": "m", "receiptHandle": "r-1", "body": body, "attributes": attributes,
            "eventSourceARN": "arn:aws:sqs:eu-west-1:1:punctual-short-0.fifo",
        }  # fmt: skip
        sqs_module.SqsBatch(Stub()).process_record(record)  # type: ignore[arg-type]
        expected = Delivery(config.short_queue_urls[0], "r-1", int(count), "m")
        assert seen[-1] == expected and list(vars(seen[-1]).items()) == list(vars(expected).items())
        assert hash(seen[-1]) == hash(expected)
