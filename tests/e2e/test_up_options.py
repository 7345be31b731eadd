"""``punctual-local up --duration --json-logs``, and components run alone."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_harness import (
    REPO,
    LocalMode,
    child_env,
    free_port,
    http,
    start_local_mode,
    stop_group,
    wait_ready,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def short_run(tmp_path: Path) -> Iterator[LocalMode]:
    local = start_local_mode(tmp_path, "--duration", "20", "--json-logs")
    try:
        yield local
    finally:
        stop_group(local.process)


def test_duration_stops_by_itself_with_one_summary_line_after_json_logs(short_run: LocalMode) -> None:
    local = short_run
    wait_ready(local)
    local.wait(lambda: local.process.poll() is not None or None, 120, "--duration to stop local mode")
    assert local.process.returncode == 0, local.tail()
    lines = local.log().strip().splitlines()
    # Every line but the last is one JSON log entry naming its component
    entries = [json.loads(line) for line in lines[:-1]]
    assert {"aws", "api", "poller", "worker-1", "worker-2", "ecs-worker", "receiver", "local"} <= {
        e["component"] for e in entries
    }
    assert all({"time", "component", "level"} <= set(e) for e in entries)
    assert any(e["component"] == "local" and e["message"].startswith("stopped aws") for e in entries)
    # ... and the last is the summary: the demo fired within its 20 s, each slot once
    match = re.fullmatch(
        r"punctual-local: (\d+)s demo, slots due (\d+), executed (\d+), duplicates (\d+), missed (\d+), "
        r"fire delay p50 (\d+) ms p99 (\d+) ms",
        lines[-1],
    )
    assert match, lines[-1]
    ran, due, executed, duplicates, missed = (int(match.group(i)) for i in range(1, 6))
    assert ran >= 20 and due > 0 and executed == due and duplicates == 0 and missed == 0


def test_components_run_alone(tmp_path: Path) -> None:
    # Given moto with the template's resources and the API, each started on its own
    ports = {"--aws-port": str(free_port()), "--api-port": str(free_port())}
    common = ["--state-dir", str(tmp_path), *[x for pair in ports.items() for x in pair]]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "local", name, *common],
            cwd=REPO,
            env=child_env(),
            stdout=(tmp_path / f"{name}.out").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name in ("api", "aws")  # the API waits for AWS: the order does not matter
    ]
    try:
        api = f"http://127.0.0.1:{ports['--api-port']}"
        local = LocalMode(processes[0], tmp_path, tmp_path / "api.out", api, "", "")
        local.wait(lambda: _answers(api + "/v1/openapi.json"), 240, "the API run alone")
        # When a job is registered, Then it is listed for its tenant only
        job = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://example.com/hook"}}
        status, created = http(api + "/v1/jobs", "POST", job, {"X-Punctual-Tenant": "alone"})
        assert status == 201, created
        status, listed = http(api + "/v1/jobs", headers={"X-Punctual-Tenant": "alone"})
        assert status == 200 and [j["id"] for j in listed["items"]] == [created["id"]]
        assert http(api + "/v1/jobs", headers={"X-Punctual-Tenant": "other"})[1]["items"] == []
        # And Ctrl-C stops each one cleanly
        for process in processes:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
    finally:
        for process in processes:
            stop_group(process, timeout_s=5)


def _answers(url: str) -> bool:
    try:
        return http(url, timeout_s=2)[0] == 200
    except OSError:
        return False
