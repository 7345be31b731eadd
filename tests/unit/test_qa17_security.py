"""QA17 security review: findings pinned as tests."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from execution_harness import SHORT, Rig
from punctual.dispatch.queues import DispatchMessage, MessageKind, SqsQueues
from punctual.execution import PARK_AFTER_RECEIVES
from punctual.models import JobState
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.security.message_auth import DispatchSigner
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

SIGNER = DispatchSigner("k" * 40)


@pytest.fixture
def rig(t0: datetime) -> Rig:
    rig = Rig(MemoryStore(), ManualClock(t0))
    rig.queues.signer = SIGNER
    return rig


def _record(rig: Rig, body: str) -> dict[str, Any]:
    [received] = rig.queues.receive(SHORT, 1, 0, 900)
    return {
        "messageId": received.message_id,
        "receiptHandle": received.receipt,
        "body": body,
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:short",
        "attributes": {"ApproximateReceiveCount": str(received.receive_count), "MessageGroupId": "g"},
    }


@pytest.mark.parametrize("sig", [1, ["x"], "\u00e9" * 64], ids=["int", "list", "non-ascii"])
def test_a_forged_message_whose_sig_is_not_an_ascii_string_is_dropped_not_parked_and_run(
    rig: Rig, t0: datetime, sig: object
) -> None:
    # Given tenant b's paused job, and a body naming it written straight into the work queue by
    # someone without the dispatch key, its "sig" something other than an ASCII string
    victim = rig.add_job("payroll", tenant="b", state=JobState.PAUSED)
    fake = rig.message(victim, t0, kind=MessageKind.FIRE)
    rig.queues.signer = None
    rig.send(fake)
    rig.queues.signer = SIGNER
    body = json.loads(fake.to_body())
    body["sig"] = sig
    forged = json.dumps(body)
    worker = rig.worker(signer=SIGNER)
    # When a worker receives it as often as the queue redelivers it
    outcomes = []
    for _ in range(PARK_AFTER_RECEIVES + 1):
        try:
            outcomes.append(worker.process_sqs_record(_record(rig, forged)).outcome)
        except Exception as exc:  # returned to the queue
            outcomes.append(type(exc).__name__)
        rig.clock.advance(1000)
        if outcomes[-1] in ("forged", "parked"):
            break
    # Then it is dropped as forged at once: nothing it names is written (no parked record,
    # no timer that would bring the slot back as a *signed* message)
    assert outcomes == ["forged"]
    assert rig.store.get_execution("b", "payroll", slot_key(t0)) is None
    assert rig.metrics.total("ForgedMessages") == 1


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        (JobState.ENABLED, MessageKind.FIRE),
        (JobState.PAUSED, MessageKind.FIRE),
        (JobState.PAUSED, MessageKind.BACKFILL),  # a backfill runs while paused: so did the forgery
    ],
)
def test_a_forged_message_with_a_non_string_sig_never_runs_the_job_it_names(
    rig: Rig, t0: datetime, state: JobState, kind: str
) -> None:
    # Given tenant b's job, and a forged body naming it (sig an int) in the work queue
    victim = rig.add_job("payroll", tenant="b", state=state, schedule="cron(0 0 1 1 ? 2099)")
    fake = rig.message(victim, t0, kind=kind)
    if kind == MessageKind.BACKFILL:
        fake = replace(fake, backfill="0123456789abcdef0123:1")
    rig.queues.signer = None
    rig.send(fake)
    rig.queues.signer = SIGNER
    body = json.loads(fake.to_body())
    body["sig"] = 1
    worker = rig.worker(signer=SIGNER)
    for _ in range(PARK_AFTER_RECEIVES):
        try:
            if worker.process_sqs_record(_record(rig, json.dumps(body))).ack:
                break
        except Exception:  # returned to the queue
            pass
        rig.clock.advance(1000)
    # When the scheduler's own machinery then runs for a while
    for _ in range(3):
        rig.clock.advance(10 * 60)
        rig.poll()
        rig.work_until_idle(worker)
    # Then b's target was never called for the forged slot
    assert rig.target.calls_for("payroll") == []


class _FakeSqs:
    """receive_message answers the bodies given; delete_message is recorded."""

    def __init__(self, bodies: list[str]) -> None:
        self.bodies = bodies
        self.deleted: list[str] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        return {
            "Messages": [
                {
                    "Body": body,
                    "ReceiptHandle": f"r{i}",
                    "MessageId": f"m{i}",
                    "Attributes": {"ApproximateReceiveCount": "1"},
                }
                for i, body in enumerate(self.bodies)
            ]
        }

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.deleted.append(ReceiptHandle)


@pytest.mark.parametrize("poison", ["not json", "{}", '{"tenant": "b"}', "[1]"])
def test_one_malformed_body_does_not_fail_the_whole_receive_of_the_ecs_lane(
    t0: datetime, poison: str
) -> None:
    # Given a receive (the ECS worker's: SqsQueues.receive) that returns a malformed body beside a
    # real message of another tenant
    good = SIGNER.sign(DispatchMessage("a", "report", slot_key(t0), slot_key(t0), 1, 1))
    client = _FakeSqs([poison, good.to_body()])
    queues = SqsQueues(client)
    queues.metrics = metrics = RecordingMetrics()
    # When it is received
    received = queues.receive("queue://long", 10, 0, 900)
    # Then the real message is handed over (not left in flight for the lease, its receive count
    # climbing towards the dead-letter queue each time the poison comes with it), and the
    # malformed one is deleted, as the Lambda worker drops it ("malformed"), and counted as
    # forged (QA24: not counted, no alarm)
    assert [r.message.job_id for r in received] == ["report"]
    assert client.deleted == ["r0"]
    assert metrics.total("ForgedMessages") == 1


@pytest.mark.parametrize("poison", ["not json", "{}", '{"tenant": "b"}', "[1]", "truncated"])
def test_a_malformed_body_is_dropped_and_counted_as_forged_by_the_lambda_worker(
    rig: Rig, t0: datetime, poison: str
) -> None:
    """QA24: the docs promise a body altered after signing is counted (ForgedMessages, which
    alarms); one that no longer reads as a message (cut short, made up) was counted apart
    (MalformedMessages), which nothing watched, so it raised no alarm."""
    victim = rig.add_job("payroll", tenant="b")
    signed = SIGNER.sign(rig.message(victim, t0, kind=MessageKind.FIRE))
    rig.send(signed)
    body = signed.to_body()[:-40] if poison == "truncated" else poison
    worker = rig.worker(signer=SIGNER)

    result = worker.process_sqs_record(_record(rig, body))

    assert (result.outcome, result.ack) == ("malformed", True)
    assert rig.metrics.total("ForgedMessages") == 1
    assert rig.store.get_execution("b", "payroll", slot_key(t0)) is None


def test_a_message_that_failed_is_parked_only_when_it_is_signed(rig: Rig, t0: datetime) -> None:
    """Review: parking writes a record and a timer for the slot a message names, which the poller
    sends signed; an unsigned message that raised (before or in its check) is dropped instead."""
    from punctual.execution import Delivery

    victim = rig.add_job("payroll", tenant="b")
    unsigned = rig.message(victim, t0, kind=MessageKind.FIRE)
    worker = rig.worker(signer=SIGNER)
    late = Delivery(SHORT, "r", PARK_AFTER_RECEIVES)

    assert worker.after_error(unsigned, late, RuntimeError("boom")) is True  # dropped: delete it
    assert rig.store.get_execution("b", victim.id, slot_key(t0)) is None
    signed = SIGNER.sign(unsigned)
    assert worker.after_error(signed, late, RuntimeError("boom")) is True  # parked, with a record
    parked = rig.store.get_execution("b", victim.id, slot_key(t0))
    assert parked is not None and "claim failed" in (parked.error or "")
