"""Queues: the FIFO lanes between pollers and workers, their dead-letter queues, and the queue
of failed executions.

``short`` queues feed the worker Lambda, ``long`` queues the ECS worker; there are
``queueCount`` short ones and as many long ones up to ``MAX_LONG_QUEUE_COUNT`` (4: the ECS
workers' scale-in alarm watches every long queue within CloudWatch's 10 metrics an alarm); the
poller spreads jobs over a lane's queues. Every FIFO queue is in
high-throughput mode (deduplication per message group, throughput limit per message group id):
the dedup id is job + slot + attempt, so a resend inside five minutes is dropped. Each has a
FIFO dead-letter queue after ``maxReceiveCount`` receives. All queues use SQS-managed
encryption and refuse requests that are not over TLS.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.config import PunctualConfig
from punctual_cdk.nag import acknowledge

SEND_ACTIONS = ("sqs:SendMessage",)  # SendMessageBatch is authorised as SendMessage


class Queues(Construct):
    """The short and long FIFO lanes, their DLQs, and the failed-executions queue."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.short: list[sqs.Queue] = []
        self.long: list[sqs.Queue] = []
        self.dead_letter: list[sqs.Queue] = []
        for index in range(config.queue_count):
            self.short.append(self._lane("Short", index, c.SHORT_QUEUE_VISIBILITY_TIMEOUT_S))
            if index < c.MAX_LONG_QUEUE_COUNT:
                self.long.append(self._lane("Long", index, c.LONG_QUEUE_VISIBILITY_TIMEOUT_S))

        # Executions that ended FAILED or TIMED_OUT are announced here for the user's tooling.
        self.failed = sqs.Queue(
            self,
            "Failed",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(c.FAILED_QUEUE_RETENTION_DAYS),
        )
        acknowledge(
            self.failed,
            "SQS3",
            "The failed-executions queue is itself a terminal queue: it holds notices of executions "
            "that already exhausted their retries, for the operator's tooling to read; a further DLQ "
            "behind it would only hold the same notices again.",
        )

    @property
    def work_queues(self) -> list[sqs.Queue]:
        return self.short + self.long

    def _lane(self, lane: str, index: int, visibility_s: int) -> sqs.Queue:
        dlq = sqs.Queue(
            self,
            f"{lane}{index}Dlq",
            fifo=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(c.DLQ_RETENTION_DAYS),
        )
        self.dead_letter.append(dlq)
        return sqs.Queue(
            self,
            f"{lane}{index}",
            fifo=True,
            content_based_deduplication=False,  # the poller sets job + slot + attempt as the id
            deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
            fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
            visibility_timeout=cdk.Duration.seconds(visibility_s),
            retention_period=cdk.Duration.days(c.QUEUE_RETENTION_DAYS),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=dlq, max_receive_count=self._config.max_receive_count
            ),
        )

    @staticmethod
    def grant(role: iam.IRole, queues: list[sqs.Queue], actions: tuple[str, ...]) -> None:
        """One statement: exactly these actions on exactly these queues."""
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(actions), resources=[q.queue_arn for q in queues])
        )
