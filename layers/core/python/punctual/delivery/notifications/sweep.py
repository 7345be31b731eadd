"""The alert sweep: no alert stays SENDING for ever, whoever dies.

Whoever makes or takes over an alert (a conditional write, :mod:`.alerts`) also writes an ALERT
timer due just after the alert would turn stale (:data:`SWEEP_AFTER_S` past its claim). The
poller hands each due ALERT timer to a worker as an ``alert`` message naming the condition
(:func:`sweep_message`); the worker reads the alert and

* does nothing when it is SENT, FAILED or HELD (the usual case: one read);
* returns the message until the stale instant when its owner renewed the claim meanwhile (an
  owner renews it after each rule it delivers, so a live delivery is never taken over);
* takes it over when it is still SENDING past the stale bound (its worker died): the new owner
  delivers the rules not delivered yet and records the result, SENT or FAILED with its tries,
  and writes its own sweep timer, so a sweeper that dies is swept in turn.

The timer's slot is the alert's key slot; its attempt is the condition's code
(:data:`CONDITION_CODES`, negative so that it never shares a row key with a retry or lease timer
of the same slot).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, MessageKind, message_for
from punctual.models import AlertCondition, AlertStatus, Job, JobState
from punctual.runtime.observability import MetricsSink
from punctual.store.base import AlertRepository, TimerRepository
from punctual.timing.timers import Timer, TimerKind, TimerLayout

log = logging.getLogger("punctual.delivery.notifications")

# An alert left SENDING this long by a worker that died is taken over. Longer than one rule's
# delivery takes (3 tries of 5 s and 5 s of backoff): an owner renews its claim after each rule.
ALERT_STALE_S = 50
SWEEP_MARGIN_S = 5
SWEEP_AFTER_S = ALERT_STALE_S + SWEEP_MARGIN_S  # the sweep timer's due instant, after the claim
CONDITION_CODES = {
    AlertCondition.FAILED: -1,
    AlertCondition.LATE: -2,
    AlertCondition.MISSED: -3,
    AlertCondition.RECOVERED: -4,
}
_CONDITION_OF_CODE = {code: condition for condition, code in CONDITION_CODES.items()}


def condition_of(timer: Timer) -> AlertCondition | None:
    """The condition an ALERT timer sweeps (None: not one)."""
    return _CONDITION_OF_CODE.get(timer.attempt) if timer.kind is TimerKind.ALERT else None


class AlertSweeps:
    """Writes the sweep timer of each alert claim.

    Parameters
    ----------
    timers
        Where timers are written (the job store).
    layout
        Their lanes and shards (a sweep is due within a minute: the near lane).
    """

    def __init__(self, timers: TimerRepository, layout: TimerLayout) -> None:
        self.timers = timers
        self.layout = layout

    def timer(
        self, job: Job, key_slot: str, condition: AlertCondition, claimed_at: datetime, now: datetime
    ) -> Timer:
        return self.layout.make(
            now=now,
            due=claimed_at + timedelta(seconds=SWEEP_AFTER_S),
            job_id=job.id,
            tenant=job.tenant,
            slot=key_slot,
            attempt=CONDITION_CODES[condition],
            kind=TimerKind.ALERT,
            job_version=job.version,
        )

    def arm(
        self, job: Job, key_slot: str, condition: AlertCondition, claimed_at: datetime, now: datetime
    ) -> None:
        self.timers.put_timers([self.timer(job, key_slot, condition, claimed_at, now)])


def sweep_message(job: Job | None, timer: Timer, now: datetime) -> DispatchMessage | None:
    """The ``alert`` message a due ALERT timer becomes (None: its job is gone, or not a sweep)."""
    condition = condition_of(timer)
    if job is None or job.state is JobState.DELETED or condition is None:
        return None
    message = message_for(job, timer.slot, timer.due, 1, MessageKind.ALERT, now)
    return replace(message, alert=condition.value, ordered=False)


def undelivered(store: AlertRepository, metrics: MetricsSink, timer: Timer) -> bool:
    """An ALERT timer whose job is gone: an alert its worker left SENDING (it died while delivering,
    and the job, a one-time one with ``delete_after_completion``, was deleted meanwhile) can no
    longer be delivered (its rules went with the job). It is given up visibly, not silently: an
    error log naming it and ``AlertsUndelivered`` (QA23: it stayed SENDING, and nothing said so).
    Returns whether it was one."""
    condition = condition_of(timer)
    if condition is None:
        return False
    alert = store.get_alert(timer.tenant, timer.job_id, timer.slot, condition)
    if alert is None or alert.status is not AlertStatus.SENDING:
        return False
    log.error(
        "alert %s of job %s (slot %s) was never delivered: its worker died while sending it and the job"
        " is gone",
        condition.value,
        timer.job_id,
        timer.slot,
    )
    metrics.add("AlertsUndelivered", 1)
    return True
