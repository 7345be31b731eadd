"""Per-job alert rules: who is told when a slot fails, runs late, is missed, or the job recovers.

**Exactly once per (job, slot, condition).** An alert is a record made by a conditional put
(:meth:`punctual.store.base.AlertRepository.claim_alert`) before anything is sent: whoever
makes it delivers it, and every repeat (a redelivered message, a second worker, a poller that
reads its minute again) finds it and sends nothing. ``recovered`` is keyed on the *first failed
slot* of the streak that ended: a job is marked failing by a conditional write on one item per
job (``open_streak``) when a slot fails, and the first success after it makes the recovered
alert, then ends the streak (``close_streak``, conditional on the same first slot), so a streak
recovers once. A worker that dies between making an alert and recording its result leaves it
SENDING; a repeat after :data:`ALERT_STALE_S` (the message's redelivery) takes it over (delivery
is at least once there, like a target's call after a lost worker; the receiver dedupes on the
``Idempotency-Key``).

**Delivery never fails the job.** It runs after the execution's result is recorded; each rule's
copy is tried :data:`DELIVERY_TRIES` times with a backoff (:data:`DELIVERY_BACKOFF_S`) in the
process that raised it, then recorded on the alert (SENT, or FAILED with the tries and the last
error); nothing it raises reaches the job's path. HTTP alerts are signed like the job's webhook
(the job's signing secrets, Standard Webhooks).

``min_interval_seconds`` sends at most one alert per rule and interval (a conditional write on
the rule's throttle item); the ones it holds back are recorded HELD and counted in the next
alert's ``held_back``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from punctual.clock import Clock
from punctual.instants import format_instant_ms
from punctual.models import (
    Alert,
    AlertCondition,
    AlertDelivery,
    AlertRule,
    AlertStatus,
    Execution,
    ExecutionStatus,
    Job,
)
from punctual.notifications.events import execution_path, first_start
from punctual.observability import MetricsSink, NullMetrics
from punctual.store.base import AlertRepository
from punctual.targets.base import Outcome, SlotContext, TargetInvoker

log = logging.getLogger("punctual.alerts")

# An alert left SENDING this long by a worker that died is taken over by a repeat. Longer than one
# rule's delivery takes (3 tries of 10 s and 5 s of backoff), and shorter than a Lambda worker's
# message takes to come back after its worker died (the visibility is the job's timeout plus the
# 60 s lease margin, and the alert is raised once the run ended): the redelivery takes it over.
ALERT_STALE_S = 50
DELIVERY_TRIES = 3
DELIVERY_BACKOFF_S = (1.0, 4.0)  # before the second and the third try
DELIVERY_TIMEOUT_S = 10.0
MAX_SUMMARY_CHARS = 500
FAILED_STATUSES = frozenset({ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT})
C = AlertCondition


def summary(text: str) -> str:
    return text[:MAX_SUMMARY_CHARS]


def rules_on(job: Job, condition: AlertCondition) -> list[tuple[int, AlertRule]]:
    """The job's rules (with their index) that fire on ``condition``."""
    return [(index, rule) for index, rule in enumerate(job.alerts) if condition in rule.on]


def late_bound_s(job: Job) -> int | None:
    """The smallest ``late_after_seconds`` of the job's ``late`` rules (None: no such rule)."""
    bounds = [rule.late_after_seconds for _, rule in rules_on(job, C.LATE) if rule.late_after_seconds]
    return min(bounds) if bounds else None


def _summary(condition: AlertCondition, job: Job, execution: Execution, fire_delay_ms: float | None) -> str:
    name = job.name or job.id
    if condition is C.FAILED:
        text = f"job {name}: slot {execution.slot} {execution.status.value} after attempt {execution.attempt}"
        return f"{text}: {execution.error}" if execution.error else text
    if condition is C.LATE:
        late_s = (fire_delay_ms or 0.0) / 1000
        return f"job {name}: slot {execution.slot} was released {late_s:.1f} s after its instant"
    if condition is C.MISSED:
        what = f"slot {execution.slot}"
        if execution.slot_count > 1:  # a range record
            what = f"{execution.slot_count} slots, {execution.slot} to {execution.last_slot},"
        return f"job {name}: {what} was missed ({execution.error or 'not run'})"
    return f"job {name} recovered: slot {execution.slot} succeeded after failed slots"


def alert_body(
    condition: AlertCondition,
    job: Job,
    execution: Execution,
    fire_delay_ms: float | None = None,
    since_slot: str | None = None,
) -> dict[str, Any]:
    """The alert document every rule's target receives (``format: json``)."""
    if fire_delay_ms is None:
        started = first_start(execution)
        fire_delay_ms = (
            round((started - execution.scheduled_at).total_seconds() * 1000, 3) if started else None
        )
    body: dict[str, Any] = {
        "condition": condition.value,
        "tenant": job.tenant,
        "job_id": job.id,
        "job_name": job.name,
        "slot": execution.slot,
        "scheduled_at": format_instant_ms(execution.scheduled_at),
        "attempt": execution.attempt,
        "status": execution.status.value,
        "error": execution.error,
        "fire_delay_ms": fire_delay_ms,
        "summary": summary(_summary(condition, job, execution, fire_delay_ms)),
        "links": {
            "execution": execution_path(job.id, execution.slot),
            "job": f"/v1/jobs/{job.id}",
            "alerts": f"/v1/jobs/{job.id}/alerts",
        },
    }
    if since_slot is not None:
        body["failing_since"] = since_slot
    if execution.slot_count > 1:  # a MISSED range record: the slots it stands for
        body["last_slot"], body["slot_count"] = execution.last_slot, execution.slot_count
    return body


def rendered(rule: AlertRule, body: dict[str, Any], held_back: int) -> dict[str, Any]:
    """What one rule sends: the document, or a Slack incoming-webhook message."""
    if rule.format == "slack":
        more = f" ({held_back} earlier alerts held back)" if held_back else ""
        link = body["links"]["execution"]
        return {"text": f":rotating_light: {body['summary']}{more} <{link}|details>"}
    return {**body, "held_back": held_back}


class Alerter:
    """Raises a job's alerts, once per (job, slot, condition), and delivers them.

    Parameters
    ----------
    store
        Alert records, streaks, throttles.
    invoker
        Calls an alert rule's target (the worker's own invoker: the same guards).
    clock
        Every instant, and the waits between tries.
    retention_days
        The alert record's TTL (as the execution records').
    signing_secrets
        ``signing_secrets(job)``: the job's webhook secrets (HTTP alerts are signed with them).
    """

    def __init__(
        self,
        store: AlertRepository,
        invoker: TargetInvoker,
        clock: Clock,
        *,
        retention_days: int = 30,
        signing_secrets: Callable[[Job], tuple[str, ...]] | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.store = store
        self.invoker = invoker
        self.clock = clock
        self.retention_days = retention_days
        self.signing_secrets = signing_secrets or (lambda job: ())
        self.metrics = metrics or NullMetrics()

    # ------------------------------------------------------------------ conditions

    def ended(self, job: Job, execution: Execution) -> None:
        """A slot ended: ``failed`` (and the start of a streak), or ``recovered``."""
        if execution.status in FAILED_STATUSES:
            if rules_on(job, C.RECOVERED):
                self.store.open_streak(job.tenant, job.id, execution.slot, self._ttl())
            self.raise_alert(C.FAILED, job, execution)
        elif execution.status is ExecutionStatus.SUCCEEDED and rules_on(job, C.RECOVERED):
            first = self.store.get_streak(job.tenant, job.id)
            if first is None or first >= execution.slot:
                return  # not failing, or this success is of a slot before the streak (overlap allow)
            self.raise_alert(C.RECOVERED, job, execution, key_slot=first, since_slot=first)
            self.store.close_streak(job.tenant, job.id, first)

    def late(self, job: Job, execution: Execution, fire_delay_ms: float) -> None:
        """``late``, to the rules whose ``late_after_seconds`` this release delay passed."""

        def passed(rule: AlertRule) -> bool:
            return fire_delay_ms > (rule.late_after_seconds or 0) * 1000

        self.raise_alert(C.LATE, job, execution, fire_delay_ms=fire_delay_ms, only=passed)

    def missed(self, job: Job, execution: Execution) -> None:
        self.raise_alert(C.MISSED, job, execution)

    # ------------------------------------------------------------------ one alert

    def raise_alert(
        self,
        condition: AlertCondition,
        job: Job,
        execution: Execution,
        *,
        key_slot: str | None = None,
        since_slot: str | None = None,
        fire_delay_ms: float | None = None,
        only: Callable[[AlertRule], bool] | None = None,
    ) -> Alert | None:
        """Make the alert (job, key slot, condition) and deliver it to the rules on ``condition``
        (those ``only`` accepts); None when it was made before, or no rule applies. Never raises."""
        rules = [(i, rule) for i, rule in rules_on(job, condition) if only is None or only(rule)]
        if not rules:
            return None
        try:
            now = self.clock.now()
            alert = Alert(
                tenant=job.tenant,
                job_id=job.id,
                key_slot=key_slot or execution.slot,
                condition=condition,
                created_at=now,
                claimed_at=now,
                owner=uuid.uuid4().hex,
                body=alert_body(condition, job, execution, fire_delay_ms, since_slot),
            )
            if not self.store.claim_alert(alert, now - timedelta(seconds=ALERT_STALE_S), self._ttl()):
                self.metrics.add("AlertsRepeated", 1)
                return None
            deliveries = [self._deliver(job, alert, index, rule) for index, rule in rules]
            failed = any(d.status is AlertStatus.FAILED for d in deliveries)
            done = alert.model_copy(
                update={
                    "deliveries": deliveries,
                    "status": AlertStatus.FAILED if failed else AlertStatus.SENT,
                }
            )
            if not done.deliveries or all(d.status is AlertStatus.HELD for d in deliveries):
                done.status = AlertStatus.HELD
            if not self.store.save_alert(done, self._ttl()):
                log.warning(
                    "alert %s %s %s was taken over while it was sent", job.id, alert.key_slot, condition
                )
            self.metrics.add("AlertsRaised", 1)
            if failed:
                self.metrics.add("AlertsFailed", 1)
            return done
        except Exception:
            log.exception("alert %s of %s %s could not be raised", condition.value, job.id, execution.slot)
            return None

    def _deliver(self, job: Job, alert: Alert, index: int, rule: AlertRule) -> AlertDelivery:
        held = 0
        if rule.min_interval_seconds:
            allowed = self.store.throttle_alert(
                job.tenant, job.id, index, self.clock.now(), rule.min_interval_seconds
            )
            if allowed is None:
                return AlertDelivery(rule=index, status=AlertStatus.HELD)
            held = allowed
        payload = rendered(rule, alert.body, held)
        error: str | None = None
        for tries in range(1, DELIVERY_TRIES + 1):
            ctx = SlotContext(
                job_id=job.id,
                tenant=job.tenant,
                slot=f"{alert.key_slot}#alert-{alert.condition.value}",
                scheduled_at=alert.created_at,
                attempt=tries,
                timeout_s=DELIVERY_TIMEOUT_S,
                signing_secrets=self.signing_secrets(job),
            )
            try:
                result = self.invoker.invoke(rule.target, payload, ctx)
                if result.outcome is Outcome.SUCCEEDED:
                    return AlertDelivery(
                        rule=index,
                        status=AlertStatus.SENT,
                        tries=tries,
                        held_back=held,
                        sent_at=self.clock.now(),
                    )
                error = result.summary
                if result.outcome is Outcome.PERMANENT:
                    break
            except Exception as exc:  # an adapter that breaks its promise: counted as a failed try
                error = f"{type(exc).__name__}: {exc}"
            if tries < DELIVERY_TRIES:
                self.clock.sleep(DELIVERY_BACKOFF_S[min(tries - 1, len(DELIVERY_BACKOFF_S) - 1)])
        log.warning(
            "alert %s of %s %s was not delivered: %s", alert.condition.value, job.id, alert.key_slot, error
        )
        return AlertDelivery(
            rule=index,
            status=AlertStatus.FAILED,
            tries=tries,
            error=summary(error or "failed"),
            held_back=held,
        )

    def _ttl(self) -> int:
        return int((self.clock.now() + timedelta(days=self.retention_days)).timestamp())


def fire_delay_of(scheduled_at: datetime, released_at: str) -> float | None:
    """A message's release delay in ms (None when it carries no release instant)."""
    if not released_at:
        return None
    return round((datetime.fromisoformat(released_at) - scheduled_at).total_seconds() * 1000, 3)
