"""Backoff instants for failed attempts: pure functions of the policy, the attempt and a random source.

``fixed`` waits ``base`` every time, ``linear`` waits ``base * n`` after the n-th failed
attempt, ``exponential`` waits ``base * 2**(n-1)``; every kind is capped at
``max_seconds``. With ``jitter`` the wait is drawn uniformly from ``[0, capped wait]``
("full jitter", which spreads the retries of many jobs that failed together). A receiver's
``Retry-After`` hint lengthens the wait, never beyond ``max_seconds``. No retry is due past
``max_age_seconds`` after the slot's scheduled instant, nor once ``max_attempts`` are used.

The random source is an argument: tests pass a stub, the worker passes
:func:`seeded_random`, so recomputing the instant of the same attempt (after a crash)
lands on the same timer row.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Protocol

from punctual.models import Backoff, RetryPolicy
from punctual.timing.timers import stable_hash

_MAX_DOUBLINGS = 63  # 2**63 times any base is far beyond every cap: no float overflow


class RandomSource(Protocol):
    """The one thing backoff needs from a random generator (``random.Random`` fits)."""

    def uniform(self, a: float, b: float) -> float: ...


def seeded_random(job_id: str, slot: str, attempt: int) -> random.Random:
    """A generator seeded by (job, slot, attempt): the same attempt always draws the same jitter.

    Parameters
    ----------
    job_id, slot, attempt
        The failed attempt whose retry is being scheduled.

    Returns
    -------
    random.Random
        Deterministic across processes (the seed is a stable hash, not ``hash()``).
    """
    return random.Random(stable_hash(f"{job_id}\x1f{slot}\x1f{attempt}"))


def backoff_ceiling_s(policy: RetryPolicy, failed_attempt: int) -> float:
    """The wait after the ``failed_attempt``-th failure, before jitter, capped at ``max_seconds``.

    Parameters
    ----------
    policy
        The job's retry policy.
    failed_attempt
        1 for the first attempt, 2 for the second, ...

    Returns
    -------
    float
        Seconds.
    """
    n = max(failed_attempt, 1)
    if policy.backoff is Backoff.FIXED:
        raw = policy.base_seconds
    elif policy.backoff is Backoff.LINEAR:
        raw = policy.base_seconds * n
    else:
        raw = policy.base_seconds * 2 ** min(n - 1, _MAX_DOUBLINGS)
    return min(raw, policy.max_seconds)


def retry_delay_s(
    policy: RetryPolicy,
    failed_attempt: int,
    rng: RandomSource,
    retry_after_s: float | None = None,
) -> float:
    """How long to wait before the next attempt.

    Parameters
    ----------
    policy
        The job's retry policy.
    failed_attempt
        The attempt that just failed (1-based).
    rng
        Draws the jitter (only used when ``policy.jitter``).
    retry_after_s
        The receiver's hint (HTTP ``Retry-After``); honoured up to ``max_seconds``.

    Returns
    -------
    float
        Seconds, in ``[0, max_seconds]``.
    """
    ceiling = backoff_ceiling_s(policy, failed_attempt)
    delay = rng.uniform(0.0, ceiling) if policy.jitter else ceiling
    if retry_after_s is not None and retry_after_s > 0:
        delay = max(delay, min(retry_after_s, policy.max_seconds))
    return delay


def next_retry_at(
    policy: RetryPolicy,
    *,
    failed_attempt: int,
    failed_at: datetime,
    scheduled_at: datetime,
    rng: RandomSource,
    retry_after_s: float | None = None,
) -> datetime | None:
    """The instant of the next attempt, or None when the slot must not be retried.

    Parameters
    ----------
    policy
        The job's retry policy.
    failed_attempt
        How many attempts have failed so far, this one included (1-based).
    failed_at
        When this attempt failed (the worker's clock).
    scheduled_at
        The slot's scheduled instant: ``max_age_seconds`` counts from here.
    rng
        The jitter source.
    retry_after_s
        The receiver's hint, if any.

    Returns
    -------
    datetime or None
        None when ``max_attempts`` are used up or the retry would be due after
        ``scheduled_at + max_age_seconds``.
    """
    if failed_attempt >= policy.max_attempts:
        return None
    due = failed_at + timedelta(seconds=retry_delay_s(policy, failed_attempt, rng, retry_after_s))
    if due > scheduled_at + timedelta(seconds=policy.max_age_seconds):
        return None
    return due


# An attempt deferred because the scheduler's own infrastructure failed before the target was
# called (KMS throttling, STS unavailable) comes back after 2 s, 4 s, 8 s, ... at most 5 min
# (half of it jitter), at most this many times a slot: past that, an attempt is counted.
DEFER_BASE_S = 2.0
DEFER_MAX_S = 300.0
MAX_DEFERRALS = 50


def deferral_at(
    deferral: int, failed_at: datetime, scheduled_at: datetime, max_age_s: float, rng: RandomSource
) -> datetime | None:
    """The instant the ``deferral``-th (1-based) deferred attempt of a slot is tried again, or
    None when it may not be deferred (past :data:`MAX_DEFERRALS`, or due past ``max_age_s``
    after ``scheduled_at``): the attempt is then counted as a failure."""
    if deferral > MAX_DEFERRALS:
        return None
    ceiling = min(DEFER_MAX_S, DEFER_BASE_S * 2 ** min(deferral - 1, _MAX_DOUBLINGS))
    due = failed_at + timedelta(seconds=rng.uniform(ceiling / 2, ceiling))
    if due > scheduled_at + timedelta(seconds=max_age_s):
        return None
    return due
