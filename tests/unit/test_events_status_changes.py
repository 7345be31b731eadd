"""Which execution events reach the stack's bus: ``events_status_changes`` (``problems`` by default).

Two routine events a trigger (an attempt's RUNNING and SUCCEEDED) were $2.00 per million triggers at
EventBridge's $1.00 per million events, as much as the rest of Punctual, and at 10,000 triggers a
second 20,000 rule invocations a second against the default quota of 18,750. The default now
publishes every change but those two; ``all`` publishes them too; a job's own bus (``events_bus``)
still gets every event of its job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from factories import job
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.composition import Container
from punctual.runtime.settings import Settings, SettingsError

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
BUS = {"type": "eventbridge", "event_bus_arn": "arn:aws:events:eu-west-1:123456789012:event-bus/ops"}


class Copies:
    """Stands in for :class:`EventCopies`: keeps what it is given."""

    def __init__(self) -> None:
        self.added: list[tuple[str, Any]] = []

    def add(self, job: Job, event: Any) -> None:
        self.added.append((job.id, event))

    def flush(self) -> None:
        pass


def _record(status: ExecutionStatus) -> Execution:
    return Execution(job_id="job-1", slot="2026-11-30T10:00:00Z", scheduled_at=T0, status=status, attempt=1)


EVERY_CHANGE = ["RUNNING", "RETRY_WAIT", "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "SKIPPED"]
PROBLEMS = ["RETRY_WAIT", "FAILED", "TIMED_OUT", "SKIPPED"]


def _statuses(sink: MemoryEventSink) -> list[str]:
    return [event.detail["status"] for event in sink.events]


def _run_a_slot(notifier: Notifier, the_job: Job) -> None:
    notifier.started(the_job, _record(ExecutionStatus.RUNNING), T0, 12.0)
    notifier.changed(the_job, _record(ExecutionStatus.RETRY_WAIT), T0)
    notifier.started(the_job, _record(ExecutionStatus.RUNNING), T0, None)
    notifier.changed(the_job, _record(ExecutionStatus.SUCCEEDED), T0)
    for status in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.SKIPPED):
        notifier.changed(the_job, _record(status), T0)
    notifier.flush()


def test_the_default_publishes_every_change_but_an_attempts_running_and_succeeded() -> None:
    sink = MemoryEventSink()
    routine = Container(Settings()).routine_events
    assert routine is False
    _run_a_slot(Notifier(EventPublisher(sink), routine=routine), job("job-1"))
    assert _statuses(sink) == PROBLEMS


def test_all_publishes_every_change() -> None:
    sink = MemoryEventSink()
    routine = Container(Settings.from_env({"PUNCTUAL_EVENTS_STATUS_CHANGES": "all"})).routine_events
    assert routine is True
    _run_a_slot(Notifier(EventPublisher(sink), routine=routine), job("job-1"))
    assert _statuses(sink) == EVERY_CHANGE


def test_a_jobs_own_bus_still_gets_every_event_of_its_job() -> None:
    sink, copies = MemoryEventSink(), Copies()
    notifier = Notifier(EventPublisher(sink), copies=copies, routine=False)  # type: ignore[arg-type]
    _run_a_slot(notifier, job("job-1", events_bus=BUS))
    assert [event.detail["status"] for _, event in copies.added] == EVERY_CHANGE
    assert _statuses(sink) == PROBLEMS


def test_a_late_slot_is_published_whatever_the_setting() -> None:
    sink = MemoryEventSink()
    late_job = job(
        "job-1",
        alerts=[
            {
                "on": ["late"],
                "late_after_seconds": 5,
                "target": {"type": "http", "url": "https://a.example.com/h"},
            }
        ],
    )
    notifier = Notifier(EventPublisher(sink), routine=False)
    notifier.started(late_job, _record(ExecutionStatus.RUNNING), T0, 9_000.0)
    notifier.flush()
    assert [(event.detail_type, event.detail["status"]) for event in sink.events] == [("Slot Late", "LATE")]


def test_an_unknown_choice_is_refused_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="PUNCTUAL_EVENTS_STATUS_CHANGES"):
        Settings.from_env({"PUNCTUAL_EVENTS_STATUS_CHANGES": "some"})
