"""``punctual jobs alerts`` shows what became of each rule's delivery (QA23: only ``-o json`` did,
though docs/alerts.md says the listing does)."""

from __future__ import annotations

from punctual_cli.api_verbs import _alert_rows, _job_detail


def test_the_alerts_table_shows_each_rules_delivery() -> None:
    alerts = [
        {
            "slot": "2026-12-06T10:00:00Z",
            "condition": "failed",
            "status": "FAILED",
            "created_at": "2026-12-06T10:00:01Z",
            "summary": "slot FAILED: HTTP 500",
            "deliveries": [
                {"rule": 0, "status": "SENT", "tries": 1},
                {"rule": 1, "status": "FAILED", "tries": 3, "error": "HTTP 503"},
            ],
        },
        {"slot": "2026-12-06T09:00:00Z", "condition": "late", "status": "SENDING", "deliveries": []},
    ]
    table = _alert_rows(alerts)
    header, first, second = table.splitlines()[:3]
    assert "DELIVERIES" in header
    assert "#0 SENT, #1 FAILED (HTTP 503)" in first
    assert second.split()[:3] == ["2026-12-06T09:00:00Z", "late", "SENDING"] and " - " in second


def test_the_job_shows_each_rules_format_and_interval() -> None:
    """QA28: ``jobs get`` showed a rule's conditions and target only: an alert HELD by the rule's
    ``min_interval_seconds``, or sent as a Slack message, had no visible cause."""
    hook = {"type": "http", "url": "https://hooks.example.com/a"}
    job = {
        "id": "j", "name": "n", "state": "ENABLED", "schedule": "rate(1 hour)", "target": hook, "version": 1,
        "alerts": [
            {"on": ["failed", "recovered"], "target": hook, "format": "slack", "min_interval_seconds": 300},
            {"on": ["late"], "late_after_seconds": 30, "target": hook, "format": "json", "min_interval_seconds": 0},
        ],
    }  # fmt: skip
    alerts = next(line for line in _job_detail(job).splitlines() if line.startswith("alerts"))
    assert "failed,recovered -> http https://hooks.example.com/a (slack, at most one per 300 s)" in alerts
    assert alerts.endswith("late after 30 s -> http https://hooks.example.com/a"), alerts
