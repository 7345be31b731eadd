"""Storage: the one DynamoDB table (jobs, executions and timer rows) and the secrets key.

The table has a partition key ``pk`` and a sort key ``sk``. Timers are base-table rows, so a
trigger costs one write unit and never waits on index back-pressure: its one index, ``audit``
(the chain auditor's, :mod:`punctual.auditing`), is sparse: only job items and running backfills
carry its key (``aseg``, the job's far shard), never a timer or an execution record, and it
projects ``version``, ``state``, ``doc`` and ``rev``. Items carry an ``expires_at`` TTL.
On-demand by default; provisioned with auto scaling, and warm throughput (so a top-of-minute
burst meets partitions that are already split), come from context.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.config import PunctualConfig
from punctual_cdk.nag import acknowledge

# Reads; transactions are authorised per item action, and there is no index, so the table ARN is
# the only resource. Each component's list is c.TABLE_ACTIONS_BY_COMPONENT.
TABLE_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")

_REMOVAL = {
    "retain": cdk.RemovalPolicy.RETAIN,
    "destroy": cdk.RemovalPolicy.DESTROY,
}


def audit_index() -> dict[str, Any]:
    """The chain auditor's index (each segment one index partition), as both tables declare it."""
    return {
        "index_name": c.AUDIT_INDEX_NAME,
        "partition_key": dynamodb.Attribute(
            name=c.AUDIT_SEGMENT_ATTRIBUTE, type=dynamodb.AttributeType.NUMBER
        ),
        "sort_key": dynamodb.Attribute(name=c.PARTITION_KEY, type=dynamodb.AttributeType.STRING),
        "projection_type": dynamodb.ProjectionType.INCLUDE,
        "non_key_attributes": list(c.AUDIT_INDEX_PROJECTION),
    }


class Storage(Construct):
    """The table, its optional customer-managed key, and the key for webhook secrets."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.table_key: kms.Key | None = None
        self.table: dynamodb.ITable = self._make_table(config)
        # Webhook signing secrets are stored encrypted under this key (PUNCTUAL_KMS_KEY_ID):
        # the API encrypts, the workers decrypt, nothing else may.
        self.secrets_key: kms.IKey = self._make_secrets_key()
        self._make_dispatch_key()

    def _make_table(self, config: PunctualConfig) -> dynamodb.ITable:
        """The one table of a single-Region deployment (the multi-Region profile makes its own)."""
        if config.table_encryption == "cmk":
            self.table_key = kms.Key(
                self,
                "TableKey",
                description="Punctual: encryption at rest of the jobs table",
                enable_key_rotation=True,
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
        provisioned = config.table_billing_mode == "provisioned"
        warm = None
        if config.table_warm_read_units_per_second or config.table_warm_write_units_per_second:
            warm = dynamodb.WarmThroughput(
                read_units_per_second=config.table_warm_read_units_per_second or None,
                write_units_per_second=config.table_warm_write_units_per_second or None,
            )
        table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=c.PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=c.SORT_KEY, type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=c.TTL_ATTRIBUTE,
            billing_mode=(
                dynamodb.BillingMode.PROVISIONED if provisioned else dynamodb.BillingMode.PAY_PER_REQUEST
            ),
            read_capacity=config.table_read_capacity_min if provisioned else None,
            write_capacity=config.table_write_capacity_min if provisioned else None,
            warm_throughput=warm,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=config.table_deletion_protection,
            removal_policy=_REMOVAL[config.table_removal_policy],
            encryption=(
                dynamodb.TableEncryption.CUSTOMER_MANAGED
                if self.table_key
                else dynamodb.TableEncryption.AWS_MANAGED
            ),
            encryption_key=self.table_key,
        )
        # The chain auditor's index: each segment is one index partition, read once per period.
        table.add_global_secondary_index(
            **audit_index(),
            read_capacity=config.table_read_capacity_min if provisioned else None,
            write_capacity=config.table_write_capacity_min if provisioned else None,
        )
        if provisioned:
            target = c.TABLE_AUTOSCALING_TARGET_PERCENT
            table.auto_scale_read_capacity(
                min_capacity=config.table_read_capacity_min, max_capacity=config.table_read_capacity_max
            ).scale_on_utilization(target_utilization_percent=target)
            table.auto_scale_write_capacity(
                min_capacity=config.table_write_capacity_min, max_capacity=config.table_write_capacity_max
            ).scale_on_utilization(target_utilization_percent=target)
            table.auto_scale_global_secondary_index_read_capacity(
                c.AUDIT_INDEX_NAME,
                min_capacity=config.table_read_capacity_min,
                max_capacity=config.table_read_capacity_max,
            ).scale_on_utilization(target_utilization_percent=target)
            table.auto_scale_global_secondary_index_write_capacity(
                c.AUDIT_INDEX_NAME,
                min_capacity=config.table_write_capacity_min,
                max_capacity=config.table_write_capacity_max,
            ).scale_on_utilization(target_utilization_percent=target)
        return table

    def _make_secrets_key(self) -> kms.IKey:
        return kms.Key(
            self,
            "SecretsKey",
            description="Punctual: encrypts the webhook secrets stored with jobs",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )

    def _make_dispatch_key(self) -> None:
        # Dispatch messages are signed with this key (PUNCTUAL_DISPATCH_KEY_SECRET_ARN,
        # punctual.security.message_auth): generated at deploy, read by the senders (pollers, workers, the
        # API) and the workers that verify; no other principal of the stack can read it.
        self.dispatch_key = secretsmanager.Secret(
            self,
            "DispatchKey",
            description="Punctual: the HMAC key that signs and verifies dispatch messages",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=c.DISPATCH_KEY_CHARS, exclude_punctuation=True
            ),
        )
        acknowledge(
            self.dispatch_key,
            "SMG4",
            "Not rotated automatically: every process signs with the current version and accepts "
            "the previous one, so a rotation is one put-secret-value, at most one per queue "
            "retention (docs/delivery.md: the scheduler's own messages are authenticated).",
        )

    def grant_dispatch_key(self, role: iam.IRole) -> None:
        """Read the dispatch key (every sender and verifier of dispatch messages): the one call
        the runtime makes on it (``grant_read`` would add DescribeSecret, which nothing calls)."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue"], resources=[self.dispatch_key.secret_arn]
            )
        )

    def grant_items(self, role: iam.IRole, actions: tuple[str, ...]) -> None:
        """Exactly ``actions`` on the table's items (see ``TABLE_ACTIONS_BY_COMPONENT``).

        With a customer-managed table key, DynamoDB also uses the key on the caller's behalf:
        Decrypt and DescribeKey to read, Encrypt and GenerateDataKey as well to write.
        """
        writes = any(a not in TABLE_READ_ACTIONS for a in actions)
        key_actions = ("kms:Decrypt", "kms:DescribeKey") + (
            ("kms:Encrypt", "kms:GenerateDataKey") if writes else ()
        )
        self._grant(role, actions, key_actions)

    def grant_audit_index(self, role: iam.IRole) -> None:
        """Query the audit index (the chain auditor only): that index's ARN, no wildcard."""
        index_arn = f"{self.table.table_arn}/index/{c.AUDIT_INDEX_NAME}"
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(c.AUDIT_INDEX_ACTIONS), resources=[index_arn])
        )
        if self.table_key:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt", "kms:DescribeKey"], resources=[self.table_key.key_arn]
                )
            )

    def _grant(self, role: iam.IRole, actions: tuple[str, ...], key_actions: tuple[str, ...]) -> None:
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(actions), resources=[self.table.table_arn])
        )
        if self.table_key:
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=list(key_actions), resources=[self.table_key.key_arn])
            )
