"""Payload placeholders, filled from the slot the way EventBridge Scheduler fills its context attributes."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from punctual.delivery.targets.base import SlotContext
from punctual.timing.instants import format_instant_adaptive
from punctual.timing.timers import slot_instant

__all__ = ["PLACEHOLDERS", "SCHEDULER_ATTRIBUTES", "execution_id", "is_schedule_job", "render_payload"]

# EventBridge Scheduler's context attributes (the fourth, <aws.scheduler.schedule-arn>, is filled
# when the schedule is created through the scheduler API: the ARN is known then).
SCHEDULER_ATTRIBUTES = (
    "<aws.scheduler.scheduled-time>",
    "<aws.scheduler.execution-id>",
    "<aws.scheduler.attempt-number>",
)
PLACEHOLDERS = ("<job_id>", "<tenant>", "<slot>", "<attempt>", "<scheduled_at>", *SCHEDULER_ATTRIBUTES)
_PLACEHOLDER_RE = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))
_ATTRIBUTE_RE = re.compile("|".join(re.escape(p) for p in SCHEDULER_ATTRIBUTES))
# The id of a schedule's job made through the scheduler API: ``sch-`` and 32 hex digits of a digest
# of its group and name (``punctual.api.scheduler.mapping.job_id_of``; no /v1 id is generated so).
_SCHEDULE_JOB_ID_RE = re.compile(r"sch-[0-9a-f]{32}\Z")


def is_schedule_job(job_id: str) -> bool:
    """Whether ``job_id`` is the job of a schedule made through the EventBridge Scheduler API."""
    return job_id.startswith("sch-") and _SCHEDULE_JOB_ID_RE.match(job_id) is not None


def nominal_instant(ctx: SlotContext) -> datetime:
    """The slot's own instant, as its key names it: a jittered slot (``jitter_seconds``, a
    FlexibleTimeWindow) is released later, but its scheduled time is the slot's (QA: a FLEXIBLE
    schedule's ``<aws.scheduler.scheduled-time>`` was the delayed delivery instant, 04:54:50
    for the 04:54:00 slot; the service fills in the time the schedule named)."""
    try:
        return slot_instant(ctx.slot)
    except ValueError:
        return ctx.scheduled_at


def render_payload(payload: Any, ctx: SlotContext) -> Any:
    """Fill the slot placeholders in every string of a JSON payload.

    Like EventBridge Scheduler's context attributes: ``<job_id>``, ``<tenant>``, ``<slot>``,
    ``<attempt>`` and ``<scheduled_at>`` (ISO 8601 UTC, ``Z``), and the service's own
    ``<aws.scheduler.scheduled-time>``, ``<aws.scheduler.execution-id>`` (:func:`execution_id`)
    and ``<aws.scheduler.attempt-number>``, are replaced
    wherever they occur inside a string value or an object key, at any depth.
    A schedule made through the EventBridge Scheduler API (its job's id says so,
    :func:`is_schedule_job`: the context is all the rendering knows of the job) has the
    service's attributes filled only, as the service does: the rest of its ``Target.Input``
    reaches the target as written (QA21: ``<order><slot>3</slot></order>`` had Punctual's own
    ``<slot>`` filled in, and ``<tenant>`` put the tenant id into the message).
    Other text, numbers, booleans and null are left alone; the input is not
    modified. Replacement is a single pass, so a filled-in value is never
    expanded again. ``<job_id>:<slot>`` spells the idempotency key.

    Parameters
    ----------
    payload : Any
        A JSON-compatible value (dicts, lists, strings, numbers, booleans, None).
    ctx : SlotContext
        The slot being run.

    Returns
    -------
    Any
        A new value of the same shape with the placeholders filled.
    """
    scheduled = format_instant_adaptive(nominal_instant(ctx))
    values = {
        "<job_id>": ctx.job_id,
        "<tenant>": ctx.tenant,
        "<slot>": ctx.slot,
        "<attempt>": str(ctx.attempt),
        "<scheduled_at>": scheduled,
        "<aws.scheduler.scheduled-time>": scheduled,
        "<aws.scheduler.execution-id>": execution_id(ctx),
        "<aws.scheduler.attempt-number>": str(ctx.attempt),
    }

    pattern = _ATTRIBUTE_RE if is_schedule_job(ctx.job_id) else _PLACEHOLDER_RE

    def fill(text: str) -> str:
        return pattern.sub(lambda match: values[match.group(0)], text) if "<" in text else text

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return fill(value)
        if isinstance(value, Mapping):
            return {fill(key) if isinstance(key, str) else key: walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    return walk(payload)


def execution_id(ctx: SlotContext) -> str:
    """``<aws.scheduler.execution-id>``: a UUID that names the slot's run (the same for each of its
    attempts, as the attempt number tells them apart), derived from tenant, job and slot."""
    digest = hashlib.sha256(f"{ctx.tenant}\x00{ctx.job_id}\x00{ctx.slot}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))
