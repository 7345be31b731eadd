"""Sustained-fault phases: a ``kill -9`` every 2-4 s for a minute, of pollers, of workers, or of both.

``make chaos`` runs each as a run of its own after the mixed run (``python -m local.chaos run
--phase pollers|workers|both``): the workload as usual, and no other fault (no skewed poller, no
re-sent deliveries, no throttling, no pause or update), so that what the verdict reports is what
repeated deaths cost. The plan fixes the instants (a function of the seed); the victim is chosen
when the moment comes, at random among the phase's processes that are up (restarted ones
included), never one that started less than :data:`UP_S` ago (it would not have done anything
yet). The workers are local mode's own (``worker-1`` to ``worker-3``, ``ecs-worker`` and
``ecs-worker-2``), restarted as the cloud would: the driver's throttled processes are not started
in a phase.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from local.chaos.faults.planned import PlannedFault

SUSTAINED = "sustained"
EVERY_S = (2.0, 4.0)
UP_S = 1.0
POLLERS = ("poller", "poller-2")
WORKERS = ("worker-1", "worker-2", "worker-3", "ecs-worker", "ecs-worker-2")
PHASES: dict[str, tuple[str, ...]] = {"pollers": POLLERS, "workers": WORKERS, "both": POLLERS + WORKERS}


def plan_sustained(rng: random.Random, seconds: float, phase: str) -> list[PlannedFault]:
    """A kill every 2-4 s of the run, each of one of ``phase``'s processes (chosen when it comes)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}: one of {', '.join(PHASES)}")
    plan: list[PlannedFault] = []
    at = rng.uniform(*EVERY_S)
    while at < seconds:
        plan.append(PlannedFault(round(at, 2), "kill", target=phase, mode=SUSTAINED))
        at += rng.uniform(*EVERY_S)
    return plan


def choose_victim(phase: str, rng: random.Random, up_s: Callable[[str], float | None]) -> str | None:
    """One of the phase's processes that has been up :data:`UP_S` (``up_s``: how long, None when
    it is not running), at random; None when none is up."""
    candidates = [name for name in PHASES[phase] if (up := up_s(name)) is not None and up >= UP_S]
    return rng.choice(candidates) if candidates else None
