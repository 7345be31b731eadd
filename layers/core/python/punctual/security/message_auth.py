"""Dispatch messages are authenticated: every sender signs, every worker verifies.

The work queues are the scheduler's own machinery. A message on them names a tenant, a job and a
slot, and a worker that believed a forged one would run another tenant's job (even a paused
one) and call its target, signed with its secret. So every :class:`DispatchMessage` is signed
when it is sent (:class:`SqsQueues` and :class:`MemoryQueues` take a signer) with an HMAC-SHA256
over its canonical body, keyed by the stack's dispatch key (generated at deploy and held in
Secrets Manager; local mode makes its own), and a worker drops, logs and counts
(``ForgedMessages``) a message whose signature is missing or does not match before it reads
anything else. The poller, the workers (takeovers, turns, dependants) and the API (manual runs)
are the only senders, and only they can read the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from functools import lru_cache
from typing import Any

from punctual.dispatch.queues import DispatchMessage
from punctual.runtime.settings import Settings

log = logging.getLogger("punctual.security.message_auth")

KEY_LABEL = b"punctual-dispatch-v1"
MIN_KEY_CHARS = 32


def _keyed_hmac(key: bytes) -> Any:
    """An HMAC-SHA256 keyed with ``key`` over nothing yet: OpenSSL's own object when the interpreter
    has it (``hmac.new`` wraps one in a Python object whose ``copy`` costs as much again)."""
    try:
        from _hashlib import hmac_new
    except ImportError:  # pragma: no cover - an interpreter built without OpenSSL
        return hmac.new(key, digestmod=hashlib.sha256)
    return hmac_new(key, b"", "sha256")


class DispatchKeyError(ValueError):
    """The dispatch key cannot be used (too short, or its secret cannot be read)."""


class DispatchSigner:
    """Signs and verifies dispatch messages with one key.

    Parameters
    ----------
    key
        The shared secret (at least 32 characters). It is not used as is: the HMAC key is
        derived from it under a label, so it never doubles as another key.
    """

    def __init__(self, key: str) -> None:
        if len(key) < MIN_KEY_CHARS:
            raise DispatchKeyError(f"the dispatch key must have at least {MIN_KEY_CHARS} characters")
        self._key = hmac.new(key.encode(), KEY_LABEL, hashlib.sha256).digest()
        # The HMAC keyed once: each signature copies it (its key's pads already hashed) instead of
        # keying a new one (``hmac.new``: a third of a signature's cost). Never updated itself, so
        # threads that sign at once share it.
        self._keyed = _keyed_hmac(self._key)

    def signature(self, message: DispatchMessage) -> str:
        """The signature of ``message``'s every field but the signature itself: the HMAC-SHA256
        ``hmac.new(key, payload, sha256).hexdigest()`` gives."""
        mac = self._keyed.copy()
        mac.update(message.payload().encode())
        return str(mac.hexdigest())

    def sign(self, message: DispatchMessage) -> DispatchMessage:
        """``message`` with its signature set."""
        return message.with_signature(self.signature(message))  # its payload is the same

    def verify(self, message: DispatchMessage) -> bool:
        """True when ``message`` carries this key's signature of its fields.

        Never raises: a body's fields are not type-checked when it is read (``from_body``), and a
        ``sig`` that is not an ASCII string made ``compare_digest`` raise TypeError, which the
        batch shell took for a claim error and parked: a QUEUED record and a timer for the slot it
        named, which the poller then released as a *signed* message (QA17: a forged body ran
        another tenant's job). Anything that is not a signature is a forgery.
        """
        sig = message.sig
        if not isinstance(sig, str) or not sig or not sig.isascii():
            return False
        try:
            expected = self.signature(message)
        except Exception:  # fields of types no sender writes: not a message this key signed
            return False
        return hmac.compare_digest(sig, expected)


def signer_from(settings: Settings, secrets_client: Any = None) -> DispatchSigner | None:
    """The signer of a process: ``PUNCTUAL_DISPATCH_KEY`` (local mode, tests), else the secret
    ``PUNCTUAL_DISPATCH_KEY_SECRET_ARN`` names (the stack), else None (messages unsigned and
    not verified: only for in-process tests; the stack always sets the secret)."""
    if settings.dispatch_key:
        return DispatchSigner(settings.dispatch_key)
    if settings.dispatch_key_secret_arn:
        return DispatchSigner(_secret_value(settings.dispatch_key_secret_arn, secrets_client))
    return None


@lru_cache(maxsize=4)
def _cached_secret(arn: str) -> str:
    from punctual.runtime import aws

    return _read_secret(aws.client("secretsmanager"), arn)


def _secret_value(arn: str, client: Any) -> str:
    if client is None:
        return _cached_secret(arn)  # once per process: the key changes only with a deployment
    return _read_secret(client, arn)


def _read_secret(client: Any, arn: str) -> str:
    try:
        value = client.get_secret_value(SecretId=arn)["SecretString"]
    except Exception as exc:
        raise DispatchKeyError(f"cannot read the dispatch key {arn}: {exc}") from exc
    return str(value)
