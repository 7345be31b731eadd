"""API Lambda: API Gateway REST proxy events in, replies from the Powertools resolver out.

Every route, and every error mapping, lives in :mod:`punctual.api`; this is only the
observability stack around ``app.resolve``. Local mode serves the same function.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.api.app import app
from punctual.api.problems import failed_here
from punctual.runtime.lambda_support import log_metrics, logger, metrics, tracer


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = app.resolve(event, context)
    status = int(response["statusCode"])
    metrics.add_metric(name=f"Api{str(status)[0]}xx", unit=MetricUnit.Count, value=1)
    if failed_here(status, response.get("body")):  # the alarm's: not a 503 "busy" (Api5xx counts those)
        metrics.add_metric(name="ApiFailures", unit=MetricUnit.Count, value=1)
    return response
