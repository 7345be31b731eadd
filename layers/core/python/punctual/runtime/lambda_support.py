"""Powertools Logger, Metrics and Tracer, created once and shared by every handler."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
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
# A handler whose metrics all went through core_metrics leaves Powertools' own set empty.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)

Handler = TypeVar("Handler", bound=Callable[..., Any])


class PowertoolsMetrics:
    """The core's MetricsSink in a Lambda: EMF with Powertools' namespace and service dimension
    (:data:`core_metrics`), printed at the end of the invocation by :func:`log_metrics`."""

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        core_metrics.add(name, value, unit)


def log_metrics(handler: Handler) -> Handler:
    """``metrics.log_metrics``, and the core's metrics printed when the handler ends (returned or
    raised), unless Powertools' metrics are disabled (``POWERTOOLS_METRICS_DISABLED``)."""

    @functools.wraps(handler)
    def flushing(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        finally:
            if is_metrics_disabled():
                core_metrics.discard()
            else:
                core_metrics.flush()

    return metrics.log_metrics(flushing)  # type: ignore[return-value]
