"""An example user app: a team's own stack declares Punctual and three jobs beside what they call.

``python examples/orders_app/app.py`` synthesises it (cdk-nag's AwsSolutions checks on, as in
Punctual's own app); ``make test`` does so too (tests/infra/test_example_app.py). It needs the
library installed from this checkout (``pip install -e . -e cdk``, what ``make install`` does) and
the layer built (``make layer``; the tests stand the core sources in for it).
"""

from __future__ import annotations

import os
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from punctual.models import Overlap, RetryPolicy
from punctual_cdk import Alert, HttpTarget, Job, LambdaTarget, Punctual, SqsTarget

REPORT_CODE = """
def handler(event, context):
    print("nightly report for", event)
"""


class OrdersStack(cdk.Stack):
    """The orders team's stack: its function, its queue, the scheduler and the jobs."""

    def __init__(
        self, scope: Construct, construct_id: str, *, scheduler_settings: dict[str, Any], **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        scheduler = Punctual(self, "Scheduler", **scheduler_settings)

        report = lambda_.Function(
            self,
            "NightlyReport",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="index.handler",
            code=lambda_.Code.from_inline(REPORT_CODE),
            log_group=logs.LogGroup(self, "NightlyReportLogs", retention=logs.RetentionDays.ONE_MONTH),
        )
        # The function's own role with AWS's managed basic execution policy (logs only).
        cdk.Validations.of(report).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                reason="The example function writes logs only: AWS's managed basic execution policy is that.",
            )
        )
        key = kms.Key(self, "QueueKey", enable_key_rotation=True)
        dlq = sqs.Queue(
            self,
            "ReindexDlq",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
        )
        reindex = sqs.Queue(
            self,
            "Reindex",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5),
        )

        # 1. A nightly report, Berlin time, retried, never two at once, alerting the queue on failure.
        Job(
            self,
            "NightlyReportJob",
            scheduler=scheduler,
            schedule="cron(0 2 * * ? *)",
            timezone="Europe/Berlin",
            target=LambdaTarget(report),
            payload={"report": "orders"},
            retry=RetryPolicy(max_attempts=5, base_seconds=10),
            overlap=Overlap.SKIP,
            alerts=[Alert(SqsTarget(reindex), on=["failed"])],
        )
        # 2. A reindex message every 15 minutes.
        Job(
            self,
            "ReindexJob",
            scheduler=scheduler,
            schedule="rate(15 minutes)",
            target=SqsTarget(reindex),
            payload="reindex",
        )
        # 3. A partner webhook every weekday morning.
        Job(
            self,
            "PartnerSyncJob",
            scheduler=scheduler,
            schedule="cron(30 7 ? * MON-FRI *)",
            target=HttpTarget("https://partner.example.com/hooks/sync", method="POST"),
            payload={"sync": "orders"},
            timeout_seconds=60,
        )


def build(
    outdir: str | None = None, scheduler_settings: dict[str, Any] | None = None
) -> tuple[cdk.App, OrdersStack]:
    app = cdk.App(outdir=outdir)
    stack = OrdersStack(app, "Orders", scheduler_settings=scheduler_settings or {})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


if __name__ == "__main__":
    build(os.environ.get("CDK_OUTDIR", "cdk.out/example"))[0].synth()
