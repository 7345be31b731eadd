"""The composition root: every runtime object is built here, one way, from :class:`Settings`.

A Lambda handler (or the ECS worker, or local mode) asks :func:`container` for what it runs —
the poller, the worker, the tick's reader — and gets objects wired the same way everywhere:
boto3 clients from :func:`punctual.runtime.aws.client` (retries, timeouts, chaos fault injection), the
timer layout and the queue routing from the settings (:meth:`Settings.layout`,
:meth:`Settings.routing`), queues that sign what they send with the dispatch key, the injected
clock. The container is cached per process (a warm Lambda reuses it); tests build their own
:class:`Container` from settings they choose.

The API's services (:mod:`punctual.api.wiring`) are assembled from the same container.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from pydantic import AwareDatetime, BaseModel, Field, ValidationError, ValidationInfo, field_validator

from punctual.delivery.notifications import Notifier
from punctual.dispatch.ecs_lane import AwsScalableTarget, EcsLaneReadiness
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import QueuePort, SqsQueues
from punctual.dispatch.scaling_aws import AwsActuator
from punctual.dispatch.smoothing import parse_budgets
from punctual.dispatch.tick import Tick
from punctual.runtime import aws
from punctual.runtime.clock import Clock, SystemClock
from punctual.runtime.observability import MetricsSink
from punctual.runtime.settings import Settings
from punctual.security.message_auth import DispatchSigner, signer_from
from punctual.store.dynamo import DynamoStore

if TYPE_CHECKING:
    from punctual.auditing import ChainAuditor
    from punctual.delivery.notifications import EventPublisher
    from punctual.delivery.targets.base import TargetInvoker
    from punctual.execution import Worker
    from punctual.models import Job


class Relay(BaseModel):
    """What group 0's pollers need to start the next minute when it is missing (the tick's ARNs)."""

    state_machine_arn: str
    burst_state_machine_arn: str = ""
    poller_function: str = ""
    lean_poller_function: str = ""


class PollerItem(BaseModel):
    """One Map item of the tick's state machine: the minute and the shard group a poller owns.

    ``replica``: which of the group's pollers this is (they all release the group's slots);
    ``relay``: set on group 0's, which also start the next minute if no tick did
    (:func:`punctual.dispatch.tick.relay_next`).
    """

    minute: AwareDatetime
    group: int = Field(ge=0)
    group_count: int = Field(ge=1)
    shard_count: int | None = Field(default=None, ge=1)
    near_shard_count: int | None = Field(default=None, ge=1)
    replica: int = Field(default=0, ge=0)
    relay: Relay | None = None


class Container:
    """The runtime's objects for one set of settings, each built once, on first use.

    Parameters
    ----------
    settings
        The validated environment.
    clock
        Replaces the system clock (offset by ``settings.clock_offset_s``).
    """

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock(settings.clock_offset_s)

    @staticmethod
    def client(service: str) -> Any:
        """The process's boto3 client for ``service`` (the one client factory)."""
        return aws.client(service)

    @cached_property
    def signer(self) -> DispatchSigner | None:
        return signer_from(self.settings)

    @cached_property
    def queues(self) -> SqsQueues:
        """The work queues; what is sent through them is signed."""
        return SqsQueues(
            self.client("sqs"),
            concurrency=self.settings.queue_send_concurrency,
            signer=self.signer,
            poll_client=lambda: aws.client("sqs", long_poll=True),
        )

    @cached_property
    def store(self) -> DynamoStore:
        settings = self.settings
        return DynamoStore(
            self.client("dynamodb"),
            settings.table_name,
            settings.layout(),
            settings.table_transactions,
            marks_scope=settings.marks_scope,
        )

    @cached_property
    def reader(self) -> DynamoStore:
        """A store for reads only (the tick, the console): no layout, so it never records or
        checks one (the tick's role may only read)."""
        return DynamoStore(
            self.client("dynamodb"),
            self.settings.table_name,
            transactions=self.settings.table_transactions,
            marks_scope=self.settings.marks_scope,
        )

    def with_layout(self, **counts: int) -> Container:
        """This container with other shard counts (a minute's plan names its own), sharing its
        clock, signer and queues: a warm poller reuses one queue sender, not one per minute."""
        child = Container(self.settings.model_copy(update=counts), self.clock)
        child.__dict__["signer"] = self.signer  # cached properties: the parent's objects
        child.__dict__["queues"] = self.queues
        return child

    def notifier(
        self,
        invoker: TargetInvoker | None = None,
        signing_secrets: Callable[[Job], tuple[str, ...]] | None = None,
        metrics: MetricsSink | None = None,
    ) -> Notifier:
        """Execution events (unless turned off) and the jobs' alerts, delivered with ``invoker``."""
        from punctual.delivery.notifications import Alerter
        from punctual.delivery.notifications.sweep import AlertSweeps
        from punctual.execution import worker as defaults

        settings = self.settings
        alerter = Alerter(
            self.store,
            invoker or defaults.default_invoker(settings, self.clock),
            self.clock,
            retention_days=settings.retention_days,
            signing_secrets=signing_secrets or defaults.default_signing_secrets(settings),
            metrics=metrics,
            sweeps=AlertSweeps(self.store, settings.layout()),
        )
        from punctual.delivery.notifications import EventCopies
        from punctual.delivery.targets import DefaultTargetInvoker
        from punctual.security.boundary import Boundary

        copies = EventCopies(DefaultTargetInvoker.client_factory(settings), Boundary.of(settings), metrics)
        return Notifier(self.event_publisher(metrics), alerter, copies, routine=self.routine_events)

    @property
    def routine_events(self) -> bool:
        """Whether an attempt's RUNNING and SUCCEEDED go to the bus (``events_status_changes``)."""
        return self.settings.events_status_changes == "all"

    def event_publisher(self, metrics: MetricsSink | None = None) -> EventPublisher:
        """Execution events to the settings' bus; a disabled publisher when they are turned off."""
        from punctual.delivery.notifications import EventBridgeSink, EventPublisher
        from punctual.delivery.notifications.events import HttpEventSink

        if not self.settings.events_enabled:
            return EventPublisher(None, metrics)
        if self.settings.events_url:  # local mode: the receiver stands in for the bus
            return EventPublisher(HttpEventSink(self.settings.events_url), metrics)
        return EventPublisher(EventBridgeSink(self.client("events"), self.settings.events_bus), metrics)

    def poller(self, metrics: MetricsSink | None = None) -> Poller:
        settings = self.settings
        config = PollerConfig(
            layout=settings.layout(),
            short_queue_urls=tuple(settings.short_queue_urls),
            long_queue_urls=tuple(settings.long_queue_urls),
            poll_interval_s=settings.poll_interval_ms / 1000,
            grace_s=float(settings.poller_grace_s),
            retention_days=settings.retention_days,
            concurrency=settings.queue_send_concurrency,
            rate_budgets=parse_budgets(settings.target_rate_budgets),
            max_lateness_s=float(settings.max_lateness_seconds),
            resend_after_s=settings.unclaimed_resend_s,
            max_backfills_per_tenant=settings.max_backfills_per_tenant,
            backfill_slots_per_minute_per_tenant=settings.backfill_slots_per_minute_per_tenant,
            max_retries_per_second_per_tenant=float(settings.max_retries_per_second_per_tenant),
            burst_head_s=float(settings.burst_lateness_target_s),
            every_region_releases=bool(settings.marks_scope),  # a Region of a multi-Region table
        )
        # Events only: a missed slot's alert goes to a worker (only workers may call targets).
        notifier = Notifier(self.event_publisher(metrics), routine=self.routine_events)
        return Poller(self.store, self.queues, self.clock, config, metrics, notifier)

    def auditor(self, metrics: MetricsSink | None = None) -> ChainAuditor:
        """The chain auditor (:mod:`punctual.auditing`): it repairs through the store, hands a lost
        range's ``missed`` alert to a worker through the (signing) queues, and publishes its events."""
        from punctual.auditing import AuditConfig, ChainAuditor, Repairer

        settings = self.settings
        config = AuditConfig(
            layout=settings.layout(),
            period_minutes=settings.audit_period_minutes,
            grace_s=float(settings.audit_grace_s),
            inflight_grace_s=float(settings.audit_inflight_grace_s),
            repair=settings.audit_repair,
        )
        repairer = Repairer(
            self.store, settings.layout(), settings.retention_days, self.queues, settings.routing()
        )
        return ChainAuditor(self.store, self.clock, config, repairer, metrics, self.event_publisher(metrics))

    def tick(self, metrics: MetricsSink | None = None) -> Tick:
        """The tick: it plans each coming minute from the read-only store and, when the stack
        names what to scale, sizes the workers for them (:mod:`punctual.dispatch.scaling`)."""
        sfn = self.client("stepfunctions")
        events = self.event_publisher(metrics)  # Burst Shortfall events
        return Tick(
            self.settings,
            sfn,
            self.reader,
            self.actuator(),
            metrics,
            self.tick_loads,
            events,
            self.ecs_lane(metrics),
        )

    def ecs_lane(self, metrics: MetricsSink | None = None) -> EcsLaneReadiness | None:
        """ECS worker tasks ahead of the ECS lane's slots, when the stack names the service's
        scalable target (None: off)."""
        settings = self.settings
        if not settings.ecs_service_resource_id or settings.ecs_ready_tasks <= settings.ecs_min_tasks:
            return None
        target = AwsScalableTarget(self.client("application-autoscaling"), settings.ecs_service_resource_id)
        return EcsLaneReadiness(
            self.reader,
            target,
            settings.ecs_min_tasks,
            settings.ecs_ready_tasks,
            settings.ecs_lane_sight_s,
            metrics,
        )

    @cached_property
    def tick_loads(self) -> dict[datetime, tuple[int, int]]:
        """What this process's ticks counted per minute (a warm tick reuses the last one's count)."""
        return {}

    def actuator(self) -> AwsActuator | None:
        """The capacity actuator, when there is something to scale (None: predictive scaling off)."""
        settings = self.settings
        if not (settings.worker_event_source_mappings or settings.burst_service):
            return None
        return AwsActuator(settings, self.client("lambda"), self.client("ecs"), self.client("sqs"))

    def worker(
        self,
        *,
        lease_timers: bool,
        invoker: TargetInvoker | None = None,
        metrics: MetricsSink | None = None,
        queues: QueuePort | None = None,
    ) -> Worker:
        """The execution core: heartbeat mode (``lease_timers``, the ECS worker) or message
        mode (the Lambda worker). ``queues`` replaces the signed SQS port (the ECS worker wraps
        it to batch its deletes: :class:`punctual.dispatch.queue_acks.BatchedDeletes`)."""
        from punctual.execution import JobServicePauser, SqsFailureSink, Worker, WorkerConfig
        from punctual.execution import worker as defaults  # looked up at call time (tests replace them)

        settings = self.settings
        config = WorkerConfig.from_settings(settings, lease_timers=lease_timers)
        invoker = invoker or defaults.default_invoker(settings, self.clock)
        signing_secrets = defaults.default_signing_secrets(settings)
        queues = queues or self.queues
        return Worker(
            self.store,
            queues,
            invoker,
            self.clock,
            config,
            metrics=metrics,
            failures=SqsFailureSink(self.client("sqs"), settings.failed_queue_url),
            signing_secrets=signing_secrets,
            pauser=JobServicePauser(self.store, queues, self.clock, config),
            signer=self.signer,
            dead_letters=defaults.default_dead_letters(settings, metrics),
            notifier=self.notifier(invoker, signing_secrets, metrics),
        )


@cache
def container() -> Container:
    """The process's container, from the ``PUNCTUAL_*`` environment (built once)."""
    return Container(Settings.from_env())


def reset() -> None:
    """Forget the process's container and its clients: the next :func:`container` reads the
    environment again (tests, and local mode's in-process servers, change it)."""
    container.cache_clear()
    aws.reset()


def run_poller(
    item: PollerItem,
    stop: Callable[[], bool],
    settings: Settings | None = None,
    clock: Clock | None = None,
    metrics: MetricsSink | None = None,
) -> dict[str, Any]:
    """Run one poller for its minute; returns the figures of its report."""
    base = container() if settings is None else Container(settings, clock)
    overrides: dict[str, Any] = {}
    if item.shard_count:
        overrides["shard_count"] = item.shard_count
    if item.near_shard_count:
        overrides["near_shard_count"] = item.near_shard_count
    # The plan names the layout the minute was sized with: the poller follows it.
    built = base.with_layout(**overrides) if overrides else base
    if metrics is None:
        from punctual.runtime.lambda_support import PowertoolsMetrics

        metrics = PowertoolsMetrics()
    if item.relay is not None:  # the second path to the next minute: off the poller's own path
        threading.Thread(target=relay_next, args=(base, item), name="relay", daemon=True).start()
    poller = built.poller(metrics)
    report = poller.run_minute(item.minute, item.group, item.group_count, stop=stop)
    delays = sorted(report.fire_delays_ms)
    return {
        "released": report.released,
        "stale": report.stale,
        "skipped": report.skipped,
        "superseded": report.superseded,
        "completed": report.completed,
        "fire_delay_p99_ms": delays[int(0.99 * (len(delays) - 1))] if delays else None,
    }


class AuditEvent(BaseModel):
    """The auditor's event: EventBridge's scheduled event (its ``time`` names the minute, so a
    retried invocation audits the same segments), or an enrolment of jobs stored before the audit
    index (``enrol_segment`` of ``enrol_segments``: one scan segment per invocation, by the
    auditor's handler)."""

    model_config = {"extra": "ignore"}
    time: AwareDatetime | None = None
    enrol_segments: int = Field(default=1, ge=1, le=1_000_000)  # (first: enrol_segment's check reads it)
    enrol_segment: int | None = Field(default=None, ge=0)

    @field_validator("enrol_segment")
    @classmethod
    def _segment_in_range(cls, segment: int | None, info: ValidationInfo) -> int | None:
        segments = info.data.get("enrol_segments")
        if segment is not None and segments is not None and segment >= segments:
            raise ValueError(f"must be below enrol_segments ({segments}): segments count from 0")
        return segment

    @classmethod
    def parse(cls, event: Any) -> AuditEvent:
        """The event, or a ValueError of one line naming the field it refuses (a bad enrolment
        payload would otherwise reach DynamoDB's Scan as a ValidationException)."""
        try:
            return cls.model_validate(event)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "event"
            why = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"bad auditor event: {where}: {why}") from None


def run_auditor(
    event: AuditEvent,
    stop: Callable[[], bool],
    settings: Settings | None = None,
    clock: Clock | None = None,
    metrics: MetricsSink | None = None,
) -> dict[str, Any]:
    """Audit the event's minute's share of the chains; the figures."""
    built = container() if settings is None else Container(settings, clock)
    if metrics is None:
        from punctual.runtime.lambda_support import PowertoolsMetrics

        metrics = PowertoolsMetrics()
    report = built.auditor(metrics).run(event.time or built.clock.now(), stop)
    return {
        "segments": report.segments,
        "jobs": report.jobs,
        "suspects": report.suspects,
        "deferred": report.deferred,
        "broken": report.broken,
        "repaired": report.repaired,
        "complete": report.complete,
    }


def relay_next(base: Container, item: PollerItem) -> list[str]:
    """Start the minute after ``item``'s if no tick has (idempotent by name: one DescribeExecution
    when it exists, which is the usual case); never raises (the tick is the first path)."""
    assert item.relay is not None
    settings = base.settings.model_copy(update=item.relay.model_dump())
    try:
        tick = Tick(settings, base.client("stepfunctions"), base.store)
        started = tick.start_minutes(base.clock.now(), minutes=[item.minute + timedelta(minutes=1)])
    except Exception:
        logging.getLogger("punctual.dispatch.tick").exception(
            "relaying the minute after %s failed", item.minute
        )
        return []
    if started:
        logging.getLogger("punctual.dispatch.tick").warning(
            "no tick had started %s: its pollers did", started
        )
    return started


def minute_item(minute: datetime, group: int = 0, group_count: int = 1) -> PollerItem:
    return PollerItem(minute=minute, group=group, group_count=group_count)
