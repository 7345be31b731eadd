"""QA30 review (60dfb155): docs/capacity.md's multi-Region table quoted figures of an earlier run
than the ``bench/results/capacity.json`` it cites (account concurrency "194, 4.12x | 594, 1.35x |
527, 1.52x" against the JSON's 202, 3.96x ...; "workerMaxConcurrency 338, 16.9 ms" against 354,
17.7 ms). Its per-Region rows are read back from the JSON here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _row(doc: str, start: str) -> list[str]:
    line = next(line for line in doc.splitlines() if line.startswith(start))
    return [cell.strip().replace("*", "") for cell in line.strip().strip("|").split("|")][1:]


def _check(profile: dict[str, Any], prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in profile["checks"] if c["name"].startswith(prefix))
    return found


def test_the_multi_region_rows_are_the_jsons() -> None:
    doc = (ROOT / "docs" / "capacity.md").read_text()
    profiles = json.loads((ROOT / "bench" / "results" / "capacity.json").read_text())["multi_region"]
    rows = {
        "| account concurrency per Region": "Lambda account concurrency per Region",
        "| worker concurrency per Region": "worker concurrency per Region",
    }
    for start, prefix in rows.items():
        expected = [
            f"{_check(p, prefix)['demand']:.0f}, {_check(p, prefix)['headroom']:.2f}x" for p in profiles
        ]
        assert _row(doc, start) == expected, start
    workers = _row(doc, "| worker time a slot per Region")
    assert workers == [f"{p['worker_ms_per_slot_per_region']:.1f} ms" for p in profiles]
    limit = _check(profiles[0], "worker concurrency per Region")["limit"]
    assert f"`workerMaxConcurrency` {limit} and a worker message of {workers[0]}" in doc
