"""Tenant data keys: envelope encryption of webhook signing secrets, without KMS per trigger.

A worker needs a job's signing secret in plain text at every webhook call. Sealed directly
with KMS (one ``Decrypt`` per secret), that is a KMS call per trigger as soon as a worker's
cache cannot hold every job: ~10,000 calls a second at peak against an account-wide quota,
and more money than the rest of a trigger. So secrets are sealed with a **data key of their
tenant**, and only the data key is sealed by KMS:

* One data key per tenant and *key epoch* (``tenant_key_lifetime_s``, 30 days by default):
  the first process that needs it calls ``GenerateDataKey`` with the encryption context
  ``{purpose: punctual-tenant-data-key, tenant}`` and stores the wrapped key in the table with
  a conditional put (:mod:`punctual.store.keyring`); every other process reads it and unwraps
  it once (``Decrypt`` under the same context).
* A secret is sealed with keys derived from the data key (HMAC-SHA256 counter-mode keystream,
  then an HMAC-SHA256 tag: :class:`Sealer`), with the job's binding ``{purpose, tenant, job}``
  as authenticated data, and stored with the wrapped data key beside it
  (:func:`punctual.security.signing_secrets` ``kms:v3:``): a worker needs nothing else to open it.
* :class:`TenantKeyring` caches unwrapped keys per process for a key lifetime: **at most one
  KMS call per tenant per process per key epoch** (concurrent misses of one key wait for the
  first: one call, not one per thread).

What the binding still guarantees: a sealed secret copied onto another job's item fails its
tag (the job is in the authenticated data); onto another tenant's job, KMS refuses to unwrap
the data key under that tenant's context (and the tag fails too); the workers' ``kms:Decrypt``
is conditioned on the data keys' purpose and context keys, as before on the secrets'.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets as _random
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from punctual.runtime.clock import Clock, SystemClock
from punctual.store.keyring import TenantKeyRecord, TenantKeyRepository

TENANT_KEY_PURPOSE = "punctual-tenant-data-key"
DEFAULT_LIFETIME_S = 30 * 24 * 3600
CACHE_ENTRIES = 65_536  # unwrapped keys a process keeps (tenants x epochs in use): 32 bytes each
NONCE_BYTES = 16
TAG_BYTES = 32


class SealError(Exception):
    """A sealed text failed its integrity check, or is malformed."""


def key_context(tenant: str) -> dict[str, str]:
    """The KMS encryption context of a tenant's data key."""
    return {"purpose": TENANT_KEY_PURPOSE, "tenant": tenant}


class Sealer:
    """Authenticated encryption from the standard library: an HMAC-SHA256 keystream (counter
    mode over a random 16-byte nonce) XORed with the text, then an HMAC-SHA256 tag over a
    label, the context, the nonce and the ciphertext (encrypt-then-MAC). Two keys, derived from
    ``root`` under distinct labels."""

    def __init__(self, root: bytes, label: bytes) -> None:
        self._enc = hmac.new(root, label + b"/encrypt", hashlib.sha256).digest()
        self._mac = hmac.new(root, label + b"/mac", hashlib.sha256).digest()

    def seal(self, plaintext: bytes, context: Mapping[str, str], label: str) -> bytes:
        nonce = _random.token_bytes(NONCE_BYTES)
        ciphertext = _xor(plaintext, self._keystream(nonce, len(plaintext)))
        return nonce + ciphertext + self._tag(nonce, ciphertext, context, label)

    def open(self, blob: bytes, context: Mapping[str, str], label: str) -> bytes:
        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise SealError("is truncated")
        nonce, ciphertext, tag = blob[:NONCE_BYTES], blob[NONCE_BYTES:-TAG_BYTES], blob[-TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(nonce, ciphertext, context, label)):
            raise SealError("failed its integrity check (altered, or another key)")
        return _xor(ciphertext, self._keystream(nonce, len(ciphertext)))

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = (length + 31) // 32
        stream = b"".join(
            hmac.new(self._enc, nonce + counter.to_bytes(8, "big"), hashlib.sha256).digest()
            for counter in range(blocks)
        )
        return stream[:length]

    def _tag(self, nonce: bytes, ciphertext: bytes, context: Mapping[str, str], label: str) -> bytes:
        aad = json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode()
        message = label.encode() + len(aad).to_bytes(4, "big") + aad + nonce + ciphertext
        return hmac.new(self._mac, message, hashlib.sha256).digest()


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


@dataclass(frozen=True)
class DataKey:
    """A tenant's data key of one epoch, in plain text and as KMS wrapped it."""

    tenant: str
    epoch: int
    plaintext: bytes = field(repr=False)
    wrapped: bytes = field(repr=False)


class TenantKeyring:
    """Per-tenant data keys, cached per process.

    Parameters
    ----------
    kms
        Returns the KMS client (called on first use only).
    key_id
        The KMS key that wraps the data keys.
    store
        Where wrapped keys are kept (None: this process can unwrap, not make, keys: a worker).
    clock
        Which epoch is current, and how old a cached key is.
    lifetime_s
        A key epoch: new secrets are sealed under a new data key after this long, and a process
        unwraps a key again after it has held it this long.
    """

    def __init__(
        self,
        kms: Callable[[], Any],
        key_id: str,
        store: TenantKeyRepository | None = None,
        clock: Clock | None = None,
        lifetime_s: int = DEFAULT_LIFETIME_S,
        max_entries: int = CACHE_ENTRIES,
    ) -> None:
        self._kms_factory = kms
        self._kms_client: Any = None
        self.key_id = key_id
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.lifetime_s = lifetime_s
        self.max_entries = max_entries
        self.kms_calls = 0  # what the bound is about: counted for tests and metrics
        self._cache: OrderedDict[tuple[str, str, bytes | int], tuple[bytes, bytes, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str, bytes | int], threading.Lock] = {}

    def epoch(self) -> int:
        return int(self.clock.now().timestamp()) // self.lifetime_s

    def current(self, tenant: str) -> DataKey:
        """The tenant's data key of the current epoch, made and stored by the first process
        that needs it (``GenerateDataKey``), unwrapped once per process by the others."""
        if self.store is None:
            raise RuntimeError("this keyring has no store: it can open sealed secrets, not seal new ones")
        epoch = self.epoch()
        plaintext, wrapped = self._cached(
            ("current", tenant, epoch), lambda: self._load_current(tenant, epoch)
        )
        return DataKey(tenant, epoch, plaintext, wrapped)

    def unwrap(self, tenant: str, wrapped: bytes) -> bytes:
        """The plain data key of ``wrapped`` (a ``Decrypt`` under the tenant's context, once per
        process and key lifetime)."""
        plaintext, _ = self._cached(
            ("unwrap", tenant, wrapped), lambda: (self._decrypt(tenant, wrapped), wrapped)
        )
        return plaintext

    # ------------------------------------------------------------------ internals

    def _load_current(self, tenant: str, epoch: int) -> tuple[bytes, bytes]:
        assert self.store is not None
        stored = self.store.get_tenant_key(tenant, epoch)
        if stored is not None:
            return self._decrypt(tenant, stored.wrapped), stored.wrapped
        self.kms_calls += 1
        made = self._kms().generate_data_key(
            KeyId=self.key_id, KeySpec="AES_256", EncryptionContext=key_context(tenant)
        )
        plaintext, wrapped = bytes(made["Plaintext"]), bytes(made["CiphertextBlob"])
        kept = self.store.put_tenant_key(TenantKeyRecord(tenant, epoch, wrapped, self.clock.now()))
        if kept.wrapped != wrapped:  # another process stored its key first: use that one
            return self._decrypt(tenant, kept.wrapped), kept.wrapped
        self._remember(("unwrap", tenant, wrapped), plaintext, wrapped)
        return plaintext, wrapped

    def _decrypt(self, tenant: str, wrapped: bytes) -> bytes:
        self.kms_calls += 1
        reply = self._kms().decrypt(CiphertextBlob=wrapped, EncryptionContext=key_context(tenant))
        return bytes(reply["Plaintext"])

    def _kms(self) -> Any:
        if self._kms_client is None:
            self._kms_client = self._kms_factory()
        return self._kms_client

    def _fresh(self, key: tuple[str, str, bytes | int]) -> tuple[bytes, bytes] | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        plaintext, wrapped, loaded = entry
        if self.clock.now().timestamp() - loaded >= self.lifetime_s:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return plaintext, wrapped

    def _remember(self, key: tuple[str, str, bytes | int], plaintext: bytes, wrapped: bytes) -> None:
        with self._lock:
            self._cache[key] = (plaintext, wrapped, self.clock.now().timestamp())
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def _cached(
        self, key: tuple[str, str, bytes | int], load: Callable[[], tuple[bytes, bytes]]
    ) -> tuple[bytes, bytes]:
        with self._lock:
            hit = self._fresh(key)
            if hit is not None:
                return hit
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:  # one load per key at a time: the others wait for it and find it cached
            with self._lock:
                hit = self._fresh(key)
            if hit is not None:
                return hit
            try:
                plaintext, wrapped = load()
                self._remember(key, plaintext, wrapped)
                return plaintext, wrapped
            finally:
                with self._lock:
                    self._loading.pop(key, None)
