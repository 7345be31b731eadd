"""The dispatch key can be rotated while messages are in flight (QA22: the docs said to redeploy,
which keeps a generated secret's value, and a worker accepted one key, so a process that had read
the key before a rotation would have dropped every message signed after it as forged)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.dispatch.queues import DispatchMessage
from punctual.runtime.settings import Settings
from punctual.security.message_auth import DispatchSigner, signer_from

K1, K2, K3 = "a" * 40, "b" * 40, "c" * 40
MESSAGE = DispatchMessage("acme", "billing", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 1, 3)


class Counting:
    """A Secrets Manager client that counts its reads."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.reads = 0

    def get_secret_value(self, **kwargs: Any) -> Any:
        self.reads += 1
        return self.client.get_secret_value(**kwargs)


@pytest.fixture
def secrets() -> Any:
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        arn = client.create_secret(Name="dispatch", SecretString=K1)["ARN"]
        yield client, arn


def _signer(client: Any, arn: str) -> DispatchSigner:
    signer = signer_from(Settings(dispatch_key_secret_arn=arn), client)
    assert signer is not None
    return signer


def test_messages_signed_on_either_side_of_a_rotation_verify_everywhere(secrets: Any) -> None:
    client, arn = secrets
    before = _signer(client, arn)  # a process started before the rotation (it holds K1 only)
    signed_before = before.sign(MESSAGE)

    client.put_secret_value(SecretId=arn, SecretString=K2)  # the rotation: K2 current, K1 previous
    after = _signer(client, arn)
    signed_after = after.sign(MESSAGE)

    assert signed_after.sig == DispatchSigner(K2).signature(MESSAGE)  # a new process signs with K2
    assert after.verify(signed_before)  # a message signed before the rotation still runs
    assert before.verify(signed_after)  # the old process reads the key again and runs it
    assert before.sign(MESSAGE).sig == signed_after.sig  # and signs with the new key from then on
    assert not after.verify(DispatchSigner("x" * 40).sign(MESSAGE))  # a forgery is still one


def test_a_key_two_rotations_old_no_longer_verifies(secrets: Any) -> None:
    client, arn = secrets
    signed_k1 = _signer(client, arn).sign(MESSAGE)
    client.put_secret_value(SecretId=arn, SecretString=K2)
    client.put_secret_value(SecretId=arn, SecretString=K3)
    assert not _signer(client, arn).verify(signed_k1)


def test_messages_no_key_verifies_read_the_secret_at_most_every_ten_seconds(secrets: Any) -> None:
    client, arn = secrets
    counting = Counting(client)
    now = [0.0]
    first = _signer(counting, arn)
    signer = DispatchSigner(K1, reload=first._reload, clock=lambda: now[0])  # type: ignore[arg-type]
    forged = DispatchSigner("x" * 40).sign(MESSAGE)
    reads = counting.reads
    assert not signer.verify(forged)  # read again once (current and previous)...
    assert counting.reads == reads + 2
    for _ in range(50):
        assert not signer.verify(forged)
    assert counting.reads == reads + 2  # ...and not again within the ten seconds
    now[0] = 10.5
    assert not signer.verify(forged)
    assert counting.reads == reads + 4


def test_a_secret_that_cannot_be_read_again_leaves_the_keys_held(secrets: Any) -> None:
    client, arn = secrets
    signer = _signer(client, arn)
    client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    assert not signer.verify(DispatchSigner("x" * 40).sign(MESSAGE))  # logged, not raised
    assert signer.verify(DispatchSigner(K1).sign(MESSAGE))


class _TellingLock:
    """The signer's reload lock, telling when a second thread asks for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked = 0
        self.second_asked = threading.Event()

    def __enter__(self) -> None:
        self.asked += 1
        if self.asked == 2:
            self.second_asked.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_messages_checked_while_another_thread_reads_the_new_key_are_not_forged() -> None:
    """QA24: a worker checks a batch's messages in threads. After a rotation, the first thread to
    meet the new key read it again; another thread that had checked its message (by the new key
    too) meanwhile waited for that read, then found it 'too recent' to read again, and its message
    was dropped as forged (ForgedMessages, the alarm; the slot waited for a re-send)."""
    reading = threading.Event()
    go = threading.Event()

    def slow_read() -> tuple[str, str]:  # Secrets Manager, answering once told to
        reading.set()
        assert go.wait(30)
        return K2, K1

    signer = DispatchSigner(K1, reload=slow_read)
    signer._reload_lock = lock = _TellingLock()  # type: ignore[assignment]
    first, second = (DispatchSigner(K2).sign(replace(MESSAGE, job_id=job)) for job in ("a", "b"))
    results: dict[str, bool] = {}
    threads = [
        threading.Thread(target=lambda m=m: results.__setitem__(m.job_id, signer.verify(m)))
        for m in (first, second)
    ]

    threads[0].start()  # the first thread reads the key again...
    assert reading.wait(30)
    threads[1].start()  # ...while the second checks its message by the old key and waits
    assert lock.second_asked.wait(30)
    go.set()
    for thread in threads:
        thread.join(30)

    assert results == {"a": True, "b": True}


def test_a_process_that_only_signs_follows_rotations(secrets: Any) -> None:
    """QA24: a poller, the API or the auditor never verifies, so it never met a message that made
    it read the key again: one that lived through two rotations signed with a key no worker
    accepted any more, and every slot it released was dropped as forged."""
    client, arn = secrets
    counting = Counting(client)
    now = [0.0]
    first = _signer(counting, arn)
    signer = DispatchSigner(K1, reload=first._reload, clock=lambda: now[0])  # type: ignore[arg-type]
    client.put_secret_value(SecretId=arn, SecretString=K2)
    client.put_secret_value(SecretId=arn, SecretString=K3)
    reads = counting.reads
    assert signer.sign(MESSAGE).sig == DispatchSigner(K1).signature(MESSAGE)  # read moments ago
    assert counting.reads == reads  # no read per signature
    now[0] = 301.0  # past the refresh period: the next signature has the keys read beside it
    signer.sign(MESSAGE)
    assert signer.refreshing is not None
    signer.refreshing.join(30)
    signed = signer.sign(MESSAGE)
    assert signed.sig == DispatchSigner(K3).signature(MESSAGE)
    assert _signer(client, arn).verify(signed)  # a worker of today runs it
    for _ in range(20):
        signer.sign(MESSAGE)
    assert counting.reads == reads + 2  # once (current and previous), not per signature


def test_a_failed_refresh_keeps_signing_with_the_keys_held(secrets: Any) -> None:
    client, arn = secrets
    now = [0.0]
    first = _signer(client, arn)
    signer = DispatchSigner(K1, reload=first._reload, clock=lambda: now[0])  # type: ignore[arg-type]
    client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    now[0] = 400.0
    assert signer.sign(MESSAGE).sig == DispatchSigner(K1).signature(MESSAGE)  # logged, not raised
    assert signer.refreshing is not None
    signer.refreshing.join(30)
    assert signer.sign(MESSAGE).sig == DispatchSigner(K1).signature(MESSAGE)  # the keys held


def test_a_refresh_secrets_manager_does_not_answer_does_not_hold_up_the_signature() -> None:
    """Review of the 5-minute refresh: a sender signs on its release's thread (SqsQueues.send), and
    a read Secrets Manager does not answer waits out the SDK's retries (8 tries, 5 s to connect,
    30 s to read: minutes). Read inline, it held a poller's release up that long. The signature goes
    on with the keys held while the read runs beside it; the next ones use what it read."""
    now = [0.0]
    answer = threading.Event()

    def slow_read() -> tuple[str, str | None]:
        answer.wait(3)  # Secrets Manager unreachable for a while
        return K2, K1

    signer = DispatchSigner(K1, reload=slow_read, clock=lambda: now[0])
    now[0] = 301.0
    started = time.monotonic()
    assert signer.sign(MESSAGE).sig == DispatchSigner(K1).signature(MESSAGE)  # the keys held
    assert time.monotonic() - started < 1.0  # not the read's wait
    answer.set()
    assert signer.refreshing is not None
    signer.refreshing.join(10)
    assert signer.sign(MESSAGE).sig == DispatchSigner(K2).signature(MESSAGE)  # what it read
