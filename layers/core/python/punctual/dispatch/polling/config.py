"""The poller's settings: shard layout, queues and timings (built from Settings by the runtime)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from punctual.dispatch.queues import QueueRouting
from punctual.timing.timers import TimerLayout


@dataclass
class PollerConfig:
    layout: TimerLayout = field(default_factory=TimerLayout)
    short_queue_urls: Sequence[str] = ()
    long_queue_urls: Sequence[str] = ()
    poll_interval_s: float = 1.0
    grace_s: float = 10.0  # how long past its minute a poller keeps reading that minute's near buckets
    skew_s: float = 5.0  # the clock skew the near-lane look-back covers
    max_catchup_minutes: int = 24 * 60  # timers live a day (TTL): older buckets are empty
    concurrency: int = 8
    # Durable progress: a poller that released something records how far it got at most this
    # often, so a restart re-reads (and may re-send) only the last few seconds.
    progress_interval_s: float = 2.0
    # What a poller may send is bounded in its progress item ahead of the sends
    # (punctual.dispatch.polling.sent_bound): moved on this far past the next timer due, once a
    # while it releases. A resumer takes what is due by the bound as maybe sent.
    send_bound_ahead_s: float = 5.0
    # Catch-up of past minutes is interleaved with the minute's own releases, in slices of at
    # most this many timers, at most one slice per ``catchup_pause_s``: a backlog of any size
    # costs a bounded amount of work per step, and on-time slots go first.
    catchup_timers_per_slice: int = 20  # x MAX_RELEASE_PER_TIMER (30) slots: at most 600 a slice
    catchup_pause_s: float = 0.05
    retention_days: int = 30  # how long a MISSED execution record is kept (as the worker's)
    # Burst smoothing (punctual.dispatch.smoothing): deployment-wide budgets per (tenant or "*", target)
    # and the default of a job's max_lateness_seconds.
    rate_budgets: dict[tuple[str, str], float] = field(default_factory=dict)
    max_lateness_s: float = 10.0
    # A message sent to the Lambda lane that no worker claimed this long after is re-sent (its
    # worker may have died before its handler ran: punctual.dispatch.polling.resend); 0: never (pollers
    # without workers: tests, benchmarks). The composition root sets Settings.unclaimed_resend_s.
    resend_after_s: float = 0.0
    # A tenant's backfills (punctual.security.tenant_quotas): at most this many running, this many
    # backfilled slots sent a minute by all of them (0: no limit).
    max_backfills_per_tenant: int = 10
    backfill_slots_per_minute_per_tenant: int = 600
    # A tenant's retries released a second, by all pollers together (punctual.dispatch.polling.retry_pace;
    # 0: no limit).
    max_retries_per_second_per_tenant: float = 100.0
    # The minute-load ledger (punctual.dispatch.load_forecast): a released slot of a near chain forecasts
    # the one a horizon on; a minute's head is its first burst_head_s seconds.
    burst_head_s: float = 10.0
    forecast_horizon_s: float = 240.0
    # On a multi-Region table (docs/multi-region.md) every Region's pollers release every slot to
    # their own Region's queues: a fire timer whose chain's next timer is already written is
    # released all the same (punctual.dispatch.polling.drain). One Region, False: a later timer
    # proves the slot was sent to the queues this poller sends to, so it is not sent again.
    every_region_releases: bool = False

    @property
    def routing(self) -> QueueRouting:
        return QueueRouting(tuple(self.short_queue_urls), tuple(self.long_queue_urls))

    @property
    def near_lookback_ms(self) -> int:
        return int((self.skew_s + 2 * self.poll_interval_s) * 1000)

    @property
    def send_bound_ahead_ms(self) -> int:
        return int(self.send_bound_ahead_s * 1000)

    @property
    def unmarked_ms(self) -> int:
        """How long a poller may go on releasing after its last progress mark (a mark interval and
        the look-back of the clock skew): a poller draining a dead one's minute takes the timers
        due that long past its mark for maybe released (:mod:`punctual.dispatch.polling.redrain`)."""
        return int(self.progress_interval_s * 1000) + self.near_lookback_ms

    @property
    def rewatch_lookback_ms(self) -> int:
        """How far before a progress mark a poller resuming it reads the far lane again: what was
        sent that recently may still have been under the dead poller's resend watch
        (:mod:`punctual.dispatch.polling.rewatch`). The near lane's look-back covers it already."""
        if self.resend_after_s <= 0:
            return 0
        return int((self.resend_after_s + 2 * self.poll_interval_s + 1.0) * 1000)
