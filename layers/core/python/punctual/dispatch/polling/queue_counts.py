"""A count of the messages waiting in queues, read off the poller's loop: the evidence the catch-up
pace (:mod:`.catchup_pace`) and the re-send watch (:mod:`.resend_backlog`) go by."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class CountsWaiting(Protocol):
    """A queue port that can say how many messages wait (visible, not yet received) in queues."""

    def waiting(self, queue_urls: Sequence[str]) -> int: ...


def counts_remotely(queues: object) -> bool:
    """Whether ``queues`` counts over the network (``waiting_is_remote``: SQS), so that its counts
    are read off the poller's loop."""
    return bool(getattr(queues, "waiting_is_remote", False))


def read_by(count: Callable[[], int], remote: bool) -> Callable[[], int] | BackgroundCount:
    """``count`` as the pace and the watch read it: off the poller's loop when ``remote``, at once
    otherwise (an in-memory port)."""
    return BackgroundCount(count) if remote else count


class NotYet(Exception):
    """The count's read is still running (off the poller's loop): no new figure yet."""


class BackgroundCount:
    """A count read off the poller's loop.

    SQS's ``GetQueueAttributes`` goes through the poller's client, whose retries under a throttle
    (standard mode, backing off) would hold the poller's loop, and the minute's on-time releases
    with it, for seconds. So each call starts a read when none runs and answers the one that ended
    since it was last asked, else raises :class:`NotYet` at once: the pace works on figures one
    read old, and a read that hangs only leaves it unpaced (:data:`.catchup_pace.READ_TIMEOUT_S`).

    A figure one read old is paired with what the poller had sent when that read began
    (:meth:`ask`'s ``mark``): paired with what it had sent when the figure was answered, the
    messages sent while the read ran were in neither, taken for drained (QA: with no worker at
    all, a drain of 120 a second and three windows waiting).
    """

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._running = False
        self._done: tuple[int | None, Exception | None, int] | None = None

    def __call__(self) -> int:
        return self.ask(0)[0]

    def ask(self, mark: int) -> tuple[int, int]:
        """The figure of the read that ended since the last ask, and the ``mark`` it began with;
        a read begins now (with this ``mark``) when none runs."""
        with self._lock:
            done, self._done = self._done, None
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, args=(mark,), name="backlog-read", daemon=True).start()
        if done is None:
            raise NotYet
        value, error, began = done
        if error is not None:
            raise error
        assert value is not None
        return value, began

    def _run(self, mark: int) -> None:
        result: tuple[int | None, Exception | None, int]
        try:
            result = (int(self._count()), None, mark)
        except Exception as exc:
            result = (None, exc, mark)
        with self._lock:
            self._done, self._running = result, False


__all__ = ["BackgroundCount", "CountsWaiting", "NotYet", "counts_remotely", "read_by"]
