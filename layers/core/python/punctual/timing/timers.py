"""Timer rows: the one owner of their layout, lanes and shard hashing.

A timer is an immutable row saying "act on (job, slot, attempt) at this instant". Its key
is fully determined by what it is, so writing the same timer twice is a no-op and two
pollers that race to write the next timer of a chain write the same row.

Layout (see DESIGN.md)::

    far:  pk = timer#<YYYYMMDDTHHMM>#<shard>   sk = <due ms, 13 digits>#<tenant>#<job>#<slot>#<attempt>
    near: pk = near#<YYYYMMDDTHHMM>#<k>         sk = (same)

The tenant is in the sort key and in the shard's hash: job ids are unique per tenant only (an
EventBridge Scheduler schedule ``default/nightly`` is job ``sch-<digest of group/name>`` in every
tenant), so two tenants' timers of one job id, slot and attempt are two rows. Neither a tenant
(``api.tenancy``) nor a job id holds ``#``. Rows written before the tenant was in the key
(``<due>#<job>#<slot>#<attempt>``, shard = hash of the job id alone) are read alike (a reader
takes a timer's fields from its attributes, never from its key);
:mod:`punctual.store.dynamo.migrate_keys` moves them.

A far timer is due more than ``far_threshold_s`` after it is written: its bucket is read
once, a little before its minute. A near timer is due sooner (retries, rate(n seconds),
fresh registrations, catch-up): near buckets are read every poll interval. The threshold
is much larger than the read-ahead lead plus any clock skew, so a far bucket is never
written after it was read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from hashlib import blake2b as _blake2b

MINUTE_FMT = "%Y%m%dT%H%M"
SLOT_FMT = "%Y-%m-%dT%H:%M:%SZ"
TTL_AFTER_DUE_S = 24 * 3600
_DUE_DIGITS = 13  # (written out in sort_key and due_bound: a nested width is parsed at each call)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MINUTE = timedelta(minutes=1)
_MINUTE_MS = 60_000
# The one shape slot_key writes: parsed with fromisoformat (fast), anything else with strptime.
_CANONICAL_SLOT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


class Lane(StrEnum):
    FAR = "timer"
    NEAR = "near"


_FAR, _NEAR = Lane.FAR, Lane.NEAR  # read once: a class attribute of an enum is a slow read


class TimerKind(StrEnum):
    FIRE = "fire"  # a scheduled slot of a job
    RETRY = "retry"  # the next attempt of a failed execution
    LEASE = "lease"  # a running execution's lease expiry
    CHILD = "child"  # a dependent job's slot whose parents all succeeded
    # A fire timer whose slot is already due when it is written: the rest of a catch-up the
    # release before it had to cut short. Released like FIRE, but at catch-up's bounded rate.
    CATCHUP = "catchup"
    # The first timer of a resumed job's chain, due at the resume: its slots due before that were
    # owed by the pause, and the catch-up policy decides each (punctual.dispatch.polling.chains).
    RESUME = "resume"
    QUEUED = "queued"  # a slot queued behind another (overlap queue): check that it still waits
    BACKFILL = "backfill"  # a backfill's next step (slot = the backfill id, attempt = the step)
    ALERT = "alert"  # an alert's sweep (slot = its key slot, attempt = its condition's code)
    # A parent's first after() child was linked (slot = the link's instant): its slots in flight,
    # whose claims trusted a copy of it without that child, are checked for successes to pass on
    # (punctual.execution.relinks)
    RELINK = "relink"


CHAIN_KINDS = frozenset(
    {TimerKind.FIRE, TimerKind.CATCHUP, TimerKind.RESUME}
)  # the timers of a job's chain of slots
# The timers whose release hands a slot to a worker: what a minute's load counts. A LEASE timer
# (a running execution's expiry: usually extended or ended before it is due), a QUEUED slot's
# check and a backfill's step are not load (a burst's lease timers are no second burst).
LOAD_KINDS = frozenset(
    {TimerKind.FIRE, TimerKind.CATCHUP, TimerKind.RESUME, TimerKind.RETRY, TimerKind.CHILD}
)


def stable_hash(text: str) -> int:
    """A hash that is the same in every process and Python version (unlike ``hash()``)."""
    return int.from_bytes(_blake2b(text.encode(), digest_size=8).digest(), "big")


def shard_of(tenant: str, job_id: str, shard_count: int) -> int:
    """The shard of a job's timers: a hash of tenant and job id, so alike ids of many tenants
    (a popular schedule name) spread over the shards instead of filling one partition."""
    # stable_hash, inline (a timer made per release)
    text = f"{tenant}\x1f{job_id}".encode()
    return int.from_bytes(_blake2b(text, digest_size=8).digest(), "big") % shard_count


def minute_of(instant: datetime) -> datetime:
    """The UTC minute that contains ``instant``."""
    u = instant.astimezone(UTC)
    if u.fold or type(u) is not datetime:  # (the same value either way; replace keeps these as they are)
        return u.replace(second=0, microsecond=0)
    return u - timedelta(0, u.second, u.microsecond)  # replace's value, at half its cost (a call per slot)


def minute_key(minute: datetime) -> str:
    if minute.utcoffset() is None:  # local time: its UTC minute depends on the process's zone
        return minute.astimezone(UTC).strftime(MINUTE_FMT)
    return _epoch_minute_key((minute - _EPOCH) // _ONE_MINUTE)


@lru_cache(maxsize=4096)
def _epoch_minute_key(epoch_minute: int) -> str:
    """The key of the UTC minute ``epoch_minute`` minutes after the epoch (a poller reuses a few)."""
    return (_EPOCH + epoch_minute * _ONE_MINUTE).strftime(MINUTE_FMT)


def parse_minute_key(text: str) -> datetime:
    return datetime.strptime(text, MINUTE_FMT).replace(tzinfo=UTC)


def to_ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)


@lru_cache(maxsize=4096)
def from_ms(ms: int) -> datetime:
    """The UTC instant ``ms`` milliseconds after the epoch. Cached: a poller reads the due instant
    of every timer it releases, and the timers of one release share a few (whole seconds)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def bucket_pk(lane: Lane, minute: datetime, shard: int) -> str:
    return f"{lane.value}#{minute_key(minute)}#{shard}"


def bucket_pk_of_ms(lane: Lane, due_ms: int, shard: int) -> str:
    """``bucket_pk`` of the minute that contains ``due_ms``, in integer arithmetic."""
    return f"{lane.value}#{_epoch_minute_key(due_ms // _MINUTE_MS)}#{shard}"


def sort_key(due_ms: int, tenant: str, job_id: str, slot: str, attempt: int) -> str:
    return f"{due_ms:013d}#{tenant}#{job_id}#{slot}#{attempt}"  # (013: _DUE_DIGITS)


def due_bound(ms: int) -> str:
    """A sort-key bound: every timer due at or after ``ms`` sorts at or after it."""
    return f"{ms:013d}"  # (013: _DUE_DIGITS)


@dataclass(frozen=True)
class Timer:
    """One timer row. ``due_ms`` is when to act; ``slot`` is the slot's identity."""

    lane: Lane
    shard: int
    due_ms: int
    job_id: str
    tenant: str
    slot: str
    attempt: int
    kind: TimerKind
    job_version: int
    owner: str | None = None  # lease timers: the owner whose lease this is

    @property
    def due(self) -> datetime:
        return from_ms(self.due_ms)

    @property
    def pk(self) -> str:
        return bucket_pk_of_ms(self.lane, self.due_ms, self.shard)

    @property
    def sk(self) -> str:
        return sort_key(self.due_ms, self.tenant, self.job_id, self.slot, self.attempt)

    @property
    def expires_at(self) -> int:
        return self.due_ms // 1000 + TTL_AFTER_DUE_S

    @property
    def identity(self) -> tuple[str, str, str, int, str]:
        """What makes two timers the same action (lane and due may differ)."""
        return (self.tenant, self.job_id, self.slot, self.attempt, self.kind.value)


# A timer's fields, in declaration order (:func:`timer_of`'s arguments).
TimerFields = tuple[Lane, int, int, str, str, str, int, TimerKind, int, str | None]


def timer_of(*fields: *TimerFields) -> Timer:
    """``Timer(*fields)`` without its frozen ``__init__`` (one ``object.__setattr__`` a field: half
    the cost of a timer; a poller makes one per release and unpacks one per timer it reads): the
    same fields, in declaration order."""
    lane, shard, due_ms, job_id, tenant, slot, attempt, kind, job_version, owner = fields
    timer = object.__new__(Timer)
    object.__setattr__(
        timer,
        "__dict__",
        {
            "lane": lane,
            "shard": shard,
            "due_ms": due_ms,
            "job_id": job_id,
            "tenant": tenant,
            "slot": slot,
            "attempt": attempt,
            "kind": kind,
            "job_version": job_version,
            "owner": owner,
        },
    )
    return timer


@dataclass(frozen=True)
class TimerLayout:
    """Where timers go: shard counts and the lane threshold, from settings."""

    shard_count: int = 512
    near_shard_count: int = 32
    far_threshold_s: int = 180

    def make(
        self,
        *,
        now: datetime,
        due: datetime,
        job_id: str,
        tenant: str,
        slot: str,
        attempt: int,
        kind: TimerKind,
        job_version: int,
        owner: str | None = None,
    ) -> Timer:
        """Build the timer for an action due at ``due``, written at ``now`` (the writer's clock).

        A due instant in the past is clamped to ``now`` (and goes to the near lane): the
        near lane is read with a look-back that covers clock skew, so nothing written
        late is lost, while the slot keeps its identity.
        """
        now_ms = round(now.timestamp() * 1000)  # to_ms, inline (a timer made per release)
        due_ms = round(due.timestamp() * 1000)
        if due_ms < now_ms:
            due_ms = now_ms
        if due_ms - now_ms > self.far_threshold_s * 1000:
            lane, shard_count = _FAR, self.shard_count
        else:
            lane, shard_count = _NEAR, self.near_shard_count
        shard = shard_of(tenant, job_id, shard_count)  # (shard_for, its lane's count known here)
        return timer_of(lane, shard, due_ms, job_id, tenant, slot, attempt, kind, job_version, owner)

    def shard_for(self, lane: Lane, tenant: str, job_id: str) -> int:
        """The shard of ``lane`` a job's timers go to (the one place it is computed: the chain
        auditor's segments are the far shards, :mod:`punctual.auditing`)."""
        return shard_of(tenant, job_id, self.shard_count if lane is _FAR else self.near_shard_count)

    def shards_of_group(self, lane: Lane, group: int, group_count: int) -> list[int]:
        count = self.shard_count if lane is Lane.FAR else self.near_shard_count
        return [shard for shard in range(count) if shard % group_count == group]


def slot_key(instant: datetime) -> str:
    """The identity of a scheduled slot: its whole-second UTC instant."""
    if type(instant) is datetime and instant.tzinfo is UTC:
        # The usual slot (a schedule's slots are UTC datetimes): formatted once per instant, as
        # the many slots of one second in a release share it. Only UTC instants: equal instants of
        # another zone may differ (an ambiguous hour's two passes compare equal in their zone).
        return _utc_slot_key(instant)
    return _slot_text(instant.astimezone(UTC))


def _slot_text(u: datetime) -> str:
    """:func:`slot_key` of a UTC instant."""
    if u.year < 1000:  # strftime does not pad such years: keep its exact text
        return u.strftime(SLOT_FMT)
    # %-formatting: about half the cost of the f-string with six format specs.
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (u.year, u.month, u.day, u.hour, u.minute, u.second)  # noqa: UP031


_utc_slot_key = lru_cache(maxsize=4096)(_slot_text)


MANUAL_MARK = "~m"  # in a triggered slot's key, <instant>~m<token> (JobService.trigger)
# What a slot key looks like (:func:`slot_key`, and a run-now slot's mark): what a caller may name
SLOT_KEY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z(~[A-Za-z0-9_-]{1,64})?\Z")


def is_slot_key(text: str) -> bool:
    """Whether a caller's ``text`` names a slot: a slot key (:data:`SLOT_KEY_RE`) whose instant
    exists. QA28: one of the right shape naming none (``23:59:60``, ``24:00:00``, November 31st)
    raised out of :func:`slot_instant` (a 500) where it sorted inside a MISSED range record."""
    if not SLOT_KEY_RE.match(text):
        return False
    try:
        slot_instant(text)
    except ValueError:
        return False
    return True


# An RFC 3339 instant as clients write one: any offset or Z, a fraction, t and z in lowercase
_RFC3339_INSTANT = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


def slot_key_of(text: str) -> str | None:
    """The slot key ``text`` names, or None when it names none: the key itself, or its instant
    written as RFC 3339 otherwise (``2026-11-30T03:00:00+01:00``, JavaScript's ``...00.000Z``,
    Python's ``+00:00``), a run-now slot's mark kept. A fraction other than zero names no slot
    (a slot is a whole second). QA32: such a form of a slot that ran answered 404 "no execution"."""
    instant, mark, suffix = text.partition("~")
    found = _RFC3339_INSTANT.fullmatch(instant)
    if found is not None and not is_slot_key(text):
        day, clock, fraction, offset = found.groups()
        if (fraction or "").strip("0"):
            return None
        try:
            parsed = datetime.fromisoformat(f"{day}T{clock}{'+00:00' if offset in 'Zz' else offset}")
            text = slot_key(parsed) + mark + suffix
        except (ValueError, OverflowError):  # no such day or time; past year 1 or 9999 in UTC
            return None
    return text if is_slot_key(text) else None


@lru_cache(maxsize=4096)
def slot_instant(key: str) -> datetime:
    """The nominal instant of a slot key (manual triggers carry a ``~suffix``). Cached: a poller
    reads the slot of every timer it releases, and the timers of one release share a few."""
    text = key.split("~", 1)[0]
    if _CANONICAL_SLOT.fullmatch(text):
        try:
            return datetime.fromisoformat(text)  # the same fields strptime reads, in UTC
        except ValueError:
            pass  # out of range: strptime raises its own error below
    return datetime.strptime(text, SLOT_FMT).replace(tzinfo=UTC)


def minutes_between(first: datetime, last: datetime) -> list[datetime]:
    """Every minute from ``first`` to ``last`` inclusive (both minute-aligned)."""
    out: list[datetime] = []
    current = minute_of(first)
    while current <= last:
        out.append(current)
        current += timedelta(minutes=1)
    return out
