"""Alert rules and execution events through the real worker and poller (in-memory store, injected clock).

Each condition (failed, late, missed, recovered), exactly once per (job, slot, condition) under
repeated delivery and a worker that dies while it alerts, throttling, the Slack format, delivery
failures that never fail the job, and every published event against docs/events.schema.json.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from execution_harness import Crash, FakeTarget, Rig
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.notifications.alerts import ALERT_STALE_S, DELIVERY_TRIES
from punctual.delivery.notifications.events import SLOT_LATE, SLOT_MISSED, STATUS_CHANGE
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.models import Alert, AlertCondition, AlertRule, AlertStatus, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.slots import fire_timer
from punctual.timing.timers import slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())
FAIL = TargetResult.permanent("HTTP 500")
OK = TargetResult.ok("HTTP 200")


class Alerting:
    """A rig whose worker and poller notify: events kept in memory, alerts sent to ``hooks``."""

    def __init__(self, *results: Any, hooks: FakeTarget | None = None) -> None:
        self.store = MemoryStore()
        self.clock = ManualClock(T0)
        self.events = MemoryEventSink()
        self.hooks = hooks or FakeTarget()
        self.alerter = Alerter(
            self.store, self.hooks, self.clock, signing_secrets=lambda job: ("whsec_test",)
        )
        self.rig = Rig(
            self.store,
            self.clock,
            target=FakeTarget(*results),
            notifier=Notifier(EventPublisher(self.events), self.alerter),
        )
        self.worker = self.rig.worker()

    def job(self, *rules: dict[str, Any], **overrides: Any) -> Job:
        overrides.setdefault("retry", {"max_attempts": 1})
        return self.rig.add_job(alerts=list(rules), **overrides)

    def run_slot(self, job: Job, minute: int, *, released_after_s: float = 0.5) -> None:
        """Release slot T0+minute (``released_after_s`` after its instant) and work it."""
        slot = T0 + timedelta(minutes=minute)
        self.clock.set(slot + timedelta(seconds=released_after_s))
        self.rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, self.clock.now()))
        self.rig.work_until_idle(self.worker)

    def alerts(self, job: Job) -> list[tuple[str, str, AlertStatus]]:
        found = self.store.list_alerts(job.tenant, job.id, 100)
        return sorted((a.key_slot, a.condition.value, a.status) for a in found)

    def check_events(self) -> None:
        for event in self.events.events:
            jsonschema.validate(event.detail, SCHEMA)


def _recording_hooks(*results: Any) -> tuple[FakeTarget, list[Any]]:
    payloads: list[Any] = []
    hooks = FakeTarget(*results)
    original = hooks.invoke

    def invoke(target: Any, payload: Any, ctx: Any) -> TargetResult:
        payloads.append(payload)
        return original(target, payload, ctx)

    hooks.invoke = invoke  # type: ignore[method-assign]
    return hooks, payloads


def test_a_failed_slot_alerts_once_however_often_its_message_repeats() -> None:
    # Given a job whose target fails, with a rule on failed
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK}, name="nightly")
    # When its slot runs, and the same message is delivered three more times
    a.run_slot(job, 0)
    slot = slot_key(T0)
    for _ in range(3):
        a.rig.send(message_for(job, slot, T0, 1, MessageKind.FIRE, a.clock.now()))
        a.rig.work_until_idle(a.worker)
    # Then one alert, sent once, with the documented body
    assert a.alerts(job) == [(slot, "failed", AlertStatus.SENT)]
    assert len(payloads) == 1
    body = payloads[0]
    assert body["condition"] == "failed" and body["job_id"] == job.id and body["job_name"] == "nightly"
    assert body["slot"] == slot and body["attempt"] == 1 and body["status"] == "FAILED"
    assert body["error"] == "HTTP 500" and body["fire_delay_ms"] == 500.0
    assert "nightly" in body["summary"] and "FAILED" in body["summary"]
    assert body["links"]["execution"] == f"/v1/jobs/{job.id}/executions/2026-11-30T10%3A00%3A00Z"
    # And the HTTP alert was signed with the job's secrets, under its own idempotency key
    ctx = hooks.calls[0]
    assert ctx.signing_secrets == ("whsec_test",)
    assert ctx.idempotency_key == f"{job.id}:{slot}#alert-failed"
    a.check_events()


def test_a_worker_that_dies_while_alerting_leaves_the_alert_to_the_redelivery() -> None:
    # Given a worker that dies (Crash) in the middle of delivering the alert
    hooks = FakeTarget(Crash(), OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK})
    a.clock.set(T0)
    a.rig.send(message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, a.clock.now()))
    with pytest.raises(Crash):
        a.rig.work(a.worker, visibility_s=ALERT_STALE_S + 5)
    assert a.alerts(job) == [(slot_key(T0), "failed", AlertStatus.SENDING)]
    # When another repeat raises it before the stale bound: nobody sends it a second time
    a.clock.set(T0 + timedelta(seconds=ALERT_STALE_S - 10))
    record = a.store.get_execution(job.tenant, job.id, slot_key(T0))
    assert record is not None and record.status is ExecutionStatus.FAILED
    a.worker.notifier.changed(job, record, a.clock.now())
    assert len(hooks.calls) == 1
    # And the message's redelivery (after its visibility) takes the alert over and delivers it
    a.clock.set(T0 + timedelta(seconds=ALERT_STALE_S + 10))
    a.rig.work_until_idle(a.worker)
    assert len(hooks.calls) == 2
    assert a.alerts(job) == [(slot_key(T0), "failed", AlertStatus.SENT)]


def test_recovered_is_sent_once_per_failure_streak() -> None:
    # Given slots that fail, fail, succeed, succeed, fail, succeed
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, FAIL, OK, OK, FAIL, OK, hooks=hooks)
    job = a.job({"on": ["failed", "recovered"], "target": HOOK})
    for minute in range(6):
        a.run_slot(job, minute)
    # When the first success's message comes again
    third = T0 + timedelta(minutes=2)
    a.rig.send(message_for(job, slot_key(third), third, 1, MessageKind.FIRE, a.clock.now()))
    a.rig.work_until_idle(a.worker)
    # Then one failed alert per failed slot, and one recovered per streak (keyed on its first slot)
    s = [slot_key(T0 + timedelta(minutes=m)) for m in range(6)]
    assert a.alerts(job) == sorted(
        [
            (s[0], "failed", AlertStatus.SENT),
            (s[1], "failed", AlertStatus.SENT),
            (s[0], "recovered", AlertStatus.SENT),
            (s[4], "failed", AlertStatus.SENT),
            (s[4], "recovered", AlertStatus.SENT),
        ]
    )
    recovered = [p for p in payloads if p["condition"] == "recovered"]
    assert [(p["slot"], p["failing_since"], p["status"]) for p in recovered] == [
        (s[2], s[0], "SUCCEEDED"),
        (s[5], s[4], "SUCCEEDED"),
    ]
    assert a.store.get_streak(job.tenant, job.id) is None
    a.check_events()


def test_late_is_judged_on_the_release_instant_the_message_carries() -> None:
    # Given a rule on late after 5 s, and one after 60 s elsewhere
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(OK, hooks=hooks)
    pager = {"type": "http", "url": "https://pager.example.com/hook"}
    job = a.job(
        {"on": ["late"], "target": HOOK, "late_after_seconds": 5},
        {"on": ["late", "failed"], "target": pager, "late_after_seconds": 60},
    )
    # When one slot is released 1 s late and the next 8 s late (the injected clock decides)
    a.run_slot(job, 0, released_after_s=1)
    a.run_slot(job, 1, released_after_s=8)
    # Then only the second is late: one alert, and one Slot Late event
    late_slot = slot_key(T0 + timedelta(minutes=1))
    assert a.alerts(job) == [(late_slot, "late", AlertStatus.SENT)]
    assert payloads[0]["fire_delay_ms"] == 8000.0 and "8.0 s" in payloads[0]["summary"]
    assert [c.slot for c in hooks.calls] == [f"{late_slot}#alert-late"]  # not the 60 s rule's target
    [alert] = a.store.list_alerts(job.tenant, job.id, 10)
    assert [d.rule for d in alert.deliveries] == [0]
    late_events = [e for e in a.events.events if e.detail_type == SLOT_LATE]
    assert [(e.detail["slot"], e.detail["late_after_seconds"]) for e in late_events] == [(late_slot, 5)]
    a.check_events()


def test_missed_slots_alert_once_each_even_when_the_poller_reads_them_again() -> None:
    # Given a job with catch-up none whose timer is found five minutes late
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(OK, hooks=hooks)
    job = a.job({"on": ["missed"], "target": HOOK}, catchup={"policy": "none"})
    a.store.put_timers([fire_timer(a.rig.dispatcher().config.layout, job, T0, T0)])
    a.clock.set(T0 + timedelta(minutes=5, seconds=1))
    a.rig.poll()
    # The poller hands each missed slot's alert to a worker (only workers may call targets)
    alert_messages = [m.message for m in a.rig.queues.queues["queue://short"] if m.message.kind == "alert"]
    assert len(alert_messages) == 5 and not a.store.list_alerts(job.tenant, job.id, 10)
    a.rig.work_until_idle(a.worker)
    # When a restarted poller releases the same timer again, and its messages are worked too
    a.rig.released_timers.clear()
    a.clock.advance(1)
    a.rig.poll()
    a.rig.work_until_idle(a.worker)
    # Then each missed slot has one alert and the job's target was never called for them
    missed = [slot_key(T0 + timedelta(minutes=m)) for m in range(5)]
    assert a.alerts(job) == [(s, "missed", AlertStatus.SENT) for s in missed]
    assert len(payloads) == 5 and all(p["status"] == "MISSED" for p in payloads)
    assert all("catch-up policy none" in p["summary"] for p in payloads)
    assert [c.slot for c in a.rig.target.calls] == [slot_key(T0 + timedelta(minutes=5))]  # the on-time one
    missed_events = {e.detail["slot"] for e in a.events.events if e.detail_type == SLOT_MISSED}
    assert missed_events == set(missed)
    # Each slot's event is sent once by the release that recorded it, and once more by the one
    # that found it recorded (it may have died before telling): never more (QA: three each)
    per_slot = Counter(e.detail["slot"] for e in a.events.events if e.detail_type == SLOT_MISSED)
    assert set(per_slot.values()) == {2}
    a.check_events()


def test_min_interval_holds_alerts_back_and_the_next_one_counts_them() -> None:
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK, "min_interval_seconds": 600})
    for minute in (0, 1, 2, 11):
        a.run_slot(job, minute)
    statuses = [status for _, _, status in a.alerts(job)]
    assert statuses == [AlertStatus.SENT, AlertStatus.HELD, AlertStatus.HELD, AlertStatus.SENT]
    assert [p["held_back"] for p in payloads] == [0, 2]


def test_an_alert_taken_over_still_counts_the_alerts_its_rule_held_back() -> None:
    # Given a rule with min_interval_seconds that held back one failure's alert
    hooks, payloads = _recording_hooks(OK, Crash(), OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK, "min_interval_seconds": 300})
    a.run_slot(job, 0)
    a.run_slot(job, 1)
    # When the next alert past the interval passes the throttle, and its worker dies while it
    # sends it (the throttle's mark taken, the count of held back alerts reset)
    with pytest.raises(Crash):
        a.run_slot(job, 6)
    slot = slot_key(T0 + timedelta(minutes=6))
    # And its sweep takes it over
    a.clock.set(T0 + timedelta(minutes=6, seconds=ALERT_STALE_S + 5))
    a.alerter.sweep(job, slot, AlertCondition.FAILED)
    a.worker.settle()  # (the takeover delivers on a thread beside)
    # Then the alert delivered says one was held back, as its first try did (QA26: 0, the count
    # lost with the throttle's mark)
    alert = a.store.get_alert(job.tenant, job.id, slot, AlertCondition.FAILED)
    assert alert is not None and alert.status is AlertStatus.SENT
    assert [p["held_back"] for p in payloads] == [0, 1, 1]
    assert [d.held_back for d in alert.deliveries] == [1]


def _swept_after_a_replace(rules: list[AlertRule]) -> tuple[FakeTarget, Alert | None]:
    """A failed slot's alert whose worker died while it sent it, swept after the job's alert rules
    were replaced by ``rules``: the hooks called and the alert as it ended."""
    hooks = FakeTarget(Crash(), OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK})
    with pytest.raises(Crash):
        a.run_slot(job, 0)
    replaced = job.model_copy(update={"alerts": rules, "version": job.version + 1})
    a.clock.set(T0 + timedelta(seconds=ALERT_STALE_S + 5))
    a.alerter.sweep(replaced, slot_key(T0), AlertCondition.FAILED)
    a.worker.settle()  # (the takeover delivers on a thread beside)
    return hooks, a.store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.FAILED)


def test_an_alert_taken_over_after_the_rules_were_replaced_goes_only_to_rules_on_its_condition() -> None:
    # Given a failed slot's alert whose worker died while it sent it, when the job's rules are
    # replaced meanwhile by one on recovered only, then its sweep runs
    recovered_only = AlertRule.model_validate({"on": ["recovered"], "target": HOOK})
    hooks, alert = _swept_after_a_replace([recovered_only])
    # Then the failed alert is not sent to a rule that asked for recovered alerts only (QA26: it
    # went to whatever rule was now at its rule's index)
    assert len(hooks.calls) == 1  # the dead worker's try only
    assert alert is not None and alert.status is AlertStatus.FAILED
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.FAILED)]  # (named why)


def test_a_takeovers_tries_carry_fencing_numbers_above_its_dead_owners() -> None:
    # Given a failed slot's alert whose endpoint failed its first try, and whose worker died in
    # the second (the receiver has seen the fencing number 2)
    hooks = FakeTarget(TargetResult.retryable("HTTP 503"), Crash(), OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK})
    with pytest.raises(Crash):
        a.run_slot(job, 0)
    # When its sweep takes it over
    a.clock.set(T0 + timedelta(minutes=1, seconds=ALERT_STALE_S))
    a.alerter.sweep(job, slot_key(T0), AlertCondition.FAILED)
    a.worker.settle()  # (the takeover delivers on a thread beside)
    # Then the takeover's try carries a higher number, same key: a receiver that fences on the
    # number (docs/delivery.md) takes it (QA26: it was 1 again, below the 2 it had seen: refused)
    assert len({ctx.idempotency_key for ctx in hooks.calls}) == 1
    numbers = [ctx.attempt for ctx in hooks.calls]
    assert numbers == sorted(set(numbers)) and len(numbers) == 3
    alert = a.store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.FAILED)
    assert alert is not None and alert.status is AlertStatus.SENT


def test_an_alert_taken_over_after_its_rules_were_removed_is_failed_naming_why() -> None:
    # Given a failed slot's alert whose worker died while it sent it, when the job's alert rules
    # are all removed meanwhile, then its sweep runs
    hooks, alert = _swept_after_a_replace([])
    # Then the alert, delivered to nobody, is FAILED naming why (QA26: HELD, with no delivery, as
    # if a rule's min_interval_seconds had held it back and the next alert would count it)
    assert len(hooks.calls) == 1  # the dead worker's try only
    assert alert is not None and alert.status is AlertStatus.FAILED
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.FAILED)]
    assert "rules were replaced" in (alert.deliveries[0].error or "")


def test_the_docs_example_rule_tells_the_team_a_failure_it_reported_has_ended() -> None:
    # docs/alerts.md's first rule: a slot fails, the next succeeds a minute later (QA21: the
    # recovered alert was HELD by the interval, for good; nobody heard the job recovered)
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, OK, FAIL, OK, hooks=hooks)
    rule = {"on": ["failed", "recovered"], "target": HOOK, "format": "slack", "min_interval_seconds": 300}
    job = a.job(rule)
    for minute in (0, 1, 2, 3):
        a.run_slot(job, minute)
    # the failure and its end are sent; the second failure, within the interval, is held, and so is
    # its recovery (nothing was sent for it to close): one recovery per alert the rule sent
    # (a recovery is keyed by the first slot of the failures it ends)
    assert a.alerts(job) == [
        (slot_key(T0), "failed", AlertStatus.SENT),
        (slot_key(T0), "recovered", AlertStatus.SENT),
        (slot_key(T0 + timedelta(minutes=2)), "failed", AlertStatus.HELD),
        (slot_key(T0 + timedelta(minutes=2)), "recovered", AlertStatus.HELD),
    ]
    assert len(payloads) == 2 and "recovered" in payloads[1]["text"].lower()


def test_slack_format_sends_the_summary_as_an_incoming_webhook_message() -> None:
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK, "format": "slack"}, name="billing")
    a.run_slot(job, 0)
    assert list(payloads[0]) == ["text"]
    assert "billing" in payloads[0]["text"] and "FAILED" in payloads[0]["text"]
    # The execution's API path is written out: a Slack link to a path without a host goes nowhere
    assert f"(details: GET /v1/jobs/{job.id}/executions/" in payloads[0]["text"]
    assert "|details>" not in payloads[0]["text"]


def test_an_alert_that_cannot_be_delivered_is_retried_recorded_and_never_fails_the_job() -> None:
    # Given an alert target that always fails, and a job that succeeds after a failed slot
    hooks = FakeTarget(TargetResult.retryable("HTTP 503"))
    a = Alerting(FAIL, OK, hooks=hooks)
    job = a.job({"on": ["failed"], "target": HOOK})
    a.run_slot(job, 0)
    a.run_slot(job, 1)
    # Then the alert was tried DELIVERY_TRIES times, with the injected clock's backoff between
    [alert] = a.store.list_alerts(job.tenant, job.id, 10)
    assert alert.status is AlertStatus.FAILED
    assert alert.deliveries[0].tries == DELIVERY_TRIES and alert.deliveries[0].error == "HTTP 503"
    assert len(hooks.calls) == DELIVERY_TRIES
    # And the slots' records are as the job's target decided, the queue drained
    records = {e.slot: e.status for e in a.rig.history(job)}
    assert records == {
        slot_key(T0): ExecutionStatus.FAILED,
        slot_key(T0 + timedelta(minutes=1)): ExecutionStatus.SUCCEEDED,
    }
    assert not a.rig.queues.queues.get("queue://short")


def test_an_alert_target_the_worker_refuses_is_named_by_its_field() -> None:
    # QA28: a rule's target that the worker's boundary refused (a job stored before the deployment
    # required execution roles) was recorded "target refused: ...", as if the job's own target were
    from punctual.delivery.targets import DefaultTargetInvoker
    from punctual.runtime.settings import Settings
    from punctual.security.ownership import OwnResources

    a = Alerting(FAIL)
    a.alerter.invoker = DefaultTargetInvoker(None, Settings(require_target_role=True), own=OwnResources)
    queue = {"type": "sqs", "queue_arn": "arn:aws:sqs:us-east-1:123456789012:alerts"}
    job = a.job({"on": ["missed"], "target": HOOK}, {"on": ["failed"], "target": queue})
    a.run_slot(job, 0)
    [alert] = a.store.list_alerts(job.tenant, job.id, 10)
    assert alert.status is AlertStatus.FAILED and alert.deliveries[0].tries == 1
    assert (alert.deliveries[0].error or "").startswith("alerts.1.target.role_arn refused: ")


def test_every_state_change_is_an_event_and_a_job_without_rules_costs_no_alert_write() -> None:
    # Given a job without alert rules whose first attempt fails and whose retry succeeds
    a = Alerting(TargetResult.retryable("HTTP 503"), OK)
    job = a.rig.add_job(retry={"max_attempts": 2, "base_seconds": 1, "jitter": False}, tags={"team": "data"})
    a.run_slot(job, 0)
    a.clock.set(T0 + timedelta(seconds=5))
    a.rig.poll()
    a.rig.work_until_idle(a.worker)
    # Then started, retry scheduled, started, succeeded: each a status change event
    seen = [(e.detail_type, e.detail["status"], e.detail["attempt"]) for e in a.events.events]
    assert seen == [
        (STATUS_CHANGE, "RUNNING", 1),
        (STATUS_CHANGE, "RETRY_WAIT", 1),
        (STATUS_CHANGE, "RUNNING", 2),
        (STATUS_CHANGE, "SUCCEEDED", 2),
    ]
    assert a.events.events[-1].detail["tags"] == {"team": "data"}
    assert a.events.events[-1].detail["duration_ms"] is not None
    # And each message's events went out together (one call per message)
    assert [len(call) for call in a.events.calls] == [2, 2]
    assert a.store.list_alerts(job.tenant, job.id, 10) == []
    a.check_events()


def test_a_batch_of_messages_sends_its_events_together() -> None:
    # Given three slots' messages handled as one Lambda batch
    a = Alerting(OK)
    job = a.rig.add_job()
    for minute in range(3):
        slot = T0 + timedelta(minutes=minute)
        a.rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, slot))
    a.clock.set(T0 + timedelta(minutes=3))
    with a.worker.notifier.batched():
        a.rig.work(a.worker)
        assert a.events.calls == []  # held while the batch runs
    # Then their six events (started and succeeded, each) went out in one PutEvents call
    assert [len(call) for call in a.events.calls] == [6]
    a.check_events()


def test_a_started_event_carries_the_first_attempts_start_delay_not_the_release_delay() -> None:
    # Given a slot released on time (0.1 s after its instant) that a busy worker takes 3 s later
    a = Alerting(OK)
    job = a.job({"on": ["late"], "target": HOOK, "late_after_seconds": 60})
    a.clock.set(T0 + timedelta(seconds=0.1))
    a.rig.send(message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, a.clock.now()))
    a.clock.set(T0 + timedelta(seconds=3))
    a.rig.work_until_idle(a.worker)
    # Then its RUNNING event's fire delay is the start's, as the schema says and as its SUCCEEDED
    # event has it (QA: the RUNNING event carried the release delay, 100 ms)
    delays = {e.detail["status"]: e.detail["fire_delay_ms"] for e in a.events.events}
    assert delays == {"RUNNING": 3000.0, "SUCCEEDED": 3000.0}
    a.check_events()


def test_a_signing_secret_that_cannot_be_read_fails_that_rules_delivery_only() -> None:
    # Given a job with an HTTP rule and a queue rule, whose signing secret cannot be decrypted
    hooks = FakeTarget(OK)
    a = Alerting(FAIL, hooks=hooks)

    def unreadable(job: Job) -> tuple[str, ...]:
        raise RuntimeError("sealed under another local key")

    a.alerter.signing_secrets = unreadable
    queue = {"type": "sqs", "queue_arn": "arn:aws:sqs:us-east-1:123456789012:alerts"}
    job = a.job({"on": ["failed"], "target": HOOK}, {"on": ["failed"], "target": queue})
    # When its slot fails
    a.run_slot(job, 0)
    # Then the alert is recorded FAILED (not left SENDING): the HTTP rule's delivery names why and
    # sent nothing unsigned, the queue rule's (which signs nothing) was sent
    [alert] = a.store.list_alerts(job.tenant, job.id, 10)
    assert alert.status is AlertStatus.FAILED
    http, sqs = sorted(alert.deliveries, key=lambda d: d.rule)
    assert http.status is AlertStatus.FAILED and "signing secret cannot be read" in (http.error or "")
    assert "another local key" in (http.error or "") and sqs.status is AlertStatus.SENT
    assert [ctx.signing_secrets for ctx in hooks.calls] == [()]
    assert {e.status for e in a.rig.history(job)} == {ExecutionStatus.FAILED}


def test_a_signing_secret_kms_throttles_for_a_moment_is_read_again_and_the_alert_sent() -> None:
    # QA24: an HTTP rule's delivery failed at KMS's first throttle (its secret unread), though a
    # target that fails is tried three times: KMS failing a moment is tried again the same way
    from botocore.exceptions import ClientError

    hooks = FakeTarget(OK)
    a = Alerting(FAIL, hooks=hooks)
    reads = []

    def throttled_once(job: Job) -> tuple[str, ...]:
        reads.append(job.id)
        if len(reads) == 1:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Decrypt")
        return ("whsec_current",)

    a.alerter.signing_secrets = throttled_once
    job = a.job({"on": ["failed"], "target": HOOK})
    a.run_slot(job, 0)
    [alert] = a.store.list_alerts(job.tenant, job.id, 10)
    assert alert.status is AlertStatus.SENT and len(reads) == 2
    assert [ctx.signing_secrets for ctx in hooks.calls] == [("whsec_current",)]


def test_a_late_slot_that_waits_for_its_turn_is_alerted_late_once() -> None:
    # Given an overlap 'queue' job with a rule on late after 30 s, whose slot is still running
    # when the next slot is released 45 s late (QA23: its claim queued it before judging its
    # release, and its turn is never judged: no late alert, no Slot Late event)
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(OK, hooks=hooks)
    job = a.job({"on": ["late"], "target": HOOK, "late_after_seconds": 30}, overlap="queue")
    a.clock.set(T0 + timedelta(seconds=0.5))
    running = a.worker.claim(message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, a.clock.now()))
    nxt = T0 + timedelta(minutes=1)
    a.clock.set(nxt + timedelta(seconds=45))
    a.rig.send(message_for(job, slot_key(nxt), nxt, 1, MessageKind.FIRE, a.clock.now()))
    a.rig.work_until_idle(a.worker)
    assert a.store.get_execution(job.tenant, job.id, slot_key(nxt)).status is ExecutionStatus.QUEUED  # type: ignore[union-attr]
    # When the running slot ends and the queued one runs on its turn
    a.clock.advance(5)
    a.worker.finish(running, OK)
    for _ in range(3):
        a.clock.advance(5)
        a.rig.poll()
        a.rig.work_until_idle(a.worker)
    # Then the late slot ran, and was alerted late once, with one Slot Late event
    assert {e.slot: e.status for e in a.rig.history(job)}[slot_key(nxt)] is ExecutionStatus.SUCCEEDED
    assert a.alerts(job) == [(slot_key(nxt), "late", AlertStatus.SENT)]
    assert len(payloads) == 1 and payloads[0]["fire_delay_ms"] == 45000.0
    late = [e.detail["slot"] for e in a.events.events if e.detail_type == SLOT_LATE]
    assert late == [slot_key(nxt)]
    a.check_events()


def test_a_failed_alert_is_made_when_its_streak_cannot_be_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA23: the failure streak is written before the failed alert; a store error there (DynamoDB
    throttling through its retries) raised past the alert, which the notifier swallowed: lost."""
    hooks, payloads = _recording_hooks(OK)
    a = Alerting(FAIL, hooks=hooks)
    job = a.job({"on": ["failed", "recovered"], "target": HOOK})

    def throttled(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(a.store, "open_streak", throttled)
    a.run_slot(job, 0)
    assert a.alerts(job) == [(slot_key(T0), "failed", AlertStatus.SENT)]
    assert [p["condition"] for p in payloads] == ["failed"]
