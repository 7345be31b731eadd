"""A run's stop request: ``threading.Event``'s ``set``, ``is_set`` and ``wait``, made cheaply.

Every claimed attempt carries one (``Claim.cancel``, the target adapter's ``SlotContext.cancel``),
and almost none is ever set or waited on. A ``threading.Event`` builds a ``Condition`` and its
lock in Python (~2 µs a claim on the worker's hot path); this flag holds a plain lock and makes
the event only when a thread first waits.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Cancellation(Protocol):
    """What a run's code may do with its stop request (a ``threading.Event`` is one too)."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class StopSignal:
    """Set once, seen by every reader; ``wait`` blocks until it is set (or ``timeout``)."""

    __slots__ = ("_event", "_flag", "_lock")

    def __init__(self) -> None:
        self._flag = False
        self._event: threading.Event | None = None
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._lock:
            self._flag = True
            event = self._event
        if event is not None:
            event.set()  # wake the threads that wait

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False when ``timeout`` seconds passed first (as ``Event.wait``)."""
        with self._lock:
            if self._flag:
                return True
            if self._event is None:  # the first waiter: made under the lock ``set`` takes
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)
