"""Payload placeholders, filled from the slot the way EventBridge Scheduler fills its context attributes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from punctual.instants import format_instant_adaptive
from punctual.targets.base import SlotContext

__all__ = ["PLACEHOLDERS", "render_payload"]

PLACEHOLDERS = ("<job_id>", "<slot>", "<attempt>", "<scheduled_at>")
_PLACEHOLDER_RE = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


def render_payload(payload: Any, ctx: SlotContext) -> Any:
    """Fill the slot placeholders in every string of a JSON payload.

    Like EventBridge Scheduler's context attributes: ``<job_id>``, ``<slot>``,
    ``<attempt>`` and ``<scheduled_at>`` (ISO 8601 UTC, ``Z``) are replaced
    wherever they occur inside a string value or an object key, at any depth.
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
    values = {
        "<job_id>": ctx.job_id,
        "<slot>": ctx.slot,
        "<attempt>": str(ctx.attempt),
        "<scheduled_at>": format_instant_adaptive(ctx.scheduled_at),
    }

    def fill(text: str) -> str:
        return _PLACEHOLDER_RE.sub(lambda match: values[match.group(0)], text) if "<" in text else text

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return fill(value)
        if isinstance(value, Mapping):
            return {fill(key) if isinstance(key, str) else key: walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    return walk(payload)
