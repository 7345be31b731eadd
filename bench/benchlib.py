"""What every benchmark shares: percentiles, tables, machine facts, result files, job builders.

Benchmarks print human tables and write ``bench/results/<name>.json``; nothing here asserts
a timing. Run them from the repository root with the project's venv.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PRICES_PATH = BENCH_DIR / "prices.json"

# Fake credentials before any boto3 client exists: benchmarks never reach real AWS.
for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_SECURITY_TOKEN", "testing"),
    ("AWS_SESSION_TOKEN", "testing"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
):
    os.environ.setdefault(_name, _value)


# The cost benchmarks' job mix, (share of jobs, schedule): half every five minutes at :00 (far
# lane), the rest every minute (near lane: the next slot is under the 180 s far threshold).
COST_MIX: list[tuple[float, str]] = [
    (0.5, "cron(0/5 * * * ? *)"),
    (0.3, "rate(1 minute)"),
    (0.2, "cron(* * * * ? *)"),
]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def summary(values: Sequence[float]) -> dict[str, float | None]:
    """p50 / p90 / p99 / max of a sample."""
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """The facts a reader needs to compare figures across machines."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def machine_line() -> str:
    m = machine()
    return f"{m['cpu']}, {m['cores']} cores, {m['arch']}, {m['python']}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` with the date and machine added."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    body = {"benchmark": name, "date": now_iso(), "machine": machine(), **payload}
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path


def result_figure(name: str, *keys: str) -> float:
    """A figure of ``bench/results/<name>.json`` by its keys; 0 until that benchmark has run."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return 0.0
    node: Any = json.loads(path.read_text())
    for key in keys:
        node = node[key]
    return float(node)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A plain-text table; ``align`` is one of 'l'/'r' per column (numbers right by default)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    lines = []
    lines.append("  ".join(_pad(h, widths[i], align[i]) for i, h in enumerate(headers)))
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines.append("  ".join(_pad(v, widths[i], align[i]) for i, v in enumerate(row)))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _pad(text: str, width: int, how: str) -> str:
    return text.rjust(width) if how == "r" else text.ljust(width)


def load_prices() -> dict[str, Any]:
    return json.loads(PRICES_PATH.read_text())


def price(prices: dict[str, Any], key: str) -> float:
    """A price by dotted key, e.g. ``dynamodb.on_demand_write_per_million``."""
    node: Any = prices
    for part in key.split("."):
        node = node[part]
    return float(node["usd"] if isinstance(node, dict) else node)


def heading(text: str) -> None:
    print()
    print(text)
    print("=" * len(text))
    sys.stdout.flush()


def fast_moto_queries() -> None:
    """Make moto's base-table Query look only at the queried partition.

    moto 5 sorts and scans every item of the table on each Query (about 15 µs per item
    here), which no real table does and which would make a benchmark's run time grow with
    its own history. Results are unchanged: the same items of the same partition, in the
    same order. Index queries keep moto's own path. Benchmarks only; never in tests.
    """
    import threading

    from moto.dynamodb.models.table import Table

    if getattr(Table.query, "_bench_fast", False):
        return
    original, every_item = Table.query, Table.all_items
    # The partition a query on this thread is reading, per table: the poller reads its far
    # buckets on several threads at once, so the narrowed view is the thread's own (a view
    # shared on the table was replaced and removed by another thread's query mid-read).
    narrowed = threading.local()

    def all_items(self: Any) -> Any:
        views = getattr(narrowed, "views", None)
        return views[-1][1] if views and views[-1][0] is self else every_item(self)

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is not None or not self.range_key_attr:
            return original(self, hash_key, *args, **kwargs)
        partition = list(self.items[hash_key].values()) if hash_key in self.items else []
        views = narrowed.__dict__.setdefault("views", [])
        views.append((self, partition))
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            views.pop()

    query._bench_fast = True  # type: ignore[attr-defined]
    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def fast_moto_transactions() -> None:
    """Make moto's TransactWriteItems snapshot the table shallowly instead of deep-copying it.

    moto deep-copies the whole table once per transaction item, for a rollback, so each
    registration costs time in proportion to everything registered before it (0.17 s at
    300 jobs here). The shallow snapshot restores added and removed items on a failed
    transaction but not in-place updates of existing ones; benchmarks register fresh jobs
    and never see a failed transaction. Benchmarks only; never in tests.
    """
    import copy as stdlib_copy
    import types

    from moto.dynamodb import models as dynamodb_models
    from moto.dynamodb.models.table import Table

    if getattr(dynamodb_models.copy, "_bench_fast", False):
        return

    def deepcopy(value: Any, memo: Any = None) -> Any:
        if isinstance(value, Table):
            snapshot = stdlib_copy.copy(value)
            snapshot.items = type(value.items)(
                value.items.default_factory,  # type: ignore[attr-defined]
                {h: dict(r) if isinstance(r, dict) else r for h, r in value.items.items()},
            )
            return snapshot
        return stdlib_copy.deepcopy(value, memo)

    shim = types.SimpleNamespace(deepcopy=deepcopy, copy=stdlib_copy.copy, _bench_fast=True)
    dynamodb_models.copy = shim  # type: ignore[attr-defined]
