"""Tick Lambda (EventBridge, every minute): start the coming minutes' Step Functions executions.

Every decision (naming, planning, the lean poller, slices, predictive scaling) lives in
:class:`punctual.dispatch.tick.Tick`; the composition root builds it from the ``PUNCTUAL_*`` settings.
"""

from __future__ import annotations

from typing import Any

from punctual.runtime.composition import container
from punctual.runtime.lambda_support import PowertoolsMetrics, log_metrics, logger


@log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    built = container()
    started = built.tick(PowertoolsMetrics()).start_minutes(built.clock.now())
    logger.info("started %s", started or "nothing new")
    return {"started": started}
