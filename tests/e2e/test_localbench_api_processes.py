"""``punctual-local up --api-processes 2``: two API containers answer on one port, and jobs
registered through it run (what bench/local_mode.py registers its thousands of jobs with)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from local import harness


def test_two_api_processes_share_the_port_and_serve_registrations(tmp_path: Path) -> None:
    with harness.running(
        tmp_path, "--no-demo", "--api-processes", "2", "--workers", "1", tenant="e2e"
    ) as local:
        # Given both API processes up
        def both() -> list[int] | None:
            pids = [p for p in (local.pid("api"), local.pid("api-2")) if p]
            return pids if len(pids) == 2 else None

        pids = local.wait(both, timeout_s=120, what="both API processes alive")
        assert len(set(pids)) == 2
        # When twenty jobs are registered through the one port, each due in a few seconds
        start = (datetime.now(UTC) + timedelta(seconds=8)).replace(microsecond=0)
        ids = []
        for _ in range(20):
            status, body = local.api(
                "POST",
                "/v1/jobs",
                {
                    "schedule": "rate(1 day)",
                    "start_at": start.isoformat(),
                    "target": {"type": "http", "url": local.hook("api-processes")},
                    "payload": {"job": "<job_id>"},
                },
            )
            assert status in (200, 201), body
            ids.append(body["id"])
        # Then every one is listed and runs
        status, body = local.api("GET", "/v1/jobs?limit=100")
        assert status == 200 and set(ids) <= {job["id"] for job in body["items"]}
        local.wait(
            lambda: {r.get("job") for r in local.records() if r.get("name") == "api-processes"} >= set(ids),
            timeout_s=180,
            what="a webhook from each registered job",
        )
