"""Alert rules are validated like targets; events go out ten per call and can be turned off."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from factories import job, spec
from punctual.delivery.notifications import EventBridgeSink, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.notifications.events import MAX_ENTRIES_PER_CALL, SOURCE, execution_event
from punctual.dispatch.queues import MemoryQueues
from punctual.models import Execution, ExecutionStatus, JobSpec
from punctual.runtime.clock import ManualClock
from punctual.runtime.composition import Container
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings
from punctual.security.ownership import OwnResources
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
OWN_QUEUE = "arn:aws:sqs:eu-west-1:123456789012:Punctual-QueuesShort0-AbC123.fifo"
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}


@pytest.fixture
def service() -> JobService:
    clock = ManualClock(T0)
    return JobService(
        MemoryStore(),
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ("long",)),
        own_resources=lambda: OwnResources.of([OWN_QUEUE]),
        require_target_role=False,
    )


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"on": [], "target": HOOK}, "at least 1"),
        ({"on": ["exploded"], "target": HOOK}, "failed"),
        ({"on": ["failed", "failed"], "target": HOOK}, "listed twice"),
        ({"on": ["late"], "target": HOOK}, "needs late_after_seconds"),
        ({"on": ["failed"], "target": HOOK, "late_after_seconds": 5}, "only for a rule on 'late'"),
        ({"on": ["failed"], "target": HOOK, "format": "teams"}, "slack"),
        ({"on": ["failed"], "target": {"type": "http", "url": "ftp://x"}}, "http:// or https://"),
        ({"on": ["failed"], "target": HOOK, "min_interval_seconds": -1}, "greater than or equal"),
        ({"on": ["failed"], "target": HOOK, "color": "red"}, "Extra inputs"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_problem(rule: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"schedule": "rate(1 minute)", "target": HOOK, "alerts": [rule]})
    assert problem in str(refused.value)
    assert "alerts.0" in str(refused.value)


def test_alert_targets_pass_the_same_guards_as_the_jobs_target(service: JobService) -> None:
    # A webhook to a private address (the SSRF guard)
    with pytest.raises(InvalidJobError) as refused:
        service.register(
            "t", spec(alerts=[{"on": ["failed"], "target": {"type": "http", "url": "http://10.0.0.7/"}}])
        )
    assert refused.value.field == "alerts.0.target.url"
    # One of the scheduler's own resources
    own = {"type": "sqs", "queue_arn": OWN_QUEUE}
    with pytest.raises(InvalidJobError) as refused:
        service.register(
            "t", spec(alerts=[{"on": ["missed"], "target": HOOK}, {"on": ["failed"], "target": own}])
        )
    assert refused.value.field == "alerts.1.target" and "own resources" in str(refused.value)
    assert service.store.list_jobs("t", 10).items == []
    # A good rule is kept with the job, and an HTTP alert gives a non-HTTP job a signing secret
    sns = {"type": "sns", "topic_arn": "arn:aws:sns:eu-west-1:123456789012:team"}
    stored, _ = service.register(
        "t", spec(target=sns, alerts=[{"on": ["failed", "recovered"], "target": HOOK}])
    )
    assert [rule.on for rule in service.get("t", stored.id).alerts] == [["failed", "recovered"]]


class FakeEvents:
    """An EventBridge client: records PutEvents calls; fails the entries named in ``fail_once``."""

    def __init__(self, fail_once: int = 0) -> None:
        self.calls: list[list[dict[str, Any]]] = []
        self.fail_once = fail_once

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Entries)
        failing = min(self.fail_once, len(Entries))
        self.fail_once -= failing
        results = [
            {"ErrorCode": "InternalFailure"} if i < failing else {"EventId": "e"} for i in range(len(Entries))
        ]
        return {"FailedEntryCount": failing, "Entries": results}


def _events(count: int) -> list[Any]:
    record = Execution(
        job_id="job-1", slot="2026-11-30T10:00:00Z", scheduled_at=T0, status=ExecutionStatus.SUCCEEDED
    )
    return [
        execution_event(job("job-1"), record.model_copy(update={"attempt": n + 1}), T0) for n in range(count)
    ]


def test_events_go_out_ten_per_put_events_call_on_the_chosen_bus() -> None:
    client = FakeEvents()
    metrics = RecordingMetrics()
    publisher = EventPublisher(EventBridgeSink(client, "punctual-events"), metrics)
    publisher.publish(_events(23))
    assert [len(call) for call in client.calls] == [10, 10, 3]
    entry = client.calls[0][0]
    assert entry["Source"] == SOURCE and entry["EventBusName"] == "punctual-events"
    assert entry["DetailType"] == "Execution Status Change"
    assert metrics.total("EventsPublished") == 23


def test_entries_a_call_reports_failed_are_sent_once_more_then_counted() -> None:
    client = FakeEvents(fail_once=3)
    metrics = RecordingMetrics()
    EventPublisher(EventBridgeSink(client, "default"), metrics).publish(_events(5))
    assert [len(call) for call in client.calls] == [5, 3]
    assert metrics.total("EventsPublished") == 5 and metrics.total("EventsFailed") == 0


def test_a_publisher_that_cannot_reach_eventbridge_never_raises() -> None:
    class Broken:
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            raise ConnectionError("no route")

    metrics = RecordingMetrics()
    EventPublisher(EventBridgeSink(Broken(), "default"), metrics).publish(_events(12))
    assert metrics.total("EventsFailed") == 12


def test_buffered_events_are_sent_when_ten_are_waiting() -> None:
    sink = MemoryEventSink()
    publisher = EventPublisher(sink)
    for event in _events(MAX_ENTRIES_PER_CALL + 1):
        publisher.add(event)
    assert [len(call) for call in sink.calls] == [10]
    publisher.flush()
    assert [len(call) for call in sink.calls] == [10, 1]


def test_events_can_be_turned_off_and_the_bus_chosen_by_settings() -> None:
    off = Container(Settings.from_env({"PUNCTUAL_EVENTS_ENABLED": "false"})).event_publisher()
    assert not off.enabled
    off.publish(_events(3))  # nothing built, nothing sent, nothing raised
    assert Notifier().events.enabled is False
    bus = "arn:aws:events:eu-west-1:123456789012:event-bus/punctual"
    on = Settings.from_env({"PUNCTUAL_EVENTS_BUS": bus})
    assert on.events_enabled and on.events_bus == bus
    assert Settings().events_enabled and Settings().events_bus == "default"


def test_a_turned_off_publisher_sends_nothing_from_the_worker_path() -> None:
    publisher = EventPublisher(None)
    notifier = Notifier(publisher)
    record = Execution(
        job_id="job-1", slot="2026-11-30T10:00:00Z", scheduled_at=T0, status=ExecutionStatus.FAILED
    )
    notifier.changed(job("job-1"), record, T0)
    notifier.started(job("job-1"), record, T0, 1.0)
    assert publisher._buffer == []  # nothing built or kept
