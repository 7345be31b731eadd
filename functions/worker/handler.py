"""Worker Lambda: a batch from an SQS FIFO queue in, the execution core per record, a partial batch out.

A record that fails, or must come back later, stops only its own message group's later records
(``skip_group_on_error``); those are made visible again at once, behind it, so the group resumes
as soon as its first record does. Every decision lives in :mod:`punctual.execution`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.execution import Worker
from punctual.settings import Settings

logger, metrics, tracer = Logger(), Metrics(), Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
processor.raise_on_entire_batch_failure = False  # a batch whose records all wait is not an error


class _Metrics:
    """The core's metrics sink, forwarded to Powertools (EMF)."""

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        metrics.add_metric(name=name, unit=unit, value=value)


@cache
def worker() -> Worker:
    return Worker.from_settings(Settings.from_env(), lease_timers=False, metrics=_Metrics())


@tracer.capture_method
def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> None:
    # A FIFO batch runs one after another: never start a run this invocation cannot finish.
    worker().process_sqs_record(record.raw_event, lambda_context.get_remaining_time_in_millis() / 1000)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = process_partial_response(event, record_handler, processor, context)
    # An SQS batch's item identifiers are its message ids (Powertools types them for Kafka too).
    worker().return_blocked_records(
        event, {str(item["itemIdentifier"]) for item in response["batchItemFailures"]}
    )
    return dict(response)
