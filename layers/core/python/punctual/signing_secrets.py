"""Webhook signing secrets: generated, stored encrypted, rotated.

A secret is ``whsec_`` followed by the base64 of 32 random bytes, the form
Standard Webhooks libraries accept. It is shown to the user once (the
``signing_secret`` of the creation response) and stored only encrypted:

* **KMS** when ``settings.kms_key_id`` is set (the cloud): ``Encrypt`` /
  ``Decrypt`` with an encryption context naming the purpose, and, for a job's
  signing secret, the tenant and the job id (``{"purpose": ..., "tenant": ...,
  "job": ...}``): a ciphertext made for something else, or copied onto another
  job's item by someone who can write the table, does not decrypt. The workers'
  IAM policy allows ``kms:Decrypt`` only under that purpose.
* **Local fallback** otherwise: an authenticated construction from the standard
  library keyed by ``settings.secret_key`` (``PUNCTUAL_SECRET_KEY``).
  Encrypt-then-MAC: an HMAC-SHA256 keystream (counter mode over a random
  16-byte nonce) XORed with the text, then an HMAC-SHA256 tag over version,
  context, nonce and ciphertext; the two keys are derived from the root key with
  distinct labels. **Only local mode uses it**: deployed stacks set a KMS key.

Stored forms carry a versioned prefix, so either can be decrypted whatever the
current settings prefer, and the format can move on: ``kms:v2:`` / ``local:v2:``
are bound to a tenant and a job (the context above); ``kms:v1:`` / ``local:v1:``
carry the purpose only. v1 is what idempotent replies use, and what job secrets
used before they were bound: those still decrypt (nothing breaks at upgrade), and
rotating a job's secret (``POST /v1/jobs/{id}/rotate-secret``, then again with
``drop_previous=true`` once the receiver uses the new one) replaces them with v2.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets as _random
from collections.abc import Mapping
from typing import Any

from punctual.settings import Settings

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
_NONCE_BYTES = 16
_TAG_BYTES = 32


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
    """Encrypts signing secrets for storage; satisfies ``punctual.jobs.SecretBox``.

    Parameters
    ----------
    settings : Settings
        ``kms_key_id`` selects KMS; otherwise ``secret_key`` keys the local fallback.
    kms_client : boto3 KMS client, optional
        Used for KMS; created on first use when ``kms_key_id`` is set and none is given.
    context : mapping of str to str, optional
        Encryption context bound into every ciphertext (KMS encryption context,
        or authenticated data for the fallback); decryption needs the same one.

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
        self._enc_key = (
            hmac.new(root, b"punctual/secret-box/v1/encrypt", hashlib.sha256).digest() if root else b""
        )
        self._mac_key = (
            hmac.new(root, b"punctual/secret-box/v1/mac", hashlib.sha256).digest() if root else b""
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
        bound = stored.startswith((_KMS_BOUND_PREFIX, _LOCAL_BOUND_PREFIX))
        if bound and not binding:
            raise SecretsError("stored secret is bound to a job: decrypting it needs the tenant and job id")
        context = {**self.context, **(binding or {})} if bound else dict(self.context)
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

    # -- internals

    def _kms_client(self) -> Any:
        if self._kms is None:
            from punctual import aws

            self._kms = aws.client("kms")
        return self._kms

    @staticmethod
    def _aad(context: Mapping[str, str]) -> bytes:
        return json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode()

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = (length + 31) // 32
        stream = b"".join(
            hmac.new(self._enc_key, nonce + counter.to_bytes(8, "big"), hashlib.sha256).digest()
            for counter in range(blocks)
        )
        return stream[:length]

    def _tag(self, nonce: bytes, ciphertext: bytes, context: Mapping[str, str], prefix: str) -> bytes:
        aad = self._aad(context)
        message = prefix.encode() + len(aad).to_bytes(4, "big") + aad + nonce + ciphertext
        return hmac.new(self._mac_key, message, hashlib.sha256).digest()

    def _require_local_key(self) -> None:
        if not self._enc_key:
            raise SecretsError("stored secret uses the local format, and PUNCTUAL_SECRET_KEY is not set")

    def _local_encrypt(self, plaintext: bytes, context: Mapping[str, str], prefix: str) -> str:
        self._require_local_key()
        nonce = _random.token_bytes(_NONCE_BYTES)
        ciphertext = bytes(
            a ^ b for a, b in zip(plaintext, self._keystream(nonce, len(plaintext)), strict=True)
        )
        blob = nonce + ciphertext + self._tag(nonce, ciphertext, context, prefix)
        return prefix + base64.urlsafe_b64encode(blob).decode("ascii")

    def _local_decrypt(self, stored: str, prefix: str, context: Mapping[str, str]) -> bytes:
        self._require_local_key()
        try:
            blob = base64.urlsafe_b64decode(stored[len(prefix) :].encode("ascii"))
        except (binascii.Error, ValueError):
            raise SecretsError("stored secret is not base64") from None
        if len(blob) < _NONCE_BYTES + _TAG_BYTES:
            raise SecretsError("stored secret is truncated")
        nonce, ciphertext, tag = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:-_TAG_BYTES], blob[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(nonce, ciphertext, context, prefix)):
            raise SecretsError("stored secret failed its integrity check (altered, or another key)")
        return bytes(a ^ b for a, b in zip(ciphertext, self._keystream(nonce, len(ciphertext)), strict=True))
