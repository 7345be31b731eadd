"""Envelope encryption of webhook secrets: a data key per tenant, at most one KMS call per tenant
per process per key lifetime (punctual.security.tenant_keys), against moto's KMS and both stores."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.security.signing_secrets import SecretCipher, SecretsError, job_binding
from punctual.security.tenant_keys import TenantKeyring
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LIFETIME_S = 3600


class CountingKms:
    """The moto KMS client, counting the calls that matter."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(**kwargs: Any) -> Any:
            with self.lock:
                self.calls.append(name)
            return method(**kwargs)

        return call


@pytest.fixture
def aws() -> Iterator[tuple[CountingKms, str, Any]]:
    with mock_aws():
        kms = boto3.client("kms", region_name="us-east-1")
        key_id = kms.create_key(Description="punctual webhook secrets")["KeyMetadata"]["KeyId"]
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(**table_definition("punctual-keys"))
        yield CountingKms(kms), key_id, dynamodb


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest, aws: tuple[CountingKms, str, Any]) -> Any:
    if request.param == "memory":
        return MemoryStore()
    return DynamoStore(aws[2], "punctual-keys")


def api_cipher(kms: CountingKms, key_id: str, store: Any, clock: ManualClock) -> SecretCipher:
    keyring = TenantKeyring(lambda: kms, key_id, store, clock, lifetime_s=LIFETIME_S)
    return SecretCipher(Settings(kms_key_id=key_id), kms, keyring=keyring)


def worker_cipher(kms: CountingKms, key_id: str, clock: ManualClock) -> SecretCipher:
    keyring = TenantKeyring(lambda: kms, key_id, None, clock, lifetime_s=LIFETIME_S)
    return SecretCipher(Settings(kms_key_id=key_id), kms, keyring=keyring)


def test_a_thousand_secrets_of_a_tenant_cost_one_kms_call_to_seal_and_one_to_open(
    aws: tuple[CountingKms, str, Any], store: Any
) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    # Given an API process that seals 1,000 jobs' secrets of one tenant
    api = api_cipher(kms, key_id, store, clock)
    sealed = {f"job-{i}": api.new_secret("AIDAALICE", f"job-{i}") for i in range(1000)}
    assert kms.calls == ["generate_data_key"]
    assert all(stored.startswith("kms:v3:") and plain not in stored for plain, stored in sealed.values())
    # When a worker process opens every one of them
    kms.calls.clear()
    worker = worker_cipher(kms, key_id, clock)
    for job_id, (plain, stored) in sealed.items():
        assert worker.decrypt(stored, job_binding("AIDAALICE", job_id)) == plain
    # Then it asked KMS once, for the tenant's data key
    assert kms.calls == ["decrypt"]


def test_the_workers_signing_secrets_need_no_kms_call_per_job(
    aws: tuple[CountingKms, str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from factories import job as make_job
    from punctual.execution.worker import default_signing_secrets
    from punctual.runtime import aws as factory

    kms, key_id, _ = aws
    clock = ManualClock(T0)
    api = api_cipher(kms, key_id, MemoryStore(), clock)
    jobs: list[tuple[Job, str]] = []
    for i in range(300):
        plain, stored = api.new_secret("AIDABOB", f"job-{i}")
        jobs.append((make_job(f"job-{i}", tenant="AIDABOB", signing_secret_enc=stored), plain))
    kms.calls.clear()
    monkeypatch.setattr(factory, "client", lambda service, **kw: kms if service == "kms" else None)
    # The worker's production path (what the Lambda and the ECS worker call for each run)
    secrets_of = default_signing_secrets(Settings(kms_key_id=key_id))
    assert [secrets_of(job) for job, _ in jobs] == [(plain,) for _, plain in jobs]
    assert kms.calls == ["decrypt"]


def test_a_second_api_process_seals_under_the_same_tenant_key(
    aws: tuple[CountingKms, str, Any], store: Any
) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    first = api_cipher(kms, key_id, store, clock).new_secret("AIDAALICE", "job-1")[1]
    second = api_cipher(kms, key_id, store, clock).new_secret("AIDAALICE", "job-2")[1]
    # One data key made, the other process unwrapped it: the wrapped key in both forms is one
    assert kms.calls == ["generate_data_key", "decrypt"]
    assert first.split(":")[3] == second.split(":")[3]


def test_racing_processes_agree_on_one_key_per_tenant_and_epoch(
    aws: tuple[CountingKms, str, Any], store: Any
) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    ciphers = [api_cipher(kms, key_id, store, clock) for _ in range(6)]
    out: list[str] = []
    barrier = threading.Barrier(len(ciphers))

    def seal(index: int) -> None:
        barrier.wait()
        out.append(ciphers[index].new_secret("AIDAALICE", f"job-{index}")[1])

    threads = [threading.Thread(target=seal, args=(i,)) for i in range(len(ciphers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len({stored.split(":")[3] for stored in out}) == 1  # every secret under the stored key


def test_concurrent_misses_of_one_key_make_one_kms_call(aws: tuple[CountingKms, str, Any]) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    api = api_cipher(kms, key_id, MemoryStore(), clock)
    sealed = [api.new_secret("AIDAALICE", f"job-{i}") for i in range(32)]
    kms.calls.clear()
    worker = worker_cipher(kms, key_id, clock)
    barrier = threading.Barrier(32)
    opened: list[str] = []

    def open_one(index: int) -> None:
        barrier.wait()
        opened.append(worker.decrypt(sealed[index][1], job_binding("AIDAALICE", f"job-{index}")))

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(opened) == sorted(plain for plain, _ in sealed)
    assert kms.calls == ["decrypt"]


def test_the_binding_holds_a_sealed_secret_to_its_tenant_and_job(aws: tuple[CountingKms, str, Any]) -> None:
    # Someone who can write the table copies Alice's sealed secret onto another job
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    _, stored = api_cipher(kms, key_id, MemoryStore(), clock).new_secret("AIDAALICE", "job-1")
    worker = worker_cipher(kms, key_id, clock)
    with pytest.raises(SecretsError, match="integrity"):
        worker.decrypt(stored, job_binding("AIDAALICE", "job-2"))
    with pytest.raises(SecretsError, match="KMS refused"):
        worker.decrypt(stored, job_binding("AIDABOB", "job-1"))
    with pytest.raises(SecretsError, match="bound to a job"):
        worker.decrypt(stored)


def test_each_key_epoch_has_its_own_key_and_a_process_unwraps_again_after_a_lifetime(
    aws: tuple[CountingKms, str, Any], store: Any
) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    api = api_cipher(kms, key_id, store, clock)
    worker = worker_cipher(kms, key_id, clock)
    before = api.new_secret("AIDAALICE", "job-1")
    clock.advance(LIFETIME_S)
    after = api.new_secret("AIDAALICE", "job-2")
    assert kms.calls == ["generate_data_key", "generate_data_key"]
    assert before[1].split(":")[3] != after[1].split(":")[3]
    kms.calls.clear()
    for plain, stored, job in ((*before, "job-1"), (*after, "job-2"), (*before, "job-1")):
        assert worker.decrypt(stored, job_binding("AIDAALICE", job)) == plain
    assert kms.calls == ["decrypt", "decrypt"]  # one per epoch's key
    clock.advance(LIFETIME_S)  # the worker has held them a lifetime: it asks again, once each
    worker.decrypt(before[1], job_binding("AIDAALICE", "job-1"))
    worker.decrypt(before[1], job_binding("AIDAALICE", "job-1"))
    assert kms.calls == ["decrypt", "decrypt", "decrypt"]


def test_secrets_sealed_before_the_envelope_still_open(aws: tuple[CountingKms, str, Any]) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    plain, direct = SecretCipher(Settings(kms_key_id=key_id), kms).new_secret("AIDAALICE", "job-1")
    assert direct.startswith("kms:v2:")
    assert worker_cipher(kms, key_id, clock).decrypt(direct, job_binding("AIDAALICE", "job-1")) == plain


def test_a_rotation_keeps_both_secrets_open_under_the_envelope(aws: tuple[CountingKms, str, Any]) -> None:
    kms, key_id, _ = aws
    clock = ManualClock(T0)
    api = api_cipher(kms, key_id, MemoryStore(), clock)
    old = api.new_secret("AIDAALICE", "job-1")
    clock.advance(timedelta(days=1).total_seconds() % LIFETIME_S + 10)
    new = api.new_secret("AIDAALICE", "job-1")
    worker = worker_cipher(kms, key_id, clock)
    assert [worker.decrypt(s, job_binding("AIDAALICE", "job-1")) for _, s in (new, old)] == [new[0], old[0]]
