"""The multi-Region profile: one stack per Region over a DynamoDB MRSC global table.

``MultiRegionPunctual(app, plan=RegionPlan(("us-east-1", "us-east-2", "us-west-2")), account=...)``
adds one stack per Region to an app. Each stack holds the whole scheduler (API, tick and pollers,
queues, workers, observability), bound to its own Region's replica of the one table; the first
Region's stack (the *home*) holds the table itself: an ``AWS::DynamoDB::GlobalTable`` with
multi-Region strong consistency (MRSC), its replicas in the other Regions and, with two Regions,
a witness. Every Region releases every slot and the claim (a conditional write, strongly
consistent in every Region under MRSC) keeps each slot to one run: docs/multi-region.md.

What differs from the single-Region stack, and why (the facts are numbered as in that page):

* the table is a ``TableV2`` global table, ``MultiRegionConsistency.STRONG`` (F7), on-demand,
  with point-in-time recovery and deletion protection, **without TTL** (F9: not supported) and
  without a customer-managed key (a CMK needs a replica key per Region; not offered yet);
* webhook secrets are encrypted under a **multi-Region KMS key**: the primary in the home
  Region, a replica (same key material) in each other Region, so a worker decrypts a secret the
  API of any Region stored, with its own Region's key, whatever other Region is lost;
* every function and ECS task writes the store's transactions one item at a time
  (``PUNCTUAL_TABLE_TRANSACTIONS=false``, F9: MRSC refuses ``TransactWriteItems``);
* the API's paging-token key is one Secrets Manager secret, made in the home Region with a
  replica in each other Region (a ``next_token`` one Region's API gave pages in another's);
* every role is granted its actions on **its own Region's replica only** (the table ARN in the
  stack's Region) and its own Region's key, queues and functions: nothing calls across Regions
  (F13);
* the other Regions' stacks depend on the home stack (the replicas and the primary key exist
  once it is deployed); the primary key's ARN reaches them through CDK's cross-Region references.

The single-Region default (``infra/app.py``, :class:`~punctual_cdk.scheduler.Punctual` alone) is
unchanged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from punctual.runtime.settings import Settings
from punctual_cdk import constants as c
from punctual_cdk.components.security import TokenKey
from punctual_cdk.components.storage import Storage, audit_index
from punctual_cdk.config import ConfigError, PunctualConfig
from punctual_cdk.scheduler import Punctual

# MRSC Region sets (docs/multi-region.md, F4): the three Regions of a table lie in one set.
REGION_SETS: dict[str, tuple[str, ...]] = {
    "US": ("us-east-1", "us-east-2", "us-west-2"),
    "EU": ("eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1"),
    "AP": ("ap-northeast-1", "ap-northeast-2", "ap-northeast-3"),
}
MRSC_REGIONS = 3  # three replicas, or two replicas and a witness (F3)
# The global table's name: fixed, since every Region's stack names its replica by it (a second
# deployment in the same account and Regions chooses another: the app's tableName).
DEFAULT_TABLE_NAME = "punctual"
TRANSACTIONS_VARIABLE = Settings.variable("table_transactions")
MARKS_SCOPE_VARIABLE = Settings.variable("marks_scope")
ARN_REGION_VARIABLE = Settings.variable("arn_region")


@dataclass(frozen=True)
class RegionPlan:
    """Where the scheduler runs: ``regions`` (home first) and, with two of them, the ``witness``.

    Raises ``ConfigError`` for a plan MRSC refuses: not three Regions in all, Regions repeated,
    a witness with three replicas, or Regions from more than one Region set.
    """

    regions: tuple[str, ...]
    witness: str | None = None
    table_name: str = DEFAULT_TABLE_NAME

    def __post_init__(self) -> None:
        every = [*self.regions, *([self.witness] if self.witness else [])]
        if len(set(every)) != len(every):
            raise ConfigError(f"multi-Region: a Region appears twice in {every}")
        if len(every) != MRSC_REGIONS or len(self.regions) < 2:
            raise ConfigError(
                "multi-Region: MRSC needs three Regions: three replica Regions, or two and a witness"
                f" (got regions {list(self.regions)}, witness {self.witness})"
            )
        sets = {name for name, members in REGION_SETS.items() for r in every if r in members}
        unknown = [r for r in every if not any(r in members for members in REGION_SETS.values())]
        if unknown or len(sets) != 1:
            raise ConfigError(
                f"multi-Region: {every} are not in one MRSC Region set ("
                + "; ".join(f"{k}: {', '.join(v)}" for k, v in REGION_SETS.items())
                + ")"
            )

    @property
    def home(self) -> str:
        return self.regions[0]

    @property
    def replica_regions(self) -> tuple[str, ...]:
        """The replica Regions besides the home one."""
        return self.regions[1:]


class GlobalStorage(Storage):
    """:class:`Storage` over the MRSC global table: the table in the home Region's stack, its
    replica elsewhere; the secrets key a multi-Region key (primary at home, replica elsewhere)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        plan: RegionPlan,
        primary_secrets_key: kms.IKey | None = None,
    ) -> None:
        self.plan = plan
        self.region = cdk.Stack.of(scope).region
        self.primary_secrets_key = primary_secrets_key
        if (self.region == plan.home) != (primary_secrets_key is None):
            raise ConfigError("multi-Region: the home stack makes the primary key; the others replicate it")
        if config.table_encryption == "cmk":
            raise ConfigError(
                "multi-Region: tableEncryption=cmk is not offered (a CMK needs a replica key per Region);"
                " use the AWS managed key"
            )
        super().__init__(scope, construct_id, config=config)

    def grant_items(self, role: iam.IRole, actions: tuple[str, ...]) -> None:
        """The component's actions as the store uses them on MRSC (no transactions, F9): each
        transaction's items written one by one and undone on a failed condition (DeleteItem)."""
        super().grant_items(role, c.without_transactions(actions))

    def _make_table(self, config: PunctualConfig) -> dynamodb.ITable:
        if self.region != self.plan.home:
            # The replica in this Region: its ARN names this Region, so every grant stays local.
            return dynamodb.TableV2.from_table_name(self, "Table", self.plan.table_name)
        return dynamodb.TableV2(
            self,
            "Table",
            table_name=self.plan.table_name,
            partition_key=dynamodb.Attribute(name=c.PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=c.SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            # The chain auditor's index, as the single-Region table has it (MRSC has GSIs, F9).
            global_secondary_indexes=[dynamodb.GlobalSecondaryIndexPropsV2(**audit_index())],
            multi_region_consistency=dynamodb.MultiRegionConsistency.STRONG,
            replicas=[dynamodb.ReplicaTableProps(region=r) for r in self.plan.replica_regions],
            witness_region=self.plan.witness,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=config.table_deletion_protection,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
        )

    def _make_secrets_key(self) -> kms.IKey:
        if self.primary_secrets_key is None:
            key = kms.Key(
                self,
                "SecretsKey",
                description="Punctual: encrypts the webhook secrets stored with jobs (multi-Region primary)",
                enable_key_rotation=True,
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
            cfn = key.node.default_child
            assert isinstance(cfn, kms.CfnKey)
            cfn.multi_region = True
            return key
        replica = kms.CfnReplicaKey(
            self,
            "SecretsKey",
            primary_key_arn=self.primary_secrets_key.key_arn,
            description="Punctual: encrypts the webhook secrets stored with jobs (multi-Region replica)",
            key_policy=_account_key_policy(),
        )
        replica.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        return kms.Key.from_key_arn(self, "SecretsKeyReplica", replica.attr_arn)


def _account_key_policy() -> iam.PolicyDocument:
    """The default key policy: the account administers the key; roles get use by their own
    IAM policies (the same grants as the single-Region key's, on this Region's replica)."""
    return iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(actions=["kms:*"], principals=[iam.AccountRootPrincipal()], resources=["*"])
        ]
    )


class RegionStack(cdk.Stack):
    """One Region of the multi-Region profile: the whole scheduler over its replica."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        plan: RegionPlan,
        primary_secrets_key: kms.IKey | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, cross_region_references=True, **kwargs)  # type: ignore[arg-type]
        self.scheduler = Punctual(
            self,
            "Default",
            config=config,
            storage=lambda owner: GlobalStorage(
                owner, "Storage", config=config, plan=plan, primary_secrets_key=primary_secrets_key
            ),
            # One paging-token key for every Region (made at home, a replica in each other Region):
            # a next_token one Region's API gave pages in another's, after a failover too.
            token_key=lambda owner: TokenKey(
                owner,
                "PagingTokenKey",
                name=f"{config.stack_name}/paging-token-key",
                replica_regions=plan.replica_regions if self.region == plan.home else (),
                replica=self.region != plan.home,
            ),
        )
        # MRSC refuses transactions (F9): every function and task of the scheduler writes a
        # transaction's items one by one. And each Region's pollers keep watermarks and progress
        # marks of their own (docs/multi-region.md, section 2): another Region's say what its
        # queues were given, which a lost Region takes with it.
        # The EventBridge-compatible API names every ARN in the home Region, whichever Region's
        # API answers: a client that fails over keeps the ARNs it holds.
        scoped = {
            TRANSACTIONS_VARIABLE: "false",
            MARKS_SCOPE_VARIABLE: self.region,
            ARN_REGION_VARIABLE: plan.home,
        }
        for node in self.scheduler.node.find_all():
            if isinstance(node, lambda_.Function):
                for name, value in scoped.items():
                    node.add_environment(name, value)
        for container in self.scheduler.workers.containers:
            for name, value in scoped.items():
                container.add_environment(name, value)
        # Every Region's workers claim every slot, and the winner assumes its job's execution role:
        # the worker roles are named, so each Region's jobs (and stack output) can name them all
        for index, role in enumerate(self.scheduler.workers.roles):
            cfn = role.node.default_child
            assert isinstance(cfn, iam.CfnRole)
            cfn.role_name = worker_role_name(config.stack_name, self.region, index)


def worker_role_name(stack_name: str, region: str, index: int) -> str:
    """The name of a Region's ``index``-th worker role (IAM's 64 characters at most)."""
    suffix = f"-{region}-worker-{index}"
    if len(stack_name + suffix) <= 64:
        return stack_name + suffix
    suffix = f"-{hashlib.sha256(stack_name.encode()).hexdigest()[:8]}{suffix}"  # a long name, cut
    return stack_name[: 64 - len(suffix)] + suffix


class MultiRegionPunctual:
    """The stacks of the multi-Region profile, one per Region of ``plan``, added to ``app``.

    ``stacks`` maps each Region to its stack (``<stack name>-<region>``); the home Region's
    comes first and the others depend on it.
    """

    def __init__(self, app: cdk.App, *, plan: RegionPlan, account: str, config: PunctualConfig) -> None:
        if config.table_billing_mode == "provisioned":
            raise ConfigError("multi-Region: the global table is on-demand (tableBillingMode=provisioned)")
        # Table settings the global table does not take: refused, not silently dropped.
        not_offered = {
            "tableWarmReadUnitsPerSecond": config.table_warm_read_units_per_second != 0,
            "tableWarmWriteUnitsPerSecond": config.table_warm_write_units_per_second != 0,
            "tableRemovalPolicy": config.table_removal_policy != "retain",
        }
        for key in (key for key, given in not_offered.items() if given):
            raise ConfigError(
                f"{key}: not offered by the multi-Region profile (its global table has no warm throughput "
                "set and is always retained on stack deletion): leave it at its default"
            )
        self.plan = plan
        self.stacks: dict[str, RegionStack] = {}
        home: RegionStack | None = None
        for region in plan.regions:
            primary = None if home is None else home.scheduler.storage.secrets_key
            stack = RegionStack(
                app,
                f"{config.stack_name}-{region}",
                config=replace(config),
                plan=plan,
                primary_secrets_key=primary,
                env=cdk.Environment(account=account, region=region),
                description=f"Punctual, Region {region} of {', '.join(plan.regions)} (MRSC global table)",
            )
            if home is None:
                home = stack
            else:
                stack.node.add_dependency(home)  # the replicas and the primary key are made there
            self.stacks[region] = stack
        count = len(home.scheduler.workers.roles) if home else 0
        every = {
            region: [
                f"arn:aws:iam::{account}:role/{worker_role_name(config.stack_name, region, i)}"
                for i in range(count)
            ]
            for region in plan.regions
        }
        for region, stack in self.stacks.items():
            peers = tuple(arn for other, arns in every.items() if other != region for arn in arns)
            stack.scheduler.peer_worker_role_arns = peers
            # What a tenant's execution role (role_arn) trusts: every Region's workers
            stack.scheduler.worker_role_arns_output.value = ",".join(
                arn for arns in every.values() for arn in arns
            )
