"""Webhook signing secrets: generated, stored encrypted, rotated.

A secret is ``whsec_`` followed by the base64 of 32 random bytes, the form
Standard Webhooks libraries accept. It is shown to the user once (the
``signing_secret`` of the creation response) and stored only encrypted:

* **KMS envelope** when ``settings.kms_key_id`` is set (the cloud) and a job's
  secret is sealed by a process that can reach the tenant keyring (the API): the
  secret is sealed with its tenant's data key (:mod:`punctual.security.tenant_keys`) and the
  binding ``{"purpose": ..., "tenant": ..., "job": ...}`` as authenticated data, and
  stored with the KMS-wrapped data key beside it (``kms:v3:``). Opening it costs a
  KMS ``Decrypt`` once per tenant per process per key lifetime, not once per secret.
* **KMS** directly (``kms:v2:`` / ``kms:v1:``): ``Encrypt`` / ``Decrypt`` with an
  encryption context naming the purpose, and, for a job's signing secret, the tenant
  and the job id: what secrets stored before the envelope use, and what an idempotent
  reply (no tenant key) still uses. Either way a ciphertext made for something else, or
  copied onto another job's item by someone who can write the table, does not open. The
  workers' IAM policy allows ``kms:Decrypt`` only under the two purposes.
* **Local fallback** otherwise: an authenticated construction from the standard
  library keyed by ``settings.secret_key`` (``PUNCTUAL_SECRET_KEY``).
  Encrypt-then-MAC: an HMAC-SHA256 keystream (counter mode over a random
  16-byte nonce) XORed with the text, then an HMAC-SHA256 tag over version,
  context, nonce and ciphertext; the two keys are derived from the root key with
  distinct labels. **Only local mode uses it**: deployed stacks set a KMS key.

Stored forms carry a versioned prefix, so each can be decrypted whatever the
current settings prefer, and the format can move on: ``kms:v3:`` is the envelope
(``kms:v3:<epoch>:<wrapped data key>:<sealed secret>``); ``kms:v2:`` / ``local:v2:``
are bound to a tenant and a job (the context above); ``kms:v1:`` / ``local:v1:``
carry the purpose only. v1 is what idempotent replies use, and what job secrets
used before they were bound: those still decrypt (nothing breaks at upgrade), and
rotating a job's secret (``POST /v1/jobs/{id}/rotate-secret``, then again with
``drop_previous=true`` once the receiver uses the new one) replaces them with v2.
"""

from __future__ import annotations

import base64
import binascii
import secrets as _random
from collections.abc import Mapping
from typing import Any

from punctual.runtime.settings import Settings
from punctual.security.tenant_keys import Sealer, SealError, TenantKeyring

__all__ = [
    "SECRET_BYTES",
    "SECRET_PREFIX",
    "SecretCipher",
    "SecretsError",
    "generate_signing_secret",
    "job_binding",
    "rotate",
    "signing_key",
]

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # Standard Webhooks asks for 24 to 64 random bytes
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
MIN_LOCAL_KEY_CHARS = 16
DEFAULT_CONTEXT: Mapping[str, str] = {"purpose": "punctual-webhook-signing-secret"}

_KMS_PREFIX = "kms:v1:"
_LOCAL_PREFIX = "local:v1:"
_KMS_BOUND_PREFIX = "kms:v2:"
_LOCAL_BOUND_PREFIX = "local:v2:"
_ENVELOPE_PREFIX = "kms:v3:"
_ENVELOPE_LABEL = b"punctual/tenant-seal/v3"


class SecretsError(Exception):
    """A secret cannot be made, stored or read back (configuration or tampering)."""


def generate_signing_secret(nbytes: int = SECRET_BYTES) -> str:
    """A new webhook signing secret: ``whsec_`` + base64 of ``nbytes`` random bytes.

    Parameters
    ----------
    nbytes : int, default 32
        Between 24 and 64, as Standard Webhooks recommends.

    Returns
    -------
    str
    """
    if not MIN_SECRET_BYTES <= nbytes <= MAX_SECRET_BYTES:
        raise ValueError(f"a signing secret has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes")
    return SECRET_PREFIX + base64.b64encode(_random.token_bytes(nbytes)).decode("ascii")


def signing_key(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret.

    Raises
    ------
    SecretsError
        Wrong prefix, not base64, or a key outside 24-64 bytes.
    """
    if not secret.startswith(SECRET_PREFIX):
        raise SecretsError(f"a signing secret starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise SecretsError("a signing secret is base64 after its prefix") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise SecretsError(f"a signing secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes")
    return key


def rotate(current: str) -> tuple[str, str]:
    """Start a rotation: a new secret, and the current one kept as the previous.

    While both are kept, the webhook adapter signs with both (``SlotContext.
    signing_secrets = (new, previous)``), so the receiver may switch to the new
    secret at any moment; drop the previous one when the receiver confirms.

    Parameters
    ----------
    current : str
        The secret in use.

    Returns
    -------
    tuple of str
        ``(new_secret, previous_secret)``.
    """
    signing_key(current)
    return generate_signing_secret(), current


def job_binding(tenant: str, job_id: str) -> dict[str, str]:
    """The encryption-context entries that bind a job's signing secret to that job."""
    return {"tenant": tenant, "job": job_id}


class SecretCipher:
    """Encrypts signing secrets for storage; satisfies ``punctual.usecases.jobs.SecretBox``.

    Parameters
    ----------
    settings : Settings
        ``kms_key_id`` selects KMS; otherwise ``secret_key`` keys the local fallback.
    kms_client : boto3 KMS client, optional
        Used for KMS; created on first use when ``kms_key_id`` is set and none is given.
    context : mapping of str to str, optional
        Encryption context bound into every ciphertext (KMS encryption context,
        or authenticated data for the fallback); decryption needs the same one.
    keyring : TenantKeyring, optional
        The tenant data keys (envelope encryption). With a store, job secrets are sealed
        under their tenant's key (``kms:v3:``); without one (or none given: one is made with
        no store), envelope forms can be opened, not made.

    Raises
    ------
    SecretsError
        Neither a KMS key nor a usable local key (at least 16 characters) is set.
    """

    def __init__(
        self,
        settings: Settings,
        kms_client: Any | None = None,
        *,
        context: Mapping[str, str] | None = None,
        keyring: TenantKeyring | None = None,
    ) -> None:
        self.kms_key_id = settings.kms_key_id
        self._kms = kms_client
        self.context = dict(context or DEFAULT_CONTEXT)
        root = settings.secret_key.encode()
        if not self.kms_key_id and len(settings.secret_key) < MIN_LOCAL_KEY_CHARS:
            raise SecretsError(
                "webhook secrets need PUNCTUAL_KMS_KEY_ID, or PUNCTUAL_SECRET_KEY of at least "
                f"{MIN_LOCAL_KEY_CHARS} characters (local mode)"
            )
        self._local = Sealer(root, b"punctual/secret-box/v1") if root else None
        self.keyring = keyring or TenantKeyring(
            self._kms_client, self.kms_key_id, lifetime_s=settings.tenant_key_lifetime_s
        )

    # -- the SecretBox protocol

    def new_secret(self, tenant: str, job_id: str) -> tuple[str, str]:
        """A fresh signing secret of one job: ``(plain text, stored form bound to tenant and job)``."""
        secret = generate_signing_secret()
        return secret, self.encrypt(secret, job_binding(tenant, job_id))

    # -- encryption

    def encrypt(self, plaintext: str, binding: Mapping[str, str] | None = None) -> str:
        """The stored form of ``plaintext``: KMS when configured, else the local fallback.

        ``binding`` (e.g. :func:`job_binding`) joins the encryption context: the stored
        form then decrypts only with the same binding.
        """
        context = {**self.context, **(binding or {})}
        if self.kms_key_id and binding and "tenant" in binding and self.keyring.store is not None:
            return self._envelope_seal(plaintext, context, binding["tenant"])
        if self.kms_key_id:
            response = self._kms_client().encrypt(
                KeyId=self.kms_key_id, Plaintext=plaintext.encode(), EncryptionContext=context
            )
            prefix = _KMS_BOUND_PREFIX if binding else _KMS_PREFIX
            return prefix + base64.b64encode(response["CiphertextBlob"]).decode("ascii")
        prefix = _LOCAL_BOUND_PREFIX if binding else _LOCAL_PREFIX
        return self._local_encrypt(plaintext.encode(), context, prefix)

    def decrypt(self, stored: str, binding: Mapping[str, str] | None = None) -> str:
        """The plain text of a stored form made by :meth:`encrypt`.

        A bound (v2) form needs the ``binding`` it was made with; an unbound (v1) form
        decrypts with the purpose alone, whatever ``binding`` says.

        Raises
        ------
        SecretsError
            Unknown format, the key needed is not configured, the ciphertext was
            altered (or made with another key or context), or a bound form was read
            without its binding or with another one.
        """
        bound = stored.startswith((_KMS_BOUND_PREFIX, _LOCAL_BOUND_PREFIX, _ENVELOPE_PREFIX))
        if bound and not binding:
            raise SecretsError("stored secret is bound to a job: decrypting it needs the tenant and job id")
        context = {**self.context, **(binding or {})} if bound else dict(self.context)
        if stored.startswith(_ENVELOPE_PREFIX):
            return self._envelope_open(stored, context, (binding or {}).get("tenant", ""))
        for prefix in (_KMS_PREFIX, _KMS_BOUND_PREFIX):
            if stored.startswith(prefix):
                return self._kms_decrypt(stored[len(prefix) :], context)
        for prefix in (_LOCAL_PREFIX, _LOCAL_BOUND_PREFIX):
            if stored.startswith(prefix):
                return self._local_decrypt(stored, prefix, context).decode()
        raise SecretsError("stored secret has an unknown format")

    def _kms_decrypt(self, text: str, context: Mapping[str, str]) -> str:
        try:
            blob = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise SecretsError("stored secret is not base64") from None
        if self._kms is None and not self.kms_key_id:
            raise SecretsError("stored secret was encrypted with KMS, and no KMS client is configured")
        try:
            response = self._kms_client().decrypt(CiphertextBlob=blob, EncryptionContext=dict(context))
        except Exception as exc:
            if type(exc).__name__ in ("InvalidCiphertextException", "ClientError"):
                raise SecretsError(f"KMS refused to decrypt the stored secret: {exc}") from None
            raise
        return bytes(response["Plaintext"]).decode()

    def _envelope_seal(self, plaintext: str, context: Mapping[str, str], tenant: str) -> str:
        key = self.keyring.current(tenant)
        sealed = Sealer(key.plaintext, _ENVELOPE_LABEL).seal(plaintext.encode(), context, _ENVELOPE_PREFIX)
        wrapped = base64.urlsafe_b64encode(key.wrapped).decode("ascii")
        return f"{_ENVELOPE_PREFIX}{key.epoch}:{wrapped}:{base64.urlsafe_b64encode(sealed).decode('ascii')}"

    def _envelope_open(self, stored: str, context: Mapping[str, str], tenant: str) -> str:
        try:
            _epoch, wrapped_text, sealed_text = stored[len(_ENVELOPE_PREFIX) :].split(":")
            wrapped = base64.urlsafe_b64decode(wrapped_text.encode("ascii"))
            sealed = base64.urlsafe_b64decode(sealed_text.encode("ascii"))
        except (ValueError, binascii.Error):
            raise SecretsError("stored secret is not an envelope") from None
        if not self.kms_key_id and self._kms is None:
            raise SecretsError("stored secret was sealed under a KMS data key, and no KMS is configured")
        try:
            data_key = self.keyring.unwrap(tenant, wrapped)
        except Exception as exc:
            if type(exc).__name__ in ("InvalidCiphertextException", "ClientError"):
                raise SecretsError(f"KMS refused to unwrap the tenant's data key: {exc}") from None
            raise
        try:
            return Sealer(data_key, _ENVELOPE_LABEL).open(sealed, context, _ENVELOPE_PREFIX).decode()
        except SealError as exc:
            raise SecretsError(f"stored secret {exc}") from None

    # -- internals

    def _kms_client(self) -> Any:
        if self._kms is None:
            from punctual.runtime import aws

            self._kms = aws.client("kms")
        return self._kms

    def _require_local_key(self) -> Sealer:
        if self._local is None:
            raise SecretsError("stored secret uses the local format, and PUNCTUAL_SECRET_KEY is not set")
        return self._local

    def _local_encrypt(self, plaintext: bytes, context: Mapping[str, str], prefix: str) -> str:
        blob = self._require_local_key().seal(plaintext, context, prefix)
        return prefix + base64.urlsafe_b64encode(blob).decode("ascii")

    def _local_decrypt(self, stored: str, prefix: str, context: Mapping[str, str]) -> bytes:
        sealer = self._require_local_key()
        try:
            blob = base64.urlsafe_b64decode(stored[len(prefix) :].encode("ascii"))
        except (binascii.Error, ValueError):
            raise SecretsError("stored secret is not base64") from None
        try:
            return sealer.open(blob, context, prefix)
        except SealError as exc:
            raise SecretsError(f"stored secret {exc}") from None
