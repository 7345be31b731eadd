"""The Lambda batch runs its last message group on the invocation's own thread, the others on its
pool (the thread would only wait for them): the same partial batch response, the same calls in
each group's order, the same error raised, as when every group had a thread of its own.

A stub worker answers each record as the test says (done, returned to the queue, a retry due,
an error the adapter keeps in the queue, or an error the batch raises); the batch as it runs now
is compared with the same batch whose last group is handed to the pool too.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from punctual.dispatch.queues import DispatchMessage
from punctual.execution import batch as batch_module
from punctual.execution.batch import LambdaBatch
from punctual.execution.ports import HandleResult, MessageReturned, WorkerConfig
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock

T0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
ARN = "arn:aws:sqs:eu-west-1:123456789012:punctual-short-0.fifo"
ANSWERS = ["done", "returned", "retry", "error", "escapes"]
RETRYING = Execution(
    job_id="j", tenant="t", slot="s", scheduled_at=T0, status=ExecutionStatus.RETRY_WAIT, attempt=1
)


class _Queues:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def change_visibility_batch(self, url: str, receipts: list[str], seconds: int) -> list[str]:
        return []

    def change_visibility(self, url: str, receipt: str, seconds: int) -> None:
        with self._lock:
            self.calls.append(("visibility", receipt, str(seconds)))

    def delete(self, url: str, receipt: str) -> None:
        with self._lock:
            self.calls.append(("delete", receipt))


class _Keeper:
    def start(self) -> _Keeper:
        return self

    def hold(self, url: str, receipts: list[str], now: datetime) -> None:
        pass

    def release(self, url: str, receipt: str) -> None:
        pass


class _Worker:
    """Answers each record by its body (one of ANSWERS); notes the order and thread of each."""

    def __init__(self) -> None:
        self.config = WorkerConfig(
            short_queue_urls=("https://sqs.eu-west-1.amazonaws.com/1/punctual-short-0.fifo",)
        )
        self.queues = _Queues()
        self.clock = ManualClock(T0)
        self.seen: list[tuple[str, str]] = []  # (group, message id), in each group's order
        self.threads: dict[str, int] = {}

    def process_sqs_record(self, record: dict[str, Any], time_left_s: float) -> HandleResult:
        group = record["attributes"]["MessageGroupId"]
        self.seen.append((group, record["messageId"]))
        self.threads[group] = threading.get_ident()
        answer = record["body"]
        if answer == "returned":
            raise MessageReturned("waiting", 5)
        if answer == "error":
            raise RuntimeError("the claim failed")
        if answer == "escapes":
            raise KeyboardInterrupt  # not an Exception: the batch raises it
        return HandleResult(answer, True, None, RETRYING if answer == "retry" else None)

    def settle(self, timeout_s: float | None = None) -> int:
        return 0

    def return_blocked_records(self, event: Any, failed_ids: set[str]) -> int:
        return 0


def _event(groups: list[list[str]]) -> dict[str, Any]:
    records = []
    for g, answers in enumerate(groups):
        for n, answer in enumerate(answers):
            records.append(
                {
                    "messageId": f"m{g}-{n}",
                    "receiptHandle": f"r{g}-{n}",
                    "body": answer,
                    "attributes": {"MessageGroupId": f"g{g}", "ApproximateReceiveCount": "1"},
                    "eventSourceARN": ARN,
                }
            )
    return {"Records": records}


def _run(groups: list[list[str]], every_group_on_the_pool: bool) -> tuple[Any, list[Any], list[Any], _Worker]:
    worker = _Worker()
    batch = LambdaBatch(worker, keeper=_Keeper())  # type: ignore[arg-type]
    if every_group_on_the_pool:  # the batch before: the last group on a thread of its own too

        def on_the_pool(items: Any, time_left_s: Any, released: Any, mates: bool) -> Future[list[str]]:
            return batch._pool.submit(batch._work_group, items, time_left_s, released, mates)

        batch._work_here = on_the_pool  # type: ignore[method-assign]
    try:
        outcome: Any = batch.handle(_event(groups), lambda: 900.0)
    except BaseException as exc:
        outcome = type(exc)
    finally:
        batch._pool.shutdown(wait=True)
    per_group = sorted(worker.seen)
    return outcome, per_group, sorted(worker.queues.calls), worker


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(ANSWERS), min_size=1, max_size=3), max_size=6))
def test_the_last_group_on_this_thread_answers_as_on_a_thread_of_its_own(groups: list[list[str]]) -> None:
    fast = _run(groups, every_group_on_the_pool=False)
    slow = _run(groups, every_group_on_the_pool=True)
    assert fast[:3] == slow[:3]


def test_a_batch_of_one_group_runs_on_the_invocations_thread() -> None:
    outcome, _, _, worker = _run([["done", "retry"]], every_group_on_the_pool=False)
    assert outcome == {"batchItemFailures": []}
    assert worker.threads == {"g0": threading.get_ident()}
    outcome, _, _, worker = _run([["done"], ["returned", "done"]], every_group_on_the_pool=False)
    assert outcome == {"batchItemFailures": [{"itemIdentifier": "m1-0"}, {"itemIdentifier": "m1-1"}]}
    assert worker.threads["g1"] == threading.get_ident() != worker.threads["g0"]
    outcome, _, _, _ = _run(
        [["error", "done"], ["done"], ["retry", "returned"]], every_group_on_the_pool=False
    )
    failed = ["m0-0", "m0-1", "m2-1"]  # the pool's groups' failures as the last group's, in the batch's order
    assert outcome == {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}


def test_what_the_last_group_raises_is_raised_after_the_others_answered() -> None:
    with pytest.raises(KeyboardInterrupt):
        LambdaBatch(_Worker(), keeper=_Keeper()).handle(_event([["done"], ["escapes"]]), lambda: 900.0)  # type: ignore[arg-type]


# An overlap 'queue' job's record is deleted as soon as it is handled when other groups share the
# batch. Which records are such was read by parsing each body a second time (the worker had parsed
# it already): ~12 µs a record on the worker's hot path, for every record of a mixed batch. It is
# read from the body's text instead; it must answer as the parse does.


def _bodies(ordered: list[bool]) -> list[list[str]]:
    spec = '{"id":"j","payload":{"note":"\\"ordered\\":true \\u00e9"},"overlap":"queue"}'
    return [
        [
            DispatchMessage(
                tenant="t",
                job_id=f"j{n}",
                slot="s",
                scheduled_at="2026-12-06T02:00:00Z",
                attempt=1,
                job_version=1,
                released_at="2026-12-06T02:00:00.000Z",
                ordered=flag,
                spec=spec,
                sig="a" * 64,
            ).to_body()
        ]
        for n, flag in enumerate(ordered)
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        DispatchMessage,
        tenant=st.text(max_size=8),
        job_id=st.text(max_size=8),
        slot=st.text(max_size=8),
        scheduled_at=st.text(max_size=8),
        attempt=st.integers(1, 5),
        job_version=st.integers(1, 5),
        released_at=st.text(max_size=8),
        ordered=st.booleans(),
        spec=st.text(max_size=40),
        sig=st.text(max_size=8),
    )
)
@example(
    DispatchMessage(
        '"ordered":true', "j", "s", "t", 1, 1, ordered=False, spec='{"ordered":true}', sig='"ordered":true'
    )
)
def test_the_ordered_records_are_told_from_their_bodies_as_the_parse_tells_them(
    message: DispatchMessage,
) -> None:
    body = message.to_body()
    assert batch_module._ordered({"body": body}) is DispatchMessage.from_body(body).ordered


def test_a_mixed_batch_does_not_parse_its_bodies_again(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _bodies([True, False, False])
    parses: list[str] = []
    real = DispatchMessage.from_body.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, body: str) -> DispatchMessage:
        parses.append(body)
        return real(cls, body)  # type: ignore[no-any-return]

    monkeypatch.setattr(DispatchMessage, "from_body", classmethod(counted))
    worker = _Worker()
    worker.process_sqs_record = lambda record, time_left_s: HandleResult("done", True)  # type: ignore[method-assign]
    batch = LambdaBatch(worker, keeper=_Keeper())  # type: ignore[arg-type]
    try:
        assert batch.handle(_event(groups), lambda: 900.0) == {"batchItemFailures": []}
    finally:
        batch._pool.shutdown(wait=True)
    assert parses == []  # (the stub worker parses nothing: a parse is the batch's)
    assert worker.queues.calls == [("delete", "r0-0")]  # the queue job's record, deleted at once


# A tenant's alert endpoint that hangs held the invocation (one of the lane's concurrency, shared by
# every tenant) for every try of every rule, ~35 s a rule: the batch waited for its deliveries as
# long as the invocation had left (QA 2026-12-06: another tenant's slots 22-27 s late in local
# mode). It now waits a try's length at most; the alert stays SENDING and its sweep finishes it.


def test_a_hanging_alert_delivery_holds_the_invocation_a_try_at_most() -> None:
    from punctual.delivery.notifications.background import DeliveryThreads

    endpoint_answers, delivering = threading.Event(), threading.Event()

    class _Alerting(_Worker):
        def __init__(self) -> None:
            super().__init__()
            self.deliveries = DeliveryThreads()

        def process_sqs_record(self, record: dict[str, Any], time_left_s: float) -> HandleResult:
            def hang() -> None:
                delivering.set()
                endpoint_answers.wait(120)

            self.deliveries.submit(hang)  # the run's failed alert, delivered beside it
            return super().process_sqs_record(record, time_left_s)

        def settle(self, timeout_s: float | None = None) -> int:
            return self.deliveries.settle(timeout_s)

    worker = _Alerting()
    batch = LambdaBatch(worker, keeper=_Keeper())  # type: ignore[arg-type]
    answered: list[Any] = []
    handler = threading.Thread(
        target=lambda: answered.append(batch.handle(_event([["done"]]), lambda: 900.0))
    )
    try:
        handler.start()
        assert delivering.wait(30)
        handler.join(60)  # the old wait: the invocation's 900 s less a margin
        assert answered == [{"batchItemFailures": []}]
        assert worker.deliveries.pending == 1  # left to its thread and its alert's sweep
    finally:
        endpoint_answers.set()
        handler.join(30)
        batch._pool.shutdown(wait=True)
    assert batch_module.SETTLE_S < 60
