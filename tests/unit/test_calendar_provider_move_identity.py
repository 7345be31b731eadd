"""QA30 review (978ad992): a calendar moved to another, separate deployment that held a calendar of
the same name with the same days (made by another stack, team or the API) was taken over in place:
its days overwritten, the stack's calendar at the old API left behind, and the stack's later Delete
removed the other party's calendar. A move is in place only when the calendar at the new API carries
this resource's mark (its description's end), which a multi-Region deployment's one table shows
through every Region's API; then a retried failover whose days changed is in place too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from punctual_cdk.calendars import DESCRIPTION_ROOM
from punctual_cdk.provider import handler as provider

A = "https://aaaaaaaaaa.execute-api.eu-west-1.amazonaws.com/prod"  # deployment 1 (its own table)
B = "https://bbbbbbbbbb.execute-api.eu-central-1.amazonaws.com/prod"  # deployment 2 (its own table)
STACK = "arn:aws:cloudformation:eu-west-1:123456789012:stack/orders/1"


class Deployment:
    """One separate Punctual deployment's calendar routes (its own store)."""

    def __init__(self) -> None:
        self.calendars: dict[str, dict[str, Any]] = {}

    def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> tuple[int, Any]:
        name = path.rsplit("/", 1)[1]
        if method == "GET":
            return (200, self.calendars[name]) if name in self.calendars else (404, {"title": "not found"})
        if method == "PUT":
            if (headers or {}).get("If-None-Match") == "*" and name in self.calendars:
                return 412, {"title": "exists"}
            made = name not in self.calendars
            self.calendars[name] = {"name": name, "created_at": "2020-01-01T00:00:00Z", **body}
            return (201 if made else 200), self.calendars[name]
        if method == "DELETE":
            return (204, None) if self.calendars.pop(name, None) else (404, {"title": "not found"})
        raise AssertionError(method)


def _event(kind: str, url: str, days: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "StackId": STACK,
        "RequestId": f"req-{kind}-{url[8:12]}",
        "LogicalResourceId": "Holidays",
        "ResourceType": provider.CALENDAR_RESOURCE_TYPE,
        "ResourceProperties": {
            "ServiceToken": "x",
            "ApiUrl": url,
            "Name": "holidays",
            "Spec": json.dumps(days),
        },
        **extra,
    }


def test_a_move_to_a_separate_deployment_does_not_take_over_its_same_named_calendar() -> None:
    days = {"timezone": "UTC", "dates": ["2026-12-25", "2026-12-26"], "ranges": []}
    deployments = {A: Deployment(), B: Deployment()}
    # Deployment B already has a calendar "holidays" with the same (common) days: another team's
    deployments[B].calendars["holidays"] = {"name": "holidays", "created_at": "2020-01-01T00:00:00Z", **days}
    # This stack made its own "holidays" at A
    physical = provider.on_event(_event("Create", A, days), deployments.__getitem__)["PhysicalResourceId"]
    assert "holidays" in deployments[A].calendars
    # The stack is moved to deployment B (a separate deployment, not another Region of A's), new days
    new_days = {**days, "dates": ["2026-12-25"]}
    old = {"ServiceToken": "x", "ApiUrl": A, "Name": "holidays", "Spec": json.dumps(days)}
    move = _event("Update", B, new_days, PhysicalResourceId=physical, OldResourceProperties=old)
    with pytest.raises(provider.ProviderError, match="exists and this resource did not make it"):
        provider.on_event(move, deployments.__getitem__)
    assert deployments[B].calendars["holidays"]["dates"] == days["dates"]  # untouched


def test_a_failover_retried_after_a_skipped_rollback_moves_the_calendar() -> None:
    # One multi-Region deployment: A's and B's APIs over the one table (one store)
    table = Deployment()
    apis = {A: table, B: table}
    days = {"timezone": "UTC", "dates": ["2026-12-25"], "ranges": []}
    physical = provider.on_event(_event("Create", A, days), apis.__getitem__)["PhysicalResourceId"]
    # A failover update (ApiUrl to B, and new days) puts the days at B in place, then another
    # resource fails; the rollback to A (lost) fails, and the operator continues it skipping the
    # calendar (docs/multi-region.md, 764497bd): CloudFormation keeps the old properties (A, days)
    new_days = {**days, "dates": ["2026-12-25", "2026-12-26"]}
    old = {"ServiceToken": "x", "ApiUrl": A, "Name": "holidays", "Spec": json.dumps(days)}
    move = _event("Update", B, new_days, PhysicalResourceId=physical, OldResourceProperties=old)
    assert provider.on_event(move, apis.__getitem__)["PhysicalResourceId"] == physical
    # The same failover update sent again: its calendar is the stack's own, in the one table (its
    # days are the new ones now: it was refused "did not make it" when days told whose it was)
    again = {**move, "RequestId": "req-again"}
    assert provider.on_event(again, apis.__getitem__)["PhysicalResourceId"] == physical
    assert table.calendars["holidays"]["dates"] == new_days["dates"]


def test_the_mark_ends_the_declared_description_and_one_with_no_room_for_it_is_refused() -> None:
    table = Deployment()
    days = {"timezone": "UTC", "dates": ["2026-12-25"], "ranges": [], "description": "public holidays"}
    provider.on_event(_event("Create", A, days), {A: table}.__getitem__)
    described = table.calendars["holidays"]["description"]
    assert described.startswith("public holidays\n[made by CloudFormation resource ")
    # The construct refuses at synth what has no room for the mark
    assert len(described) - len("public holidays\n") == provider.MAX_DESCRIPTION - 1 - DESCRIPTION_ROOM
    with pytest.raises(provider.ProviderError, match="description: at most"):
        provider.on_event(_event("Create", A, {**days, "description": "x" * 1000}), {A: table}.__getitem__)
