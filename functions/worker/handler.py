"""Worker Lambda: a batch from an SQS FIFO queue in, the execution core per record, a partial batch out.

Every message of the batch is leased for seconds as soon as the batch arrives (beside its first
claims: punctual.execution.hold_gate), and renewed while
the batch holds it; records of different message groups run side by side, a group's in order,
and a record that fails (or must come back later) fails its group's later records behind it
(:mod:`punctual.execution.batch`). Every decision lives in :mod:`punctual.execution`; the worker
is built by the composition root (:func:`punctual.runtime.composition.container`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.execution.batch import LambdaBatch
from punctual.execution.hold_gate import HoldGate
from punctual.execution.unbuilt import configured_queue_urls, return_unbuilt_batch
from punctual.runtime import aws
from punctual.runtime.composition import container
from punctual.runtime.lambda_support import PowertoolsMetrics, log_metrics, logger, tracer
from punctual.runtime.settings import Platform


@cache
def batch() -> LambdaBatch:
    built = container()
    gate = HoldGate(built.queues)  # the batch's hold beside its claims (punctual.execution.hold_gate)
    return LambdaBatch(built.worker(lease_timers=False, metrics=PowertoolsMetrics(), queues=gate), gate=gate)


def init() -> None:
    """Build the worker (its clients, store, queues, signer) before the first batch arrives.

    Built lazily, the first invocation of every execution environment paid for it between the
    batch's receipt and its first claim: measured in local mode at a burst's instant, 0.1 to
    0.3 s of every cold worker's first batch. Lambda runs this in its init phase (below),
    ahead of the invocation (and with provisioned concurrency, ahead of the traffic); local
    mode calls it in each worker process before its first receive (local.event_source).
    """
    try:
        batch()
    except Exception:  # (a dependency unreachable at start-up: each batch tries again, below)
        logger.exception("the worker could not be built; each batch tries again")


if Platform.from_env().lambda_initialization:  # Lambda's init phase (never so in tests or a zygote)
    init()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        work = batch()
    except Exception:
        # No worker: the batch goes back after its error backoff, not the queue's 960 s, and the
        # invocation still fails (counted in Errors). punctual.execution.unbuilt
        returned = return_unbuilt_batch(event, aws.client("sqs"), configured_queue_urls())
        logger.warning("the worker could not be built: %d messages back after their backoff", returned)
        raise
    with work.worker.notifier.batched():  # the batch's execution events in as few PutEvents as possible
        return work.handle(event, lambda: context.get_remaining_time_in_millis() / 1000)
