"""Webhook signing secrets: their form, the local encryption fallback, rotation."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from punctual.runtime.settings import Settings
from punctual.security.signing_secrets import (
    SecretCipher,
    SecretsError,
    generate_signing_secret,
    job_binding,
    rotate,
    signing_key,
)

LOCAL = Settings(secret_key="local-mode-key-0123456789")


def test_a_secret_is_whsec_and_base64_of_32_random_bytes() -> None:
    secret = generate_signing_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert generate_signing_secret() != secret


def test_standard_webhooks_accepts_our_secrets() -> None:
    secret = generate_signing_secret()
    stamp = datetime(2026, 11, 30, tzinfo=UTC)
    # The library derives the same key from the secret as we do.
    expected = Webhook(secret).sign("msg", stamp, "{}")
    ours = base64.b64encode(
        hmac.new(signing_key(secret), f"msg.{int(stamp.timestamp())}.{{}}".encode(), hashlib.sha256).digest()
    ).decode()
    assert expected == f"v1,{ours}"


@pytest.mark.parametrize("size", [23, 65])
def test_secret_sizes_outside_24_to_64_bytes_are_refused(size: int) -> None:
    with pytest.raises(ValueError):
        generate_signing_secret(size)


@pytest.mark.parametrize(
    "bad", ["", "whsec_", "sk_abc", "whsec_not base64!", "whsec_" + base64.b64encode(b"x" * 8).decode()]
)
def test_malformed_secrets_are_refused(bad: str) -> None:
    with pytest.raises(SecretsError):
        signing_key(bad)


def test_local_encryption_round_trips_and_hides_the_secret() -> None:
    cipher = SecretCipher(LOCAL)
    secret = generate_signing_secret()
    stored = cipher.encrypt(secret)
    assert stored.startswith("local:v1:")
    assert secret not in stored and secret.removeprefix("whsec_") not in stored
    assert cipher.decrypt(stored) == secret
    assert cipher.encrypt(secret) != stored  # a fresh nonce each time


def test_new_secret_gives_the_plain_text_and_its_stored_form() -> None:
    cipher = SecretCipher(LOCAL)
    plain, stored = cipher.new_secret("AIDAALICE", "job-1")
    assert stored.startswith("local:v2:")
    assert cipher.decrypt(stored, job_binding("AIDAALICE", "job-1")) == plain


@pytest.mark.parametrize(
    "binding",
    [
        None,  # read without saying whose it is
        {"tenant": "AIDAALICE", "job": "job-2"},  # copied onto another job of the tenant
        {"tenant": "AIDABOB", "job": "job-1"},  # copied onto another tenant's job of the same id
    ],
)
def test_a_job_secret_decrypts_only_for_its_own_tenant_and_job(binding: dict[str, str] | None) -> None:
    cipher = SecretCipher(LOCAL)
    _, stored = cipher.new_secret("AIDAALICE", "job-1")
    with pytest.raises(SecretsError):
        cipher.decrypt(stored, binding)


def test_a_secret_stored_before_binding_still_decrypts_for_its_job() -> None:
    # Stored forms of the previous version (v1, purpose only) keep working after an upgrade.
    cipher = SecretCipher(LOCAL)
    legacy = cipher.encrypt("whsec_" + "B" * 43 + "=")
    assert legacy.startswith("local:v1:")
    assert cipher.decrypt(legacy, job_binding("AIDAALICE", "job-1")) == "whsec_" + "B" * 43 + "="


def test_an_altered_ciphertext_is_refused() -> None:
    cipher = SecretCipher(LOCAL)
    stored = cipher.encrypt(generate_signing_secret())
    blob = bytearray(base64.urlsafe_b64decode(stored.removeprefix("local:v1:")))
    for index in (0, 20, len(blob) - 1):  # nonce, ciphertext, tag
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(SecretsError, match="integrity"):
            cipher.decrypt("local:v1:" + base64.urlsafe_b64encode(bytes(tampered)).decode())


def test_another_key_or_context_cannot_decrypt() -> None:
    stored = SecretCipher(LOCAL).encrypt(generate_signing_secret())
    with pytest.raises(SecretsError, match="integrity"):
        SecretCipher(Settings(secret_key="another-local-key-987654")).decrypt(stored)
    with pytest.raises(SecretsError, match="integrity"):
        SecretCipher(LOCAL, context={"purpose": "something-else"}).decrypt(stored)


@pytest.mark.parametrize(
    "stored", ["plain-text", "local:v1:@@@", "local:v1:" + base64.urlsafe_b64encode(b"short").decode()]
)
def test_garbage_is_refused(stored: str) -> None:
    with pytest.raises(SecretsError):
        SecretCipher(LOCAL).decrypt(stored)


def test_without_kms_a_short_local_key_is_a_configuration_error() -> None:
    with pytest.raises(SecretsError, match="PUNCTUAL_SECRET_KEY"):
        SecretCipher(Settings(secret_key="short"))


def test_a_kms_stored_secret_needs_kms() -> None:
    with pytest.raises(SecretsError, match="KMS"):
        SecretCipher(LOCAL).decrypt("kms:v1:" + base64.b64encode(b"blob").decode())


def test_rotation_keeps_the_current_secret_as_previous() -> None:
    current = generate_signing_secret()
    new, previous = rotate(current)
    assert previous == current
    assert new != current and signing_key(new)
    with pytest.raises(SecretsError):
        rotate("not-a-secret")
