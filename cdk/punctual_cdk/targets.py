"""Typed targets of a declared job, built from the user's own constructs.

Each renders the target as the job API takes it (with CloudFormation tokens for what the stack
resolves at deploy time), a stand-in with placeholders for the tokens (what synth-time validation
checks with the API's own models), and grants the job's execution role what calling it needs.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn

from punctual_cdk.nag import acknowledge, acknowledge_at_synth, nag_text

# What a token stands for while the spec is validated at synth (any value of the right shape).
PLACEHOLDERS = {
    "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:placeholder",
    "queue_arn": "arn:aws:sqs:us-east-1:123456789012:placeholder",
    "topic_arn": "arn:aws:sns:us-east-1:123456789012:placeholder",
    "event_bus_arn": "arn:aws:events:us-east-1:123456789012:event-bus/placeholder",
    "state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:placeholder",
    "role_arn": "arn:aws:iam::123456789012:role/placeholder",
    "url": "https://example.com/placeholder",
}


class JobTarget:
    """A job's target: ``fields`` as the API's ``target`` object, ``options`` any other member
    of it (``rate_budget_per_second``, ...)."""

    needs_role = True  # called as the job's execution role (its role_arn is the construct's)
    is_webhook = False  # an http target: the job has a signing secret

    def __init__(self, fields: dict[str, Any], options: dict[str, Any]) -> None:
        self.fields = {**fields, **options}

    def render(self) -> dict[str, Any]:
        return {key: value for key, value in self.fields.items() if value is not None}

    def sample(self) -> dict[str, Any]:
        """The target with each unresolved token replaced by a placeholder of its shape."""
        return {
            key: PLACEHOLDERS.get(key, "placeholder") if _is_token(value) else value
            for key, value in self.render().items()
        }

    def grant(self, role: iam.IRole) -> None:
        """Grant ``role`` what a call of this target needs."""


def _construct(value: Any, attribute: str, where: str, from_arn: str) -> Any:
    """``value``, a construct with ``attribute`` (its ARN); anything else is a ``TypeError`` naming
    the argument and how an ARN becomes one (QA23: an ARN string was an AttributeError)."""
    if not hasattr(value, attribute):
        raise TypeError(
            f"{where}: a construct (for an ARN: {from_arn}(scope, id, arn)), not {type(value).__name__}"
        )
    return value


def _is_token(value: Any) -> bool:
    return isinstance(value, str) and cdk.Token.is_unresolved(value)


class LambdaTarget(JobTarget):
    def __init__(
        self, function: lambda_.IFunction, *, invocation_type: str | None = None, **options: Any
    ) -> None:
        function = _construct(
            function, "function_arn", "LambdaTarget(function)", "lambda_.Function.from_function_arn"
        )
        super().__init__(
            {"type": "lambda", "function_arn": function.function_arn, "invocation_type": invocation_type},
            options,
        )
        self.function = function

    def grant(self, role: iam.IRole) -> None:
        self.function.grant_invoke(role)
        acknowledge_at_synth(  # (the function may be another stack's)
            role,
            lambda: f"IAM5[Resource::{nag_text(role, self.function.function_arn)}:*]",
            "Invoking the job's function by any of its versions or aliases (what grant_invoke grants).",
        )


class SqsTarget(JobTarget):
    def __init__(self, queue: sqs.IQueue, *, message_group_id: str | None = None, **options: Any) -> None:
        queue = _construct(queue, "queue_arn", "SqsTarget(queue)", "sqs.Queue.from_queue_arn")
        super().__init__(
            {"type": "sqs", "queue_arn": queue.queue_arn, "message_group_id": message_group_id}, options
        )
        self.queue = queue

    def grant(self, role: iam.IRole) -> None:
        self.queue.grant_send_messages(role)
        if self.queue.encryption_master_key is not None:
            for action in ("kms:ReEncrypt*", "kms:GenerateDataKey*"):
                acknowledge(
                    role,
                    f"IAM5[Action::{action}]",
                    "Sending to a queue encrypted with its own KMS key: the data-key actions SQS asks "
                    "for, on that key only (what grant_send_messages grants).",
                )


class SnsTarget(JobTarget):
    def __init__(self, topic: sns.ITopic, **options: Any) -> None:
        topic = _construct(topic, "topic_arn", "SnsTarget(topic)", "sns.Topic.from_topic_arn")
        super().__init__({"type": "sns", "topic_arn": topic.topic_arn}, options)
        self.topic = topic

    def grant(self, role: iam.IRole) -> None:
        self.topic.grant_publish(role)
        if getattr(self.topic, "master_key", None) is not None:
            acknowledge(  # (QA: cdk-nag makes topics encrypted, and then refused this grant)
                role,
                "IAM5[Action::kms:GenerateDataKey*]",
                "Publishing to a topic encrypted with its own KMS key: the data-key actions SNS asks "
                "for, on that key only (what grant_publish grants).",
            )


class EventBusTarget(JobTarget):
    def __init__(
        self,
        bus: events.IEventBus,
        *,
        detail_type: str | None = None,
        source: str | None = None,
        **options: Any,
    ) -> None:
        bus = _construct(bus, "event_bus_arn", "EventBusTarget(bus)", "events.EventBus.from_event_bus_arn")
        fields = {"type": "eventbridge", "event_bus_arn": bus.event_bus_arn}
        super().__init__({**fields, "detail_type": detail_type, "source": source}, options)
        self.bus = bus

    def grant(self, role: iam.IRole) -> None:
        self.bus.grant_put_events_to(role)


class StateMachineTarget(JobTarget):
    def __init__(self, state_machine: sfn.IStateMachine, **options: Any) -> None:
        from_arn = "sfn.StateMachine.from_state_machine_arn"
        state_machine = _construct(
            state_machine, "state_machine_arn", "StateMachineTarget(state_machine)", from_arn
        )
        super().__init__(
            {"type": "stepfunctions", "state_machine_arn": state_machine.state_machine_arn}, options
        )
        self.state_machine = state_machine

    def grant(self, role: iam.IRole) -> None:
        self.state_machine.grant_start_execution(role)


class HttpTarget(JobTarget):
    """A webhook: no role; the URL is checked by the API's own guard (and at every call)."""

    needs_role = False
    is_webhook = True

    def __init__(
        self, url: str, *, method: str | None = None, headers: dict[str, str] | None = None, **options: Any
    ) -> None:
        super().__init__({"type": "http", "url": url, "method": method, "headers": headers}, options)


class RawTarget(JobTarget):
    """The API's target object as a dict, sent as it is: nothing is granted and no role is made
    for it (an AWS target's ``role_arn`` is the dict's own)."""

    needs_role = False

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(dict(fields), {})
        self.is_webhook = fields.get("type") == "http" or ("type" not in fields and "url" in fields)


__all__ = [
    "EventBusTarget",
    "HttpTarget",
    "JobTarget",
    "LambdaTarget",
    "RawTarget",
    "SnsTarget",
    "SqsTarget",
    "StateMachineTarget",
]
