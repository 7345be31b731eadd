"""Dispatch messages are signed by every sender and verified by every worker (issue 16, point 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_harness import FakeTarget, Rig, statuses
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.models import ExecutionStatus, JobState
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.security.message_auth import DispatchKeyError, DispatchSigner, signer_from
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

KEY = "k" * 40
SIGNER = DispatchSigner(KEY)


def message(**changes: object) -> DispatchMessage:
    base = DispatchMessage("acme", "billing", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 1, 3)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_signed_message_verifies_and_survives_its_body() -> None:
    signed = SIGNER.sign(message())
    assert signed.sig and SIGNER.verify(signed)
    # The body carries the signature; what is signed is every other field
    back = DispatchMessage.from_body(signed.to_body())
    assert back == signed and SIGNER.verify(back)
    assert "sig" not in json.loads(signed.payload())
    assert DispatchMessage.from_body(message().to_body()).sig == ""


@pytest.mark.parametrize(
    "change",
    [
        {"tenant": "other"},
        {"job_id": "payroll"},
        {"slot": "2026-11-30T10:01:00Z"},
        {"attempt": 2},
        {"job_version": 4},
        {"kind": MessageKind.MANUAL},
        {"ordered": True},
    ],
    ids=lambda change: next(iter(change)),
)
def test_any_field_changed_after_signing_fails_verification(change: dict[str, object]) -> None:
    signed = SIGNER.sign(message())
    assert not SIGNER.verify(replace(signed, **change))  # type: ignore[arg-type]


def test_unsigned_and_other_key_messages_fail() -> None:
    assert not SIGNER.verify(message())
    assert not SIGNER.verify(DispatchSigner("x" * 40).sign(message()))
    assert not SIGNER.verify(message(sig="0" * 64))


def test_a_short_key_is_refused_with_its_rule() -> None:
    with pytest.raises(DispatchKeyError, match="at least 32 characters"):
        DispatchSigner("short")


def test_the_signer_comes_from_the_settings_or_the_secret() -> None:
    assert signer_from(Settings()) is None
    assert signer_from(Settings(dispatch_key=KEY)) is not None

    class Secrets:
        def get_secret_value(self, SecretId: str) -> dict[str, str]:
            assert SecretId == "arn:aws:secretsmanager:us-east-1:1:secret:dispatch"
            return {"SecretString": KEY}

    from_secret = signer_from(
        Settings(dispatch_key_secret_arn="arn:aws:secretsmanager:us-east-1:1:secret:dispatch"), Secrets()
    )
    assert from_secret is not None and from_secret.verify(SIGNER.sign(message()))


# --------------------------------------------------------------------------- the worker


@pytest.fixture
def rig(t0: datetime) -> Rig:
    rig = Rig(MemoryStore(), ManualClock(t0))
    rig.queues.signer = SIGNER
    return rig


def test_signed_messages_run_and_everything_the_worker_sends_is_signed(rig: Rig, t0: datetime) -> None:
    # Given a job that fails once, so that the worker itself sends (a retry via its timer)
    job = rig.add_job(retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 1, "jitter": False})
    worker = rig.worker(signer=SIGNER, target=FakeTarget(TargetResult.retryable("503"), TargetResult.ok()))
    rig.send(rig.message(job, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["RETRY_WAIT"]
    rig.clock.advance(2)
    rig.poll()
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert statuses(rig.history(job)) == [(2, "SUCCEEDED")]
    assert rig.metrics.total("ForgedMessages") == 0


@pytest.mark.parametrize("forgery", ["unsigned", "other key", "tenant swapped"])
def test_a_forged_message_is_dropped_unread_and_counted(rig: Rig, t0: datetime, forgery: str) -> None:
    # Given tenant B's paused job, and a message naming it that did not come from the scheduler
    victim = rig.add_job("payroll", tenant="b", state=JobState.PAUSED)
    fake = rig.message(victim, t0, kind=MessageKind.MANUAL)
    if forgery == "other key":
        fake = DispatchSigner("y" * 40).sign(fake)
    elif forgery == "tenant swapped":
        fake = replace(SIGNER.sign(replace(fake, tenant="a")), tenant="b")
    rig.queues.signer = None  # injected straight into the work queue, past any sender
    rig.send(fake)
    rig.queues.signer = SIGNER
    worker = rig.worker(signer=SIGNER)
    # When a worker receives it
    results = rig.work_until_idle(worker)
    # Then it is dropped (and deleted) without a read or write of what it names, and counted
    assert [(r.outcome, r.ack) for r in results] == [("forged", True)]
    assert rig.target.calls == []
    assert rig.store.get_execution("b", "payroll", slot_key(t0)) is None
    assert rig.metrics.total("ForgedMessages") == 1
    assert rig.queues.all_messages() == []


def test_a_worker_with_a_key_refuses_what_an_unkeyed_sender_sent(rig: Rig, t0: datetime) -> None:
    job = rig.add_job()
    rig.queues.signer = None
    rig.send(rig.message(job, t0))
    worker = rig.worker(signer=SIGNER)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["forged"]
    stored = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert stored is None or stored.status is not ExecutionStatus.SUCCEEDED


@pytest.mark.parametrize("kind", [MessageKind.FIRE, MessageKind.MANUAL])
def test_a_signed_copy_put_back_after_its_record_expired_never_runs_again(
    rig: Rig, t0: datetime, kind: str
) -> None:
    # QA24: a copy of a signed message put back on a work queue once the slot's record had expired
    # (30 days) ran the slot again: nothing looked at how long ago it was released
    from punctual.dispatch.queues import message_for
    from punctual.security.message_auth import MAX_MESSAGE_AGE_S

    job = rig.add_job()
    slot = slot_key(t0) if kind == MessageKind.FIRE else f"{slot_key(t0)}~01HZX3"
    sent = message_for(job, slot, t0, 1, kind, t0)
    worker = rig.worker(signer=SIGNER)
    rig.send(sent)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    copy = rig.queues.signer.sign(sent)  # what a queue held, as it was received
    # A message redriven from a dead-letter queue (its queue's retention, the DLQ's, the queue's
    # again) still runs: another slot, released 22 days ago, never claimed
    rig.clock.set(t0 + timedelta(days=22))
    later = message_for(job, slot_key(t0 + timedelta(minutes=1)), t0 + timedelta(minutes=1), 1, kind, t0)
    rig.send(later)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    # 31 days on, the record is gone (its TTL), and the copy is put back
    rig.clock.set(t0 + timedelta(days=31))
    rig.store._executions.pop((job.tenant, job.id, slot))  # type: ignore[attr-defined]
    rig.queues.signer = None  # the copy as it was (signed), straight into the queue
    rig.send(copy)
    results = rig.work_until_idle(worker)
    assert [(r.outcome, r.ack) for r in results] == [("forged", True)]
    assert rig.target.calls_for(job.id) == [(slot, 1), (slot_key(t0 + timedelta(minutes=1)), 1)]
    assert rig.store.get_execution(job.tenant, job.id, slot) is None
    assert rig.metrics.total("ForgedMessages") == 1
    assert 23 * 86400 <= MAX_MESSAGE_AGE_S < 30 * 86400  # below the records' default retention


def test_a_message_of_a_rotated_key_waits_on_its_queue_while_the_key_cannot_be_read(
    rig: Rig, t0: datetime
) -> None:
    # QA24: after a rotation, with Secrets Manager unreachable, a worker that could not read the
    # new key again dropped every message signed with it as forged (the slots lost, the alarm raised)
    job = rig.add_job()
    reachable = [False]
    ticks = [0.0]

    def read_again() -> tuple[str, str]:
        if not reachable[0]:
            raise ConnectionError("secretsmanager: could not connect")
        return "n" * 40, KEY

    signer = DispatchSigner(KEY, reload=read_again, clock=lambda: ticks[0])
    worker = rig.worker(signer=signer)
    rig.queues.signer = DispatchSigner("n" * 40)  # the poller read the rotated key
    rig.send(rig.message(job, t0))
    results = rig.work_until_idle(worker)
    assert [(r.outcome, r.ack) for r in results] == [("unverified", False)]
    assert rig.target.calls == [] and rig.metrics.total("ForgedMessages") == 0
    assert len(rig.queues.all_messages()) == 1  # kept, to be verified when it comes back
    # Secrets Manager answers again: when the message comes back it verifies, and runs once
    reachable[0] = True
    ticks[0] += 11
    rig.clock.advance(11)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    # A forgery is still dropped as one once the key can be read
    rig.queues.signer = DispatchSigner("y" * 40)
    rig.send(rig.message(job, t0 + timedelta(minutes=1)))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["forged"]


_fields = st.fixed_dictionaries(
    {
        "tenant": st.text(min_size=1, max_size=10),
        "job_id": st.text(min_size=1, max_size=10),
        "attempt": st.integers(min_value=1, max_value=200),
        "job_version": st.integers(min_value=1, max_value=10**9),
        "ordered": st.booleans(),
        "not_before": st.sampled_from(["", "2026-11-30T10:00:01.500Z"]),
        "backfill": st.sampled_from(["", "bf-1:1"]),
        "resend": st.integers(min_value=0, max_value=3),
        "spec": st.sampled_from(["", '{"id":"j","payload":{"q":"\\"quoted\\" \\u00e9 ünï"}}']),
        "last": st.booleans(),
    }
)


@settings(max_examples=200, deadline=None)
@given(fields=_fields)
def test_a_received_body_verifies_over_the_text_that_was_signed(fields: dict[str, object]) -> None:
    sent = message(**fields)
    signed = SIGNER.sign(sent)
    assert signed == replace(sent, sig=signed.sig)  # what replace() gave
    body = signed.to_body()
    back = DispatchMessage.from_body(body)
    # The payload a worker verifies is the body less its signature, the very text the sender signed
    assert back == signed and back.payload() == sent.payload() and SIGNER.verify(back)
    # and a body whose signature is not its last member is encoded again, and verifies the same
    data = json.loads(body)
    reordered = json.dumps({"sig": data.pop("sig"), **data})
    again = DispatchMessage.from_body(reordered)
    assert again == signed and SIGNER.verify(again)


@settings(max_examples=100, deadline=None)
@given(fields=_fields, at=st.integers(min_value=1, max_value=10_000))
def test_a_body_changed_in_transit_fails_verification(fields: dict[str, object], at: int) -> None:
    body = SIGNER.sign(message(**fields)).to_body()
    sig_at = body.rindex(',"sig":')
    # Any one character of what was signed changed to another that keeps the JSON readable
    index = at % sig_at
    original = body[index]
    if not original.isalnum():
        return
    changed = body[:index] + ("0" if original != "0" else "1") + body[index + 1 :]
    try:
        back = DispatchMessage.from_body(changed)
    except (ValueError, TypeError):
        return  # no longer a message at all
    assert not SIGNER.verify(back)


def test_a_body_with_a_second_signature_inside_does_not_verify() -> None:
    signed = SIGNER.sign(message())
    body = signed.to_body()
    # A forger appends its own members after a real signature: the tail is no longer the signature
    forged = body[:-1] + f',"tenant":"other","sig":"{signed.sig}"}}'
    back = DispatchMessage.from_body(forged)
    assert back.tenant == "other" and not SIGNER.verify(back)


def test_signatures_are_pinned_across_releases() -> None:
    """A deploy leaves messages signed by the old code in flight: the signature of a message is
    fixed (HMAC-SHA256 over its payload text, hex), whatever call computes it."""
    carrying = message(spec='{"id":"j","payload":{"q":"\\u00e9 ünï"}}', not_before="2026-11-30T10:00:01.500Z")
    assert SIGNER.sign(carrying).sig == "1b2df12734651357be91f143e95d17722091eea10b06b9c007a5d8e0318fa17e"
    assert SIGNER.sign(message()).sig == "171c3afe3703a393cb904d46271409df90fce9b0c839fd5b182d6620aa69f243"
    assert SIGNER.verify(DispatchMessage.from_body(SIGNER.sign(carrying).to_body()))


def test_a_message_of_a_key_rotated_just_after_a_re_read_waits_instead_of_being_dropped(
    rig: Rig, t0: datetime
) -> None:
    # QA27: a worker that had read the key again (a message it could not verify) in the 10 s before
    # a rotation dropped every message signed with the new key for the rest of those 10 s: slots lost
    job = rig.add_job()
    key = [KEY]
    ticks = [0.0]
    signer = DispatchSigner(KEY, reload=lambda: (key[0], KEY), clock=lambda: ticks[0])
    worker = rig.worker(signer=signer)
    rig.queues.signer = DispatchSigner("y" * 40)
    rig.send(rig.message(job, t0 - timedelta(minutes=5)))  # a forgery: the key read again at t=0
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["forged"]
    key[0] = "n" * 40  # the rotation, at t=1
    ticks[0] = 2.0
    rig.clock.advance(2)
    rig.queues.signer = DispatchSigner("n" * 40)  # the poller read the rotated key
    fresh = replace(rig.message(job, t0), released_at=rig.clock.now().isoformat().replace("+00:00", "Z"))
    rig.send(fresh)
    results = rig.work_until_idle(worker)
    assert [(r.outcome, r.ack) for r in results] == [("unverified", False)]
    assert rig.metrics.total("ForgedMessages") == 1 and rig.target.calls == []
    # back after its wait, the key read again: verified, run once
    ticks[0] += 11
    rig.clock.advance(11)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    # a forgery released well before the keys were read is still dropped at once
    rig.queues.signer = DispatchSigner("y" * 40)
    rig.send(rig.message(job, t0 + timedelta(minutes=1)))
    old = replace(rig.message(job, t0 + timedelta(minutes=2)), released_at="2026-01-01T00:00:00Z")
    rig.send(old)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["forged", "forged"]


@pytest.mark.parametrize("ahead", [timedelta(seconds=25), timedelta(days=365 * 70)], ids=["25s", "70y"])
def test_a_forgery_dated_ahead_is_dropped_not_returned_for_good(
    rig: Rig, t0: datetime, ahead: timedelta
) -> None:
    # A forgery's released_at is the forger's to write: dated ahead, 'released + 30 s' stayed later
    # than every read of the keys (each return's verify reads them afresh), so it went back to its
    # queue at every receive, never dropped, until the dead-letter queue took it (and a redrive)
    ticks = [0.0]
    signer = DispatchSigner(KEY, reload=lambda: (KEY, KEY), clock=lambda: ticks[0])
    worker = rig.worker(signer=signer)
    rig.queues.signer = DispatchSigner("y" * 40)
    job = rig.add_job()
    released = (rig.clock.now() + ahead).isoformat().replace("+00:00", "Z")
    rig.send(replace(rig.message(job, t0), released_at=released))
    outcomes: list[str] = []
    for _ in range(5):  # each return's wait, the keys read again each time
        outcomes += [r.outcome for r in rig.work_until_idle(worker)]
        ticks[0] += 900
        rig.clock.advance(900)
    # Then it is dropped as a forgery after a return or two at most (a sender's clock a little ahead)
    assert outcomes[-1] == "forged" and outcomes.count("unverified") <= 2
    assert rig.metrics.total("ForgedMessages") == 1 and rig.target.calls_for(job.id) == []
