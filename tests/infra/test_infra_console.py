"""The console widget: on the dashboard, backed by its own function that can only read."""

from __future__ import annotations

import json
import re

from cdk_helpers import Synth, actions_on, join_parts, role_statements


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


def test_the_console_function_can_only_query_the_table(any_synth: Synth) -> None:
    console = any_synth.stack.console.handler
    function = any_synth.resources[any_synth.logical_id(console.function)]["Properties"]
    granted = actions_on(role_statements(any_synth, console.role))
    table = any_synth.logical_id(any_synth.stack.storage.table)

    data_actions = {a for a in granted if a.startswith(("dynamodb:", "sqs:", "sns:", "states:", "lambda:"))}
    assert data_actions == {"dynamodb:Query"}
    assert granted["dynamodb:Query"] == {f"<{table}.Arn>"}
    key = any_synth.stack.storage.table_key
    if key is not None:  # a customer-managed table key: decrypt, never encrypt
        assert {"kms:Decrypt", "kms:DescribeKey"} <= set(granted)
        assert not {"kms:Encrypt", "kms:GenerateDataKey"} & set(granted)
    assert function["Handler"] == "handler.handler"
    assert function["Environment"]["Variables"]["PUNCTUAL_CONSOLE_PAGE_SIZE"] == "20"
    assert "PUNCTUAL_TABLE_NAME" in function["Environment"]["Variables"]
