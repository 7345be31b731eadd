"""``punctual-local up --duration --json-logs --stale-reads --transaction-conflicts``, and components
run alone."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import harness
from local.config import free_port, http_ok
from local.harness import LocalMode

pytestmark = pytest.mark.e2e


@pytest.fixture
def short_run(tmp_path: Path) -> Iterator[LocalMode]:
    options = ["--duration", "20", "--json-logs", "--stale-reads", "1", "--transaction-conflicts", "0.2"]
    with harness.running(tmp_path, *options, tenant="e2e") as local:
        yield local


def test_duration_stops_by_itself_with_one_summary_line_after_json_logs(short_run: LocalMode) -> None:
    local = short_run
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
    # moto answered as DynamoDB does: reads a second behind, a fifth of contended writes cancelled
    assert any(e["component"] == "aws" and "reads up to 1.0s behind" in e["message"] for e in entries)
    fidelity = json.loads((local.state / "run" / "fidelity.json").read_text())
    assert fidelity["stale_read_s"] == 1.0 and fidelity["conflict_share"] == 0.2
    # ... and the last is the summary: the demo fired within its 20 s, each slot once, on that DynamoDB
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
    # the API waits for AWS: the order does not matter
    processes = [harness.spawn([name, *common], tmp_path / f"{name}.out") for name in ("api", "aws")]
    try:
        api = f"http://127.0.0.1:{ports['--api-port']}"
        local = LocalMode(processes[0], tmp_path, tmp_path / "api.out", api, tenant="alone")
        local.wait(lambda: http_ok(api + "/v1/openapi.json"), 240, "the API run alone")
        # When a job is registered, Then it is listed for its tenant only
        job = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://example.com/hook"}}
        status, created = local.api("POST", "/v1/jobs", job)
        assert status == 201, created
        status, listed = local.api("GET", "/v1/jobs")
        assert status == 200 and [j["id"] for j in listed["items"]] == [created["id"]]
        assert local.api("GET", "/v1/jobs", tenant="other")[1]["items"] == []
        # And Ctrl-C stops each one cleanly
        for process in processes:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
    finally:
        for process in processes:
            harness.stop_group(process, timeout_s=5)


def test_ctrl_c_while_it_starts_stops_every_component_by_itself(tmp_path: Path) -> None:
    """Ctrl-C a moment into ``make run``, its processes still starting (a newcomer's second
    thoughts): every one of them printed ``Fatal Python error: init_import_site`` and a
    KeyboardInterrupt traceback, and the components forked by a zygote still warming up (both
    pollers, a worker) let the supervisor's SIGTERM go by and ran until their stop timeout's
    SIGKILL. Each now stops by itself, in order, with no traceback."""
    import os

    local = harness.start(tmp_path, "--no-demo", tenant="e2e")
    try:
        local.wait(
            lambda: "started worker-2" in local.log() or None, 240, "the supervisor to start its children"
        )
        os.killpg(local.process.pid, signal.SIGINT)
        local.wait(lambda: local.process.poll() is not None or None, 240, "local mode to stop")
    finally:
        local.stop()
    log = local.log()
    for sign in ("Fatal Python error", "KeyboardInterrupt", "Traceback", "did not stop", "killed by SIGKILL"):
        assert sign not in log, (sign, local.tail(80))
    assert local.process.returncode == 0, local.tail(80)


def test_ctrl_c_to_the_whole_group_stops_every_component_by_itself(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) reaches every process of local mode's group, the components' zygotes too.
    A zygote that died of it could no longer report its component's exit, so the supervisor
    waited out each component's stop timeout, killed it and waited again: two minutes to stop,
    every component "did not stop", KeyboardInterrupt tracebacks. The zygotes outlive the signal
    now, and the supervisor alone stops the components, in order (AWS last): each is seen to stop
    on its own. (A SIGTERM to the group stops AWS at once too, so a component still writing then
    may rightly wait out its timeout under load: not asserted here.)"""
    import os

    local = harness.start(tmp_path, "--no-demo", tenant="e2e")
    try:
        local.wait_ready()
        os.killpg(local.process.pid, signal.SIGINT)
        local.wait(lambda: local.process.poll() is not None or None, 240, "local mode to stop")
    finally:
        local.stop()
    log = local.log()
    assert "did not stop" not in log, local.tail(80)
    assert "killed by SIGKILL" not in log, local.tail(80)
    assert "KeyboardInterrupt" not in log, local.tail(80)
    assert local.process.returncode == 0, local.tail(80)
    stopped = {
        line.split("stopped ", 1)[1].split(" ", 1)[0] for line in log.splitlines() if "│ stopped " in line
    }
    # (the ECS worker drains on Ctrl-C by itself, as a task does on SIGTERM: it may be gone first)
    wanted = {"api", "aws", "poller", "poller-2", "worker-1", "worker-2", "receiver"}
    assert wanted <= stopped, (stopped, local.tail(80))
