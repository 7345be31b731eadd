"""The console widget: on the dashboard, backed by its own function that can only read."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from cdk_helpers import Synth, actions_on, join_parts, role_statements

from factories import job
from punctual.console.view import ConsoleQuery, build_view
from punctual.models import JobState
from punctual.store.dynamo import DynamoStore


def _widget(synth: Synth) -> dict[str, object]:
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = join_parts(dashboard["Properties"]["DashboardBody"])
    console_fn = synth.logical_id(synth.stack.console.handler.function)
    # The body is JSON once each token is a string again; the widget names the function by ARN.
    widgets = json.loads(re.sub(r"<([A-Za-z0-9.]+)>", r"\1", body))["widgets"]
    (widget,) = [w for w in widgets if w["type"] == "custom"]
    assert widget["properties"]["endpoint"] == f"{console_fn}.Arn"
    return widget


def test_the_dashboard_carries_the_console_widget_full_width(default_synth: Synth) -> None:
    widget = _widget(default_synth)
    properties = widget["properties"]
    assert isinstance(properties, dict)
    assert widget["width"] == 24
    assert properties["title"].startswith("Punctual: jobs")
    # Only loads and refreshes call it: the page does not follow time range or size.
    assert properties["updateOn"] == {"refresh": True, "resize": False, "timeRange": False}


def test_the_console_function_can_only_read_the_table(any_synth: Synth) -> None:
    console = any_synth.stack.console.handler
    function = any_synth.resources[any_synth.logical_id(console.function)]["Properties"]
    granted = actions_on(role_statements(any_synth, console.role))
    table = any_synth.logical_id(any_synth.stack.storage.table)

    data_actions = {a for a in granted if a.startswith(("dynamodb:", "sqs:", "sns:", "states:", "lambda:"))}
    assert data_actions == {"dynamodb:Query", "dynamodb:GetItem"}  # reads only
    assert granted["dynamodb:Query"] == granted["dynamodb:GetItem"] == {f"<{table}.Arn>"}
    key = any_synth.stack.storage.table_key
    if key is not None:  # a customer-managed table key: decrypt, never encrypt
        assert {"kms:Decrypt", "kms:DescribeKey"} <= set(granted)
        assert not {"kms:Encrypt", "kms:GenerateDataKey"} & set(granted)
    assert function["Handler"] == "handler.handler"
    assert function["Environment"]["Variables"]["PUNCTUAL_CONSOLE_PAGE_SIZE"] == "20"
    assert "PUNCTUAL_TABLE_NAME" in function["Environment"]["Variables"]


class _AsRole:
    """A DynamoDB client that refuses the calls a role is not granted, as IAM does in AWS (moto
    allows every call)."""

    def __init__(self, client: object, granted: set[str]) -> None:
        self._client, self._granted = client, granted

    def __getattr__(self, name: str) -> object:
        action = "dynamodb:" + "".join(part.capitalize() for part in name.split("_"))
        if action not in self._granted:
            raise PermissionError(f"AccessDeniedException: the role may not {action}")
        return getattr(self._client, name)


def test_the_console_reads_a_just_resumed_job_with_what_its_role_is_granted(
    default_synth: Synth, dynamo_client: object
) -> None:
    """QA22: the console asks whether a resume still owes a slot (the execution record's GetItem);
    its role could only Query, so the widget failed whole while a resumed job was on its page."""
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    resumed = job("hourly", "cron(0 * * * ? *)", now=t0 - timedelta(hours=2)).model_copy(
        update={  # paused at 09:10, resumed at 10:00:10: the 10:00 slot is owed
            "state": JobState.ENABLED,
            "paused_at": t0 - timedelta(minutes=50),
            "updated_at": t0 + timedelta(seconds=10),
            "version": 3,
            "spec_version": 1,
        }
    )
    DynamoStore(dynamo_client, "punctual-test").create_job(resumed, None, 100)
    granted = set(actions_on(role_statements(default_synth, default_synth.stack.console.handler.role)))
    store = DynamoStore(_AsRole(dynamo_client, granted), "punctual-test")

    now = t0 + timedelta(seconds=20)
    assert build_view(store, ConsoleQuery("default"), now).rows[0].next_fire_at == now
