"""Console: the jobs-and-runs widget on the stack's dashboard, and the function behind it.

A CloudWatch custom widget calls the console function (``functions/console``) each time the
dashboard loads or refreshes; the function reads a page of jobs and each job's newest slots
with ``dynamodb:Query`` (and a just-resumed job's owed slot with one ``GetItem``; no write, no
queue) and returns HTML.
The widget does not follow the dashboard's time range or size (the page does not depend on
them), so only loads and refreshes invoke it: nothing runs while nobody looks.

Whoever views the dashboard needs ``lambda:InvokeFunction`` on the function (CloudWatch calls
it with the viewer's credentials); the function itself can read every tenant's jobs, so
grant that to operators only. Context ``consoleTenant`` names the tenant the widget shows
first (an IAM principal's unique id, as the API's tenancy has it: ``AROA...`` for a role); the
widget's form chooses another.
"""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from constructs import Construct

from punctual_cdk.components.functions import LambdaRuntime, PunctualFunction
from punctual_cdk.components.storage import Storage
from punctual_cdk.config import ConfigError, PunctualConfig

CONSOLE_TABLE_ACTIONS = ("dynamodb:Query", "dynamodb:GetItem")  # reads only, no write, no queue
CONSOLE_TIMEOUT_S = 30
CONSOLE_MEMORY_MB = 256
CONSOLE_PAGE_SIZE = 20  # jobs per widget page
CONSOLE_HISTORY_LIMIT = 30  # slots read per job on the page
WIDGET_WIDTH = 24  # the whole dashboard row
WIDGET_HEIGHT = 15
_TENANT_RE = re.compile(r"^[A-Za-z0-9._:/@+=,\-]{1,256}\Z")


class Console(Construct):
    """The console function (read-only) and its custom widget on ``dashboard``.

    Attributes
    ----------
    handler
        The console function, its role and log group.
    widget
        The custom widget added to the dashboard.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        runtime: LambdaRuntime,
        storage: Storage,
        environment: dict[str, str],
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        tenant = self.node.try_get_context("consoleTenant")
        if tenant is not None and not _TENANT_RE.match(str(tenant)):
            raise ConfigError(
                "consoleTenant: must be a tenant: 1-256 characters of letters, digits, ._:/@+=,-"
            )
        self.handler: PunctualFunction = runtime.function(
            self,
            "Function",
            name="console",
            description="Punctual console: the dashboard's jobs-and-runs widget (reads only)",
            timeout_s=CONSOLE_TIMEOUT_S,
            memory_mb=CONSOLE_MEMORY_MB,
            environment={
                **environment,
                "PUNCTUAL_CONSOLE_PAGE_SIZE": str(CONSOLE_PAGE_SIZE),
                "PUNCTUAL_CONSOLE_HISTORY_LIMIT": str(CONSOLE_HISTORY_LIMIT),
                **({"PUNCTUAL_CONSOLE_TENANT": str(tenant)} if tenant else {}),
            },
        )
        # A page of jobs and each job's history are both one Query; a job resumed in the last
        # minutes is asked whether its owed slot has a record yet (one GetItem, as the API's
        # next_fire_at asks it: punctual.usecases.next_fire.owes_now). Reads only.
        self.handler.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(CONSOLE_TABLE_ACTIONS), resources=[storage.table.table_arn])
        )
        if storage.table_key is not None:
            storage.table_key.grant(self.handler.role, "kms:Decrypt", "kms:DescribeKey")
        params: dict[str, Any] = {"tenant": str(tenant)} if tenant else {}
        self.widget = cloudwatch.CustomWidget(
            function_arn=self.handler.function.function_arn,
            title="Punctual: jobs, recent runs, failures, fire delay",
            width=WIDGET_WIDTH,
            height=WIDGET_HEIGHT,
            params=params or None,
            update_on_refresh=True,
            update_on_resize=False,
            update_on_time_range_change=False,
        )
        dashboard.add_widgets(self.widget)
        cdk.CfnOutput(
            scope,
            "ConsoleFunctionArn",
            value=self.handler.function.function_arn,
            description="The dashboard's console widget function (viewers need lambda:InvokeFunction on it)",
        )
