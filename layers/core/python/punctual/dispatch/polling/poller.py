"""A poller node: builds the poll of each (minute, shard group) it is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from punctual.delivery.notifications import Notifier
from punctual.dispatch.polling.config import PollerConfig
from punctual.dispatch.polling.minute import MinutePoll
from punctual.dispatch.polling.release import ReleaseReport, SlotReleaser
from punctual.dispatch.queues import QueuePort
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.store.base import JobStore
from punctual.timing.timers import Timer, minute_of


class Poller:
    """Releases due timers to the FIFO queues; one :class:`MinutePoll` per minute it owns.

    Parameters
    ----------
    store, queues
        The storage and FIFO queue ports.
    clock
        Every clock read goes through it (tests give two pollers clocks that differ).
    config
        Shard layout, queues and timings.
    metrics
        Where the poller's figures go.
    notifier
        Events and alerts of the slots it records MISSED (None: neither).
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        config: PollerConfig,
        metrics: MetricsSink | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.config = config
        self.metrics = metrics or NullMetrics()
        self.pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="release")
        self.releaser = SlotReleaser(store, queues, clock, config, self.metrics, self.pool, notifier)

    def release(self, timers: Sequence[Timer], uncertain: bool = False) -> ReleaseReport:
        """Release due timers now (see :meth:`SlotReleaser.release`)."""
        return self.releaser.release(timers, uncertain)

    def run_minute(
        self,
        minute: datetime,
        group: int = 0,
        group_count: int = 1,
        stop: Callable[[], bool] | None = None,
    ) -> ReleaseReport:
        """Own (``minute``, ``group`` of ``group_count``) until the minute and its grace are over."""
        return self.minute_poll(minute, group, group_count).run(stop or (lambda: False))

    def minute_poll(self, minute: datetime, group: int = 0, group_count: int = 1) -> MinutePoll:
        """The poll of one (minute, group), to drive step by step (tests, local mode)."""
        self.releaser.ledger.lane = (group, max(1, group_count))  # the groups take turns on each budget
        return MinutePoll(self, minute_of(minute), group, group_count)
