"""The ECS RunTask target: run a task for a slot, adopt the one already running, track it to its end."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from punctual.delivery.targets.aws_clients import ClientFactory, api_client
from punctual.delivery.targets.aws_services import (
    access_denied,
    arn_parts,
    classify_aws_error,
    json_body,
    slot_digest,
)
from punctual.delivery.targets.base import Outcome, SlotContext, TargetResult
from punctual.delivery.targets.payload import nominal_instant
from punctual.runtime.clock import Clock, SystemClock
from punctual.timing.instants import format_instant_adaptive

logger = logging.getLogger(__name__)

MAX_ECS_OVERRIDE_CHARS = 8192  # AWS limit on the containerOverrides JSON
ECS_POLL_INTERVAL_S = 10.0
ECS_CANCEL_POLL_S = 0.5  # a cancelled run stops tracking its task within this long
ECS_MAX_DESCRIBE_ERRORS = 5  # consecutive DescribeTasks failures before giving up


OVERRIDES_TOO_LARGE = (
    f"payload too large for container overrides ({MAX_ECS_OVERRIDE_CHARS} characters in all, "
    "the PUNCTUAL_* environment and the payload as JSON in PUNCTUAL_PAYLOAD)"
)


def container_overrides(ctx: SlotContext, payload: Any, container: str | None) -> dict[str, Any]:
    """RunTask's ``overrides`` for the slot: the ``PUNCTUAL_*`` environment of ``container``
    (none without one). Registration measures it too (``punctual.usecases.job_admission``).

    Raises
    ------
    TypeError, ValueError
        The payload is not JSON.
    """
    environment: list[dict[str, str]] = [
        {"name": "PUNCTUAL_JOB_ID", "value": ctx.job_id},
        {"name": "PUNCTUAL_TENANT", "value": ctx.tenant},
        {"name": "PUNCTUAL_SLOT", "value": ctx.slot},
        {"name": "PUNCTUAL_ATTEMPT", "value": str(ctx.attempt)},
        {"name": "PUNCTUAL_SCHEDULED_AT", "value": format_instant_adaptive(nominal_instant(ctx))},
        {"name": "PUNCTUAL_IDEMPOTENCY_KEY", "value": ctx.idempotency_key},
        {"name": "PUNCTUAL_FENCING_TOKEN", "value": ctx.fencing_token},
        {"name": "PUNCTUAL_PAYLOAD", "value": json_body(payload)},
    ]
    return {"containerOverrides": [{"name": container, "environment": environment}]} if container else {}


def _started_by(ctx: SlotContext) -> str:
    """ECS ``startedBy`` (36 characters at most): marks the task as this slot's."""
    return "punctual-" + slot_digest(ctx.tenant, ctx.idempotency_key)[:27]


class EcsTargetAdapter:
    """``ecs``: RunTask, then poll DescribeTasks until the task stops.

    * A task already RUNNING for this slot (``startedBy`` marks it) is adopted,
      not started again: a worker that took over a crashed worker's execution
      keeps tracking the same task.
    * RunTask's ``clientToken`` is derived from slot and attempt, so an SDK retry
      of the call starts one task.
    * The container gets ``PUNCTUAL_JOB_ID``, ``PUNCTUAL_SLOT``,
      ``PUNCTUAL_ATTEMPT``, ``PUNCTUAL_SCHEDULED_AT``,
      ``PUNCTUAL_IDEMPOTENCY_KEY``, ``PUNCTUAL_FENCING_TOKEN`` and
      ``PUNCTUAL_PAYLOAD`` (JSON) in its environment: ``container_name``, else
      the task definition's first essential container.
    * Between polls ``ctx.heartbeat()`` extends the lease; if the lease was lost, or
      the run is cancelled (``ctx.cancel``: the worker shuts down), the adapter stops
      tracking and leaves the task running for the next attempt, which adopts it.
      When ``ctx.timeout_s`` passes, the task is stopped and the result is a
      retryable time-out. No poll sleeps past that instant, and each ECS call is
      bounded by :func:`api_call_timeouts`, so the adapter returns at most two
      calls (the last DescribeTasks and the StopTask) after the timeout.
    * The exit code decides: ``container_name``'s, else every essential
      container's. All 0 succeeds; anything else, or a task that failed to
      start, is a retryable failure with the stop reason in the summary.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``ecs`` client.
    clock : Clock, optional
        Measures the job timeout and sleeps between polls.
    poll_interval_s : float, optional
        Seconds between DescribeTasks calls (each also heartbeats).
    """

    def __init__(
        self,
        clients: ClientFactory,
        *,
        clock: Clock | None = None,
        poll_interval_s: float = ECS_POLL_INTERVAL_S,
    ) -> None:
        self.clients = clients
        self.clock: Clock = clock or SystemClock()
        self.poll_interval_s = poll_interval_s
        self._essentials: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Run (or adopt) the slot's task and wait for it to stop; see the class notes."""
        cluster = str(target.cluster_arn)
        started_at = self.clock.now()
        try:
            region, _, _ = arn_parts(cluster)
        except ValueError as exc:
            return TargetResult.permanent(f"ecs target: {exc}")
        try:
            client = api_client(self.clients, "ecs", region, target, ctx)
            named = getattr(target, "container_name", None)
            decisive = (
                (named,) if named else self._essential_containers(client, str(target.task_definition_arn))
            )
            task_arn, adopted = self._start(client, target, payload, ctx, decisive[0] if decisive else None)
        except _EcsFailure as failure:
            return failure.result
        except Exception as exc:
            return classify_aws_error(exc, "ecs")
        result = self._track(client, cluster, task_arn, ctx, started_at, decisive)
        result.detail.setdefault("task_arn", task_arn)
        result.detail["adopted"] = adopted
        return result

    def abandon(self, target: Any, ctx: SlotContext) -> int:
        """Stop the slot's task still running (``startedBy`` marks it) when the slot ended without
        it: the attempt that would have adopted it was refused (attempts or ``max_age_seconds``
        used up, the spec superseded). Returns how many were stopped; errors are logged.

        QA: a crashed (or handed-back) run's task went on untracked, past the job's timeout and
        with no attempt left to stop it, while the record said the slot had ended."""
        cluster = str(target.cluster_arn)
        try:
            client = api_client(self.clients, "ecs", arn_parts(cluster)[0], target, ctx)
            running = client.list_tasks(cluster=cluster, startedBy=_started_by(ctx), desiredStatus="RUNNING")
            arns = [str(arn) for arn in running.get("taskArns") or []]
            for arn in arns:
                client.stop_task(
                    cluster=cluster, task=arn, reason="Punctual: the slot ended without this task"
                )
        except Exception as exc:
            logger.warning("could not stop the ecs task of %s %s: %s", ctx.job_id, ctx.slot, exc)
            return 0
        return len(arns)

    # -- starting

    def _start(
        self, client: Any, target: Any, payload: Any, ctx: SlotContext, container: str | None
    ) -> tuple[str, bool]:
        cluster = str(target.cluster_arn)
        started_by = _started_by(ctx)
        try:
            running = client.list_tasks(cluster=cluster, startedBy=started_by, desiredStatus="RUNNING")
        except Exception as exc:
            if not access_denied(exc):
                raise _EcsFailure(classify_aws_error(exc, "ecs ListTasks")) from None
            # Without ecs:ListTasks a running task cannot be adopted; starting one is
            # still right (the container sees the idempotency key).
            logger.warning("ecs:ListTasks denied on %s: running tasks of a slot are not adopted", cluster)
            running = {}
        if running.get("taskArns"):
            return str(running["taskArns"][0]), True

        try:
            overrides = container_overrides(ctx, payload, container)
        except (TypeError, ValueError) as exc:
            raise _EcsFailure(TargetResult.permanent(f"ecs target: payload is not JSON: {exc}")) from None
        if len(json.dumps(overrides)) > MAX_ECS_OVERRIDE_CHARS:
            raise _EcsFailure(TargetResult.permanent(f"ecs target: {OVERRIDES_TOO_LARGE}"))
        vpc: dict[str, Any] = {
            "subnets": list(target.subnets),
            "assignPublicIp": "ENABLED" if getattr(target, "assign_public_ip", False) else "DISABLED",
        }
        if security_groups := list(getattr(target, "security_groups", None) or []):
            vpc["securityGroups"] = security_groups
        request: dict[str, Any] = {
            "cluster": cluster,
            "taskDefinition": str(target.task_definition_arn),
            "count": 1,
            "launchType": str(getattr(target, "launch_type", "FARGATE")),
            "networkConfiguration": {"awsvpcConfiguration": vpc},
            "startedBy": started_by,
            "clientToken": slot_digest(ctx.tenant, ctx.idempotency_key, str(ctx.attempt)),
        }
        if overrides:
            request["overrides"] = overrides
        try:
            response = client.run_task(**request)
        except Exception as exc:
            raise _EcsFailure(classify_aws_error(exc, "ecs RunTask")) from None
        tasks = response.get("tasks") or []
        if not tasks:
            reasons = "; ".join(
                str(f.get("reason", "unknown")) + (f" ({f['detail']})" if f.get("detail") else "")
                for f in response.get("failures") or []
            )
            raise _EcsFailure(
                TargetResult.retryable(f"ecs RunTask started no task: {reasons or 'no reason given'}"[:500])
            )
        return str(tasks[0]["taskArn"]), False

    def _essential_containers(self, client: Any, task_definition: str) -> tuple[str, ...]:
        with self._lock:
            cached = self._essentials.get(task_definition)
        if cached:
            return cached
        try:
            definition = client.describe_task_definition(taskDefinition=task_definition)["taskDefinition"]
        except Exception as exc:
            if not access_denied(exc):
                raise _EcsFailure(classify_aws_error(exc, "ecs DescribeTaskDefinition")) from None
            # Without ecs:DescribeTaskDefinition the essential container is unknown: the
            # task runs without the PUNCTUAL_* environment and every container's exit decides.
            logger.warning(
                "ecs:DescribeTaskDefinition denied on %s: name container_name on the target", task_definition
            )
            return ()
        containers = definition.get("containerDefinitions") or []
        names = tuple(str(c["name"]) for c in containers if c.get("essential", True))
        if not names:
            raise _EcsFailure(TargetResult.permanent("ecs task definition has no essential container"))
        with self._lock:
            self._essentials[task_definition] = names
        return names

    # -- tracking

    def _track(
        self,
        client: Any,
        cluster: str,
        task_arn: str,
        ctx: SlotContext,
        started_at: datetime,
        decisive: tuple[str, ...],
    ) -> TargetResult:
        deadline = started_at + timedelta(seconds=ctx.timeout_s)
        errors = 0
        while True:
            try:
                described = client.describe_tasks(cluster=cluster, tasks=[task_arn])
            except Exception as exc:
                failure = classify_aws_error(exc, "ecs DescribeTasks")
                errors += 1
                if errors >= ECS_MAX_DESCRIBE_ERRORS or failure.outcome is not Outcome.RETRYABLE:
                    failure.summary = f"lost track of the ecs task: {failure.summary}"
                    return failure
            else:
                errors = 0
                tasks = described.get("tasks") or []
                if not tasks:
                    reasons = ", ".join(str(f.get("reason", "")) for f in described.get("failures") or [])
                    return TargetResult.retryable(f"ecs task disappeared ({reasons or 'MISSING'})")
                if tasks[0].get("lastStatus") == "STOPPED":
                    return decide_task_outcome(tasks[0], decisive)
            # Lease lost, or the run cancelled (the worker shuts down): the task keeps running,
            # and the attempt that follows adopts it (startedBy names the slot), so nothing
            # starts twice.
            if ctx.cancelled:
                return TargetResult.stopped_early(
                    "stopped: the run was cancelled; the ecs task is left running for the next attempt"
                )
            if not ctx.heartbeat():
                return TargetResult.stopped_early(
                    "lease lost: the ecs task is left to the worker that took over"
                )
            now = self.clock.now()
            if now >= deadline:
                return self._stop_for_timeout(client, cluster, task_arn, ctx)
            self._pause(ctx, min(self.poll_interval_s, (deadline - now).total_seconds()))

    def _pause(self, ctx: SlotContext, seconds: float) -> None:
        """Sleep between polls, in short steps so that a cancelled run stops tracking at once."""
        until = self.clock.now() + timedelta(seconds=seconds)
        while not ctx.cancelled:
            left = (until - self.clock.now()).total_seconds()
            if left <= 0:
                return
            self.clock.sleep(min(left, ECS_CANCEL_POLL_S))

    @staticmethod
    def _stop_for_timeout(client: Any, cluster: str, task_arn: str, ctx: SlotContext) -> TargetResult:
        note = ""
        try:
            client.stop_task(
                cluster=cluster, task=task_arn, reason=f"Punctual: timeout of {ctx.timeout_s:g}s"
            )
        except Exception as exc:
            note = f" (StopTask failed: {classify_aws_error(exc, 'ecs StopTask').summary})"
        result = TargetResult.retryable(
            f"ecs task ran past the {ctx.timeout_s:g}s timeout and was stopped{note}"
        )
        result.timed_out = True
        return result


def decide_task_outcome(task: Mapping[str, Any], decisive: tuple[str, ...] = ()) -> TargetResult:
    """Judge a STOPPED ECS task by its containers' exit codes.

    Parameters
    ----------
    task : mapping
        One entry of DescribeTasks' ``tasks``.
    decisive : tuple of str
        Container names whose exit codes decide; all containers when empty or
        when none of them is present.

    Returns
    -------
    TargetResult
        Success when every decisive container exited 0; otherwise retryable, with
        the exit code, the container's reason and the task's stop reason.
    """
    stop_code = str(task.get("stopCode", ""))
    stopped_reason = " ".join(str(task.get("stoppedReason", "")).split())
    containers = list(task.get("containers") or [])
    chosen = [c for c in containers if c.get("name") in decisive] or containers
    detail: dict[str, Any] = {
        "stop_code": stop_code,
        "stopped_reason": stopped_reason[:500],
        "exit_codes": {str(c.get("name")): c.get("exitCode") for c in chosen},
    }
    if stop_code == "TaskFailedToStart":
        result = TargetResult.retryable(f"ecs task failed to start: {stopped_reason}"[:500])
    elif not chosen or any(c.get("exitCode") is None for c in chosen):
        result = TargetResult.retryable(
            f"ecs task stopped without an exit code ({stop_code or 'no stop code'}: {stopped_reason})"[:500]
        )
    elif failed := [c for c in chosen if c.get("exitCode") != 0]:
        first = failed[0]
        why = f" ({first['reason']})" if first.get("reason") else ""
        tail = f"; {stopped_reason}" if stopped_reason else ""
        result = TargetResult.retryable(
            f"container {first.get('name')} exited with code {first['exitCode']}{why}{tail}"[:500]
        )
    else:
        result = TargetResult.ok("task exited 0")
    result.detail = detail
    return result


class _EcsFailure(Exception):
    """Carries a finished result out of the start-up steps."""

    def __init__(self, result: TargetResult) -> None:
        super().__init__(result.summary)
        self.result = result
