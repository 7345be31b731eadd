"""Timer rows: the one owner of their layout, lanes and shard hashing.

A timer is an immutable row saying "act on (job, slot, attempt) at this instant". Its key
is fully determined by what it is, so writing the same timer twice is a no-op and two
pollers that race to write the next timer of a chain write the same row.

Layout (see DESIGN.md)::

    far:  pk = timer#<YYYYMMDDTHHMM>#<shard>   sk = <due ms, 13 digits>#<job>#<slot>#<attempt>
    near: pk = near#<YYYYMMDDTHHMM>#<k>         sk = (same)

A far timer is due more than ``far_threshold_s`` after it is written: its bucket is read
once, a little before its minute. A near timer is due sooner (retries, rate(n seconds),
fresh registrations, catch-up): near buckets are read every poll interval. The threshold
is much larger than the read-ahead lead plus any clock skew, so a far bucket is never
written after it was read.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

MINUTE_FMT = "%Y%m%dT%H%M"
TTL_AFTER_DUE_S = 24 * 3600
_DUE_DIGITS = 13


class Lane(StrEnum):
    FAR = "timer"
    NEAR = "near"


class TimerKind(StrEnum):
    FIRE = "fire"  # a scheduled slot of a job
    RETRY = "retry"  # the next attempt of a failed execution
    LEASE = "lease"  # a running execution's lease expiry
    CHILD = "child"  # a dependent job's slot whose parents all succeeded


def stable_hash(text: str) -> int:
    """A hash that is the same in every process and Python version (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def shard_of(job_id: str, shard_count: int) -> int:
    return stable_hash(job_id) % shard_count


def minute_of(instant: datetime) -> datetime:
    """The UTC minute that contains ``instant``."""
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def minute_key(minute: datetime) -> str:
    return minute.astimezone(UTC).strftime(MINUTE_FMT)


def parse_minute_key(text: str) -> datetime:
    return datetime.strptime(text, MINUTE_FMT).replace(tzinfo=UTC)


def to_ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def bucket_pk(lane: Lane, minute: datetime, shard: int) -> str:
    return f"{lane.value}#{minute_key(minute)}#{shard}"


def sort_key(due_ms: int, job_id: str, slot: str, attempt: int) -> str:
    return f"{due_ms:0{_DUE_DIGITS}d}#{job_id}#{slot}#{attempt}"


def due_bound(ms: int) -> str:
    """A sort-key bound: every timer due at or after ``ms`` sorts at or after it."""
    return f"{ms:0{_DUE_DIGITS}d}"


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
        return bucket_pk(self.lane, minute_of(self.due), self.shard)

    @property
    def sk(self) -> str:
        return sort_key(self.due_ms, self.job_id, self.slot, self.attempt)

    @property
    def expires_at(self) -> int:
        return self.due_ms // 1000 + TTL_AFTER_DUE_S

    @property
    def identity(self) -> tuple[str, str, str, int, str]:
        """What makes two timers the same action (lane and due may differ)."""
        return (self.tenant, self.job_id, self.slot, self.attempt, self.kind.value)


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
        due_ms = max(to_ms(due), to_ms(now))
        if due_ms - to_ms(now) > self.far_threshold_s * 1000:
            lane, shard = Lane.FAR, shard_of(job_id, self.shard_count)
        else:
            lane, shard = Lane.NEAR, shard_of(job_id, self.near_shard_count)
        return Timer(lane, shard, due_ms, job_id, tenant, slot, attempt, kind, job_version, owner)

    def shards_of_group(self, lane: Lane, group: int, group_count: int) -> list[int]:
        count = self.shard_count if lane is Lane.FAR else self.near_shard_count
        return [shard for shard in range(count) if shard % group_count == group]


def slot_key(instant: datetime) -> str:
    """The identity of a scheduled slot: its whole-second UTC instant."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot_instant(key: str) -> datetime:
    """The nominal instant of a slot key (manual triggers carry a ``~suffix``)."""
    return datetime.strptime(key.split("~", 1)[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def minutes_between(first: datetime, last: datetime) -> list[datetime]:
    """Every minute from ``first`` to ``last`` inclusive (both minute-aligned)."""
    out: list[datetime] = []
    current = minute_of(first)
    while current <= last:
        out.append(current)
        current += timedelta(minutes=1)
    return out
