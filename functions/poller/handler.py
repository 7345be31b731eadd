"""Poller Lambda: owns one (minute, shard group) given by the Step Functions Map, for the minute.

Every decision lives in :mod:`punctual.dispatch.polling`; this parses the item, wires the core from
``PUNCTUAL_*`` settings and stops early when the invocation is about to run out of time
(the next minute's poller then drains what is left from the watermark).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.runtime.composition import PollerItem, run_poller
from punctual.runtime.lambda_support import log_metrics, logger, tracer

STOP_BEFORE_TIMEOUT_MS = 8_000


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    item = PollerItem.model_validate(event)
    report = run_poller(item, stop=lambda: context.get_remaining_time_in_millis() < STOP_BEFORE_TIMEOUT_MS)
    return {"minute": item.minute.isoformat(), "group": item.group, **report}
