"""The core's Lambda metrics print what Powertools printed, without its cost per value.

:class:`punctual.runtime.emf.EmfBuffer` replaced ``Metrics.add_metric`` for the core's metrics
(~15 µs a value there). These tests hold it to Powertools' own output for the same values: the
same namespace, ``service`` dimension, names, units and values, within EMF's bounds per document.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider
from hypothesis import example, given, settings
from hypothesis import strategies as st

from punctual.execution.worker_service import EmfMetrics
from punctual.runtime import lambda_support
from punctual.runtime.clock import ManualClock
from punctual.runtime.emf import MAX_METRICS, MAX_VALUES, EmfBuffer

UNITS = {f"Metric{i}": ("Milliseconds" if i % 2 else "Count") for i in range(120)}
_adds = st.lists(
    st.tuples(
        st.sampled_from(sorted(UNITS)[:6]) | st.sampled_from(sorted(UNITS)),
        st.floats(min_value=-1e9, max_value=1e9, allow_nan=False) | st.integers(min_value=0, max_value=10**6),
    ),
    max_size=400,
)


def _emitted(documents: list[dict[str, Any]]) -> tuple[Counter[tuple[str, str, float]], set[tuple[str, str]]]:
    """Every (name, unit, value) the documents hold, and each document's (namespace, service)."""
    values: Counter[tuple[str, str, float]] = Counter()
    where: set[tuple[str, str]] = set()
    for document in documents:
        [directive] = document["_aws"]["CloudWatchMetrics"]
        assert directive["Dimensions"] == [["service"]]
        where.add((directive["Namespace"], document["service"]))
        assert len(directive["Metrics"]) <= MAX_METRICS
        for definition in directive["Metrics"]:
            emitted = document[definition["Name"]]
            assert isinstance(emitted, list) and 1 <= len(emitted) <= MAX_VALUES
            values.update((definition["Name"], definition["Unit"], float(v)) for v in emitted)
    return values, where


def _powertools(adds: list[tuple[str, float]]) -> list[dict[str, Any]]:
    provider = AmazonCloudWatchEMFProvider(namespace="Punctual", service="punctual")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for name, value in adds:
            provider.add_metric(name=name, unit=UNITS[name], value=value)
        if provider.metric_set:
            provider.flush_metrics()
    return [json.loads(line) for line in out.getvalue().splitlines()]


@settings(max_examples=60, deadline=None)
@given(adds=_adds)
def test_the_buffer_prints_the_values_powertools_printed(adds: list[tuple[str, float]]) -> None:
    lines: list[str] = []
    buffer = EmfBuffer("Punctual", "punctual", write=lines.append)
    for name, value in adds:
        buffer.add(name, value, UNITS[name])
    buffer.flush()
    ours = _emitted([json.loads(line) for line in lines])
    theirs = _emitted(_powertools(adds))
    assert ours[0] == theirs[0]
    if adds:
        assert ours[1] == theirs[1] == {("Punctual", "punctual")}


def test_a_flush_empties_the_buffer_and_a_metric_past_100_values_takes_more_documents() -> None:
    lines: list[str] = []
    buffer = EmfBuffer("Punctual", "punctual", write=lines.append)
    for n in range(250):
        buffer.add("FireDelayMs", n, "Milliseconds")
    buffer.add("SlotsReleased", 250)
    assert buffer.flush() == 3
    assert [len(json.loads(line)["FireDelayMs"]) for line in lines] == [100, 100, 50]
    assert buffer.flush() == 0


def test_a_value_that_is_not_a_number_is_refused_at_once() -> None:
    with pytest.raises((TypeError, ValueError)):
        EmfBuffer("Punctual", "punctual").add("SlotsReleased", "many")  # type: ignore[arg-type]


def test_the_handler_decorator_prints_the_core_metrics_when_it_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines: list[str] = []
    buffer = EmfBuffer("Punctual", "punctual", write=lines.append)
    monkeypatch.setattr(lambda_support, "core_metrics", buffer)

    @lambda_support.log_metrics
    def handler(event: dict[str, Any], context: Any) -> str:
        lambda_support.PowertoolsMetrics().add("SlotsReleased", 3)
        if event.get("fail"):
            raise RuntimeError("boom")
        return "ok"

    assert handler({}, None) == "ok"
    assert json.loads(lines[-1])["SlotsReleased"] == [3.0]
    with pytest.raises(RuntimeError):
        handler({"fail": True}, None)
    assert len(lines) == 2  # printed although the handler raised
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    assert handler({}, None) == "ok"
    assert len(lines) == 2 and buffer.flush() == 0  # disabled: dropped, as Powertools drops its own
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED")
    monkeypatch.setattr(lambda_support.metrics.provider, "namespace", "Punctual")

    @lambda_support.log_metrics
    def api(event: dict[str, Any], context: Any) -> str:
        lambda_support.metrics.add_metric(name="Api2xx", unit="Count", value=1)  # Powertools' own
        return "ok"

    capsys.readouterr()
    assert api({}, None) == "ok"
    assert json.loads(capsys.readouterr().out)["Api2xx"] == [1.0]


_few_adds = st.lists(
    st.tuples(
        st.sampled_from(sorted(UNITS)[:4]) | st.sampled_from(sorted(UNITS)),
        st.sampled_from(["Count", "Milliseconds"]),
        st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-(10**6), max_value=10**6),
    ),
    max_size=250,
)


@settings(max_examples=200, deadline=None)
@given(adds=_few_adds, service=st.sampled_from(["punctual", "", None]))
@example(adds=[("Metric1", "Milliseconds", n) for n in range(150)], service="punctual")
@example(
    adds=[("Metric1", "Count", 1), ("Metric2", "Count", 2), ("Metric1", "Milliseconds", 3)],
    service="punctual",
)
@example(adds=[(f"Metric{n}", "Count", n) for n in range(101)], service="punctual")
def test_a_flush_that_fits_one_document_prints_what_the_general_split_prints(
    adds: list[tuple[str, str, float]], service: str | None
) -> None:
    """A flush whose metrics fit one document builds it at once; its line is the general path's
    (documents(), json.dumps) byte for byte, and any other flush takes the general path (names
    added under two units, more than 100 values of a metric, more than 100 metrics)."""
    clock = ManualClock(datetime(2026, 12, 6, 1, 0, 0, 123456, tzinfo=UTC))
    lines: list[str] = []
    buffer = EmfBuffer("Punctual", service, write=lines.append, clock=clock)
    general = EmfBuffer("Punctual", service, clock=clock)
    for name, unit, value in adds:
        buffer.add(name, value, unit)
        general.add(name, value, unit)
    taken = general._values
    expected = [json.dumps(document, separators=(",", ":")) for document in general.documents(taken)]
    assert buffer.flush() == len(expected)
    assert lines == expected


@settings(max_examples=60, deadline=None)
@given(adds=_adds, runs=st.lists(st.integers(min_value=0, max_value=5), max_size=60))
def test_values_added_together_print_as_the_same_values_added_one_by_one(
    adds: list[tuple[str, float]], runs: list[int]
) -> None:
    # Given the same adds made one by one, and with runs of one name's values taken together
    one_by_one: list[str] = []
    together: list[str] = []
    single = EmfBuffer(
        "Punctual", "punctual", write=one_by_one.append, clock=ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    grouped = EmfBuffer(
        "Punctual", "punctual", write=together.append, clock=ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    for name, value in adds:
        single.add(name, value, UNITS[name])
    index = 0
    for length in [*runs, len(adds)]:
        run = adds[index : index + max(length, 1)]
        for name in dict.fromkeys(n for n, _ in run):  # (in the order each name first comes)
            grouped.add_all(name, [v for n, v in run if n == name], UNITS[name])
        index += len(run)
        if index >= len(adds):
            break

    # When both are flushed, then they print the very same documents
    assert list(grouped._values.items()) == list(single._values.items())
    single.flush()
    grouped.flush()
    assert together == one_by_one


def test_the_lambda_sink_and_a_plain_sink_take_values_together() -> None:
    from punctual.runtime.observability import RecordingMetrics, add_all

    recording = RecordingMetrics()
    add_all(recording, "FireDelayMs", [1.5, 2.0, 3.25], "Milliseconds")  # (no add_all: one add each)
    assert recording.values["FireDelayMs"] == [1.5, 2.0, 3.25]
    lambda_support.core_metrics.discard()
    add_all(lambda_support.PowertoolsMetrics(), "FireDelayMs", [1.5, 2.0], "Milliseconds")
    add_all(lambda_support.PowertoolsMetrics(), "FireDelayMs", [], "Milliseconds")
    assert lambda_support.core_metrics._values == {("FireDelayMs", "Milliseconds"): [1.5, 2.0]}
    lambda_support.core_metrics.discard()
    with pytest.raises((TypeError, ValueError)):
        EmfBuffer("Punctual", "punctual").add_all("SlotsReleased", ["many"])  # type: ignore[list-item]


def test_the_ecs_worker_prints_each_delay_and_sums_only_its_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # QA24: the ECS worker's sink summed every metric per flush (a minute), StartDelayMs and
    # RunDurationMs too: a graph of their p99 on the ECS lane showed a minute's total, not a delay.
    clock = ManualClock(datetime(2027, 1, 1, tzinfo=UTC))
    sink = EmfMetrics("Punctual", clock=clock)
    for delay in (120.0, 480.0, 90.0):
        sink.add("StartDelayMs", delay, "Milliseconds")
        sink.add("ExecutionsSucceeded", 1)
    sink.flush()

    values: Counter[tuple[str, str, float]] = Counter()
    for line in capsys.readouterr().out.splitlines():
        document = json.loads(line)
        [directive] = document["_aws"]["CloudWatchMetrics"]
        assert (directive["Namespace"], directive["Dimensions"]) == ("Punctual", [["service"]])
        assert document["service"] == "punctual-ecs-worker"
        for definition in directive["Metrics"]:
            emitted = document[definition["Name"]]
            for value in emitted if isinstance(emitted, list) else [emitted]:
                values[(definition["Name"], definition["Unit"], float(value))] += 1
    assert values == Counter(
        {
            ("StartDelayMs", "Milliseconds", 120.0): 1,
            ("StartDelayMs", "Milliseconds", 480.0): 1,
            ("StartDelayMs", "Milliseconds", 90.0): 1,
            ("ExecutionsSucceeded", "Count", 3.0): 1,
        }
    )
