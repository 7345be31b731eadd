"""Execution events: the EventBridge bus the pollers and workers publish to (least privilege).

``eventsBus`` (context) chooses the bus: ``default`` (the account's default bus) or ``stack``
(a bus this stack creates, ``<stack>-events``, listed with the stack's own resources so that no
job can target it and forge Punctual's events). The pollers and the workers may
``events:PutEvents`` on that bus only, and only while ``eventsEnabled`` is true; the runtime
reads the bus from ``PUNCTUAL_EVENTS_BUS``.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

from punctual_cdk.config import PunctualConfig


class ExecutionEvents(Construct):
    """The bus execution events go to, and the grant to publish on it."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PunctualConfig, stack_name: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.enabled = config.events_enabled
        self.bus: events.EventBus | None = None
        if config.events_bus == "stack":
            self.bus = events.EventBus(self, "Bus", event_bus_name=f"{stack_name}-events")
            self.bus_arn = self.bus.event_bus_arn
        else:
            stack = cdk.Stack.of(self)
            self.bus_arn = f"arn:{stack.partition}:events:{stack.region}:{stack.account}:event-bus/default"

    def grant_put(self, role: iam.IRole) -> None:
        """``events:PutEvents`` on this bus only (nothing when events are turned off)."""
        if not self.enabled:
            return
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["events:PutEvents"], resources=[self.bus_arn])
        )
