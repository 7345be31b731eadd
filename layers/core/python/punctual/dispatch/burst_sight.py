"""What the tick adds to see a burst at any lead time: the minute-load ledger, a re-plan of a
minute before its pollers start, and a ``Burst Shortfall`` event when capacity comes too late.

* **The ledger** (:mod:`punctual.dispatch.load_forecast`): the near slots of a coming minute — fresh
  registrations, near chains — that its far timers do not show yet. The tick adds it to the far
  sample wherever it counted near timers before (and near timers are counted no more: a near
  bucket holds lease expiries, which are no load).
* **A re-plan** (:class:`Replanner`): the tick plans each minute twice, two minutes and one
  minute ahead; the first plan starts the minute's execution, which waits until
  ``poller_lead_s`` before the minute. At the second look, a minute that now needs more pollers
  than its waiting execution has (a burst registered in between) is stopped and started again
  as ``<name>-r`` with the new plan — only while its pollers have not started (up to
  ``REPLAN_MARGIN_S`` before), so no slot is released twice. Burst workers asked for at that look
  come late for their start lead: that is what the shortfall reports.
* **A shortfall event** (:func:`shortfall_events`): every minute a decision finds served late —
  burst workers asked for less than their start lead before it, or more than the bounds allow —
  is one ``Burst Shortfall`` event on the events bus (and the ``BurstShortfall`` metric), with
  the minute, its burst, what was asked, when it is ready and the slots expected late.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from punctual.delivery.notifications.events import SCHEMA_VERSION, Event
from punctual.dispatch.scaling import ScalingDecision
from punctual.runtime.settings import Settings
from punctual.store.base import JobStore
from punctual.store.loads import MinuteLoad
from punctual.timing.instants import format_instant

log = logging.getLogger("punctual.dispatch.tick")

BURST_SHORTFALL = "Burst Shortfall"
REPLAN_SUFFIX = "-r"
REPLAN_MARGIN_S = 5.0  # a minute is re-planned only while its pollers start at least this much later


def execution_name(minute: datetime) -> str:
    """A minute's Step Functions execution name (colons are illegal in names); a re-plan's adds
    :data:`REPLAN_SUFFIX`."""
    return minute.strftime("m-%Y%m%dT%H%M")


def ledger_load(store: JobStore | None, minute: datetime) -> MinuteLoad:
    """The ledger's forecast of ``minute``'s near slots (nothing when it cannot be read)."""
    if store is None:
        return MinuteLoad()
    try:
        return store.get_minute_load(minute)
    except Exception:
        log.exception("reading the load ledger of %s failed: its far timers alone size it", minute)
        return MinuteLoad()


def shortfall_events(decision: ScalingDecision, now: datetime) -> list[Event]:
    """One ``Burst Shortfall`` event per minute the decision serves late (see the module docstring)."""
    events = []
    for need in decision.upcoming:
        if need.met or need.load <= 0:
            continue
        reason = "asked too late for the start lead" if need.late else "beyond the capacity bounds"
        detail: dict[str, Any] = {
            "version": SCHEMA_VERSION,
            "event_id": f"burst-shortfall:{format_instant(need.minute)}:{format_instant(now)}",
            "minute": format_instant(need.minute),
            "burst_slots": need.load,
            "burst_workers": need.burst_workers,
            "running": decision.running,
            "decided_at": format_instant(now),
            "ready_at": format_instant(need.ready_at) if need.ready_at else None,
            "late_slots": need.late,
            "beyond_bounds_slots": need.shortfall,
            "reason": reason,
        }
        events.append(Event(BURST_SHORTFALL, detail, now))
    return events


class Replanner:
    """Restarts a waiting minute whose new plan needs more pollers (see the module docstring).

    Parameters
    ----------
    settings
        ``poller_lead_s``, ``shard_groups`` and the state machines.
    sfn
        A Step Functions client (``DescribeExecution``, ``StopExecution``, ``StartExecution``).
    """

    def __init__(self, settings: Settings, sfn: Any) -> None:
        self.settings = settings
        self.sfn = sfn

    def replan(
        self, minute: datetime, plan: dict[str, Any], running_on: str, target: str, now: datetime
    ) -> bool:
        """Stop ``minute``'s waiting execution on ``running_on`` and start it again on ``target``
        with ``plan`` when ``plan`` has more groups; True when it did."""
        wanted = len(plan["groups"])
        if wanted <= self.settings.shard_groups:
            return False  # no minute has fewer: nothing to add
        starts = minute - timedelta(seconds=self.settings.poller_lead_s)
        if now >= starts - timedelta(seconds=REPLAN_MARGIN_S):
            return False  # its pollers start (or started): too late to change them
        name = execution_name(minute)
        arn = running_on.replace(":stateMachine:", ":execution:", 1) + ":" + name
        try:
            described = self.sfn.describe_execution(executionArn=arn)
        except Exception:
            log.exception("looking at %s to re-plan it failed: it runs as planned", name)
            return False
        if described.get("status") != "RUNNING":
            return False
        have = len(json.loads(described.get("input") or "{}").get("groups", []))
        if wanted <= have:
            return False
        try:
            self.sfn.stop_execution(
                executionArn=arn, error="Punctual.Replanned", cause=f"re-planned with {wanted} pollers"
            )
            self.sfn.start_execution(
                stateMachineArn=target, name=name + REPLAN_SUFFIX, input=json.dumps(plan)
            )
        except self.sfn.exceptions.ExecutionAlreadyExists:
            return False  # an earlier tick re-planned it
        log.warning("re-planned %s: %d pollers instead of %d (a burst seen late)", name, wanted, have)
        return True
