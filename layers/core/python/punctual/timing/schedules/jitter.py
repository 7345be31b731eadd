"""Jitter: a deterministic dispatch delay per (job, slot), the same on every node and replay."""

from __future__ import annotations

import hashlib
from datetime import datetime

from punctual.timing.instants import format_instant

__all__ = ["jitter_offset_s"]


def jitter_offset_s(job_id: str, slot: datetime, jitter_seconds: int) -> int:
    """A deterministic dispatch delay for one (job, slot).

    Parameters
    ----------
    job_id
        The job's id.
    slot
        The slot's nominal instant (its identity, which jitter does not change).
    jitter_seconds
        The job's jitter bound; 0 disables jitter.

    Returns
    -------
    int
        Seconds in ``[0, jitter_seconds]``, the same on every node and every replay
        (SHA-256, not Python's per-process salted ``hash``).
    """
    if jitter_seconds < 0:
        raise ValueError(f"jitter_seconds must be >= 0, got {jitter_seconds}")
    if jitter_seconds == 0:
        return 0
    digest = hashlib.sha256(f"{job_id}\x00{format_instant(slot)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_seconds + 1)
