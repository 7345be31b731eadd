"""The FIFO queue port: what a poller sends and a worker receives.

:class:`DispatchMessage` is the one message shape; its deduplication id is derived from
(tenant, job, slot, attempt), so a resend of the same attempt inside SQS's five-minute
window is dropped by SQS, and the worker's claim drops it after that.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol

from pydantic_core import from_json, to_json

from punctual.dispatch.sqs_send import send_batch, send_batches
from punctual.models import Job, Overlap, Runtime
from punctual.models.job_documents import document_of, stored_document
from punctual.models.jobs import read_carried
from punctual.runtime.observability import MetricsSink
from punctual.timing.instants import format_instant_ms
from punctual.timing.timers import stable_hash

log = logging.getLogger("punctual.dispatch.queues")

SQS_BATCH_MAX = 10
_COMPACT_JSON = json.JSONEncoder(
    separators=(",", ":")
)  # what json.dumps(..., separators=...) builds per call
# What _COMPACT_JSON writes for a string (it calls this; ensure_ascii), without the call through it.
_escape: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _escape_long(text: str) -> str:
    """``_escape(text)`` for a long text (a message's carried job: ~600 characters, a third of
    them quotes to escape), in half the time. pydantic-core writes an ASCII string as the encoder
    does (a quote and a backslash escaped by a backslash, the five control characters JSON names
    by a letter so, the other control characters as a lower-case u00XX escape, nothing else
    escaped) but for DEL, which the encoder escapes and it does not. So a ``str`` of ASCII without
    DEL is written by pydantic-core, anything else by the encoder (which raises TypeError for
    what is not a string, as before). ``tests/unit/test_perf_equivalence.py`` compares the two on
    every ASCII character and on generated texts."""
    if type(text) is str and text.isascii() and "\x7f" not in text:
        return to_json(text).decode("ascii")
    return _escape(text)


# The count of work-queue bodies no scheduler process wrote: unsigned, signed with another key,
# altered after signing, or no message at all (truncated, not JSON): the alarm ForgedMessages.
FORGED_MESSAGES = "ForgedMessages"
THROTTLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "RequestThrottled",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "KMS.ThrottlingException",
    }
)


class MessageKind:
    FIRE = "fire"  # a scheduled slot
    RETRY = "retry"  # the next attempt after a failure
    TAKEOVER = "takeover"  # a lease expired: the next attempt after a lost worker
    MANUAL = "manual"  # POST /trigger
    CHILD = "child"  # a dependent job's slot whose parents all succeeded
    TURN = "turn"  # a queued slot's turn came: the slot before it ended (overlap queue)
    CHECK = "check"  # a queued slot checks that it still waits (its safety-net timer)
    # An alert for a worker to raise or finish: a slot the poller recorded MISSED whose job has a
    # ``missed`` rule (the worker, which may call targets, raises and delivers it), or, with
    # ``alert`` set, an alert's sweep (punctual.delivery.notifications.sweep): take it over if its
    # worker died while it was SENDING.
    ALERT = "alert"
    BACKFILL = "backfill"  # a past slot run by a backfill (punctual.usecases.backfill_runner)
    # A parent's successes to pass on to an after() child linked while they were in flight
    # (slot: the link's instant; punctual.execution.relinks)
    RELINK = "relink"


@dataclass(frozen=True)
class DispatchMessage:
    """One attempt of one slot, handed to a worker."""

    # The encoded payload, kept in a slot of its own (not in ``__dict__``: the fields are).
    __slots__ = ("__dict__", "_payload_text")

    tenant: str
    job_id: str
    slot: str
    scheduled_at: str  # RFC 3339 UTC: the instant it was meant to start (slot + jitter)
    attempt: int
    job_version: int
    kind: str = MessageKind.FIRE
    released_at: str = ""  # when the poller released it (fire delay = released_at - scheduled_at)
    ordered: bool = False  # one message group per job (overlap 'queue'); else one per slot
    # Burst smoothing: the worker holds the message until this instant (its target's rate budget);
    # "" (the usual case): at once. Signed with the rest, and absent from the body when empty.
    not_before: str = ""
    # The backfill that sent this slot (punctual.usecases.backfills.backfill_ref), carried on to its
    # record and its dependants' messages; empty for every other message (and then not in the
    # body, so other messages read and sign as before).
    backfill: str = ""
    # An ALERT message's condition when it sweeps an alert (the slot is the alert's key slot);
    # empty for every other message (and then not in the body).
    alert: str = ""
    # A poller's re-send of a message no worker claimed (punctual.dispatch.polling.resend): n > 0 puts it
    # in a message group and under a deduplication id of its own, past a group held in flight by
    # a worker that died before its handler ran. 0 (every other message): not in the body.
    resend: int = 0
    # The job as the sender read it (:func:`spec_of`, its version is ``job_version``): a worker
    # that receives the message soon after it was sent claims and runs it without reading the
    # job (punctual.execution.claim). Empty for a job too large to carry (then not in the body).
    spec: str = ""
    # The slot after which the job's chain ends (a one-time job's slot, the last before its
    # end): the worker that takes it marks the job COMPLETED (punctual.execution.chain_ends).
    last: bool = False
    # An overlap ``queue`` job's creation instant (``ordered`` messages only; else empty, and then not
    # in the body): its message group is its job's incarnation's, so that a job deleted and created
    # again at its id does not wait in FIFO behind the earlier job's run in flight (QA29).
    incarnation: str = ""
    sig: str = ""  # HMAC of every other field (punctual.security.message_auth); empty when unsigned

    @property
    def held_until(self) -> datetime | None:
        """``not_before`` as an instant; None when the message is not smoothed, or when the signed
        value does not read (it then runs at once rather than never)."""
        if not self.not_before:
            return None
        try:
            return datetime.fromisoformat(self.not_before.replace("Z", "+00:00"))
        except ValueError:
            return None

    @property
    def dedup_id(self) -> str:
        """Stable per (tenant, job, slot, attempt, job version): a resend is the same message.

        The version is part of it so that a slot released for a job's old version and again
        for its new one (a replacement a moment before the slot) is two messages: the claim
        records the first as superseded and runs the second, instead of FIFO dropping it.
        """
        raw = f"{self.tenant}\x1f{self.job_id}\x1f{self.slot}\x1f{self.attempt}\x1f{self.job_version}"
        if self.kind in (MessageKind.TURN, MessageKind.CHECK, MessageKind.RELINK):  # a message of its own
            raw += f"\x1f{self.kind}\x1f{self.released_at}"
        elif self.kind == MessageKind.ALERT:  # not the slot's own fire message
            raw += f"\x1f{self.kind}"
            if self.alert:  # a sweep: each one a message of its own
                raw += f"\x1f{self.alert}\x1f{self.released_at}"
        if self.backfill:  # a backfill started again after a cancel sends its slots afresh
            raw += f"\x1f{self.backfill}"
        if self.resend:
            raw += f"\x1fresend {self.resend}"
        return hashlib.sha256(raw.encode()).hexdigest()

    @property
    def group_id(self) -> str:
        """The FIFO message group.

        Overlap ``queue`` jobs get one group per job, so their slots are delivered in order
        and one at a time. Other jobs get one group per slot: FIFO would otherwise hold a
        job's next slot until the previous one finished, turning ``allow`` and ``skip``
        into ``queue`` (and more groups is what high-throughput FIFO scales on). Every
        attempt of one slot shares its group either way. A ``queue`` job's TURN message (the
        slot the turn was passed to, which the turn item alone orders) has a group of its own:
        in the job's it waited behind any message held there, a claim that met throttling
        and went back for its error backoff (10 s, 30 s, 90 s), and the job stood still that
        long after the fault ended (QA24).
        """
        key = (
            f"{self.tenant}\x1f{self.job_id}" + (f"\x1f{self.incarnation}" if self.incarnation else "")
            if self.ordered
            else f"{self.tenant}\x1f{self.job_id}\x1f{self.slot}"
        )
        if self.alert:  # a sweep waits behind no message in flight (its slot's, an earlier sweep's)
            key += f"\x1falert-{self.alert}\x1f{self.released_at}"
        elif self.kind == MessageKind.RELINK:  # nor a relink check (its slot is a link's instant)
            key += f"\x1frelink\x1f{self.released_at}"
        elif self.kind == MessageKind.TURN:  # nor the slot a turn was passed to
            key += f"\x1fturn\x1f{self.slot}\x1f{self.released_at}"
        if self.resend:  # a group of its own: the slot's usual one may be held by a dead worker
            key += f"\x1f{self.slot}\x1fresend {self.resend}"
        return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()

    def payload(self) -> str:
        """Every field but the signature, in declaration order: what is signed.

        Computed once per message (a send signs it and writes it; a worker verifies it): a
        message is immutable, and :func:`dataclasses.replace` makes a new one.
        """
        text: str | None = getattr(self, "_payload_text", None)  # no exception raised when unset
        if text is None:
            text = self._encode_payload()
            object.__setattr__(self, "_payload_text", text)
        return text

    def __getstate__(self) -> dict[str, object]:  # copies and pickles carry the fields, not the cache
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def _encode_payload(self) -> str:
        """The text ``_COMPACT_JSON`` gives for the fields (:meth:`_encode_payload_json`), written
        here field by field: half the encoder's cost, which builds and walks a dict first.

        Strings are escaped by the encoder's own function (which refuses anything but a string);
        ints and bools of their exact types have one form. A message with a field of another type
        (only a body read from the queue can have one) is encoded by the encoder.
        """
        v = self.__dict__
        if (
            type(v["attempt"]) is not int
            or type(v["job_version"]) is not int
            or type(v["resend"]) is not int
            or type(v["ordered"]) is not bool
            or type(v["last"]) is not bool
        ):
            return self._encode_payload_json()
        try:
            text = (
                f'{{"tenant":{_escape(v["tenant"])},"job_id":{_escape(v["job_id"])},'
                f'"slot":{_escape(v["slot"])},"scheduled_at":{_escape(v["scheduled_at"])},'
                f'"attempt":{v["attempt"]},"job_version":{v["job_version"]},'
                f'"kind":{_escape(v["kind"])},"released_at":{_escape(v["released_at"])},'
                f'"ordered":{"true" if v["ordered"] else "false"}'
            )
            if v["not_before"]:
                text += f',"not_before":{_escape(v["not_before"])}'
            if v["backfill"]:
                text += f',"backfill":{_escape(v["backfill"])}'
            if v["alert"]:
                text += f',"alert":{_escape(v["alert"])}'
            if v["resend"]:
                text += f',"resend":{v["resend"]}'
            if v["spec"]:
                text += f',"spec":{_escape_long(v["spec"])}'
            if v["last"]:
                text += ',"last":true'
            if v["incarnation"]:
                text += f',"incarnation":{_escape(v["incarnation"])}'
        except TypeError:  # a string field that holds no string
            return self._encode_payload_json()
        return text + "}"

    def _encode_payload_json(self) -> str:
        # What ``dataclasses.asdict`` gives, without its recursive deep copy of what are only
        # strings, ints and a bool.
        fields: dict[str, object] = {
            "tenant": self.tenant,
            "job_id": self.job_id,
            "slot": self.slot,
            "scheduled_at": self.scheduled_at,
            "attempt": self.attempt,
            "job_version": self.job_version,
            "kind": self.kind,
            "released_at": self.released_at,
            "ordered": self.ordered,
        }
        if self.not_before:
            fields["not_before"] = self.not_before
        if self.backfill:
            fields["backfill"] = self.backfill
        if self.alert:
            fields["alert"] = self.alert
        if self.resend:
            fields["resend"] = self.resend
        if self.spec:
            fields["spec"] = self.spec
        if self.last:
            fields["last"] = True
        if self.incarnation:
            fields["incarnation"] = self.incarnation
        return _COMPACT_JSON.encode(fields)

    def to_body(self) -> str:
        """The SQS message body: the payload, and the signature when there is one."""
        payload = self.payload()
        if not self.sig:
            return payload
        sig = self.sig
        return f'{payload[:-1]},"sig":{_escape(sig) if type(sig) is str else _COMPACT_JSON.encode(sig)}}}'

    @classmethod
    def from_body(cls, body: str) -> DispatchMessage:
        """The message a body holds; ValueError when it is not JSON (pydantic's parser, about three
        times as fast as ``json.loads`` on a body that carries its job)."""
        data = from_json(body)
        if not isinstance(data, dict):
            raise ValueError("message body is not a JSON object")
        keys = data.keys()
        if keys in _WRITTEN:  # what to_body writes
            message = _built(data)
        else:
            message = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        sig = data.get("sig")
        if isinstance(sig, str) and sig:
            # A body to_body wrote is its payload with the signature appended as the last member:
            # that text is what was signed, so verifying it needs no second encoding of the fields
            # (the fields were parsed from the same text; a body in any other form is encoded
            # again, as before).
            tail = f',"sig":{_escape(sig)}}}'
            if body.endswith(tail) and len(body) > len(tail) and body[0] == "{":
                object.__setattr__(message, "_payload_text", body[: -len(tail)] + "}")
        return message

    def with_signature(self, sig: str) -> DispatchMessage:
        """This message with ``sig`` set (what :func:`dataclasses.replace` gives, without running
        ``__init__`` again), keeping its encoded payload: the payload leaves the signature out."""
        signed = object.__new__(DispatchMessage)
        object.__setattr__(signed, "__dict__", {**self.__dict__, "sig": sig})
        object.__setattr__(signed, "_payload_text", self.payload())
        return signed


_MESSAGE_FIELDS = frozenset(DispatchMessage.__dataclass_fields__)
# Every field in declaration order, at its default ("" for the required ones, always given).
_MESSAGE_DEFAULTS: dict[str, object] = {
    name: "" if spec.default is MISSING else spec.default
    for name, spec in DispatchMessage.__dataclass_fields__.items()
}


def _built(fields: dict[str, Any]) -> DispatchMessage:
    """``DispatchMessage(**fields)`` for ``fields`` that hold every required field (a dataclass
    checks no types either): its ``__dict__`` set at once, in declaration order, instead of
    one frozen ``__setattr__`` a field."""
    values = _MESSAGE_DEFAULTS.copy()
    values.update(fields)
    message = object.__new__(DispatchMessage)
    object.__setattr__(message, "__dict__", values)
    return message


# What to_body writes for a message neither smoothed, of a backfill, a sweep, a re-send nor a
# chain's last, signed and not; and the usual case, signed and carrying its job.
_PLAIN_SIGNED = _MESSAGE_FIELDS - {"not_before", "backfill", "alert", "resend", "last", "spec", "incarnation"}
_PLAIN_UNSIGNED = _PLAIN_SIGNED - {"sig"}
_CARRYING_SIGNED = _PLAIN_SIGNED | {"spec"}
# The same of an overlap 'queue' job's message (its incarnation too)
_WRITTEN = (
    _PLAIN_SIGNED,
    _CARRYING_SIGNED,
    _PLAIN_UNSIGNED,
    _CARRYING_SIGNED | {"incarnation"},
    _PLAIN_SIGNED | {"incarnation"},
)

# A job whose spec is larger than this is not carried (the worker reads it): SQS bills a message
# per 64 KB and accepts 256 KB, and a job's payload alone may be 256 KB. Counted as the body writes
# it (escaped: a quote in 2 bytes, a character outside ASCII in 6, 12 outside the BMP), so that ten
# messages stay within one SendMessageBatch's 256 KB whatever one tenant's payloads hold.
SPEC_MAX_CHARS = 16 * 1024
# A text this long or shorter is within SPEC_MAX_CHARS however it is escaped (12 bytes a character)
_SURELY_SMALL_CHARS = SPEC_MAX_CHARS // 12


def spec_of(job: Job) -> str:
    """What a message carries of its job (empty when too large: the worker then reads it): its
    document and the fields the store keeps beside it (counters, sealed signing secrets). The
    document is the one the store read the job from when it noted it (the same fields and values,
    :mod:`punctual.models.job_documents`), else the job dumped as the store would write it."""
    text = document_of(job) or stored_document(job)
    extra = f',"dependents":{job.dependents},"trigger_rate":{job.trigger_rate}'
    if job.signing_secret_enc:
        extra += ',"signing_secret_enc":' + _COMPACT_JSON.encode(job.signing_secret_enc)
    if job.signing_secret_prev_enc:
        extra += ',"signing_secret_prev_enc":' + _COMPACT_JSON.encode(job.signing_secret_prev_enc)
    text = text[:-1] + extra + "}"
    if len(text) <= _SURELY_SMALL_CHARS:
        return text
    # QA: counted in characters, an emoji payload's message was 181 KB, and two in one request
    # made SQS refuse it whole, another tenant's slots in it too, at every attempt of the release.
    return text if len(_escape_long(text)) <= SPEC_MAX_CHARS else ""


def job_from_spec(spec: str) -> Job:
    """The job a message carries (:func:`spec_of`); raises ValueError when it does not read.

    Its types are validated; the rules it passed when the scheduler read it a moment before are
    not checked again (:func:`punctual.models.jobs.read_carried`): the message is signed by it.
    """
    return read_carried(spec)


class MessageSigner(Protocol):
    """Signs dispatch messages as they are sent (:class:`punctual.security.message_auth.DispatchSigner`)."""

    def sign(self, message: DispatchMessage) -> DispatchMessage: ...


# A poller stamps one release instant on a whole chunk of messages, and many jobs share
# a slot's instant: equal instants (in any zone) have the same UTC text.
_message_instant = lru_cache(maxsize=1024)(format_instant_ms)
# Read once: an enum's member read through its class costs several times a global's (the enum
# metaclass's __getattr__ hook), and these are read per message.
_QUEUE_OVERLAP, _ECS = Overlap.QUEUE, Runtime.ECS


def message_for(
    job: Job,
    slot: str,
    scheduled: datetime,
    attempt: int,
    kind: str,
    now: datetime,
    backfill: str = "",
    *,
    spec: str | None = None,
    last: bool = False,
) -> DispatchMessage:
    """The message for one attempt of one slot of ``job``: the one way messages are made.

    It carries the job (``spec``: :func:`spec_of`, given when the caller made it already for
    another slot of the same job) and, for the slot that ends the job's chain, ``last``.
    """
    # ``_built`` of these fields, every field given in declaration order (no defaults to merge).
    ordered = job.overlap is _QUEUE_OVERLAP
    message = object.__new__(DispatchMessage)
    object.__setattr__(
        message,
        "__dict__",
        {
            "tenant": job.tenant,
            "job_id": job.id,
            "slot": slot,
            "scheduled_at": _message_instant(scheduled),
            "attempt": attempt,
            "job_version": job.version,
            "kind": kind,
            "released_at": _message_instant(now),
            "ordered": ordered,
            "not_before": "",
            "backfill": backfill,
            "alert": "",
            "resend": 0,
            "spec": spec_of(job) if spec is None else spec,
            "last": last,
            "incarnation": _message_instant(job.created_at) if ordered else "",
            "sig": "",
        },
    )
    return message


def pick_queue(urls: Sequence[str], job_id: str) -> str:
    """Spread jobs over several queues when one queue's throughput quota is not enough."""
    if not urls:
        raise ValueError("no queue configured")
    if len(urls) == 1:
        return urls[0]  # what any hash modulo 1 picks
    return urls[stable_hash(job_id) % len(urls)]


@dataclass(frozen=True)
class QueueRouting:
    """Which work queue a job's messages go to: the long lane for ECS jobs (the short one when
    there is no long queue), the short lane otherwise, spread by job over a lane's queues."""

    short_queue_urls: tuple[str, ...] = ()
    long_queue_urls: tuple[str, ...] = ()

    def queue_for(self, job: Job) -> str:
        urls = self.long_queue_urls if job.runtime is _ECS else self.short_queue_urls
        return pick_queue(urls or self.short_queue_urls, job.id)


# One visibility for every message of a change_visibility_batch, or each receipt's own
Visibilities = int | Mapping[str, int]


def visibility_for(visibility_s: Visibilities, receipt: str) -> int:
    """The visibility :meth:`QueuePort.change_visibility_batch` is asked to set for ``receipt``."""
    return visibility_s if isinstance(visibility_s, int) else visibility_s[receipt]


@dataclass
class Received:
    message: DispatchMessage
    receipt: str
    receive_count: int
    message_id: str
    raw_body: str = ""


class QueuePort(Protocol):
    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        """Send every message (batches of ten, failed entries retried); raise if any cannot be sent
        (:class:`punctual.dispatch.sqs_send.SendFailed` saying which may have gone, if it knows)."""
        ...

    def receive(
        self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[Received]: ...

    def delete(self, queue_url: str, receipt: str) -> None: ...

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None: ...

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        """Set the visibility of several received messages (one request per ten; ``visibility_s``
        one figure for all, or each receipt's own: an entry of SQS's batch has its own); returns
        the receipts that could not be changed (deleted meanwhile, or stale)."""
        ...


class SqsQueues:
    """The SQS implementation. Batches of ten, sent concurrently; partial failures retried."""

    def __init__(
        self,
        client: Any,
        concurrency: int = 8,
        max_rounds: int = 12,
        signer: MessageSigner | None = None,
        poll_client: Callable[[], Any] | None = None,
    ) -> None:
        self.client = client
        # A receive that waits (an SQS long poll) goes through a client whose reads wait that long
        # (made when first needed); the others' time out in seconds (punctual.runtime.aws).
        self.poll_client = poll_client
        self.max_rounds = max_rounds
        self.signer = signer
        self.metrics: MetricsSink | None = None  # counts what receive drops (the ECS worker sets it)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="sqs-send")

    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        """Send ``messages`` in requests of ten side by side; raises :class:`.sqs_send.SendFailed`
        with those SQS may have taken if any cannot be sent."""
        signer = self.signer
        if signer is not None:
            messages = [signer.sign(message) for message in messages]
        batches = [messages[i : i + SQS_BATCH_MAX] for i in range(0, len(messages), SQS_BATCH_MAX)]
        client, rounds = self.client, self.max_rounds
        send_batches(
            lambda batch: send_batch(client, queue_url, batch, rounds, THROTTLE_CODES), self._pool, batches
        )

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Received]:
        client = self.poll_client() if wait_s > 0 and self.poll_client is not None else self.client
        reply = client.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_s,
            VisibilityTimeout=visibility_s,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        out = []
        for raw in reply.get("Messages", []):
            try:
                message = DispatchMessage.from_body(raw["Body"])
            except (ValueError, TypeError) as exc:
                # One body that is no message must not fail the whole receive (QA17: the ECS worker
                # logged "receive failed" and left the batch's real messages in flight for the lease,
                # their receive counts climbing towards the dead-letter queue each time the poison
                # came with them). Dropped, as the Lambda worker drops it ("malformed").
                self._drop_malformed(queue_url, raw, exc)
                continue
            out.append(
                Received(
                    message=message,
                    receipt=raw["ReceiptHandle"],
                    receive_count=int(raw.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
                    message_id=raw["MessageId"],
                    raw_body=raw["Body"],
                )
            )
        return out

    def delete(self, queue_url: str, receipt: str) -> None:
        self.client.delete_message(QueueUrl=queue_url, ReceiptHandle=receipt)

    def _drop_malformed(self, queue_url: str, raw: Mapping[str, Any], error: Exception) -> None:
        log.error("dropping a malformed message %s: %s", raw.get("MessageId"), error)
        if self.metrics is not None:
            self.metrics.add(FORGED_MESSAGES, 1)  # no sender writes one (as the Lambda worker counts it)
        try:
            self.delete(queue_url, raw["ReceiptHandle"])
        except Exception:  # its receive count takes it to the dead-letter queue anyway
            log.warning("could not delete malformed message %s", raw.get("MessageId"), exc_info=True)

    def delete_batch(self, queue_url: str, receipts: Sequence[str]) -> list[str]:
        """One ``DeleteMessageBatch`` of up to ten receipts; returns those worth trying again (a
        receipt SQS refuses as the sender's fault, such as an expired one, is not)."""
        entries = [{"Id": str(i), "ReceiptHandle": receipt} for i, receipt in enumerate(receipts)]
        reply = self.client.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        retry = []
        for failed in reply.get("Failed", []):
            if failed.get("SenderFault") and failed.get("Code") not in THROTTLE_CODES:
                continue  # delivered again meanwhile: its claim drops the repeat
            retry.append(receipts[int(failed["Id"])])
        return retry

    waiting_is_remote = True  # (the pace reads it off the poller's loop)

    def waiting(self, queue_urls: Sequence[str]) -> int:
        """Messages visible in ``queue_urls`` (SQS's approximate count; one GetQueueAttributes a
        queue, side by side): the backlog the poller paces catch-up by
        (:mod:`punctual.dispatch.polling.catchup_pace`)."""

        def one(url: str) -> int:
            reply = self.client.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
            )
            return int(reply["Attributes"]["ApproximateNumberOfMessages"])

        if len(queue_urls) <= 1:
            return sum(one(url) for url in queue_urls)
        return sum(self._pool.map(one, queue_urls))

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        self.client.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=receipt, VisibilityTimeout=visibility_s
        )

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(receipts), SQS_BATCH_MAX):
            chunk = receipts[start : start + SQS_BATCH_MAX]
            entries = [
                {
                    "Id": str(i),
                    "ReceiptHandle": receipt,
                    "VisibilityTimeout": visibility_for(visibility_s, receipt),
                }
                for i, receipt in enumerate(chunk)
            ]
            reply = self.client.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
            failed.extend(chunk[int(f["Id"])] for f in reply.get("Failed", []))
        return failed


@dataclass
class _Stored:
    message: DispatchMessage
    message_id: str
    visible_at: datetime
    receive_count: int = 0
    receipt: str = ""


@dataclass
class MemoryQueues:
    """In-memory FIFO queues with AWS's five-minute deduplication window (not moto's).

    ``now`` is a clock function so tests can move time.
    """

    now: Callable[[], datetime]
    dedup_window_s: float = 300.0
    queues: dict[str, list[_Stored]] = field(default_factory=dict)
    sent_ids: dict[str, dict[str, datetime]] = field(default_factory=dict)
    sends: int = 0
    delete_requests: int = 0  # DeleteMessage and DeleteMessageBatch calls
    signer: MessageSigner | None = None  # signs what is sent, as SqsQueues does
    visibility_calls: int = 0  # change_visibility_batch requests (each one of SQS's, up to ten)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: int = 0

    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        signer = self.signer
        with self._lock:
            for message in messages:
                if signer is not None:
                    message = signer.sign(message)
                self.sends += 1
                now = self.now()
                seen = self.sent_ids.setdefault(queue_url, {})
                dedup_id = message.dedup_id
                first = seen.get(dedup_id)
                if first is not None and now - first < timedelta(seconds=self.dedup_window_s):
                    continue
                seen[dedup_id] = now
                self._seq += 1
                self.queues.setdefault(queue_url, []).append(
                    _Stored(message, f"m{self._seq}", visible_at=now)
                )

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Received]:
        with self._lock:
            now = self.now()
            out: list[Received] = []
            busy_groups: set[str] = set()
            for stored in self.queues.get(queue_url, []):
                group = stored.message.group_id
                if stored.visible_at > now:
                    busy_groups.add(group)  # FIFO: an in-flight message blocks its group
                    continue
                if group in busy_groups:
                    continue
                stored.receive_count += 1
                self._seq += 1
                stored.receipt = f"r{self._seq}"
                stored.visible_at = now + timedelta(seconds=visibility_s)
                busy_groups.add(group)
                out.append(Received(stored.message, stored.receipt, stored.receive_count, stored.message_id))
                if len(out) == max_messages:
                    break
            return out

    def delete(self, queue_url: str, receipt: str) -> None:
        self.delete_batch(queue_url, [receipt])

    def delete_batch(self, queue_url: str, receipts: Sequence[str]) -> list[str]:
        with self._lock:
            self.delete_requests += 1
            gone = set(receipts)
            items = self.queues.get(queue_url, [])
            self.queues[queue_url] = [s for s in items if s.receipt not in gone]
        return []

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        with self._lock:
            for stored in self.queues.get(queue_url, []):
                if stored.receipt == receipt:
                    stored.visible_at = self.now() + timedelta(seconds=visibility_s)

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        with self._lock:
            wanted = set(receipts)
            for stored in self.queues.get(queue_url, []):
                if stored.receipt in wanted:
                    seconds = visibility_for(visibility_s, stored.receipt)
                    stored.visible_at = self.now() + timedelta(seconds=seconds)
                    wanted.discard(stored.receipt)
            self.visibility_calls += -(-len(receipts) // SQS_BATCH_MAX)
            return [r for r in receipts if r in wanted]

    def all_messages(self, queue_url: str | None = None) -> list[DispatchMessage]:
        with self._lock:
            urls = [queue_url] if queue_url else list(self.queues)
            return [s.message for url in urls for s in self.queues.get(url, [])]

    def drain(self, queue_url: str | None = None) -> list[DispatchMessage]:
        """Take every message out (tests): returns them in send order."""
        with self._lock:
            urls = [queue_url] if queue_url else list(self.queues)
            out = [s.message for url in urls for s in self.queues.get(url, [])]
            for url in urls:
                self.queues[url] = []
            return out
