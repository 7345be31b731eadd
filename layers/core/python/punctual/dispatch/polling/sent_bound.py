"""A poller sends nothing it could not vouch for after its death: the send bound.

A poller that resumes another's minute (a restart, the next minute's poller draining a dead
one's) releases again, as uncertain, the timers the earlier poller may have sent, and must know
which: a slot sent on time, still waiting in a backlogged queue, that the resumer judged late
again was recorded MISSED, and the worker dropped its message on that record
(:mod:`.redrain`). The release marks only say how far a poller got (a lower bound), and they are
written after the sends: when their writes failed while the releases went on, a resumer could not
tell a slot sent on time from one never sent (QA33: marks failing from :30, the poller dead at
:50, 199 of 300 slots sent at :45 recorded MISSED and never run).

So each poller keeps a durable *upper* bound in its progress item (:mod:`punctual.store.progress`):
before it sends a timer due after the bound it moves the bound on (a conditional write that only
moves forward), and while that write fails it sends nothing past it. The bound is in due time (the
timers' instants), not read off a clock, so no skew between nodes changes it. A resumer takes every
timer due by the furthest bound of the groups covering its shards as maybe sent: its slots are sent
again as copies (the claim keeps one run), never recorded MISSED for lateness; a timer due after
it was sent by no one, and its catch-up policy decides.

What it costs: one small write each ``ahead_ms`` of due time while a poller releases (a poller
with nothing due writes none), moved on a step before the next release needs it; a minute
released by a catch-up writes one bound for the whole minute. A failing store holds a poller's
releases past the bound until the write goes through: the workers could not claim them meanwhile
(a claim is a write to the same table), and held slots keep their fate lines (a slot released late
is judged by its policy, as after any outage).
"""

from __future__ import annotations

import logging
from datetime import datetime

from punctual.store.progress import ProgressRepository

log = logging.getLogger("punctual.dispatch.polling")


class SentBound:
    """The durable bound on what one poller may have sent of one minute's timers (of its group)."""

    def __init__(
        self,
        store: ProgressRepository,
        minute: datetime,
        group: int,
        group_count: int,
        ahead_ms: int,
    ) -> None:
        self.store = store
        self.minute = minute
        self.group = group
        self.group_count = group_count
        self.ahead_ms = ahead_ms
        self.durable_ms: int | None = None  # the bound known written (None: none yet)

    def covers(self, due_ms: int) -> bool:
        return self.durable_ms is not None and due_ms <= self.durable_ms

    def resumed(self, bound_ms: int | None) -> None:
        """A bound read from the store (written by an earlier poller of the group): durable."""
        if bound_ms is not None and (self.durable_ms is None or bound_ms > self.durable_ms):
            self.durable_ms = bound_ms

    def cover(self, due_ms: int) -> bool:
        """Whether timers due by ``due_ms`` may be sent: the bound covers them, moved on now to
        ``ahead_ms`` past them when it did not. False: the write failed, send none of them."""
        if self.covers(due_ms):
            return True
        target = due_ms + self.ahead_ms
        try:
            self.store.put_sent_bound(self.minute, self.group, self.group_count, target)
        except Exception:
            log.exception(
                "moving the send bound of %s on failed: nothing past it is sent", f"{self.minute:%H:%M}"
            )
            return False
        self.durable_ms = target
        return True


__all__ = ["SentBound"]
