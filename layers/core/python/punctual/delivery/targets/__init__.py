"""Targets: what a job does when its slot fires.

:class:`DefaultTargetInvoker` is the :class:`~punctual.delivery.targets.base.TargetInvoker`
the worker uses: it fills the payload's placeholders (:func:`render_payload`) and
hands the call to the adapter for ``target.type``. Adapters live in
:mod:`punctual.delivery.targets.webhooks` and :mod:`punctual.delivery.targets.aws_services`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from punctual.delivery.targets.aws_clients import Boto3ClientFactory, ClientFactory
from punctual.delivery.targets.aws_services import (
    EventBridgeTargetAdapter,
    LambdaTargetAdapter,
    SnsTargetAdapter,
    SqsTargetAdapter,
    StepFunctionsTargetAdapter,
)
from punctual.delivery.targets.base import Outcome, SlotContext, TargetAdapter, TargetInvoker, TargetResult
from punctual.delivery.targets.ecs import ECS_POLL_INTERVAL_S, EcsTargetAdapter
from punctual.delivery.targets.payload import PLACEHOLDERS, render_payload
from punctual.delivery.targets.webhooks import (
    BlockedTargetError,
    ConnectionFactory,
    HttpTargetAdapter,
    guard_url,
)
from punctual.runtime.clock import Clock
from punctual.runtime.settings import Platform, Settings
from punctual.security.boundary import Boundary, Callee
from punctual.security.ownership import OwnResources, own_resources

__all__ = [
    "PLACEHOLDERS",
    "BlockedTargetError",
    "DefaultTargetInvoker",
    "Outcome",
    "SlotContext",
    "TargetAdapter",
    "TargetInvoker",
    "TargetResult",
    "guard_url",
    "render_payload",
]

logger = logging.getLogger(__name__)


class _LazyClients:
    """Creates the default boto3 factory on first use (HTTP-only runs never need AWS)."""

    def __init__(self, default_role_arn: str = "") -> None:
        self.default_role_arn = default_role_arn  # AWS targets without a role_arn are called as this role
        self._factory: Boto3ClientFactory | None = None
        self._lock = threading.Lock()

    def __call__(self, service: str, /, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._factory is None:
                self._factory = Boto3ClientFactory(default_role_arn=self.default_role_arn)
        return self._factory(service, *args, **kwargs)


class DefaultTargetInvoker:
    """Runs any job's target: renders the payload, dispatches on ``target.type``.

    Never raises: an unknown type is a permanent failure, and an adapter that
    breaks its promise and raises becomes a retryable failure (logged).

    Parameters
    ----------
    clients : ClientFactory or None
        ``clients(service)`` returns a boto3 client (see :mod:`punctual.delivery.targets.aws_services`);
        None builds :class:`~punctual.delivery.targets.aws_clients.Boto3ClientFactory` on first use.
    settings : Settings
        ``target_allow_cidrs`` opens addresses the SSRF guard would refuse;
        ``target_role_arn`` is the role AWS targets without ``role_arn`` are called as
        (default factory only); ``require_target_role`` refuses those targets; the own
        resources (:mod:`punctual.security.ownership`) are never called, nor any callee the tenant boundary
        refuses (:mod:`punctual.security.boundary`: own roles, roles that did not opt in, Punctual's source);
        nor is a webhook to the AWS endpoint the components use (``AWS_ENDPOINT_URL``, local mode).
    clock : Clock, optional
        Webhook timestamps, ``Retry-After`` dates, ECS timeouts and poll sleeps.
    resolver : callable, optional
        ``getaddrinfo``-shaped resolver for webhooks.
    connection_factory : ConnectionFactory, optional
        Opens pinned webhook connections (tests, custom trust stores).
    ecs_poll_interval_s : float, optional
        Seconds between DescribeTasks polls.
    adapters : mapping of str to TargetAdapter, optional
        Replace or add adapters by type (local mode runs Lambda handlers itself).

    Raises
    ------
    ValueError
        ``settings.target_allow_cidrs`` holds something that is not a CIDR block.
    """

    def __init__(
        self,
        clients: ClientFactory | None,
        settings: Settings,
        *,
        clock: Clock | None = None,
        resolver: Callable[..., Sequence[tuple[Any, ...]]] | None = None,
        connection_factory: ConnectionFactory | None = None,
        ecs_poll_interval_s: float = ECS_POLL_INTERVAL_S,
        adapters: Mapping[str, TargetAdapter] | None = None,
        own: Callable[[], OwnResources] | None = None,
    ) -> None:
        factory: ClientFactory = clients if clients is not None else _LazyClients(settings.target_role_arn)
        self.own: Callable[[], OwnResources] = own or (lambda: own_resources(settings))
        self.boundary = Boundary.of(settings, self.own)
        self.adapters: dict[str, TargetAdapter] = {
            "http": HttpTargetAdapter(
                settings.target_allow_cidrs,
                clock=clock,
                resolver=resolver,
                connection_factory=connection_factory,
                own_endpoints=Platform.from_env().endpoint_urls,
            ),
            "lambda": LambdaTargetAdapter(factory),
            "sqs": SqsTargetAdapter(factory),
            "sns": SnsTargetAdapter(factory),
            "eventbridge": EventBridgeTargetAdapter(factory),
            "stepfunctions": StepFunctionsTargetAdapter(factory),
            "ecs": EcsTargetAdapter(factory, clock=clock, poll_interval_s=ecs_poll_interval_s),
        }
        self.adapters.update(adapters or {})

    @staticmethod
    def client_factory(settings: Settings) -> ClientFactory:
        """The boto3 client factory the default invoker's AWS adapters use (built on first use)."""
        return _LazyClients(settings.target_role_arn)

    def abandon(self, target: Any, ctx: SlotContext) -> int:
        """The slot ``ctx`` ended without the run its last attempt left behind: stop what is still
        running of it (an ECS task, which the next attempt would have adopted). How many."""
        adapter = self.adapters.get(str(getattr(target, "type", None)))
        abandon = getattr(adapter, "abandon", None)
        return abandon(target, ctx) if callable(abandon) else 0

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Run ``target`` for the slot ``ctx`` with ``payload`` rendered.

        Parameters
        ----------
        target : target model or mapping
            One of the ``punctual.models`` target specs (a mapping is validated
            into one).
        payload : Any
            The job's payload, placeholders unfilled.
        ctx : SlotContext
            The slot being run.

        Returns
        -------
        TargetResult
        """
        kind = target.get("type") if isinstance(target, Mapping) else getattr(target, "type", None)
        adapter = self.adapters.get(str(kind))
        if adapter is None:
            return TargetResult.permanent(f"unknown target type {kind!r}")
        try:
            if isinstance(target, Mapping):
                target = _validate_target(target)
            # Registration refuses these too; a job stored before, or a list that changed, stops here.
            refusal = self.boundary.refusal(Callee(ctx.target_field, target))
            if refusal is not None:
                return TargetResult.permanent(str(refusal)[:500])
            rendered = render_payload(payload, ctx)
            return adapter.invoke(target, rendered, ctx)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            return TargetResult.permanent(f"invalid {kind} target: {exc}"[:500])
        except Exception as exc:
            logger.exception("target adapter %s raised for job %s slot %s", kind, ctx.job_id, ctx.slot)
            return TargetResult.retryable(
                f"internal error in the {kind} adapter: {type(exc).__name__}: {exc}"[:500]
            )


def _validate_target(target: Mapping[str, Any]) -> Any:
    from pydantic import TypeAdapter

    from punctual.models import Target  # late: the models pull in the schedule engine

    return TypeAdapter(Target).validate_python(dict(target))
