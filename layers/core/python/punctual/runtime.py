"""Wiring: the core's objects built from ``PUNCTUAL_*`` settings, for handlers and local mode."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field

from punctual import aws
from punctual.clock import Clock, SystemClock
from punctual.message_auth import signer_from
from punctual.observability import MetricsSink
from punctual.polling import Poller, PollerConfig
from punctual.queues import SqsQueues
from punctual.settings import Settings
from punctual.store.dynamo import DynamoStore
from punctual.timers import TimerLayout


class PollerItem(BaseModel):
    """One Map item of the tick's state machine: the minute and the shard group a poller owns."""

    minute: AwareDatetime
    group: int = Field(ge=0)
    group_count: int = Field(ge=1)
    shard_count: int | None = Field(default=None, ge=1)
    near_shard_count: int | None = Field(default=None, ge=1)


def layout_from(settings: Settings) -> TimerLayout:
    return TimerLayout(settings.shard_count, settings.near_shard_count, settings.far_threshold_s)


def store_from(settings: Settings) -> DynamoStore:
    return DynamoStore(aws.client("dynamodb"), settings.table_name, layout_from(settings))


def reader_from(settings: Settings) -> DynamoStore:
    """A store for reads only (the tick): no layout, so it never records or checks one.

    Counting timers and reading watermarks needs no shard layout, and the tick's role may only
    read (it holds no PutItem to record the layout, nor GetItem to check it).
    """
    return DynamoStore(aws.client("dynamodb"), settings.table_name)


def poller_from(settings: Settings, clock: Clock | None = None, metrics: MetricsSink | None = None) -> Poller:
    config = PollerConfig(
        layout=layout_from(settings),
        short_queue_urls=tuple(settings.short_queue_urls),
        long_queue_urls=tuple(settings.long_queue_urls),
        poll_interval_s=settings.poll_interval_ms / 1000,
        grace_s=float(settings.poller_grace_s),
        retention_days=settings.retention_days,
        concurrency=settings.queue_send_concurrency,
    )
    queues = SqsQueues(
        aws.client("sqs"), concurrency=settings.queue_send_concurrency, signer=signer_from(settings)
    )
    return Poller(
        store_from(settings), queues, clock or SystemClock(settings.clock_offset_s), config, metrics
    )


def run_poller(
    item: PollerItem,
    stop: Callable[[], bool],
    settings: Settings | None = None,
    clock: Clock | None = None,
    metrics: MetricsSink | None = None,
) -> dict[str, Any]:
    """Run one poller for its minute; returns the figures of its report."""
    settings = settings or Settings.from_env()
    overrides: dict[str, Any] = {}
    if item.shard_count:
        overrides["shard_count"] = item.shard_count
    if item.near_shard_count:
        overrides["near_shard_count"] = item.near_shard_count
    if overrides:
        # The plan names the layout the minute was sized with: the poller follows it.
        settings = settings.model_copy(update=overrides)
    if metrics is None:
        from punctual.lambda_support import PowertoolsMetrics

        metrics = PowertoolsMetrics()
    poller = poller_from(settings, clock, metrics)
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


def minute_item(minute: datetime, group: int = 0, group_count: int = 1) -> PollerItem:
    return PollerItem(minute=minute, group=group, group_count=group_count)
