"""Powertools Logger, Metrics and Tracer, created once and shared by every handler."""

from __future__ import annotations

import threading

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

logger = Logger()
metrics = Metrics()
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})


_METRICS_LOCK = threading.Lock()  # a Lambda batch runs its message groups in threads


class PowertoolsMetrics:
    """The core's MetricsSink, forwarded to Powertools (EMF)."""

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        with _METRICS_LOCK:
            metrics.add_metric(name=name, unit=unit, value=value)
