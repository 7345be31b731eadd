"""The catch-up pace may delay a held timer, never change its slots' fate.

The pace (:mod:`.catchup_pace`) holds owed timers while the short lane's queues hold a second of
the workers' work. Held past a catch-up line, a slot that would have run is recorded MISSED only
because of when the pace let it go (QA 2026-12-07: a dead poller's minute of 600 one-slot timers of
catch-up ``none`` jobs, 35 s late when owed, workers claiming 20 a second: unpaced every slot ran,
paced 70 were MISSED). So every held timer whose fate line (:mod:`punctual.timing.fate`: the
instant past which a later release may change whether its slots run) comes within
:data:`FATE_MARGIN_S` goes out at the next catch-up turn, whatever the pace says, oldest line
first (:class:`FateIndex`).

Why the line is judged this way, and not by when the slot became owed: a poller that restarts
knows nothing of when the slot became owed (the line is in the timer, so a restart holds by it
too), and releasing under ``none`` a slot minutes late, as if on time, is what its user asked
not to be done. Why this does not bring the other tenants' wait back: an ``all`` job's line is its
window (an hour by default) past its slot, which a catch-up the workers take seldom reaches;
``none`` and ``latest`` jobs send little of what they owe (their late slots are recorded, not sent),
and what comes out by its line is at most a slot's own rate, a minute late.

A past minute's timer goes with every timer due before it, in order, and the minute's progress
mark moves (:meth:`.drain.MinuteDrain.release_urgent`): in a dead poller's minute that mixes
policies, the ``all`` timers due before a ``none`` one go with it, at the minute's own rate, under a
minute late. The owed minutes after the one the pace holds open are read ahead for their lines
(:meth:`.catchup.CatchUp.release_urgent`). What it does not see: owed minutes past
:data:`.catchup.AHEAD_TIMERS` held timers. A timer written before lines were noted is held by its
due instant when it is a FIRE timer (its first slot's dispatch instant: by the 60 s line),
else not at all (a CATCHUP or RESUME timer's first slot is not known more closely).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

from punctual.timing.fate import noted_line_ms
from punctual.timing.slots import MISSED_AFTER_S
from punctual.timing.timers import CHAIN_KINDS, Timer, TimerKind, slot_instant, to_ms

# How long before its fate line a held timer goes out: a poll interval, a catch-up turn and the
# release's own reads and writes (its plan is made as of its release, a moment after the turn).
FATE_MARGIN_S = 10.0


def fate_line_ms(timer: Timer) -> int | None:
    """When a later release of ``timer`` may change whether its slots run (None: never, it is no
    timer of a job's chain of slots)."""
    if timer.kind not in CHAIN_KINDS:
        return None
    slot_ms = to_ms(slot_instant(timer.slot))
    noted = noted_line_ms(timer.owner, slot_ms)
    if noted is not None:
        return noted
    if timer.kind is TimerKind.FIRE:
        return timer.due_ms + MISSED_AFTER_S * 1000
    return slot_ms


class FateIndex:
    """Held timers by fate line, earliest first. Timers released meanwhile stay in it until their
    line comes (their holder finds them gone then)."""

    def __init__(self, timers: Iterable[Timer] = ()) -> None:
        self._order = itertools.count()
        self._heap: list[tuple[int, int, Timer]] = []
        for timer in timers:
            self.add(timer)

    def add(self, timer: Timer) -> None:
        line = fate_line_ms(timer)
        if line is not None:
            heapq.heappush(self._heap, (line, next(self._order), timer))

    def due(self, by_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers whose line is at or before ``by_ms``, earliest line first
        (taken out of the index)."""
        heap = self._heap
        out: list[Timer] = []
        while heap and heap[0][0] <= by_ms and len(out) < limit:
            out.append(heapq.heappop(heap)[2])
        return out

    def __len__(self) -> int:
        return len(self._heap)


__all__ = ["FATE_MARGIN_S", "FateIndex", "fate_line_ms"]
