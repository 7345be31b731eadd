"""Worker Lambda: a batch from an SQS FIFO queue in, the execution core per record, a partial batch out.

A record that fails, or must come back later, stops only its own message group's later records
(``skip_group_on_error``); those are made visible again at once, behind it, so the group resumes
as soon as its first record does. Every decision lives in :mod:`punctual.execution`; the worker
is built by the composition root (:func:`punctual.composition.container`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.composition import container
from punctual.execution import Worker
from punctual.lambda_support import PowertoolsMetrics, logger, metrics, tracer

SETTLE_MARGIN_S = 5.0  # of the invocation, left after waiting for the batch's alert deliveries
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
processor.raise_on_entire_batch_failure = False  # a batch whose records all wait is not an error


@cache
def worker() -> Worker:
    return container().worker(lease_timers=False, metrics=PowertoolsMetrics())


@tracer.capture_method
def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> None:
    # A FIFO batch runs one after another: never start a run this invocation cannot finish.
    worker().process_sqs_record(record.raw_event, lambda_context.get_remaining_time_in_millis() / 1000)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    with worker().notifier.batched():  # the batch's execution events in as few PutEvents as possible
        response = process_partial_response(event, record_handler, processor, context)
        # The batch's alerts were delivered beside its runs: wait for them before the invocation
        # ends (one left over stays SENDING, and its sweep finishes it).
        worker().settle(context.get_remaining_time_in_millis() / 1000 - SETTLE_MARGIN_S)
    # An SQS batch's item identifiers are its message ids (Powertools types them for Kafka too).
    worker().return_blocked_records(
        event, {str(item["itemIdentifier"]) for item in response["batchItemFailures"]}
    )
    return dict(response)
