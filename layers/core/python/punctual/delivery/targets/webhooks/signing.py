"""Webhook signatures: Standard Webhooks ``webhook-signature`` and the fencing signature.

Both are HMAC-SHA256 over the exact request, keyed by the job's ``whsec_`` signing
secrets (:func:`punctual.security.signing_secrets.signing_key`); during a rotation every current
secret signs, so a receiver holding either one verifies the request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from punctual.security.signing_secrets import signing_key

__all__ = [
    "FENCING_KEY_LABEL",
    "FENCING_SIGNATURE_HEADER",
    "FENCING_TOKEN_HEADER",
    "TENANT_HEADER",
    "sign_fencing_token",
    "sign_webhook",
]

FENCING_TOKEN_HEADER = "Punctual-Fencing-Token"
FENCING_SIGNATURE_HEADER = "Punctual-Fencing-Signature"
# The tenant that owns the job (job ids repeat across tenants). Set by the worker, refused at
# registration (punctual.usecases.jobs), but not by the model: a job stored with it stays readable, and
# the worker's value replaces its own.
TENANT_HEADER = "Punctual-Tenant"
# The fencing signature's key is derived from the signing secret's, so it can never
# double as a Standard Webhooks signature of some other request.
FENCING_KEY_LABEL = b"punctual-fencing-token"


def sign_webhook(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> str:
    """The Standard Webhooks ``webhook-signature`` header value.

    Parameters
    ----------
    msg_id : str
        ``webhook-id``: the same for every attempt of one slot, so receivers dedupe on it.
    timestamp : int
        ``webhook-timestamp``, seconds since the epoch.
    body : bytes
        The exact request body.
    secrets : sequence of str
        ``whsec_…`` secrets, current first; during rotation both sign, so a
        receiver holding either one verifies the request.

    Returns
    -------
    str
        Space-separated ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` entries.

    Raises
    ------
    SecretsError
        A secret is malformed.
    """
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(signing_key(secret), signed, hashlib.sha256).digest()).decode()
        for secret in secrets
    )


def sign_fencing_token(msg_id: str, timestamp: int, token: str, body: bytes, secrets: Sequence[str]) -> str:
    """The ``Punctual-Fencing-Signature`` header value: the fencing token, signed.

    ``webhook-signature`` (Standard Webhooks) covers ``webhook-id``,
    ``webhook-timestamp`` and the body, not other headers; this signature binds the
    ``Punctual-Fencing-Token`` to the same request. Its key is derived, so it can
    never pass for a Standard Webhooks signature::

        key  = base64decode(secret without "whsec_")
        fkey = HMAC-SHA256(key, "punctual-fencing-token")
        sig  = base64(HMAC-SHA256(fkey, "<webhook-id>.<webhook-timestamp>.<token>." + body))

    Parameters
    ----------
    msg_id : str
        ``webhook-id`` (the idempotency key).
    timestamp : int
        ``webhook-timestamp``.
    token : str
        ``Punctual-Fencing-Token``: ``<job_id>:<slot>:<attempt>``.
    body : bytes
        The exact request body.
    secrets : sequence of str
        ``whsec_…`` secrets, current first (both sign during a rotation).

    Returns
    -------
    str
        Space-separated ``v1,<base64>`` entries, one per secret.

    Raises
    ------
    SecretsError
        A secret is malformed.
    """
    signed = f"{msg_id}.{timestamp}.{token}.".encode() + body
    entries = []
    for secret in secrets:
        fencing_key = hmac.new(signing_key(secret), FENCING_KEY_LABEL, hashlib.sha256).digest()
        digest = hmac.new(fencing_key, signed, hashlib.sha256).digest()
        entries.append("v1," + base64.b64encode(digest).decode())
    return " ".join(entries)
