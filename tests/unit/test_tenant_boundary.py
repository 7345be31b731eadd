"""Issue 31, points 1, 2 and 4: every ARN a job names passes one boundary, at registration and
in the worker (target, dead-letter queue, alert targets, events bus); execution roles are the
tenant's own roles that opted in, never the stack's; Punctual's event source is Punctual's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from factories import spec
from punctual.delivery.targets import DefaultTargetInvoker, SlotContext
from punctual.delivery.targets.base import Outcome
from punctual.dispatch.queues import MemoryQueues
from punctual.execution.dead_letters import SqsDeadLetters
from punctual.models import DeadLetterQueue, Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings
from punctual.security.boundary import Boundary, Callee, callees, reserved_source, role_name_part
from punctual.security.ownership import OwnResources
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
TENANT_ACCOUNT = "210987654321"
FAILED = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:Punctual-QueuesFailed-Qq1"
WORK_QUEUE = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:Punctual-QueuesShort0-AbC123.fifo"
BUS = f"arn:aws:events:eu-west-1:{ACCOUNT}:event-bus/Punctual-events"
TARGET_ROLE = f"arn:aws:iam::{ACCOUNT}:role/Punctual-TargetRole-1A2B"
WORKER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/Punctual-WorkersWorkerRole-3C4D"
OWN = OwnResources.of([FAILED, WORK_QUEUE, BUS, TARGET_ROLE, WORKER_ROLE])

TENANT_QUEUE = f"arn:aws:sqs:eu-west-1:{TENANT_ACCOUNT}:orders"
TENANT_DLQ = f"arn:aws:sqs:eu-west-1:{TENANT_ACCOUNT}:orders-dlq"
TENANT_BUS = f"arn:aws:events:eu-west-1:{TENANT_ACCOUNT}:event-bus/ops"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/punctual/orders-scheduler"
HOOK = {"type": "http", "url": "https://hooks.example.com/x"}


def service(**boundary: Any) -> JobService:
    clock = ManualClock(T0)
    return JobService(
        MemoryStore(),
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ("long",)),
        boundary=Boundary(lambda: OWN, **boundary),
    )


def sqs(queue: str = TENANT_QUEUE, role: str | None = TENANT_ROLE) -> dict[str, Any]:
    return {"type": "sqs", "queue_arn": queue, **({"role_arn": role} if role else {})}


def refused(svc: JobService, **fields: Any) -> InvalidJobError:
    with pytest.raises(InvalidJobError) as caught:
        svc.register("tenant-a", spec(**fields))
    assert svc.store.list_jobs("tenant-a", 10).items == []  # nothing stored
    return caught.value


# --------------------------------------------------------------------------- point 2: every ARN


@pytest.mark.parametrize("own", [FAILED, WORK_QUEUE])
def test_a_dead_letter_queue_that_is_an_own_queue_is_refused_at_registration(own: str) -> None:
    """The issue's reproduction: a job whose DLQ was the operators' failed queue was accepted (201)."""
    error = refused(service(), target=sqs(), dead_letter={"queue_arn": own})

    assert error.field == "dead_letter"
    assert "own resources" in str(error)


def test_an_alert_target_and_the_events_bus_pass_the_same_refusal() -> None:
    svc = service()
    alert = refused(svc, target=HOOK, alerts=[{"on": ["failed"], "target": sqs(FAILED)}])
    bus = refused(svc, target=HOOK, events_bus={"type": "eventbridge", "event_bus_arn": BUS})

    assert alert.field == "alerts.0.target"
    assert bus.field == "events_bus" and "own resources" in str(bus)


def test_the_target_role_rule_covers_the_dead_letter_queue_and_the_events_bus() -> None:
    svc = service(require_target_role=True)
    # An HTTP job's dead-letter queue has no target role to borrow: it names its own.
    dlq = refused(svc, target=HOOK, dead_letter={"queue_arn": TENANT_DLQ})
    bus = refused(svc, target=HOOK, events_bus={"type": "eventbridge", "event_bus_arn": TENANT_BUS})
    assert dlq.field == "dead_letter.role_arn"
    assert bus.field == "events_bus.role_arn"

    # With roles, both are accepted; an AWS target's dead-letter queue takes the target's role.
    job, _ = svc.register(
        "tenant-a",
        spec(
            target=HOOK,
            dead_letter={"queue_arn": TENANT_DLQ, "role_arn": TENANT_ROLE},
            events_bus={"type": "eventbridge", "event_bus_arn": TENANT_BUS, "role_arn": TENANT_ROLE},
        ),
    )
    assert job.dead_letter is not None and job.events_bus is not None
    inherited = svc.register("tenant-a", spec(target=sqs(), dead_letter={"queue_arn": TENANT_DLQ}))[0]
    (dead_letter,) = [c for c in callees(inherited) if c.where == "dead_letter"]
    assert dead_letter.role_arn == TENANT_ROLE


# --------------------------------------------------------------------------- point 1: roles


@pytest.mark.parametrize(
    "role",
    [
        TARGET_ROLE,  # borrowing the operator's targetArnPatterns, and passing requireTargetRole
        WORKER_ROLE,
        TARGET_ROLE.replace("role/", "role/some/other/path/"),  # a role is its name, whatever the path
    ],
)
@pytest.mark.parametrize("where", ["target", "dead_letter", "alerts.0.target", "events_bus"])
def test_the_stacks_own_roles_are_refused_as_execution_roles_everywhere(role: str, where: str) -> None:
    fields: dict[str, Any] = {"target": sqs(role=None)}
    if where == "target":
        fields["target"] = sqs(role=role)
    elif where == "dead_letter":
        fields["dead_letter"] = {"queue_arn": TENANT_DLQ, "role_arn": role}
    elif where == "alerts.0.target":
        fields["alerts"] = [{"on": ["failed"], "target": sqs(role=role)}]
    else:
        fields["events_bus"] = {"type": "eventbridge", "event_bus_arn": TENANT_BUS, "role_arn": role}

    error = refused(service(), **fields)

    assert error.field == f"{where}.role_arn"
    assert "own roles" in str(error)


def test_a_role_outside_the_opt_in_prefix_is_refused_and_one_inside_is_accepted() -> None:
    svc = service(role_prefix="punctual/")
    outside = f"arn:aws:iam::{TENANT_ACCOUNT}:role/Admin"
    looks_alike = f"arn:aws:iam::{TENANT_ACCOUNT}:role/punctualish/x"

    for role in (outside, looks_alike):
        error = refused(svc, target=sqs(role=role))
        assert error.field == "target.role_arn" and "not opted in" in str(error)
    job, _ = svc.register("tenant-a", spec(target=sqs(role=TENANT_ROLE)))
    assert job.target.role_arn == TENANT_ROLE  # type: ignore[union-attr]
    assert role_name_part(TENANT_ROLE) == "punctual/orders-scheduler"


# --------------------------------------------------------------------------- point 4: the source


@pytest.mark.parametrize(
    "source", ["punctual", "Punctual", " punctual ", "punctual.usecases.jobs", "PUNCTUAL.x"]
)
def test_punctuals_event_source_is_refused_on_a_tenants_eventbridge_target(source: str) -> None:
    target = {"type": "eventbridge", "event_bus_arn": TENANT_BUS, "source": source}
    error = refused(service(), target=target, payload={})

    assert error.field == "target.source"
    assert reserved_source(source)


def test_other_sources_and_the_default_are_accepted() -> None:
    svc = service()
    for source in ("orders", "punctuality", "com.example.punctual"):
        target = {"type": "eventbridge", "event_bus_arn": TENANT_BUS, "source": source}
        svc.register("tenant-a", spec(target=target, payload={}))
    default = svc.register("tenant-a", spec(target={"type": "eventbridge", "event_bus_arn": TENANT_BUS}))[0]
    assert not reserved_source(default.target.source)  # type: ignore[union-attr]


# --------------------------------------------------------------------------- in the worker


def ctx() -> SlotContext:
    return SlotContext("job-1", "tenant-a", "2026-11-30T10:00:00Z", T0, 1, 30.0)


class Clients:
    """A client factory that must never be asked: the boundary stops the call first."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    def __call__(self, service: str, *args: Any, **kwargs: Any) -> Any:
        self.asked.append((service, kwargs.get("role")))
        raise AssertionError(f"a {service} client was asked for")


@pytest.mark.parametrize(
    "target",
    [
        sqs(role=TARGET_ROLE),
        sqs(FAILED),
        {"type": "eventbridge", "event_bus_arn": TENANT_BUS, "source": "punctual", "role_arn": TENANT_ROLE},
    ],
)
def test_the_worker_refuses_what_registration_refuses_for_jobs_stored_before(target: dict[str, Any]) -> None:
    clients = Clients()
    invoker = DefaultTargetInvoker(clients, Settings(), own=lambda: OWN)

    result = invoker.invoke(target, {"k": 1}, ctx())

    assert result.outcome is Outcome.PERMANENT
    assert "refused" in result.summary
    assert clients.asked == []


def test_the_worker_refuses_a_role_outside_the_prefix() -> None:
    clients = Clients()
    settings = Settings(execution_role_prefix="punctual/")
    invoker = DefaultTargetInvoker(clients, settings, own=lambda: OWN)

    result = invoker.invoke(sqs(role=f"arn:aws:iam::{TENANT_ACCOUNT}:role/Admin"), "x", ctx())

    assert result.outcome is Outcome.PERMANENT and "not opted in" in result.summary
    assert clients.asked == []


def failed_execution() -> Execution:
    return Execution(
        job_id="job-1",
        tenant="tenant-a",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=T0,
        status=ExecutionStatus.FAILED,
        attempt=3,
        error="boom",
    )


def job_with(dead_letter: DeadLetterQueue, target: dict[str, Any]) -> Job:
    from factories import job

    return job("job-1", tenant="tenant-a", target=target, dead_letter=dead_letter)


@pytest.mark.parametrize(
    ("dead_letter", "target"),
    [
        (DeadLetterQueue(queue_arn=FAILED), sqs()),  # the operators' failed-executions queue
        (DeadLetterQueue(queue_arn=WORK_QUEUE), sqs()),  # a work queue: a forged dispatch message
        (DeadLetterQueue(queue_arn=TENANT_DLQ), sqs(role=TARGET_ROLE)),  # borrowing the target role
        (DeadLetterQueue(queue_arn=TENANT_DLQ, role_arn=WORKER_ROLE), HOOK),
    ],
)
def test_the_dead_letter_sender_refuses_what_the_boundary_refuses_and_sends_nothing(
    dead_letter: DeadLetterQueue, target: dict[str, Any]
) -> None:
    """The issue's reproduction, in the worker: the failed slot's body landed in the failed queue."""
    clients = Clients()
    metrics = RecordingMetrics()
    sender = SqsDeadLetters(clients, Boundary(lambda: OWN), metrics)

    sender.send(job_with(dead_letter, target), failed_execution(), T0)

    assert clients.asked == []
    assert metrics.total("DeadLettersRefused") == 1


def test_the_dead_letter_sender_refuses_a_queue_without_a_role_where_one_is_required() -> None:
    clients = Clients()
    sender = SqsDeadLetters(clients, Boundary(lambda: OWN, require_target_role=True))

    sender.send(job_with(DeadLetterQueue(queue_arn=TENANT_DLQ), HOOK), failed_execution(), T0)

    assert clients.asked == []


def test_a_callee_knows_its_field_role_and_kind() -> None:
    callee = Callee("target", spec(target=sqs()).target)
    assert (callee.where, callee.role_arn, callee.is_aws) == ("target", TENANT_ROLE, True)
