"""``punctual jobs alerts`` shows what became of each rule's delivery (QA23: only ``-o json`` did,
though docs/alerts.md says the listing does)."""

from __future__ import annotations

from punctual_cli.api_verbs import _alert_rows


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
