"""A planned fault: what the driver injects, when (an offset into the run) and how.

The plans (:func:`local.chaos.faults.driver.plan_faults`, :func:`local.chaos.faults.sustained.plan_sustained`)
are lists of :class:`PlannedFault`; the driver (:mod:`local.chaos.faults.driver`) carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from local.chaos.workload import Mutation

MID_MINUTE = "mid-minute"
MID_MINUTE_S = (18.0, 42.0)  # the seconds of a UTC minute the mid-minute kill lands between


@dataclass(frozen=True)
class PlannedFault:
    at_s: float
    kind: str  # kill | skew | duplicate | mutation
    target: str = ""
    mode: str = ""
    count: int = 0
    offset_s: float = 0.0
    mutation: Mutation | None = None

    def describe(self) -> str:
        if self.kind == "kill" and self.mode == MID_MINUTE:
            low, high = MID_MINUTE_S
            return f"kill -9 {self.target} ({self.mode}: next second {low:.0f}-{high:.0f} of a minute)"
        if self.kind == "kill":
            return f"kill -9 {self.target} ({self.mode})"
        if self.kind == "skew":
            return f"second poller with clock offset {self.offset_s:+.2f}s"
        if self.kind == "duplicate":
            return f"re-send {self.count} delivered message(s) ({self.mode})"
        assert self.mutation is not None
        extra = f" -> {self.mutation.schedule}" if self.mutation.schedule else ""
        return f"{self.mutation.op} {self.mutation.key}{extra}"
