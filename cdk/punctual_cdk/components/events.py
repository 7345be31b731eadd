"""Execution events: the EventBridge bus the pollers and workers publish to (least privilege).

The stack always makes a bus of its own, ``<stack>-events``, listed with the stack's own
resources (no job may target it, so none can forge Punctual's events there) and guarded by a
resource policy: nobody but its publishers' roles (pollers, workers, the tick and the chain
auditor) may ``events:PutEvents`` on it, whatever their identity policies allow. ``eventsBus``
(context) chooses where the events go: ``stack`` (the default) or ``default``, the account's
default bus (where every principal that may create rules reads every tenant's events: the choice
of stacks made before issue 31, kept for their migration, see the README). The publishers may
``events:PutEvents`` on the chosen bus only, and only while ``eventsEnabled`` is true; the
runtime reads the bus from ``PUNCTUAL_EVENTS_BUS``.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        self.bus = events.EventBus(self, "Bus", event_bus_name=f"{stack_name}-events")
        if config.events_bus == "stack":
            self.bus_arn = self.bus.event_bus_arn
        else:
            stack = cdk.Stack.of(self)
            self.bus_arn = f"arn:{stack.partition}:events:{stack.region}:{stack.account}:event-bus/default"

    def grant_put(self, role: iam.IRole) -> None:
        """``events:PutEvents`` on the chosen bus only (nothing when events are turned off)."""
        if not self.enabled:
            return
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["events:PutEvents"], resources=[self.bus_arn])
        )

    def only_publishers(self, publishers: Sequence[iam.IRole]) -> None:
        """The bus's resource policy: PutEvents by anyone but ``publishers`` is denied."""
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyPunctualPublishes",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in publishers]}},
            )
        )
