"""A minute's far buckets, read side by side when its poller starts."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from punctual.store.base import TimerRepository
from punctual.timing.timers import Lane, Timer

log = logging.getLogger("punctual.dispatch.polling")

FAR_READS_AT_ONCE = 8  # a group's far buckets read side by side at the minute's start


def read_far_buckets(
    store: TimerRepository,
    minute: datetime,
    shards: list[int],
    far_from: dict[int, int],
    hold: Callable[[Iterable[Timer]], None],
) -> set[int]:
    """Read ``minute``'s far buckets of ``shards`` (each from its ``far_from`` due on, when it has
    one) side by side, in threads of their own (the release pool may still be busy with the minute
    before); ``hold`` their timers in shard order; return the shards whose read failed.

    One after another, a burst's buckets (5,000 timers in four) took 10 s in local mode on a
    loaded machine, against a 10 s lead: the release came after the instant. Side by side
    it takes the longest read, not the sum. Each of the :data:`FAR_READS_AT_ONCE` threads
    takes the next shard still unread until none is left (a future a shard, 512 of them a
    minute, cost more CPU than the reads' own work in the store).
    """
    unread = deque(shards)
    reads: dict[int, tuple[list[Timer], None] | tuple[None, Exception]] = {}
    query = store.query_timers

    def read_until_none_left() -> None:
        while True:
            try:
                shard = unread.popleft()  # (atomic: each shard is taken by one thread)
            except IndexError:
                return
            try:
                reads[shard] = (query(Lane.FAR, minute, shard, far_from.get(shard), None), None)
            except Exception as exc:
                reads[shard] = (None, exc)

    threads = min(len(shards), FAR_READS_AT_ONCE)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        readers = [pool.submit(read_until_none_left) for _ in range(threads)]
    for reader in readers:
        reader.result()  # (what is not an Exception, as a read's own future raised it)
    failed: set[int] = set()
    for shard in shards:
        timers, error = reads[shard]
        if timers is None:
            log.error("reading far bucket %s/%s failed; will retry", minute, shard, exc_info=error)
            failed.add(shard)
            continue
        hold(timers)
        log.debug("minute %s: far bucket %d read, %d timers", f"{minute:%H:%M}", shard, len(timers))
    return failed


__all__ = ["FAR_READS_AT_ONCE", "read_far_buckets"]
