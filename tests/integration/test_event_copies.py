"""Issue 31, point 4: a tenant gets its own jobs' events on a bus of its own, through its execution
role; the copy passes the tenant boundary; a missed slot's copy is handed to a worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from factories import job
from punctual.delivery.notifications import EventCopies, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.aws_clients import Boto3ClientFactory
from punctual.dispatch.queues import MessageKind
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.observability import RecordingMetrics
from punctual.security.boundary import Boundary
from punctual.security.ownership import OwnResources

REGION = "us-east-1"
ACCOUNT = "123456789012"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
OWN_BUS = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/Punctual-events"


@pytest.fixture
def tenant_bus(aws: None) -> dict[str, Any]:
    """A bus of the tenant's, whose rule sends Punctual's events to a queue, and its role."""
    sqs = boto3.client("sqs", region_name=REGION)
    events = boto3.client("events", region_name=REGION)
    iam = boto3.client("iam", region_name=REGION)
    bus = events.create_event_bus(Name="ops")["EventBusArn"]
    queue = sqs.create_queue(QueueName="ops-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="punctual", EventBusName="ops", EventPattern=json.dumps({"source": ["punctual"]}))
    events.put_targets(Rule="punctual", EventBusName="ops", Targets=[{"Id": "q", "Arn": queue_arn}])
    role = iam.create_role(
        RoleName="punctual-events",
        AssumeRolePolicyDocument="{}",
        Tags=[{"Key": "punctual:execution-role", "Value": "true"}],
    )["Role"]["Arn"]
    factory = Boto3ClientFactory(region_name=REGION)
    assumed: list[dict[str, Any]] = []
    factory._session.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **_: assumed.append(dict(params))
    )
    return {"bus": bus, "queue": queue, "sqs": sqs, "role": role, "factory": factory, "assumed": assumed}


def _received(world: dict[str, Any]) -> list[dict[str, Any]]:
    messages = (
        world["sqs"].receive_message(QueueUrl=world["queue"], MaxNumberOfMessages=10).get("Messages", [])
    )
    return [json.loads(m["Body"]) for m in messages]


def _job(bus: str, role: str | None, job_id: str = "nightly") -> Job:
    target = {"type": "eventbridge", "event_bus_arn": bus, **({"role_arn": role} if role else {})}
    return job(job_id, tenant="AROATENANTEXAMPLE0001", events_bus=target)


def _execution(status: ExecutionStatus) -> Execution:
    return Execution(
        job_id="nightly",
        tenant="AROATENANTEXAMPLE0001",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=T0,
        status=status,
        started_at=T0 + timedelta(milliseconds=40),
        error="boom" if status is ExecutionStatus.FAILED else None,
    )


def test_a_jobs_events_are_copied_to_its_own_bus_as_its_role(tenant_bus: dict[str, Any]) -> None:
    # Given a job that asked for its events on its bus, and a worker's notifier (the deployment's
    # bus in memory)
    ours = MemoryEventSink()
    metrics = RecordingMetrics()
    copies = EventCopies(tenant_bus["factory"], Boundary(lambda: OwnResources.of([OWN_BUS])), metrics)
    notifier = Notifier(EventPublisher(ours), copies=copies)
    mine = _job(tenant_bus["bus"], tenant_bus["role"])

    # When a slot starts and fails, in one batch
    with notifier.batched():
        notifier.started(mine, _execution(ExecutionStatus.RUNNING), T0, 40.0)
        notifier.changed(mine, _execution(ExecutionStatus.FAILED), T0)

    # Then the tenant's rule got both, as Punctual's events, put as its role with its id
    got = _received(tenant_bus)
    assert [(e["source"], e["detail"]["status"]) for e in got] == [
        ("punctual", "RUNNING"),
        ("punctual", "FAILED"),
    ]
    assert {e["detail"]["job_id"] for e in got} == {"nightly"}
    assert [(a["RoleArn"], a["ExternalId"]) for a in tenant_bus["assumed"]] == [
        (tenant_bus["role"], "AROATENANTEXAMPLE0001")
    ]
    assert len(ours.events) == 2  # the deployment's bus got them too
    assert metrics.total("EventCopiesSent") == 2


def test_a_copy_to_an_own_bus_or_as_an_own_role_is_refused_and_counted(tenant_bus: dict[str, Any]) -> None:
    target_role = f"arn:aws:iam::{ACCOUNT}:role/Punctual-TargetRole-1"
    boundary = Boundary(lambda: OwnResources.of([OWN_BUS, target_role]))
    metrics = RecordingMetrics()
    notifier = Notifier(
        EventPublisher(MemoryEventSink()), copies=EventCopies(tenant_bus["factory"], boundary, metrics)
    )

    for forged in (_job(OWN_BUS, tenant_bus["role"]), _job(tenant_bus["bus"], target_role)):
        notifier.changed(forged, _execution(ExecutionStatus.FAILED), T0)

    assert metrics.total("EventCopiesRefused") == 2
    assert tenant_bus["assumed"] == [] and _received(tenant_bus) == []


def test_a_job_without_a_bus_is_not_copied_and_events_off_still_copy(tenant_bus: dict[str, Any]) -> None:
    metrics = RecordingMetrics()
    copies = EventCopies(tenant_bus["factory"], Boundary(), metrics)
    notifier = Notifier(EventPublisher(None), copies=copies)  # the deployment turned its events off

    notifier.changed(job("plain"), _execution(ExecutionStatus.SUCCEEDED), T0)
    notifier.changed(_job(tenant_bus["bus"], tenant_bus["role"]), _execution(ExecutionStatus.SUCCEEDED), T0)

    assert [e["detail"]["status"] for e in _received(tenant_bus)] == ["SUCCEEDED"]
    assert metrics.total("EventCopiesSent") == 1


def test_a_missed_slot_of_a_job_with_a_bus_is_handed_to_a_worker_and_copied(
    tenant_bus: dict[str, Any],
) -> None:
    """The poller cannot call tenants' resources: it hands the missed slot over as an ``alert``
    message, and the worker copies its Slot Missed event (no alert rule needed)."""
    from concurrent.futures import ThreadPoolExecutor

    from punctual.dispatch.polling.config import PollerConfig
    from punctual.dispatch.polling.release import SlotReleaser
    from punctual.dispatch.queues import MemoryQueues
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import TimerLayout

    mine = _job(tenant_bus["bus"], tenant_bus["role"])
    missed = _execution(ExecutionStatus.MISSED).model_copy(update={"started_at": None, "error": "job paused"})
    clock = ManualClock(T0)
    queues = MemoryQueues(now=clock.now)
    config = PollerConfig(
        layout=TimerLayout(4, 2, 180), short_queue_urls=("short",), long_queue_urls=("long",)
    )
    with ThreadPoolExecutor(1) as pool:
        releaser = SlotReleaser(MemoryStore(), queues, clock, config, RecordingMetrics(), pool)
        releaser.unrun.send_alerts([(mine, missed)])
    (message,) = queues.all_messages("short")
    assert message.kind == MessageKind.ALERT and message.job_id == "nightly"

    notifier = Notifier(copies=EventCopies(tenant_bus["factory"], Boundary()))
    notifier.handed_copy(mine, missed, T0)

    (event,) = _received(tenant_bus)
    assert (event["detail-type"], event["detail"]["status"]) == ("Slot Missed", "MISSED")


def _after_world(
    tenant_bus: dict[str, Any], **parent: Any
) -> tuple[Any, Any, Any, MemoryEventSink, Job, Job]:
    """A rig whose worker copies events and whose poller does not (as the container builds them;
    the deployment's bus in memory), the worker, its job service, and a parent with an after()
    child that asked for its events on the tenant's bus (today is in the calendar ``holidays``)."""
    from execution_harness import LAYOUT, Rig
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.calendar_service import CalendarService
    from punctual.usecases.calendars import CalendarSpec
    from punctual.usecases.jobs import JobService, QueueRouting

    clock = ManualClock(T0 - timedelta(hours=1))
    ours = MemoryEventSink()
    copies = EventCopies(tenant_bus["factory"], Boundary())
    rig = Rig(MemoryStore(), clock, notifier=Notifier(EventPublisher(ours), copies=copies))
    worker = rig.worker()
    rig.notifier = Notifier(EventPublisher(ours))  # the poller's
    jobs = JobService(
        rig.store, rig.queues, clock, LAYOUT, QueueRouting(("queue://short",), ("queue://long",)),
        require_target_role=False,
    )  # fmt: skip
    tenant = "AROATENANTEXAMPLE0001"
    CalendarService(rig.store, clock).put(tenant, "holidays", CalendarSpec(dates=["2026-11-30"]))
    first, _ = jobs.register(tenant, spec("cron(0 10 * * ? *)", **parent), job_id="parent")
    bus = {"event_bus_arn": tenant_bus["bus"], "role_arn": tenant_bus["role"]}
    child, _ = jobs.register(tenant, spec("after(parent)", events_bus=bus), job_id="child")
    return rig, worker, jobs, ours, jobs.get(tenant, first.id), child


def test_an_after_child_recorded_missed_by_a_worker_is_copied_to_its_bus(tenant_bus: dict[str, Any]) -> None:
    """A paused after() child whose parent's slot succeeds: the worker records the child's slot
    MISSED; its Slot Missed event goes to the deployment's bus and to the child's own (QA23: only
    the deployment's, which the tenant cannot read)."""
    from punctual.dispatch.queues import message_for
    from punctual.timing.timers import slot_key

    # Given a paused after() job that asked for its events on its bus, and its parent
    rig, worker, jobs, ours, parent, child = _after_world(tenant_bus)
    jobs.pause(child.tenant, child.id)
    # When the parent's slot runs and succeeds
    rig.clock.set(T0)
    rig.send(message_for(parent, slot_key(T0), T0, 1, MessageKind.FIRE, T0))
    rig.work_until_idle(worker)
    # Then the child's slot is MISSED, and its event is on both buses
    (record,) = rig.history(child)
    assert record.status is ExecutionStatus.MISSED
    assert [(e.detail["job_id"], e.detail_type) for e in ours.events if e.detail_type == "Slot Missed"] == [
        (child.id, "Slot Missed")
    ]
    got = [(e["detail"]["job_id"], e["detail-type"], e["detail"]["status"]) for e in _received(tenant_bus)]
    assert got == [(child.id, "Slot Missed", "MISSED")]


def test_an_after_child_skipped_by_the_poller_is_handed_to_a_worker_and_copied(
    tenant_bus: dict[str, Any],
) -> None:
    """A parent's slot its calendar excludes: the poller records the child's slot SKIPPED and,
    since it cannot call tenants' resources, hands it to a worker, which copies its event to the
    child's own bus (QA23: it went to the deployment's bus only)."""
    # Given a parent that excludes today, and its after() child with a bus of its own
    rig, worker, _, ours, _, child = _after_world(tenant_bus, exclude_calendars=["holidays"])
    # When the poller releases today's slot, and a worker takes what it handed over
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    rig.work_until_idle(worker)
    # Then the child's slot is SKIPPED, its event on both buses, and nothing ran
    (record,) = rig.history(child)
    assert record.status is ExecutionStatus.SKIPPED
    assert [e.detail["status"] for e in ours.events if e.detail["job_id"] == child.id] == ["SKIPPED"]
    got = [(e["detail"]["job_id"], e["detail-type"], e["detail"]["status"]) for e in _received(tenant_bus)]
    assert got == [(child.id, "Execution Status Change", "SKIPPED")]
    assert rig.target.calls == []
