"""The poller: reads due timers, releases each slot at its instant to SQS FIFO, writes the next timer.

One poller owns (minute M, shard group g of n) and survives its own crashes: it records
durable progress every few seconds, so a restarted poller resumes in seconds and re-sends
almost nothing; past minutes left by a dead poller are caught up in bounded slices.

Parts, one job each:

* :mod:`.release` — due timers to messages, next timers, MISSED records (send first).
* :mod:`.drain` — one minute's held timers in due order; chains and uncertain timers.
* :mod:`.redrain` — a slot an earlier poller may have sent in time is not judged late again.
* :mod:`.catchup` — past minutes owed by the watermarks, a bounded slice at a time.
* :mod:`.minute` — one (minute, group): read ahead, poll the near lane, progress marks.
* :mod:`.poller` — the node that builds them.
"""

from punctual.dispatch.polling.config import PollerConfig
from punctual.dispatch.polling.minute import MinutePoll
from punctual.dispatch.polling.poller import Poller
from punctual.dispatch.polling.release import ReleaseReport, SlotReleaser

__all__ = ["MinutePoll", "Poller", "PollerConfig", "ReleaseReport", "SlotReleaser"]
