"""The scheduler's own resources: never a job's target.

A tenant who could name one of Punctual's own queues, functions, state machines, tables,
topics, clusters or task definitions as a target could forge dispatch messages, invoke the
API function with a made-up caller, or run a worker task: act as every other tenant. So
registration refuses such a target (422), the worker refuses to call one, and IAM backs
both (the role that calls targets is denied every own resource).

The stack publishes its own ARNs in an SSM parameter (``PUNCTUAL_OWN_ARNS_PARAMETER``: a
comma-separated list, read once per process); local mode lists them in
``PUNCTUAL_OWN_ARNS``. Both may be set; the union counts.

An ARN is compared by what it names, not by its spelling: a Lambda function or a state
machine with a qualifier (``:prod``, ``:3``) is the function or machine itself, a task
definition with a revision is its family, an IAM role is its account and name (whatever path
the ARN spells: a role's name is unique in its account).

The list also holds the stack's IAM roles: none of them may be a job's execution role
(:mod:`punctual.security.boundary`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from punctual.runtime.settings import Settings

logger = logging.getLogger(__name__)

# The fields of each target type that name an AWS resource.
TARGET_ARN_FIELDS: dict[str, tuple[str, ...]] = {
    "lambda": ("function_arn",),
    "sqs": ("queue_arn",),
    "sns": ("topic_arn",),
    "eventbridge": ("event_bus_arn",),
    "stepfunctions": ("state_machine_arn",),
    "ecs": ("cluster_arn", "task_definition_arn"),
}


def resource_key(arn: str) -> str:
    """What an ARN names, qualifiers dropped: ``arn:aws:lambda:r:a:function:f:prod`` → ``...:function:f``.

    Unknown shapes are returned as they are (compared exactly).
    """
    parts = arn.strip().split(":", 5)
    if len(parts) != 6:
        return arn.strip()
    head, resource = ":".join(parts[:5]), parts[5]
    service = parts[2]
    if service == "lambda" and resource.startswith("function:"):
        resource = "function:" + resource.split(":")[1]
    elif service == "states" and resource.startswith("stateMachine:"):
        resource = "stateMachine:" + resource.split(":")[1]
    elif service == "ecs" and resource.startswith("task-definition/"):
        resource = resource.split(":")[0]
    elif service == "dynamodb" and resource.startswith("table/"):
        resource = "/".join(resource.split("/")[:2])
    elif service == "iam" and resource.startswith("role/"):
        # IAM does not tell role names apart by case (QA21: role/punctualtargetrole passed as
        # another role than the own role/PunctualTargetRole)
        resource = "role/" + resource.rsplit("/", 1)[-1].lower()
    return f"{head}:{resource}"


@dataclass(frozen=True)
class OwnResources:
    """The set of resources no target may name.

    Attributes
    ----------
    keys
        :func:`resource_key` of every own ARN.
    """

    keys: frozenset[str] = frozenset()

    @classmethod
    def of(cls, arns: Iterable[str]) -> OwnResources:
        return cls(frozenset(resource_key(a) for a in arns if a and a.strip()))

    def __bool__(self) -> bool:
        return bool(self.keys)

    def owns(self, arn: str) -> bool:
        """Whether ``arn`` names one of the own resources or roles."""
        return resource_key(arn) in self.keys

    def owned_arn(self, target: Any) -> str | None:
        """The first ARN of ``target`` that names an own resource, else None."""
        kind = target.get("type") if isinstance(target, dict) else getattr(target, "type", None)
        for name in TARGET_ARN_FIELDS.get(str(kind), ()):
            value = target.get(name) if isinstance(target, dict) else getattr(target, name, None)
            if isinstance(value, str) and resource_key(value) in self.keys:
                return value
        return None

    def refusal(self, target: Any) -> str | None:
        """Why ``target`` may not be called, or None when it names no own resource."""
        arn = self.owned_arn(target)
        if arn is None:
            return None
        return (
            f"{arn} is one of this scheduler's own resources (its queues, functions, state "
            "machines, table, topics, cluster and task definitions are never targets)"
        )


def parse_arn_list(text: str) -> list[str]:
    """A comma-separated (or newline-separated) list of ARNs."""
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


_lock = threading.Lock()
_loaded: dict[tuple[tuple[str, ...], str], OwnResources] = {}


def own_resources(settings: Settings, ssm: Callable[[], Any] | None = None) -> OwnResources:
    """The own resources of this deployment (``PUNCTUAL_OWN_ARNS`` and the SSM parameter), cached.

    Parameters
    ----------
    settings
        ``own_arns`` and ``own_arns_parameter``.
    ssm
        Returns an SSM client (default: a boto3 one); called only when a parameter is named.

    Raises
    ------
    Exception
        The parameter cannot be read: nothing is registered or called until it can be
        (failing closed; the API answers 5xx, the worker retries).
    """
    key = (tuple(settings.own_arns), settings.own_arns_parameter)
    with _lock:
        cached = _loaded.get(key)
    if cached is not None:
        return cached
    arns = list(settings.own_arns)
    if settings.own_arns_parameter:
        if ssm is None:
            from punctual.runtime import aws

            client = aws.client("ssm")
        else:
            client = ssm()
        value = client.get_parameter(Name=settings.own_arns_parameter)["Parameter"]["Value"]
        arns.extend(parse_arn_list(str(value)))
    found = OwnResources.of(arns)
    with _lock:
        _loaded[key] = found
    return found


def forget() -> None:
    """Drop the cached lists (tests)."""
    with _lock:
        _loaded.clear()
