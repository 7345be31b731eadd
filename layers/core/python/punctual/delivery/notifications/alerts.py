"""Per-job alert rules: who is told when a slot fails, runs late, is missed, or the job recovers.

**Exactly once per (job, slot, condition).** An alert is a record made by a conditional put
(:meth:`punctual.store.base.AlertRepository.create_alert`) before anything is sent: whoever
makes it delivers it, and every repeat (a redelivered message, a second worker, a poller that
reads its minute again) finds it and sends nothing.

**Made where it is decided, delivered beside the run.** :meth:`Alerter.make` is the conditional
write (and the alert's sweep timer, :mod:`.sweep`); the delivery is handed to ``later`` (the
worker's :class:`~punctual.delivery.notifications.background.DeliveryThreads`), so a target that hangs
holds up no claim, no start and no lease.

**Delivered or visibly given up, whoever dies.** The owner records its progress after each rule
(which also renews its claim), then the result: SENT, or FAILED with the tries and the last
error. An alert left SENDING past :data:`ALERT_STALE_S` (its worker died) is taken over by
whoever touches it next (a repeat, or the sweep its timer starts) and the rules not yet
delivered are delivered (delivery is at least once for a rule in flight when its worker died,
like a target's call; the receiver dedupes on the ``Idempotency-Key``).

**Recovered once per streak, and only of the failures it followed.** A failed slot counts
itself in the job's streak (one item per job, ``open_streak``); the first success after it makes
the ``recovered`` alert, keyed on the streak's first failed slot, then ends the streak by a
write conditional on the streak as it was read (:meth:`~punctual.store.base.AlertRepository.replace_streak`).
A failure that joined since the read, or a failure of a slot after the successful one, is not
closed with it: it stays, as a streak of its own, for the next success to recover.

**Delivery never fails the job.** Each rule's copy is tried :data:`DELIVERY_TRIES` times with a
backoff (:data:`DELIVERY_BACKOFF_S`); nothing it raises reaches the job's path. HTTP alerts are
signed like the job's webhook (the job's signing secrets, Standard Webhooks).

``min_interval_seconds`` sends at most one alert per rule and interval (a conditional write on
the rule's throttle item); the ones it holds back are recorded HELD and counted in the next
alert's ``held_back``.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from punctual.delivery.notifications.background import Later, run_now
from punctual.delivery.notifications.events import execution_path, first_start
from punctual.delivery.notifications.sweep import ALERT_STALE_S, AlertSweeps
from punctual.delivery.targets.base import Outcome, SlotContext, TargetInvoker, TargetResult, secrets_to_sign
from punctual.models import (
    EARLIER_JOB_MARGIN,
    Alert,
    AlertCondition,
    AlertDelivery,
    AlertRule,
    AlertStatus,
    Execution,
    ExecutionStatus,
    Job,
)
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.store.base import AlertRepository, Streak
from punctual.timing.instants import format_instant_ms

log = logging.getLogger("punctual.alerts")

STREAK_ROUNDS = 5  # a streak's conditional end, read again and tried again while failures join
DELIVERY_TRIES = 3
DELIVERY_BACKOFF_S = (1.0, 4.0)  # before the second and the third try
# A try's timeout: EventBridge API destinations give an endpoint 5 s too. A Lambda worker waits
# for its batch's deliveries a try's length at most (punctual.execution.batch.SETTLE_S), so an
# endpoint that hangs holds a worker seconds, not the ~35 s of three 10 s tries.
DELIVERY_TIMEOUT_S = 5.0
# Takeovers in a row with no rule delivered before an alert is given up (FAILED): a delivery its
# worker's wait cut short each time would otherwise be taken over every sweep, for ever.
MAX_STALLS = 3
MAX_SUMMARY_CHARS = 500
FAILED_STATUSES = frozenset({ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT})
C = AlertCondition


def summary(text: str) -> str:
    return text[:MAX_SUMMARY_CHARS]


def rules_on(job: Job, condition: AlertCondition) -> list[tuple[int, AlertRule]]:
    """The job's rules (with their index) that fire on ``condition``."""
    return [(index, rule) for index, rule in enumerate(job.alerts) if condition in rule.on]


def end_unwatched_streak(store: AlertRepository, old: Job, new: Job | None) -> None:
    """A replace that leaves the job no ``recovered`` rule ends its failure streak: no success is
    checked against it from then on (only jobs with such a rule pay that read), so kept, it would
    make a rule added back later send a ``recovered`` for failures long recovered (QA23). So does
    a delete (``new`` None): kept, the streak was the next job's at that id, whose first success
    sent a ``recovered`` for the deleted job's failures (QA28). Best effort: a failure of this
    write leaves the streak as it was."""
    if not rules_on(old, C.RECOVERED) or (new is not None and rules_on(new, C.RECOVERED)):
        return
    try:
        streak = store.get_streak(old.tenant, old.id)
        if streak is not None:
            store.replace_streak(old.tenant, old.id, streak, None)
    except Exception:
        log.warning("could not end the failure streak of %s", old.id, exc_info=True)


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
        link = str(body["links"]["execution"])
        # A path of the deployment's API (the workers know no host for it): written out, not as a
        # Slack link, which would go nowhere (QA23)
        details = f"<{link}|details>" if link.startswith("https://") else f"(details: GET {link})"
        return {"text": f":rotating_light: {body['summary']}{more} {details}"}
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
    sweeps
        Writes each alert claim's sweep timer (None: no sweep; a repeat still takes over).
    later
        Where deliveries run (default: at once; a worker runs them beside its runs).
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
        sweeps: AlertSweeps | None = None,
        later: Later = run_now,
    ) -> None:
        self.store = store
        self.invoker = invoker
        self.clock = clock
        self.retention_days = retention_days
        self.signing_secrets = signing_secrets or (lambda job: ())
        self.metrics = metrics or NullMetrics()
        self.sweeps = sweeps
        self.later = later

    # ------------------------------------------------------------------ conditions

    def ended(self, job: Job, execution: Execution) -> None:
        """A slot ended: ``failed`` (and a failure in the streak), or ``recovered``."""
        if execution.status in FAILED_STATUSES:
            if rules_on(job, C.RECOVERED):
                try:
                    self.store.open_streak(job.tenant, job.id, execution.slot, self._ttl())
                except Exception:  # (QA23: it raised past the failed alert, which was then lost)
                    log.warning(
                        "could not count %s %s in its failure streak", job.id, execution.slot, exc_info=True
                    )
            self.make(C.FAILED, job, execution, deliver=True)
        elif execution.status is ExecutionStatus.SUCCEEDED and rules_on(job, C.RECOVERED):
            streak = self.store.get_streak(job.tenant, job.id)
            if streak is None or streak.first >= execution.slot:
                return  # not failing, or this success is of a slot before the streak (overlap allow)
            made = self.make(C.RECOVERED, job, execution, key_slot=streak.first, since_slot=streak.first)
            self._end_streak(job, streak, execution.slot)
            if made is not None:
                self._deliver_later(job, made)

    def _end_streak(self, job: Job, read: Streak, slot: str) -> None:
        """End the streak ``read`` that the success of ``slot`` recovered, conditionally on it
        being as it was read. The failures it must not close stay as a streak of their own: a
        failure of a slot after ``slot``, and any that joined since the read (then the latest of
        them begins it: exact when one joined, as close as one item allows when several did)."""
        expected = read
        for _ in range(STREAK_ROUNDS):
            joined = expected.failures - read.failures
            later_first = read.last if read.last > slot else None
            rest: Streak | None = None
            if later_first is not None:
                rest = Streak(later_first, 1 + joined, expected.last)
            elif joined > 0:
                rest = Streak(expected.last, joined, expected.last)
            if self.store.replace_streak(job.tenant, job.id, expected, rest):
                if joined > 0:
                    self.metrics.add("StreakFailuresKept", joined)
                return
            current = self.store.get_streak(job.tenant, job.id)
            if current is None or current.first != read.first or current.failures < read.failures:
                return  # ended (or begun again) by another success meanwhile
            expected = current
        log.warning("the failure streak of %s kept changing; left open", job.id)

    def late(self, job: Job, execution: Execution, fire_delay_ms: float) -> None:
        """``late``, to the rules whose ``late_after_seconds`` this release delay passed."""

        def passed(rule: AlertRule) -> bool:
            return fire_delay_ms > (rule.late_after_seconds or 0) * 1000

        self.make(C.LATE, job, execution, fire_delay_ms=fire_delay_ms, only=passed, deliver=True)

    def missed(self, job: Job, execution: Execution) -> None:
        self.make(C.MISSED, job, execution, deliver=True)

    # ------------------------------------------------------------------ one alert

    def make(
        self,
        condition: AlertCondition,
        job: Job,
        execution: Execution,
        *,
        key_slot: str | None = None,
        since_slot: str | None = None,
        fire_delay_ms: float | None = None,
        only: Callable[[AlertRule], bool] | None = None,
        deliver: bool = False,
    ) -> Alert | None:
        """The alert (job, key slot, condition), made by a conditional write with its sweep timer,
        or taken over when an earlier owner died while it was SENDING; with ``deliver`` its
        delivery (:meth:`deliver`) is handed to ``later``, else the caller hands it. None: made
        before (and alive or done), or no rule applies. No target is called here. Never raises."""
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
                rules=[index for index, _ in rules],
            )
            made: Alert | None = alert
            if self.store.create_alert(alert, self._ttl()):
                self._arm(job, alert)
            else:
                current = self.store.get_alert(job.tenant, job.id, alert.key_slot, condition)
                if current is not None and current.created_at < job.created_at - EARLIER_JOB_MARGIN:
                    # A deleted job's at this id (raised a minute before this one's creation at
                    # least, whatever the nodes' clock skew, as a backfill judges its records):
                    # raised anew (QA28: a backfill of the job created again failed the slots the
                    # deleted one had, and nobody was told)
                    made = alert if self.store.save_alert(alert, self._ttl(), owner=current.owner) else None
                    if made is not None:
                        self._arm(job, alert)
                else:
                    made = self.take_over(job, current) if current is not None else None
            if deliver and made is not None:
                self._deliver_later(job, made)
            return made
        except Exception:
            log.exception("alert %s of %s %s could not be raised", condition.value, job.id, execution.slot)
            return None

    def take_over(self, job: Job, current: Alert) -> Alert | None:
        """``current`` for this process to deliver, if its owner died while it was SENDING (its
        claim is older than :data:`ALERT_STALE_S`); None otherwise (a repeat: nothing to do)."""
        now = self.clock.now()
        stale_before = now - timedelta(seconds=ALERT_STALE_S)
        if current.status is not AlertStatus.SENDING or current.claimed_at >= stale_before:
            self.metrics.add("AlertsRepeated", 1)
            return None
        # A takeover that finds nothing delivered since the claim before it is a stall: the
        # delivery was cut short again (its worker's wait ran out, or it died) without a rule done.
        stalled = current.stalled + 1 if len(current.deliveries) <= current.delivered else 0
        taken = current.model_copy(
            update={
                "owner": uuid.uuid4().hex,
                "claimed_at": now,
                "stalled": stalled,
                "delivered": len(current.deliveries),
                "taken_over": current.taken_over + 1,
            }
        )
        if not self.store.take_over_alert(taken, current.owner, stale_before, self._ttl()):
            return None  # someone else took it over first
        self.metrics.add("AlertsTakenOver", 1)
        log.warning(
            "alert %s of %s %s was left SENDING by a lost worker: taken over",
            current.condition.value,
            job.id,
            current.key_slot,
        )
        if stalled >= MAX_STALLS:
            self._give_up(job, taken)
            return None
        self._arm(job, taken)
        return taken

    def _give_up(self, job: Job, alert: Alert) -> None:
        """Record ``alert`` FAILED: its delivery was cut short :data:`MAX_STALLS` times in a row
        with no rule delivered (an endpoint that answers too slowly, or never)."""
        error = (
            f"delivery cut short {alert.stalled} times in a row with nothing delivered: the endpoint "
            f"answered too slowly (over {DELIVERY_TIMEOUT_S:g} s a try) or never"
        )
        log.warning("alert %s of %s %s given up: %s", alert.condition.value, job.id, alert.key_slot, error)
        rest = [
            AlertDelivery(rule=index, status=AlertStatus.FAILED, error=error)
            for index, _ in self._todo(job, alert)
        ] + self._gone(job, alert)
        self._record_outcome(job, alert.model_copy(update={"deliveries": [*alert.deliveries, *rest]}))

    def sweep(self, job: Job, key_slot: str, condition: AlertCondition) -> float | None:
        """An alert's sweep (:mod:`.sweep`): take it over and deliver the rest if its owner died
        while it was SENDING. Returns the seconds until it would turn stale when its owner is
        alive (the sweep looks again then), else None (done, gone, or taken over here)."""
        current = self.store.get_alert(job.tenant, job.id, key_slot, condition)
        if current is None or current.status is not AlertStatus.SENDING:
            return None
        wait_s = (current.claimed_at + timedelta(seconds=ALERT_STALE_S) - self.clock.now()).total_seconds()
        if wait_s >= 0:
            return wait_s
        taken = self.take_over(job, current)
        if taken is not None:
            self._deliver_later(job, taken)
        return None

    def deliver(self, job: Job, alert: Alert) -> Alert:
        """Deliver ``alert`` (owned by this process) to each of its rules not delivered yet,
        recording the progress after each rule (which renews the claim), then the result.
        Stops when the alert was taken over meanwhile. Never raises an error."""
        try:
            todo = self._todo(job, alert)
            for position, (index, rule) in enumerate(todo):
                delivery = self._deliver(job, alert, index, rule)
                alert = alert.model_copy(
                    update={"deliveries": [*alert.deliveries, delivery], "claimed_at": self.clock.now()}
                )
                if position < len(todo) - 1 and not self.store.save_alert(alert, self._ttl()):
                    log.warning("alert %s %s %s was taken over", job.id, alert.key_slot, alert.condition)
                    return alert
            alert = alert.model_copy(update={"deliveries": [*alert.deliveries, *self._gone(job, alert)]})
            alert = self._record_outcome(job, alert)
        except Exception:
            log.exception(
                "alert %s of %s %s could not be delivered", alert.condition.value, job.id, alert.key_slot
            )
        return alert

    @staticmethod
    def _todo(job: Job, alert: Alert) -> list[tuple[int, AlertRule]]:
        """The rules ``alert`` goes to that it has not been delivered to yet: those of the job's
        rules now that still fire on its condition (a takeover after a replace of the rules: QA26,
        the rule now at an index got the alert whatever it asked for)."""
        done = {d.rule for d in alert.deliveries}
        wanted = rules_on(job, alert.condition)
        indexes = set(alert.rules or [index for index, _ in wanted])
        return [(i, rule) for i, rule in wanted if i in indexes and i not in done]

    @staticmethod
    def _gone(job: Job, alert: Alert) -> list[AlertDelivery]:
        """FAILED records of the rules ``alert`` was for that a replace of the job's rules took away
        (none at their index fires on its condition now): not delivered, and visibly so (QA26: with
        every rule gone the alert ended HELD, delivered to nobody, as if a throttle held it)."""
        done = {d.rule for d in alert.deliveries}
        firing = {index for index, _ in rules_on(job, alert.condition)}
        error = f"not sent: the job's rules were replaced, none at its index fires on {alert.condition.value}"
        return [
            AlertDelivery(rule=i, status=AlertStatus.FAILED, error=error)
            for i in alert.rules
            if i not in done and i not in firing
        ]

    def _record_outcome(self, job: Job, alert: Alert) -> Alert:
        """Record the result of ``alert``'s deliveries (SENT, FAILED or HELD), if still its owner."""
        statuses = [d.status for d in alert.deliveries]
        failed = AlertStatus.FAILED in statuses
        status = AlertStatus.FAILED if failed else AlertStatus.SENT
        if not statuses or all(st is AlertStatus.HELD for st in statuses):
            status = AlertStatus.HELD
        alert = alert.model_copy(update={"status": status})
        if not self.store.save_alert(alert, self._ttl()):
            # Its owner now counts it (a delivery thawed after a takeover: QA26, counted twice, and
            # AlertsFailed for an alert its new owner sent)
            log.warning(
                "alert %s %s %s was taken over while it was sent", job.id, alert.key_slot, alert.condition
            )
            return alert
        self.metrics.add("AlertsRaised", 1)
        if failed:
            self.metrics.add("AlertsFailed", 1)
        return alert

    def _deliver_later(self, job: Job, alert: Alert) -> None:
        self.later(lambda: self.deliver(job, alert))

    def _arm(self, job: Job, alert: Alert) -> None:
        if self.sweeps is not None:
            self.sweeps.arm(job, alert.key_slot, alert.condition, alert.claimed_at, self.clock.now())

    def _deliver(self, job: Job, alert: Alert, index: int, rule: AlertRule) -> AlertDelivery:
        held = alert.passed_held.get(index, 0)  # (a takeover's: counted by its mark, QA26: lost)
        if rule.min_interval_seconds and index not in alert.passed_held:
            now = self.clock.now()
            # Within the job's age at most (rounded up: every mark of its own counts): a mark made
            # before it was created is a deleted job's at this id (QA28: it held back the first
            # alert of the job created again there)
            age_s = max(math.ceil((now - job.created_at).total_seconds()), 0)
            allowed = self.store.throttle_alert(
                job.tenant,
                job.id,
                index,
                now,
                min(rule.min_interval_seconds, age_s),
                resolves=alert.condition is AlertCondition.RECOVERED,  # once per alert sent before it
                # (nor do the alerts it held back count as this job's: QA28 review, held_back 1)
                since=now - timedelta(seconds=age_s),
            )
            if allowed is None:
                return AlertDelivery(rule=index, status=AlertStatus.HELD)
            held = allowed
            # Recorded before the tries: a delivery cut short during them (a Lambda worker's wait
            # ran out) left the mark, and its takeover found the rule held back by it (QA26: HELD)
            marked = {"passed_held": {**alert.passed_held, index: held}}
            self.store.save_alert(alert.model_copy(update=marked), self._ttl())
        payload = rendered(rule, alert.body, held)
        # An HTTP rule's secret that cannot be read fails that rule's delivery, naming why (QA22: the
        # error escaped it, the alert stayed SENDING and the job's other rules were never sent)
        # KMS throttled or failing a moment: read again, as a failed call is tried again (QA24: the
        # delivery failed at KMS's first throttle, the alert never sent)
        secrets = secrets_to_sign(rule.target, job, self.signing_secrets)
        for tries in range(1, DELIVERY_TRIES):
            if not (isinstance(secrets, TargetResult) and secrets.deferred):
                break
            self.clock.sleep(DELIVERY_BACKOFF_S[min(tries - 1, len(DELIVERY_BACKOFF_S) - 1)])
            secrets = secrets_to_sign(rule.target, job, self.signing_secrets)
        if isinstance(secrets, TargetResult):
            log.warning("alert of %s not sent: %s", job.id, secrets.summary)
            return AlertDelivery(
                rule=index, status=AlertStatus.FAILED, error=summary(secrets.summary), held_back=held
            )
        error: str | None = None
        for tries in range(1, DELIVERY_TRIES + 1):
            ctx = SlotContext(
                job_id=job.id,
                tenant=job.tenant,
                slot=f"{alert.key_slot}#alert-{alert.condition.value}",
                scheduled_at=alert.created_at,
                # After every earlier owner's tries: a receiver that fences on the number (as
                # docs/delivery.md asks) refused a takeover's lower one (QA26: try 1 again)
                attempt=alert.taken_over * DELIVERY_TRIES + tries,
                timeout_s=DELIVERY_TIMEOUT_S,
                signing_secrets=secrets,
                target_field=f"alerts.{index}.target",  # (QA28: its refusal said "target refused")
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
