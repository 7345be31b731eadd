"""A chain timer's fate line: the instant past which releasing it later may change whether one
of its slots runs.

A slot released more than :data:`punctual.timing.slots.MISSED_AFTER_S` after its instant is late,
and the job's catch-up policy decides it (``all`` runs it inside ``catchup.window_seconds``,
``latest`` only the newest, ``none`` none); one past the window is MISSED whatever the policy. So a
timer whose release waits (the pollers' catch-up pace, :mod:`punctual.dispatch.polling.catchup_pace`)
may turn a slot that would have run into a MISSED one, only because of when it went out. The line
says until when it may wait: its first slot's dispatch instant plus

* the window (at least ``MISSED_AFTER_S``) for catch-up ``all``: no later wait changes a slot's fate
  before its window does (its later slots' lines are later still);
* ``MISSED_AFTER_S`` for ``latest`` and ``none``: past that the slots due meanwhile are judged late
  (and a line already passed means: release at once, the later slots' lines are not known here);
* nothing for a RESUME timer: its slots were owed by a pause, and the policy decides them however
  late; what comes due after them must not wait behind them.

The line is written with the timer (its ``owner``, which chain timers use for nothing else), so a
poller knows it without reading the job; it is fixed by the job's version and the slot (two pollers
racing to write the same timer write the same line).
"""

from __future__ import annotations

_MARK = "fate:"


def fate_note(line_ms: int) -> str:
    """What a chain timer's ``owner`` holds: its fate line, epoch milliseconds."""
    return f"{_MARK}{line_ms}"


def noted_line_ms(owner: str | None) -> int | None:
    """The fate line a chain timer's ``owner`` holds (None: a timer written before lines were noted)."""
    if not owner or not owner.startswith(_MARK):
        return None
    try:
        return int(owner[len(_MARK) :])
    except ValueError:
        return None


__all__ = ["fate_note", "noted_line_ms"]
