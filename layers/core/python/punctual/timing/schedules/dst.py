"""The daylight-saving policy of fixed-time expressions, and how a job overrides it.

An expression whose minute and hour fields are both fixed (neither starts with ``*``;
a list or range counts as fixed, as in Debian cron), and every ``at(...)``, is a
*fixed-time* expression. By default a local time skipped by spring-forward fires once,
at the first instant after the gap (the transition itself), and a local time repeated
by fall-back fires once, on its first pass. :class:`DstOptions` overrides both. Any
other expression follows real time: nothing fires in a gap, and a repeated local time
fires on both passes. The evaluators (:mod:`~punctual.timing.schedules.cron`,
:mod:`~punctual.timing.schedules.at`) apply the policy at the zone's offset transitions
(:mod:`~punctual.timing.schedules.zones`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from punctual.timing.schedules.errors import ScheduleError

__all__ = ["AT_FIRES_ONCE", "DstOptions"]

# A one-time job's slot is one instant: both passes of a repeated hour would fire it twice (QA17).
AT_FIRES_ONCE = "an at() job fires once; repeat 'both' would fire it in both passes of the hour"


@dataclass(frozen=True)
class DstOptions:
    """Daylight-saving overrides for fixed-time expressions.

    Parameters
    ----------
    gap
        What a local time skipped by spring-forward does: ``"shift"`` (default) fires
        once at the first instant after the gap, ``"skip"`` does not fire.
    repeat
        What a local time repeated by fall-back does: ``"first"`` (default) fires on the
        first pass only, ``"both"`` fires on both passes.

    Expressions with a wildcard minute or hour always follow real time; these options
    do not apply to them (nor to ``rate``, ``delay`` and ``after``).
    """

    gap: Literal["shift", "skip"] | None = None
    repeat: Literal["first", "both"] | None = None

    def __post_init__(self) -> None:
        # Values can come from untyped JSON, so check them here rather than trust the hints.
        if self.gap not in (None, "shift", "skip"):
            raise ScheduleError(f"dst: gap must be 'shift' or 'skip', got {self.gap!r}")
        if self.repeat not in (None, "first", "both"):
            raise ScheduleError(f"dst: repeat must be 'first' or 'both', got {self.repeat!r}")
