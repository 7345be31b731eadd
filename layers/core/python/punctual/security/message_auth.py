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

The key can be rotated without stopping anything (``aws secretsmanager put-secret-value``, or a
rotation): a process reads the secret's ``AWSCURRENT`` version, which it signs with, and its
``AWSPREVIOUS`` version, which it still accepts, so messages signed before the rotation run. A
process that read the secret before the rotation meets messages signed with the new key: one it
cannot verify makes it read the secret again (at most every ``RELOAD_EVERY_S``) before the message
counts as forged (a worker that kept its old key dropped every new message: slots lost).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from punctual.dispatch.queues import DispatchMessage
from punctual.runtime.settings import Settings
from punctual.timing.instants import message_instant

log = logging.getLogger("punctual.security.message_auth")

KEY_LABEL = b"punctual-dispatch-v1"
MIN_KEY_CHARS = 32
RELOAD_EVERY_S = 10.0  # the most often a process reads the secret again for a message it cannot verify
# A message that verifies under no key held while the keys were last read less than this long after
# it was released may be signed with a key rotated since (a re-read throttled by RELOAD_EVERY_S, a
# read Secrets Manager answered from before the rotation, the sender's clock a little ahead): it goes
# back to its queue, verified when it comes back, not dropped (QA27: every new-key message in the
# 10 s after a re-read was dropped as forged: slots lost at a rotation). A forgery is returned a
# few times at most, then dropped.
ROTATION_MARGIN_S = 30.0
# How old the keys a process signs with may get before its next signature reads them again: a
# process that only signs (a poller, the API, the auditor) never meets a message it cannot verify,
# so without this it signed with the key it started with through any number of rotations (QA24).
REFRESH_EVERY_S = 300.0
# A dispatch key's versions: the one to sign with and the one before it (None: none, or not read)
KeyVersions = tuple[str, str | None]
# How long the work queues keep a message, and their dead-letter queues (the stack's queues are
# made with these, punctual_cdk.constants; local mode's from the same template).
QUEUE_RETENTION_DAYS = 4
DLQ_RETENTION_DAYS = 14
# The oldest a message any sender signed can be when a worker receives it: a work queue's retention,
# then its dead-letter queue's, then a work queue's again after an operator's redrive (every sender
# writes ``released_at`` as it sends, :func:`punctual.dispatch.queues.message_for`; a resend keeps
# it for minutes), and a day's margin. Older, it is a copy put back on a queue (QA24: past the
# slot's record's expiry it ran again, nothing looking at its age): dropped as forged.
MAX_MESSAGE_AGE_S = (2 * QUEUE_RETENTION_DAYS + DLQ_RETENTION_DAYS + 1) * 86400


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
    """Signs and verifies dispatch messages with one key (and accepts the one before it).

    Parameters
    ----------
    key
        The shared secret (at least 32 characters). It is not used as is: the HMAC key is
        derived from it under a label, so it never doubles as another key.
    previous
        Keys a message may still be signed with (the secret's version before a rotation): they
        verify, they never sign.
    reload
        Reads the keys again (current, previous) when a message verifies under none of them, at
        most every ``reload_every_s`` (``clock``: seconds, monotonic): a rotation made since the
        process read them; and beside a signature (on a thread of its own) when they were read
        ``refresh_every_s`` ago or more, so a process that only signs follows rotations too.
    """

    def __init__(
        self,
        key: str,
        previous: Sequence[str] = (),
        reload: Callable[[], KeyVersions] | None = None,
        reload_every_s: float = RELOAD_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        refresh_every_s: float = REFRESH_EVERY_S,
    ) -> None:
        self._reload = reload
        self._reload_every_s = reload_every_s
        self._refresh_every_s = refresh_every_s
        self._clock = clock
        self._reloaded_at: float | None = None
        self._read_at = clock()  # when the keys held were read (or a read of them last failed)
        self._keys_at = self._read_at  # when the keys held were read (a successful read only)
        self._reload_lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # (held only to start a refresh's read)
        self.refreshing: threading.Thread | None = None  # the last refresh's read
        self._reads = 0  # how many times the keys were read again (what a waiting verify looks at)
        self._unread = False  # the last read of the keys failed (Secrets Manager unreachable)
        self._use(key, previous)

    def _use(self, key: str, previous: Sequence[str]) -> None:
        if len(key) < MIN_KEY_CHARS:
            raise DispatchKeyError(f"the dispatch key must have at least {MIN_KEY_CHARS} characters")
        # The HMAC keyed once: each signature copies it (its key's pads already hashed) instead of
        # keying a new one (``hmac.new``: a third of a signature's cost). Never updated itself, so
        # threads that sign at once share it. Both set in one assignment: a verify in another
        # thread never sees the new key beside the old accepted ones.
        accepted = [_keyed_hmac(_derived(k)) for k in previous if k != key and len(k) >= MIN_KEY_CHARS]
        self._keys: tuple[Any, list[Any]] = (_keyed_hmac(_derived(key)), accepted)

    def signature(self, message: DispatchMessage) -> str:
        """The signature of ``message``'s every field but the signature itself: the HMAC-SHA256
        ``hmac.new(key, payload, sha256).hexdigest()`` gives."""
        if self._reload is not None and self._clock() - self._read_at >= self._refresh_every_s:
            self._refresh()
        return _signature(self._keys[0], message.payload())

    def sign(self, message: DispatchMessage) -> DispatchMessage:
        """``message`` with its signature set."""
        return message.with_signature(self.signature(message))  # its payload is the same

    def verify(self, message: DispatchMessage) -> bool:
        """True when ``message`` carries a signature of its fields by this key or one before it.

        Never raises: a body's fields are not type-checked when it is read (``from_body``), and a
        ``sig`` that is not an ASCII string made ``compare_digest`` raise TypeError, which the
        batch shell took for a claim error and parked: a QUEUED record and a timer for the slot it
        named, which the poller then released as a *signed* message (QA17: a forged body ran
        another tenant's job). Anything that is not a signature is a forgery.
        """
        sig = message.sig
        if not isinstance(sig, str) or not sig or not sig.isascii():
            return False
        reads = self._reads  # before the keys are looked at: a read made after this is news
        keyed, accepted = self._keys
        try:
            payload = message.payload()
            if hmac.compare_digest(sig, _signature(keyed, payload)):
                return True
            if any(hmac.compare_digest(sig, _signature(k, payload)) for k in accepted):
                return True
        except Exception:  # fields of types no sender writes: not a message this key signed
            return False
        return self._reloaded(reads) and self.verify_known(sig, payload)

    @property
    def keys_unread(self) -> bool:
        """Whether the last read of the keys failed: a message that verifies under none of the keys
        held may then be signed with a key this process could not read (a rotation), not forged."""
        return self._unread

    def may_be_rotated(self, message: DispatchMessage, now: datetime) -> bool:
        """Whether ``message``, which verified under none of the keys held, may still be signed with
        a key this process has not read: the last read failed (:attr:`keys_unread`), or the keys
        held were read less than :data:`ROTATION_MARGIN_S` after ``message`` says it was released
        (so maybe before a rotation it was signed after). ``now``: the wall clock."""
        if self._unread:
            return True
        if self._reload is None:
            return False
        read_wall = now.timestamp() - (self._clock() - self._keys_at)
        try:
            released = message_instant(message.released_at).timestamp()
        except Exception:  # no instant a sender writes: nothing to wait for
            return False
        if released > now.timestamp() + ROTATION_MARGIN_S:  # dated ahead of any sender's clock: its
            return False  # wait would never end (each return's verify reads the keys afresh)
        return read_wall < released + ROTATION_MARGIN_S

    def verify_known(self, sig: str, payload: str) -> bool:
        """Whether ``sig`` signs ``payload`` under the keys held now (no reload)."""
        keyed, accepted = self._keys
        return any(hmac.compare_digest(sig, _signature(k, payload)) for k in (keyed, *accepted))

    def _reloaded(self, reads: int) -> bool:
        """Read the keys again if the last read is old enough: whether the keys may be new since
        ``reads`` (read by this call, or by another thread's while this one checked or waited:
        QA24, after a rotation the first thread read the new key, and the messages other threads
        of the batch had checked meanwhile were dropped as forged, the read being 'too recent')."""
        if self._reload is None:
            return False
        with self._reload_lock:
            if self._reads != reads:
                return True
            now = self._clock()
            if self._reloaded_at is not None and now - self._reloaded_at < self._reload_every_s:
                return False
            self._reloaded_at = now
            if not self._read_keys(now):
                return False
        log.info("read the dispatch key again (a message this process could not verify)")
        return True

    def _refresh(self) -> None:
        """Read the keys again, they being ``refresh_every_s`` old, on a thread of its own: the
        signatures go on with the keys held until it has read them (a sender signs on its release's
        thread, and a read Secrets Manager does not answer waits out the SDK's retries, minutes of
        a poller's release held up). A failed read keeps the keys held; tried again a period later."""
        with self._refresh_lock:
            now = self._clock()
            if now - self._read_at < self._refresh_every_s:
                return  # another thread started one meanwhile
            self._read_at = now
            reading = threading.Thread(target=self._read_beside, name="dispatch-key-read", daemon=True)
            self.refreshing = reading
        reading.start()

    def _read_beside(self) -> None:
        with self._reload_lock:
            self._read_keys(self._clock())

    def _read_keys(self, now: float) -> bool:
        """Read and use the keys (under the reload lock); whether it worked."""
        assert self._reload is not None
        self._read_at = now
        try:
            current, previous = self._reload()
            self._use(current, [previous] if previous else [])
        except Exception:
            log.warning("cannot read the dispatch key again", exc_info=True)
            self._unread = True
            return False
        self._unread = False
        self._keys_at = now
        self._reads += 1
        return True


def replayed_copy(message: DispatchMessage, now: datetime) -> str:
    """Why ``message`` is not to run when it was released longer ago than a queue can have kept it
    (:data:`MAX_MESSAGE_AGE_S`: a copy put back on a queue); "" otherwise, and for a message whose
    ``released_at`` is empty or does not read (the claim decides on it as before)."""
    if not message.released_at:
        return ""
    try:
        age_s = (now - message_instant(message.released_at)).total_seconds()
    except (AttributeError, TypeError, ValueError):
        return ""
    if age_s <= MAX_MESSAGE_AGE_S:
        return ""
    return f"released {age_s / 86400:.1f} days ago, longer than a queue keeps one: a copy put back"


def _derived(key: str) -> bytes:
    return hmac.new(key.encode(), KEY_LABEL, hashlib.sha256).digest()


def _signature(keyed: Any, payload: str) -> str:
    mac = keyed.copy()
    mac.update(payload.encode())
    return str(mac.hexdigest())


def signer_from(settings: Settings, secrets_client: Any = None) -> DispatchSigner | None:
    """The signer of a process: ``PUNCTUAL_DISPATCH_KEY`` (local mode, tests), else the secret
    ``PUNCTUAL_DISPATCH_KEY_SECRET_ARN`` names (the stack: its current version signs, its previous
    one still verifies, and both are read again for a message neither verifies), else None
    (messages unsigned and not verified: only for in-process tests; the stack always sets the
    secret)."""
    if settings.dispatch_key:
        return DispatchSigner(settings.dispatch_key)
    arn = settings.dispatch_key_secret_arn
    if arn:
        current, previous = _secret_value(arn, secrets_client)

        def reload() -> KeyVersions:
            return _read_secret(secrets_client or _secrets_client(), arn)

        return DispatchSigner(current, [previous] if previous else [], reload=reload)
    return None


def _secrets_client() -> Any:
    from punctual.runtime import aws

    return aws.client("secretsmanager")


@lru_cache(maxsize=4)
def _cached_secret(arn: str) -> KeyVersions:
    return _read_secret(_secrets_client(), arn)


def _secret_value(arn: str, client: Any) -> KeyVersions:
    if client is None:
        return _cached_secret(arn)  # once per process (a rotation is found by a message that fails)
    return _read_secret(client, arn)


def _read_secret(client: Any, arn: str) -> KeyVersions:
    """The secret's current value and, if it has one, its previous (the key before a rotation)."""
    try:
        value = client.get_secret_value(SecretId=arn)["SecretString"]
    except Exception as exc:
        raise DispatchKeyError(f"cannot read the dispatch key {arn}: {exc}") from exc
    try:
        previous = client.get_secret_value(SecretId=arn, VersionStage="AWSPREVIOUS")["SecretString"]
    except Exception as exc:  # never rotated: no such version
        log.debug("no previous dispatch key: %s", exc)
        previous = None
    return str(value), None if previous is None else str(previous)
