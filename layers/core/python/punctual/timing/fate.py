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
racing to write the same timer write the same line). It is noted in whole seconds after the slot's
nominal instant (its key), rounded down (a line a second early only releases a held timer a
second sooner): a few bytes, where an epoch in milliseconds made each packed timer 30 % larger
(near-lane timers are read some 8.8 times a trigger; at 10,000 triggers a second a next timer's
write units went from 0.0808 to 0.0992). A FIRE timer of a job whose line is its due instant plus
:data:`punctual.timing.slots.MISSED_AFTER_S` notes nothing: its reader's fallback is that line
(:func:`punctual.dispatch.polling.fate_lines.fate_line_ms`).
"""

from __future__ import annotations

_MARK = "fate:"  # the first notes' form (the line itself, epoch milliseconds): still read


def fate_note(slot_ms: int, line_ms: int) -> str:
    """What a chain timer's ``owner`` holds: its fate line, whole seconds after its slot's instant
    ``slot_ms`` (rounded down)."""
    return str(max(0, line_ms - slot_ms) // 1000)


def noted_line_ms(owner: str | None, slot_ms: int) -> int | None:
    """The fate line a chain timer's ``owner`` holds, for its slot's instant ``slot_ms`` (None: a
    timer that notes none)."""
    if not owner:
        return None
    if owner.isascii() and owner.isdigit():
        return slot_ms + 1000 * int(owner)
    if owner.startswith(_MARK):
        try:
            return int(owner[len(_MARK) :])
        except ValueError:
            return None
    return None


__all__ = ["fate_note", "noted_line_ms"]
