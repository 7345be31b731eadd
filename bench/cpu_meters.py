"""What the CPU benchmark (``bench/cpu_per_trigger.py``) times apart from our code.

The in-memory store and queues stand in for DynamoDB and SQS, and the run's heap holds what
DynamoDB would: their CPU is not ours in the cloud, so it is counted apart (:class:`Metered`,
:class:`FullCollections`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

try:  # the job documents a store notes (without: every message's job is dumped again)
    from punctual.models.job_documents import note_document
except ImportError:  # pragma: no cover - older stores
    note_document = None
try:  # the document DynamoDB holds (and answers a read with): its fields at an empty default left out
    from punctual.models.job_documents import stored_document
except ImportError:  # pragma: no cover - older stores: the whole dump

    def stored_document(job: Any) -> str:
        return str(job.model_dump_json())


class FullCollections:
    """CPU in full (generation 2) garbage collections, counted apart (``ns``).

    The in-memory store keeps every execution record of the run in this process (DynamoDB keeps
    them in the cloud), so the run's heap grows with each trigger and each full collection walks
    all of it; a Lambda's heap holds one batch. The collections of the young generations, which
    follow our own allocations, stay in our figure.
    """

    def __init__(self) -> None:
        self.ns = 0
        self._started = 0
        self._by_thread: dict[int, int] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.thread_time_ns()
        else:
            spent = time.thread_time_ns() - self._started
            self.ns += spent
            thread = threading.get_ident()
            self._by_thread[thread] = self._by_thread.get(thread, 0) + spent

    def of_this_thread(self) -> int:
        """The full collections' CPU on the calling thread so far: a store call subtracts only
        its own thread's (a collection another release thread ran meanwhile is not its time)."""
        return self._by_thread.get(threading.get_ident(), 0)


FULL_GC = FullCollections()


class Metered:
    """A store or queue with the CPU of each of its calls counted apart (``ns``).

    The in-memory store and queues stand in for DynamoDB and SQS: their dictionaries, bisects
    and locks are the services' own work in the cloud, where our side of a call is its item
    marshalling (the separate row) and botocore (the SDK table). Each call is timed on its own
    thread's CPU clock (``time.thread_time_ns``), so a poller's release threads running beside
    it are not counted to it. The wrapper's own overhead outside that window (its call, the clock
    reads, the lock: ~1.6 µs a call here, where a clock read costs ~0.7 µs) would stay in our
    code: :func:`overhead_ns` measures it on a call that does nothing, and the bench shows it in a
    column of its own (``calls`` counts the calls). With ``into``, the calls are counted in that
    meter instead (the queues in the store's).
    """

    def __init__(self, inner: Any, into: Metered | None = None) -> None:
        self._inner = inner
        self._meter = into or self
        if into is None:
            self._lock = threading.Lock()
            self.ns = 0
            self.calls = 0
            self.timers_read = 0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value
        meter, clock = self._meter, time.thread_time_ns

        def metered(*args: Any, **kwargs: Any) -> Any:
            t, collected = clock(), FULL_GC.of_this_thread()
            try:
                result = value(*args, **kwargs)
                if name in _JOB_READS:
                    _note_documents(result)
            finally:
                spent = clock() - t - (FULL_GC.of_this_thread() - collected)  # counted apart
                with meter._lock:
                    meter.ns += spent
                    meter.calls += 1
            if name == "query_timers":  # each timer read is one the DynamoDB store unpacks
                meter.timers_read += len(result)
            return result

        self.__dict__[name] = metered  # later look-ups skip __getattr__
        return metered


# DynamoDB answers a job read with the job's stored document, which the store notes beside the
# job it parses (punctual.models.job_documents; checked and noted in the marshalling row): the
# in-memory stand-in has no document, so it is made here, inside the store call's time.
_JOB_READS = frozenset({"get_job", "batch_get_jobs"})


def _note_documents(result: Any) -> None:
    if note_document is None:
        return
    for job in result.values() if isinstance(result, dict) else [result]:
        if job is not None:
            note_document(job, stored_document(job))


class _Nothing:
    def call(self, value: Any) -> Any:
        return value


def overhead_ns(calls: int = 50_000, repeats: int = 5) -> float:
    """CPU ns a :class:`Metered` call adds outside the window it counts as the store's: a call
    that does nothing, through the wrapper, less what the wrapper counted and less the same call
    made directly. The least of ``repeats`` (what a busy machine adds is not the wrapper's)."""
    inner = _Nothing()
    meter = Metered(inner)
    metered, direct = meter.call, inner.call
    cpu = time.process_time_ns
    best = float("inf")
    for _ in range(repeats):
        t = cpu()
        for _ in range(calls):
            direct(None)
        plain = cpu() - t
        counted = meter.ns
        t = cpu()
        for _ in range(calls):
            metered(None)
        through = cpu() - t
        best = min(best, (through - (meter.ns - counted) - plain) / calls)
    return max(best, 0.0)
