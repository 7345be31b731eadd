"""Tick: start the Step Functions execution of each coming minute (EventBridge, every minute).

Each execution is named after its minute (``m-YYYYMMDDTHHMM``: colons are illegal in names) and
Standard executions are unique by name, so a doubled tick, or a tick that covers a minute the
previous tick already started, is a no-op. The tick starts the next
``PUNCTUAL_TICK_LOOKAHEAD_MINUTES`` minutes, so a late or lost tick is covered by its predecessor.
The core's ``plan_minute`` sizes each minute's shard groups from a sample of its far buckets and
the near lane's recent load, and says which poller runs it: ``lean`` (small memory, for an idle
minute) or ``standard``. The tick turns that into ``poller_function``, the function the state
machine invokes. If planning fails, the minute still starts, with the minimum groups on the
standard poller (a minute whose load is unknown never gets the lean one).

With more than 40 groups possible (``maxShardGroups`` > 40) the state machine runs a Parallel of
``PUNCTUAL_GROUP_SLICES`` inline Maps, Map ``i`` over ``$.group_slices[i]`` (an inline Map runs
at most 40 iterations at once): the tick then also splits the groups into that many slices,
sizes differing by at most one, empty ones included, so every branch finds its array and no
group is left out. ``$.groups`` stays in the input, whole, for the operator reading it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

plan_minute: Callable[..., dict[str, Any]] | None  # None: a layer without the planner
try:
    from punctual.runtime import reader_from
    from punctual.settings import Settings
    from punctual.tick import RecentLoad, observe_recent
    from punctual.tick import plan_minute as core_plan_minute

    plan_minute = core_plan_minute
except ImportError:  # pragma: no cover - a layer without the planner
    plan_minute = None

logger = logging.getLogger(__name__)
logger.setLevel(os.environ.get("LOG_LEVEL", "INFO"))
SFN = boto3.client("stepfunctions")


def poller_function(poller: str | None) -> str:
    """The function a minute's pollers run on: the lean one when planned and deployed."""
    standard = os.environ.get("PUNCTUAL_POLLER_FUNCTION", "")
    lean = os.environ.get("PUNCTUAL_LEAN_POLLER_FUNCTION", "")
    return lean if poller == "lean" and lean else standard


def _fallback_plan(minute: datetime, lead_s: int) -> dict[str, Any]:
    groups = int(os.environ.get("PUNCTUAL_SHARD_GROUPS", "1"))
    stamp = minute.strftime("%Y-%m-%dT%H:%M:00Z")
    return {
        "minute": stamp,
        "start_at": (minute - timedelta(seconds=lead_s)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "poller": "standard",
        "groups": [
            {
                "minute": stamp,
                "group": index,
                "group_count": groups,
                "shard_count": int(os.environ.get("PUNCTUAL_SHARD_COUNT", "256")),
                "near_shard_count": int(os.environ.get("PUNCTUAL_NEAR_SHARD_COUNT", "8")),
            }
            for index in range(groups)
        ],
    }


def group_slices(groups: list[dict[str, Any]], slices: int) -> list[list[dict[str, Any]]]:
    """``groups`` split in order into ``slices`` runs whose sizes differ by at most one."""
    count = len(groups)
    return [groups[index * count // slices : (index + 1) * count // slices] for index in range(slices)]


def recent_load(now: datetime) -> RecentLoad | None:
    """The near lane's last minute and the drain watermarks, read once per tick (None: unknown)."""
    if plan_minute is None:
        return None
    settings = Settings.from_env()
    try:
        return observe_recent(reader_from(settings), now, settings)
    except Exception:
        logger.exception("reading the recent load failed: each minute's plan tries again")
        return None


def plan(
    minute: datetime, lead_s: int, now: datetime | None = None, recent: RecentLoad | None = None
) -> dict[str, Any]:
    """The execution input of ``minute``: sized from its load when the core can tell."""
    if plan_minute is None:
        chosen = _fallback_plan(minute, lead_s)
    else:
        settings = Settings.from_env()
        try:
            chosen = plan_minute(minute, settings, reader_from(settings), now=now, recent=recent)
        except Exception:
            logger.exception("sizing %s failed: starting it with the minimum shard groups", minute)
            chosen = plan_minute(minute, settings)  # no store: unknown load, the standard poller
    chosen["poller_function"] = poller_function(chosen.get("poller"))
    slices = int(os.environ.get("PUNCTUAL_GROUP_SLICES", "1"))
    if slices > 1:  # the state machine's Parallel of inline Maps reads one slice per Map
        chosen["group_slices"] = group_slices(chosen["groups"], slices)
    return chosen


def start_minutes(now: datetime, sfn: Any = None) -> list[str]:
    """Start the coming minutes' executions; return the names of those this call started."""
    sfn = sfn or SFN
    lead_s = int(os.environ.get("PUNCTUAL_POLLER_LEAD_S", "10"))
    lookahead = int(os.environ.get("PUNCTUAL_TICK_LOOKAHEAD_MINUTES", "2"))
    first = now.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    started = []
    recent = recent_load(now)
    for offset in range(lookahead):
        minute = first + timedelta(minutes=offset)
        name = minute.strftime("m-%Y%m%dT%H%M")
        try:
            sfn.start_execution(
                stateMachineArn=os.environ["PUNCTUAL_STATE_MACHINE_ARN"],
                name=name,
                input=json.dumps(plan(minute, lead_s, now, recent)),
            )
            started.append(name)
        except sfn.exceptions.ExecutionAlreadyExists:
            pass  # this minute is already running: the no-op that makes ticks idempotent
    return started


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    started = start_minutes(datetime.now(UTC))
    logger.info("started %s", started or "nothing new")
    return {"started": started}
