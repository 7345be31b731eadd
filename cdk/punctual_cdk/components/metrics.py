"""The runtime's own metrics as CloudWatch sees them: the EMF metrics the Lambda functions and the
ECS worker write (namespace ``Punctual``), per minute, for the alarms and the dashboard."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from punctual_cdk import constants as c

MINUTE = cdk.Duration.seconds(c.DASHBOARD_PERIOD_S)


def app_metric(
    name: str, statistic: str, label: str | None = None, service: str = c.POWERTOOLS_SERVICE_NAME
) -> cloudwatch.Metric:
    """An EMF metric the runtime writes, per minute."""
    return cloudwatch.Metric(
        namespace=c.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={**c.METRIC_DIMENSIONS, "service": service},
        statistic=statistic,
        period=MINUTE,
        label=label or name,
    )


def lanes_sum(names: tuple[str, ...], label: str, period: cdk.Duration) -> cloudwatch.MathExpression:
    """Counts both workers write (and the Lambda functions: pollers, tick, auditor, api, all of
    Powertools' service ``punctual``), summed over ``period``: each name for each service."""
    using = {
        f"{name.lower()}_{lane}": app_metric(name, "Sum", service=service).with_(period=period)
        for name in names
        for lane, service in (("lambda", c.POWERTOOLS_SERVICE_NAME), ("ecs", c.ECS_METRICS_SERVICE))
    }
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({key}, 0)" for key in using),  # a count is written only when > 0
        using_metrics=using,
        label=label,
        period=period,
    )


def both_lanes_sum(name: str, label: str) -> cloudwatch.MathExpression:
    """A count both workers write: the Lambda worker (Powertools) and the ECS worker."""
    lambda_id, ecs_id = f"{name.lower()}_lambda", f"{name.lower()}_ecs"  # unique within a graph
    return cloudwatch.MathExpression(
        expression=f"FILL({lambda_id}, 0) + FILL({ecs_id}, 0)",
        using_metrics={
            lambda_id: app_metric(name, "Sum"),
            ecs_id: app_metric(name, "Sum", service=c.ECS_METRICS_SERVICE),
        },
        label=label,
        period=MINUTE,
    )
