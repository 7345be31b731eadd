"""Create the table and queues of the synthesised template in moto server, and describe them.

The ``aws`` component calls :func:`deploy` once moto server answers; it writes
``<state>/run/deployment.json`` (:class:`Deployment`), which every other component waits
for and takes its ``PUNCTUAL_*`` settings from.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from local.config import LocalConfig, LocalModeError
from local.template import Blueprint, QueueDef


@dataclass
class Deployment:
    """The resources local mode created, and the settings each function gets.

    ``poller_timeout_s``, ``worker_timeout_s`` and ``auditor_timeout_s`` are the functions' Lambda
    timeouts (the stand-in Lambda contexts count down from them); ``worker_batch_size`` is the event
    source mapping's; ``environment`` holds the template's literal ``PUNCTUAL_*`` values;
    ``poller_retry`` the minute state machine's Retry of the poller task (local/retriers.py).
    """

    endpoint: str
    table_name: str
    short_queue_urls: list[str]
    long_queue_urls: list[str]
    failed_queue_url: str
    queue_arns: dict[str, str]
    dead_letter_urls: list[str]
    poller_timeout_s: int
    worker_timeout_s: int
    api_timeout_s: int
    worker_batch_size: int
    ecs_stop_timeout_s: int
    environment: dict[str, str] = field(default_factory=dict)
    auditor_timeout_s: int = 900
    ecs_environment: dict[str, str] = field(default_factory=dict)
    template: str = ""
    poller_retry: list[dict[str, Any]] = field(default_factory=list)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".deployment-", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self), handle, indent=2)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> Deployment:
        return cls(**json.loads(path.read_text()))


def _table_request(blueprint: Blueprint, table_name: str) -> dict[str, Any]:
    table = blueprint.table
    request: dict[str, Any] = {
        "TableName": table_name,
        "KeySchema": table.key_schema,
        "AttributeDefinitions": table.attribute_definitions,
        "BillingMode": table.billing_mode,
    }
    if table.billing_mode != "PAY_PER_REQUEST":
        request["ProvisionedThroughput"] = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
    if table.global_secondary_indexes:
        request["GlobalSecondaryIndexes"] = table.global_secondary_indexes
    if table.local_secondary_indexes:
        request["LocalSecondaryIndexes"] = table.local_secondary_indexes
    if table.stream_view_type:
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": table.stream_view_type}
    return request


def create_table(dynamodb: Any, blueprint: Blueprint, table_name: str) -> None:
    """Create the table (and its TTL) unless it exists."""
    with contextlib.suppress(dynamodb.exceptions.ResourceInUseException):
        dynamodb.create_table(**_table_request(blueprint, table_name))
    if blueprint.table.ttl_attribute:
        dynamodb.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": blueprint.table.ttl_attribute},
        )


def create_queues(sqs: Any, blueprint: Blueprint) -> dict[str, tuple[str, str]]:
    """Create every queue (dead-letter queues first); returns logical id -> (url, arn)."""
    made: dict[str, tuple[str, str]] = {}

    def create(queue: QueueDef) -> None:
        attributes = dict(queue.attributes)
        if queue.dead_letter:
            if queue.dead_letter not in made:
                create(blueprint.queue(queue.dead_letter))
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": made[queue.dead_letter][1],
                    "maxReceiveCount": queue.max_receive_count,
                }
            )
        url = sqs.create_queue(QueueName=queue.name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        made[queue.logical_id] = (url, arn)

    for queue in sorted(blueprint.queues, key=lambda q: q.role != "dlq"):
        if queue.logical_id not in made:
            create(queue)
    return made


def deploy(
    config: LocalConfig, blueprint: Blueprint, dynamodb: Any, sqs: Any, template: str = ""
) -> Deployment:
    """Create the resources of ``blueprint`` and describe the deployment (not yet written)."""
    create_table(dynamodb, blueprint, config.table_name)
    made = create_queues(sqs, blueprint)

    def urls(role: str) -> list[str]:
        return [made[q.logical_id][0] for q in blueprint.queues_of(role)]

    failed = urls("failed")
    if not urls("short"):
        raise LocalModeError("the template defines no short queue")
    return Deployment(
        endpoint=config.aws_endpoint,
        table_name=config.table_name,
        short_queue_urls=urls("short"),
        long_queue_urls=urls("long"),
        failed_queue_url=failed[0] if failed else "",
        queue_arns={url: arn for url, arn in made.values()},
        dead_letter_urls=urls("dlq"),
        poller_timeout_s=blueprint.poller.timeout_s,
        worker_timeout_s=blueprint.worker.timeout_s,
        api_timeout_s=blueprint.api.timeout_s,
        worker_batch_size=blueprint.worker_batch_size,
        ecs_stop_timeout_s=blueprint.ecs_stop_timeout_s,
        auditor_timeout_s=blueprint.auditor.timeout_s if blueprint.auditor else 900,
        environment=blueprint.worker.environment,
        ecs_environment=blueprint.ecs_environment,
        template=template,
        poller_retry=blueprint.poller_retry,
    )


def resources_exist(deployment: Deployment, dynamodb: Any, sqs: Any) -> bool:
    """True when the table and every queue of ``deployment`` exist in the endpoint."""
    try:
        dynamodb.describe_table(TableName=deployment.table_name)
        for url in [*deployment.short_queue_urls, *deployment.long_queue_urls]:
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    except Exception:
        return False
    return True


def table_arn(deployment: Deployment) -> str:
    """The table's ARN as moto names it (local mode's account and region)."""
    from local.config import ACCOUNT, REGION

    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{deployment.table_name}"


def function_environment(config: LocalConfig, deployment: Deployment, base: dict[str, str]) -> dict[str, str]:
    """The ``PUNCTUAL_*`` (and Powertools) variables of one function, as local mode runs it.

    ``base`` is the function's environment in the template (literal values); local mode
    then points it at the local resources and overrides what must differ on one machine.
    """
    env = dict(base)
    env.update(
        {
            "PUNCTUAL_TABLE_NAME": deployment.table_name,
            "PUNCTUAL_SHORT_QUEUE_URLS": ",".join(deployment.short_queue_urls),
            "PUNCTUAL_LONG_QUEUE_URLS": ",".join(deployment.long_queue_urls),
            "PUNCTUAL_FAILED_QUEUE_URL": deployment.failed_queue_url,
            # Webhooks on loopback (the demo receiver) must pass the SSRF guard.
            "PUNCTUAL_TARGET_ALLOW_CIDRS": "127.0.0.0/8",
            "PUNCTUAL_LOCAL_MODE": "1",
            "PUNCTUAL_SECRET_KEY": config.secret_key(),
            "PUNCTUAL_DISPATCH_KEY": config.dispatch_key(),
            "PUNCTUAL_DISPATCH_KEY_SECRET_ARN": "",
            "PUNCTUAL_KMS_KEY_ID": "",
            # The own resources are listed here, not read from SSM (moto holds no parameter).
            "PUNCTUAL_OWN_ARNS": ",".join([*deployment.queue_arns.values(), table_arn(deployment)]),
            "PUNCTUAL_OWN_ARNS_PARAMETER": "",
            "PUNCTUAL_TOKEN_KEY": config.token_key(),
            # A job batch one transaction at a time: moto's transactions are not safe side by side.
            "PUNCTUAL_API_BATCH_CONCURRENCY": "1",
            # Execution events go to the local receiver (GET /events there), not to moto's bus.
            "PUNCTUAL_EVENTS_URL": f"{config.receiver_url}/events",
            # ...all of them: the receiver costs nothing, and a developer watches every change there
            # (a deployment's default sends only the changes that are not RUNNING and SUCCEEDED).
            "PUNCTUAL_EVENTS_STATUS_CHANGES": "all",
            "LOG_LEVEL": config.log_level,
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon on this machine
            "POWERTOOLS_SERVICE_NAME": env.get("POWERTOOLS_SERVICE_NAME", "punctual"),
        }
    )
    env.update(chosen_settings(config))
    return env


def chosen_settings(config: LocalConfig) -> dict[str, str]:
    """The ``PUNCTUAL_*`` values local mode's own options give every function (its shards, lease,
    table transactions and auditor, then ``--set``), applied last by :func:`function_environment`;
    ``punctual-local`` checks them before it starts anything (every function would refuse them)."""
    env = {
        # Few shards: moto reads the whole table per Query, and one poller owns them all.
        "PUNCTUAL_SHARD_COUNT": str(config.shard_count),
        "PUNCTUAL_NEAR_SHARD_COUNT": str(config.near_shard_count),
        "PUNCTUAL_TABLE_TRANSACTIONS": "true" if config.table_transactions else "false",
        # The chain auditor checks every job at each invocation (local/auditor.py).
        "PUNCTUAL_AUDIT_PERIOD_MINUTES": "1",
        "PUNCTUAL_AUDIT_GRACE_S": str(config.audit_grace_s),
    }
    if config.lease_s:  # else the deployment's lease (Settings' default, as the template leaves it)
        env["PUNCTUAL_LEASE_S"] = str(config.lease_s)
    env.update(config.extra)
    return env
