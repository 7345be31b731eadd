"""The dispatch key can be rotated while messages are in flight (QA22: the docs said to redeploy,
which keeps a generated secret's value, and a worker accepted one key, so a process that had read
the key before a rotation would have dropped every message signed after it as forged)."""

from __future__ import annotations

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
