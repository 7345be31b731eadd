"""``make run``'s live table fits the terminal it is shown on (QA24).

Regression: on an 80-column terminal every row wrapped over two to four lines, ``SUCCEEDED`` was
cut to ``SUCCE…`` and the last slot to ``16:41…``, and the table grew past 24 lines, so the live
display cut the footer (slots due, executed, fire delay) off the bottom of the screen.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from local.config import LocalConfig
from local.demo import Demo, demo_jobs


def _demo(tmp_path: Path) -> Demo:
    demo = Demo(LocalConfig(state_dir=tmp_path))
    now = datetime.now(UTC).replace(microsecond=0)
    demo.registered_at = now - timedelta(seconds=60)
    for n, job in enumerate(demo_jobs(now - timedelta(seconds=60))):
        job.job_id = f"{n:032x}"
        job.state = "ENABLED"
        job.last_status = "SUCCEEDED"
        job.next_fire = (now + timedelta(seconds=20)).isoformat().replace("+00:00", "Z")
        demo.jobs.append(job)
        if job.key == "recovers":
            demo.alerts.append({"body": {"job_id": job.job_id, "condition": "failed"}})
        slot = (now - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        arrived = (now - timedelta(seconds=5)).timestamp() + 0.06
        demo.records += [
            {"key": f"{job.job_id}:{slot}", "arrived": arrived + i, "status": status}
            for i, status in enumerate([500, 500, 200] if job.key == "flaky" else [200])
        ]
    return demo


def _shown(demo: Demo, width: int) -> list[str]:
    """What the live display shows: ``up``'s console soft-wraps, so a line wider is cut."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, soft_wrap=True)
    children = {name: SimpleNamespace(restarts=0) for name in ("aws", "api", "worker-1")}
    console.print(demo.table(SimpleNamespace(children=children), console))  # type: ignore[arg-type]
    return [line[:width] for line in console.export_text().splitlines()]


@pytest.mark.parametrize("width", [80, 100])
def test_a_narrow_terminal_shows_each_job_on_one_line_with_its_figures_whole(
    tmp_path: Path, width: int
) -> None:
    demo = _demo(tmp_path)
    lines = _shown(demo, width)
    assert all(len(line) <= width for line in lines), lines
    rows = [line for line in lines if line.startswith("│") and line.strip("│ ")]
    assert len(rows) == len(demo.jobs), "\n".join(lines)  # one line a job: nothing wrapped
    assert all("SUCCEEDED" in row for row in rows), "\n".join(lines)
    assert all("60 ms" in row for row in rows if not row.startswith("│ after")), "\n".join(lines)
    assert "schedule" not in lines[3] and "alerts" not in lines[3]  # the header row
    shown = "\n".join(lines)
    assert len(lines) <= 22, shown  # fits 80x24, with the shell's lines
    # the title and footer are laid out in lines that fit, nothing cut off (the footer was)
    assert "console http://127.0.0.1:8080/console?tenant=demo" in shown, shown
    footer = " · ".join(lines[lines.index(next(x for x in lines if x.startswith("└"))) + 1 :])
    for part in ("slots due ", "fire delay p50 - p99 -", "alerts 1 failed", "3 processes, 0 restarts"):
        assert part in footer, shown


def test_a_wide_terminal_shows_every_column(tmp_path: Path) -> None:
    lines = _shown(_demo(tmp_path), 200)
    header = next(line for line in lines if "job" in line and "fired" in line)
    for column in ("schedule", "fired", "last slot", "delay", "attempts", "status", "next", "alerts"):
        assert column in header, header
    assert any("rate(5 seconds)" in line and "SUCCEEDED" in line for line in lines), "\n".join(lines)
