"""Where deliveries run: beside the runs, never on a claim's path.

A worker's claim only *records* what must be announced (it buffers the started event and makes
each alert by a conditional write, with its sweep timer); the delivery itself (calls to alert
targets, the heartbeat worker's PutEvents of the started event) is handed to
:class:`DeliveryThreads`, which runs it on a thread of its own while the run goes on. A target
that hangs then delays nobody's start and no lease: the claim returns at once, the run starts on
time, and heartbeats keep the lease alive as usual.

The shells wait for what is still in flight before they let go of their process: the Lambda
worker at the end of its batch (a frozen invocation would otherwise pause a delivery half way),
the ECS worker when it drains. A delivery cut short anyway (the process died, or the wait ran
out) is not lost: its alert stays SENDING and its sweep (:mod:`.sweep`) takes it over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("punctual.delivery.notifications")

Work = Callable[[], object]
Later = Callable[[Work], None]  # where a delivery runs: run_now, or DeliveryThreads.submit


class DeliveryThreads:
    """Runs each delivery on a daemon thread of its own; :meth:`settle` waits for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[threading.Thread] = set()
        self._fatal: BaseException | None = None

    def submit(self, work: Work) -> None:
        """Start ``work`` now, beside the caller (which does not wait for it)."""
        thread = threading.Thread(target=self._run, args=(work,), name="delivery", daemon=True)
        with self._lock:  # started before settle() can see it (it joins what it sees)
            self._running.add(thread)
            try:
                thread.start()
            except BaseException:  # (no thread left: a settle() would wait on one never started)
                self._running.discard(thread)
                raise

    def _run(self, work: Work) -> None:
        try:
            work()
        except Exception:
            log.exception("a delivery failed")
        except BaseException as exc:  # the process is going down: the caller of settle() learns it
            with self._lock:
                self._fatal = exc
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())

    @property
    def pending(self) -> int:
        return len(self._running)  # (one read of the set's size: atomic, no lock needed)

    def settle(self, timeout_s: float | None = None) -> int:
        """Wait for the deliveries in flight (at most ``timeout_s``); returns how many still run.

        A delivery that died of something other than an error (a process going down, as tests
        simulate it) is raised here, in the caller's thread, as it would have been on its own.
        """
        if not self._running and self._fatal is None:
            # Nothing in flight (a worker settles after every message; most have no delivery):
            # both read without the lock, as a thread ends by setting its fatal end and then
            # leaving the set, so an empty set with no fatal end has nothing left to report.
            return 0
        deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        while True:
            with self._lock:
                running = list(self._running)
            if not running:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            running[0].join(left)
        with self._lock:
            fatal, self._fatal = self._fatal, None
            still = len(self._running)
        if fatal is not None:
            raise fatal
        return still


def run_now(work: Work) -> None:
    """The default place of deliveries: at once, in the caller's thread (a process without runs)."""
    work()
