"""Watching again what a dead poller sent: the resend watch (:mod:`.resend`) outlives its poller.

A poller watches what it sends to the Lambda lane and re-sends a message no worker claimed (the
worker that received it may have died before its handler ran, leaving it in flight for the
queue's whole visibility timeout). That watch lives in the poller's memory. When the poller dies
too before its check (a double fault), the slot's message stays in flight and nothing re-sends
it; the poller that resumes the minute found the slot's fire timer *superseded* (its chain's next
timer was written after the send) and let it be. Found by the chaos run of both phases: a
``rate(2 seconds)`` slot released, its worker killed 0.8 s later, the minute's only poller killed
2 s after that; the restarted poller resumed from its progress mark, the slot never ran.

So a poller that may be resuming another's work (its *uncertain* window: a restart, a late
start, a dead poller's minute drained by catch-up) watches the fire timers it does not release
again as if it had sent them itself: it builds the slot's first-attempt message and puts it
under its own watch, checked ``resend_after_s`` after the slot's instant (after its smoothed
instant plus the job's lateness bound, for a job under a rate budget: the original waits in the
queue that long by design). The check reads the slot's record: a claimed slot needs nothing more
(a lapsed lease is taken over, as for any watched message), an unclaimed one is sent again in a
group and with a deduplication id of its own, and the claim keeps the slot to one run. A slot
the earlier release did not send (missed, excluded) has a record the claim drops such a copy on.

What it costs: one eventually consistent job read per chunk of re-watched timers and one record
read per two of them, on a restart or a catch-up only; a re-send only for a slot no worker claimed.
A restart re-watches the look-back before its progress mark (``rewatch_lookback_ms``, about 7 s
at the defaults): at 10,000 triggers a second that is up to ~70,000 timers, ~700 job reads of a
chunk and ~35,000 read units of records, once per restarted shard group's share of them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from punctual.dispatch.polling.chains import Verdict, verdict
from punctual.dispatch.polling.release import SlotReleaser
from punctual.dispatch.queues import MessageKind, message_for, spec_of
from punctual.timing.instants import format_instant_ms
from punctual.timing.slots import dispatch_instant
from punctual.timing.timers import Timer, TimerKind, from_ms, slot_instant

log = logging.getLogger("punctual.dispatch.polling")


def watch_earlier_sends(releaser: SlotReleaser, timers: Sequence[Timer], now: datetime) -> int:
    """Put the slots of fire timers an earlier poller may have released under ``releaser``'s
    resend watch; returns how many are watched. Raises if the job read fails."""
    watch = releaser.watch
    slots = {(t.tenant, t.job_id, t.job_version, t.slot): t for t in timers if t.kind is TimerKind.FIRE}
    fire = list(slots.values())  # one per slot (two lanes may hold one slot's timer)
    if not fire or not watch.active:
        return 0
    jobs = releaser.read_jobs(fire)
    watched = 0
    for timer in fire:
        job = jobs.get((timer.tenant, timer.job_id))
        if job is None or verdict(timer, job) is not Verdict.RELEASE:
            continue  # a paused, replaced or deleted job: its slot's fate is the claim's
        queue = releaser.queue_for(job)
        if not watch.watches(queue):
            continue
        scheduled = dispatch_instant(job, slot_instant(timer.slot))
        message = message_for(job, timer.slot, scheduled, 1, MessageKind.FIRE, now, spec=spec_of(job))
        budget = releaser.lateness_under_budget(job, timer.slot, scheduled)
        if budget is not None:  # held in the queue up to the lateness bound by the smoothing
            message = replace(message, not_before=format_instant_ms(scheduled + timedelta(seconds=budget)))
        watch.sent(queue, [message], min(now, max(from_ms(timer.due_ms), scheduled)))
        watched += 1
    if watched:
        log.info("watching %d slot(s) an earlier poller released, in case their worker died", watched)
        releaser.metrics.add("EarlierSendsWatched", watched)
    return watched
