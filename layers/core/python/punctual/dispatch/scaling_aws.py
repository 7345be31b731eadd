"""The AWS capacity actuator: the worker event-source mappings and the burst ECS service.

It changes only what the stack names on the tick (``PUNCTUAL_WORKER_EVENT_SOURCE_MAPPINGS``,
``PUNCTUAL_BURST_SERVICE`` in ``PUNCTUAL_BURST_CLUSTER``), and the tick's role may call
``lambda:Get/UpdateEventSourceMapping`` on those mappings, ``ecs:DescribeServices`` and
``ecs:UpdateService`` on that service and ``sqs:GetQueueAttributes`` on the short queues,
nothing else. Each change is read first and written only when it differs, so a decision that
holds costs reads (free control-plane calls) and no update; an ``UpdateEventSourceMapping``
refused because the mapping is still applying the previous one (``ResourceInUseException``)
is left to the next tick. A failure of one resource never stops the other, nor the minute's
start: the tick logs it and goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from punctual.dispatch.scaling import ScalingDecision
from punctual.runtime.settings import Settings

log = logging.getLogger("punctual.dispatch.scaling")

BACKLOG_ATTRIBUTES = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")


class AwsActuator:
    """Applies a :class:`ScalingDecision` to the deployment.

    Parameters
    ----------
    settings
        ``worker_event_source_mappings``, ``burst_service``, ``burst_cluster``, ``short_queue_urls``.
    lambda_client, ecs_client, sqs_client
        boto3 clients (the composition root's).
    """

    def __init__(self, settings: Settings, lambda_client: Any, ecs_client: Any, sqs_client: Any) -> None:
        self.settings = settings
        self.lambda_client = lambda_client
        self.ecs_client = ecs_client
        self.sqs_client = sqs_client

    def backlog(self) -> int:
        """Messages waiting or in flight in the short queues (0 for a queue that cannot be read)."""
        total = 0
        for url in self.settings.short_queue_urls:
            try:
                reply = self.sqs_client.get_queue_attributes(
                    QueueUrl=url, AttributeNames=list(BACKLOG_ATTRIBUTES)
                )
            except Exception:
                log.exception("reading the backlog of %s failed", url)
                continue
            attributes = reply.get("Attributes", {})
            total += sum(int(attributes.get(name, 0)) for name in BACKLOG_ATTRIBUTES)
        return total

    def running(self) -> int | None:
        """The burst service's running tasks (None: no burst service, or it cannot be read)."""
        if not self.settings.burst_service:
            return None
        try:
            described = self.ecs_client.describe_services(
                cluster=self.settings.burst_cluster, services=[self.settings.burst_service]
            )
        except Exception:
            log.exception("reading the burst service's running tasks failed")
            return None
        services = described.get("services") or []
        return int(services[0].get("runningCount", 0)) if services else None

    def apply(self, decision: ScalingDecision) -> list[str]:
        changed: list[str] = []
        for uuid in self.settings.worker_event_source_mappings:
            try:
                changed += self._concurrency(uuid, decision.max_concurrency)
            except Exception:
                log.exception("scaling event source mapping %s failed: the next tick tries again", uuid)
        if self.settings.burst_service:
            try:
                changed += self._burst_tasks(decision.burst_workers)
            except Exception:
                log.exception("scaling the burst service failed: the next tick tries again")
        return changed

    def _concurrency(self, uuid: str, wanted: int) -> list[str]:
        mapping = self.lambda_client.get_event_source_mapping(UUID=uuid)
        current = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
        if current == wanted:
            return []
        scaling = {"MaximumConcurrency": wanted}
        self.lambda_client.update_event_source_mapping(UUID=uuid, ScalingConfig=scaling)
        return [f"event source {uuid} MaximumConcurrency {current} -> {wanted}"]

    def _burst_tasks(self, wanted: int) -> list[str]:
        cluster, service = self.settings.burst_cluster, self.settings.burst_service
        described = self.ecs_client.describe_services(cluster=cluster, services=[service])
        services = described.get("services") or []
        current = services[0].get("desiredCount") if services else None
        if current == wanted:
            return []
        self.ecs_client.update_service(cluster=cluster, service=service, desiredCount=wanted)
        return [f"burst service desired tasks {current} -> {wanted}"]
