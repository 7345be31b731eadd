"""The tenant boundary: which resources a job may make the workers call, and as which role.

Every ARN a job names is a *callee*: its target, its dead-letter queue, each alert rule's target
and the bus it asks its execution events to be copied to (``events_bus``). Each callee passes
the same rules, at registration (422 naming the field) and again in the worker just before the
call (a permanent failure, nothing sent), so a job stored before a rule, or a list that changed
since, is stopped where it matters:

1. **Never one of this scheduler's own resources** (:mod:`punctual.security.ownership`): its queues,
   functions, state machines, table, topics, event bus, cluster and task definitions.
2. **An execution role** (``role_arn``) **is never one of the deployment's own roles** (its
   target role above all: naming it would borrow the operator's ``targetArnPatterns`` and pass
   ``requireTargetRole``), and fits the deployment's opt-in prefix when it has one
   (``executionRolePrefix``: the part of the ARN after ``role/`` must start with it, so a path
   ``/punctual/`` or a name prefix ``punctual-``). The opt-in tag (``executionRoleTag``, default
   ``punctual:execution-role`` = ``true``) is enforced by IAM on the workers' ``sts:AssumeRole``
   (see ``cdk/punctual_cdk/components/security.py``): a role without it cannot be assumed, whatever its
   trust policy says. It cannot be read at registration (the role is in the tenant's account).
3. **requireTargetRole**: every AWS callee names a role (a dead-letter queue takes its own
   ``role_arn``, else its target's).
4. **Punctual's event source is Punctual's**: an EventBridge target may not send events with
   source ``punctual`` (or ``punctual.*``, any case), so no job can forge the scheduler's events
   on a bus whose rules trust them. (The copy of a job's own events to its ``events_bus`` is
   Punctual's and keeps that source.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from punctual.runtime.settings import Settings
from punctual.security.ownership import OwnResources, own_resources

RESERVED_SOURCE = "punctual"
DEFAULT_EXECUTION_ROLE_TAG = "punctual:execution-role"


@dataclass(frozen=True)
class Callee:
    """One resource a job makes the workers call.

    Attributes
    ----------
    where
        The field that names it (``target``, ``dead_letter``, ``alerts.0.target``, ``events_bus``).
    target
        A target model (its ``type``, ARN fields and ``role_arn``).
    punctual_events
        The copy of Punctual's own events (``events_bus``): the source rule does not apply.
    """

    where: str
    target: Any
    punctual_events: bool = False

    @property
    def role_arn(self) -> str | None:
        role = getattr(self.target, "role_arn", None)
        return str(role) if role else None

    @property
    def is_aws(self) -> bool:
        return getattr(self.target, "type", "http") != "http"


@dataclass(frozen=True)
class Refusal:
    """Why a callee may not be called: the field to name and the reason."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field} refused: {self.reason}"


def dead_letter_callee(spec: Any) -> Callee | None:
    """The job's dead-letter queue as the SQS target the sender calls (its role, else the target's)."""
    dead_letter = getattr(spec, "dead_letter", None)
    if dead_letter is None:
        return None
    from punctual.models import SqsTarget  # late: the models pull in the schedule engine

    role = getattr(dead_letter, "role_arn", None) or getattr(spec.target, "role_arn", None)
    return Callee("dead_letter", SqsTarget(queue_arn=dead_letter.queue_arn, role_arn=role))


def events_callee(spec: Any) -> Callee | None:
    """The bus the job's execution events are copied to, if it asked for one."""
    bus = getattr(spec, "events_bus", None)
    return None if bus is None else Callee("events_bus", bus, punctual_events=True)


def callees(spec: Any) -> list[Callee]:
    """Every resource ``spec`` (a job or its spec) makes the workers call, with its field."""
    found = [Callee("target", spec.target)]
    found.extend(Callee(f"alerts.{i}.target", rule.target) for i, rule in enumerate(spec.alerts))
    for extra in (dead_letter_callee(spec), events_callee(spec)):
        if extra is not None:
            found.append(extra)
    return found


def role_name_part(role_arn: str) -> str:
    """What follows ``role/`` in a role ARN (the path and the name): ``punctual/orders``."""
    return role_arn.split(":role/", 1)[1] if ":role/" in role_arn else ""


class Boundary:
    """Applies the rules of the module notes to callees.

    Parameters
    ----------
    own
        Returns the deployment's own resources and roles (loaded once, on first use).
    require_target_role
        Every AWS callee must name a role.
    role_prefix
        An execution role's ARN after ``role/`` must start with this ("" : any).
    role_tag
        The opt-in tag IAM requires on an execution role (named in messages only).
    """

    def __init__(
        self,
        own: Callable[[], OwnResources] | None = None,
        *,
        require_target_role: bool = False,
        role_prefix: str = "",
        role_tag: str = DEFAULT_EXECUTION_ROLE_TAG,
    ) -> None:
        self.own: Callable[[], OwnResources] = own or OwnResources
        self.require_target_role = require_target_role
        self.role_prefix = role_prefix
        self.role_tag = role_tag

    @classmethod
    def of(cls, settings: Settings, own: Callable[[], OwnResources] | None = None) -> Boundary:
        """The deployment's boundary (its own resources from ``settings`` unless ``own`` is given)."""
        return cls(
            own or (lambda: own_resources(settings)),
            require_target_role=settings.require_target_role,
            role_prefix=settings.execution_role_prefix,
            role_tag=settings.execution_role_tag,
        )

    def refusal(self, callee: Callee) -> Refusal | None:
        """The first rule ``callee`` breaks, or None."""
        if not callee.is_aws:
            return None
        own = self.own()
        arn = own.owned_arn(callee.target)
        if arn is not None:
            return Refusal(
                callee.where,
                f"{arn} is one of this scheduler's own resources (its queues, functions, state machines, "
                "table, topics, event bus, cluster and task definitions are never targets)",
            )
        role = callee.role_arn
        if role is not None:
            found = self.role_refusal(role, own)
            if found is not None:
                return Refusal(f"{callee.where}.role_arn", found)
        elif self.require_target_role:
            return Refusal(
                f"{callee.where}.role_arn",
                "this deployment requires an execution role on every AWS target: set "
                f"{callee.where}.role_arn (a role in your account that trusts the scheduler and carries "
                "the opt-in tag; see docs/tenants.md)",
            )
        source = getattr(callee.target, "source", None)
        if not callee.punctual_events and isinstance(source, str) and reserved_source(source):
            return Refusal(
                f"{callee.where}.source",
                f"source {source[:80]!r} is reserved for the scheduler's own events; choose your own",
            )
        return None

    def role_refusal(self, role_arn: str, own: OwnResources | None = None) -> str | None:
        """Why ``role_arn`` may not be a job's execution role, or None."""
        if (own or self.own()).owns(role_arn):
            return (
                f"{role_arn} is one of this scheduler's own roles; an execution role is a role of "
                "yours that opted in to the scheduler"
            )
        if self.role_prefix and not role_name_part(role_arn).startswith(self.role_prefix):
            return (
                f"{role_arn} has not opted in: this deployment assumes only roles whose path and name "
                f"start with {self.role_prefix!r} (and that carry the tag {self.role_tag}=true)"
            )
        return None

    def first_refusal(self, spec: Any) -> Refusal | None:
        """The first callee of ``spec`` that breaks a rule."""
        for callee in callees(spec):
            found = self.refusal(callee)
            if found is not None:
                return found
        return None


def reserved_source(source: str) -> bool:
    """Whether an event source is Punctual's own (``punctual``, ``punctual.*``; any case, spaces)."""
    text = source.strip().lower()
    return text == RESERVED_SOURCE or text.startswith(RESERVED_SOURCE + ".")


__all__ = [
    "DEFAULT_EXECUTION_ROLE_TAG",
    "RESERVED_SOURCE",
    "Boundary",
    "Callee",
    "Refusal",
    "callees",
    "dead_letter_callee",
    "events_callee",
    "reserved_source",
    "role_name_part",
]
