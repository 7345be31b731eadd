"""The core's metrics in a Lambda, kept as they come and printed as CloudWatch EMF documents once per
invocation.

Powertools' ``Metrics.add_metric`` costs ~15 µs a value: it checks the name, unit and resolution
each time and formats a debug message holding the metric's whole value list (up to 100 values)
even when debug logging is off. The poller adds a ``FireDelayMs`` per slot and the worker a
``StartDelayMs`` and a ``RunDurationMs`` per attempt, so it was ~45 µs of CPU per trigger, more
than any step of the scheduler's own. :class:`EmfBuffer` appends each value to a list and prints
the documents Powertools would have printed (the same namespace, ``service`` dimension, names,
units and values; at most 100 values of a metric and 100 metrics a document, as the
`EMF specification <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>`_
allows) when the handler ends (:func:`punctual.runtime.lambda_support.log_metrics`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from punctual.runtime.clock import Clock, SystemClock

log = logging.getLogger("punctual.runtime.emf")

MAX_VALUES = 100  # EMF: values of one metric in one document
MAX_METRICS = 100  # EMF: metric definitions in one document (Powertools' bound too)
# What json.dumps(document, separators=(",", ":")) builds per call (an encoder), built once
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


class EmfBuffer:
    """A :class:`punctual.runtime.observability.MetricsSink` whose values wait for :meth:`flush`.

    Parameters
    ----------
    namespace
        The CloudWatch namespace (None: nothing is printed, and the values are dropped with a
        warning, where Powertools would raise at its flush).
    service
        The ``service`` dimension's value (None or empty: no dimension).
    write
        Where a document's JSON line goes (``print``: CloudWatch Logs in a Lambda).
    """

    def __init__(
        self,
        namespace: str | None,
        service: str | None,
        write: Callable[[str], None] = print,
        clock: Clock | None = None,
    ) -> None:
        self.namespace = namespace
        self.service = service
        self.write = write
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], list[float]] = {}

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        number = float(value)  # a value that is not a number fails here, as in Powertools
        with self._lock:
            values = self._values.get((name, unit))
            if values is None:
                self._values[(name, unit)] = [number]
            else:
                values.append(number)

    def add_all(self, name: str, values: Iterable[float], unit: str = "Count") -> None:
        """:meth:`add` of each of ``values`` in turn, under one take of the lock (the poller's
        release delays, one a slot of a release)."""
        numbers = list(map(float, values))  # (a value that is not a number fails here, as in add)
        if not numbers:
            return
        with self._lock:
            held = self._values.get((name, unit))
            if held is None:
                self._values[(name, unit)] = numbers
            else:
                held.extend(numbers)

    def flush(self) -> int:
        """Print the values added since the last flush; returns how many documents."""
        with self._lock:
            taken, self._values = self._values, {}
        if not taken:
            return 0
        if not self.namespace:
            log.warning("no metrics namespace: %d metrics dropped", len(taken))
            return 0
        count = 0
        for document in self._one_document(taken) or self.documents(taken):
            self.write(_COMPACT_JSON.encode(document))
            count += 1
        return count

    def _one_document(self, taken: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]] | None:
        """The one document of ``taken`` when it fits in one (what :meth:`documents` yields then:
        every metric whole, in the order it was first added, no name twice); None: it does not."""
        if len(taken) > MAX_METRICS:
            return None
        chosen: dict[str, tuple[str, list[float]]] = {}
        for (name, unit), values in taken.items():
            if len(values) > MAX_VALUES or name in chosen:
                return None
            chosen[name] = (unit, values)
        return [self._document(chosen)]

    def discard(self) -> None:
        """Drop the values added since the last flush (metrics disabled)."""
        with self._lock:
            self._values = {}

    def documents(self, taken: dict[tuple[str, str], list[float]]) -> Iterator[dict[str, Any]]:
        """The EMF documents of ``taken``: a metric's values in chunks of at most
        :data:`MAX_VALUES`, at most :data:`MAX_METRICS` metrics a document. A name added with two
        units goes in separate documents (one definition a name per document)."""
        pending = [(name, unit, values) for (name, unit), values in taken.items()]
        while pending:
            document_metrics: dict[str, tuple[str, list[float]]] = {}
            rest = []
            for name, unit, values in pending:
                if name in document_metrics or len(document_metrics) == MAX_METRICS:
                    rest.append((name, unit, values))
                    continue
                document_metrics[name] = (unit, values[:MAX_VALUES])
                if len(values) > MAX_VALUES:
                    rest.append((name, unit, values[MAX_VALUES:]))
            pending = rest
            yield self._document(document_metrics)

    def _document(self, chosen: dict[str, tuple[str, list[float]]]) -> dict[str, Any]:
        dimensions = {"service": self.service} if self.service else {}
        document: dict[str, Any] = {
            "_aws": {
                "Timestamp": int(self.clock.now().timestamp() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": self.namespace,
                        "Dimensions": [list(dimensions)],
                        "Metrics": [{"Name": name, "Unit": unit} for name, (unit, _) in chosen.items()],
                    }
                ],
            },
            **dimensions,
        }
        for name, (_, values) in chosen.items():
            document[name] = values
        return document
