"""Webhook secrets stored with KMS (moto), as deployed stacks do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.runtime.settings import Settings
from punctual.security.signing_secrets import SecretCipher, SecretsError, generate_signing_secret, job_binding


@pytest.fixture
def kms() -> Iterator[tuple[Any, str]]:
    with mock_aws():
        client = boto3.client("kms", region_name="us-east-1")
        yield client, client.create_key(Description="punctual webhook secrets")["KeyMetadata"]["KeyId"]


def test_with_a_kms_key_secrets_are_stored_as_kms_ciphertext(kms: tuple[Any, str]) -> None:
    client, key_id = kms
    cipher = SecretCipher(Settings(kms_key_id=key_id), client)
    plain, stored = cipher.new_secret("AIDAALICE", "job-1")
    assert stored.startswith("kms:v2:")
    assert plain not in stored
    assert cipher.decrypt(stored, job_binding("AIDAALICE", "job-1")) == plain


def test_kms_binds_a_job_secret_to_its_tenant_and_job(kms: tuple[Any, str]) -> None:
    # Someone who can write the table copies Alice's ciphertext onto Bob's job: KMS refuses it.
    client, key_id = kms
    cipher = SecretCipher(Settings(kms_key_id=key_id), client)
    _, stored = cipher.new_secret("AIDAALICE", "job-1")
    for tenant, job in (("AIDABOB", "job-1"), ("AIDAALICE", "job-2")):
        with pytest.raises(SecretsError, match="KMS refused"):
            cipher.decrypt(stored, job_binding(tenant, job))


def test_the_encryption_context_binds_the_ciphertext_to_its_purpose(kms: tuple[Any, str]) -> None:
    client, key_id = kms
    stored = SecretCipher(Settings(kms_key_id=key_id), client).encrypt(generate_signing_secret())
    other = SecretCipher(Settings(kms_key_id=key_id), client, context={"purpose": "api-tokens"})
    with pytest.raises(SecretsError, match="KMS refused"):
        other.decrypt(stored)


def test_a_kms_deployment_still_reads_secrets_stored_locally(kms: tuple[Any, str]) -> None:
    # A table moved from local mode keeps working while its secrets are re-encrypted.
    client, key_id = kms
    local_key = "local-mode-key-0123456789"
    stored = SecretCipher(Settings(secret_key=local_key)).encrypt("whsec_" + "A" * 43 + "=")
    cloud = SecretCipher(Settings(kms_key_id=key_id, secret_key=local_key), client)
    assert cloud.decrypt(stored) == "whsec_" + "A" * 43 + "="
    assert cloud.encrypt("x").startswith("kms:v1:")
