"""Powertools Logger, Metrics and Tracer, created once and shared by every handler."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from punctual.runtime.emf import EmfBuffer

logger = Logger()
metrics = Metrics()
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})

# The core's metrics: the namespace and service dimension Powertools has, without its cost per
# value (punctual.runtime.emf); printed when a handler ends (log_metrics).
core_metrics = EmfBuffer(metrics.namespace, metrics.service)

Handler = TypeVar("Handler", bound=Callable[..., Any])


class PowertoolsMetrics:
    """The core's MetricsSink in a Lambda: EMF with Powertools' namespace and service dimension
    (:data:`core_metrics`), printed at the end of the invocation by :func:`log_metrics`."""

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        core_metrics.add(name, value, unit)

    def add_all(self, name: str, values: Iterable[float], unit: str = "Count") -> None:
        core_metrics.add_all(name, values, unit)


def log_metrics(handler: Handler) -> Handler:
    """What ``metrics.log_metrics`` does, for the core's metrics too: when the handler ends
    (returned or raised), the core's metrics are printed, and Powertools' own when it has any
    (the API's status counts), unless metrics are disabled (``POWERTOOLS_METRICS_DISABLED``)."""

    @functools.wraps(handler)
    def flushing(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        finally:
            if is_metrics_disabled():
                core_metrics.discard()
            else:
                core_metrics.flush()
            if metrics.provider.metric_set:
                metrics.flush_metrics()  # disabled: Powertools drops them itself

    return flushing  # type: ignore[return-value]
