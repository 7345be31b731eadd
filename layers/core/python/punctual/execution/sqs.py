"""The Lambda worker's SQS batch adapter: a record of an SQS event in, the worker's outcome out.

A malformed body is logged and dropped. A message that must come back later raises
:class:`MessageReturned` after its visibility was set, so the batch processor reports it as
failed and keeps it (with its group's later records) in the queue. Any other error returns the
message with a backoff that grows with its receives, or parks a first attempt with a record
(:meth:`punctual.execution.claim.Claimer.after_error`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from punctual.dispatch.queues import FORGED_MESSAGES, DispatchMessage, QueuePort
from punctual.execution.ports import Delivery, HandleResult, MessageReturned, WorkerConfig, made_at_once
from punctual.runtime.observability import MetricsSink

log = logging.getLogger("punctual.execution")


# The queue URL of each (ARN, configured URLs) met: a batch's records come from a few queues, and
# each record's URL was worked out twice a record (the batch's hold and the record's delivery).
_URL_OF_ARN: dict[tuple[str, tuple[str, ...], tuple[str, ...]], str] = {}
_ARNS_KEPT = 256  # far more queues than a stack has: past it, worked out each time


def queue_url_of(arn: str, config: WorkerConfig) -> str:
    """:func:`queue_url_for_arn` of ``arn`` among ``config``'s queues, kept once worked out (an ARN
    that is not an SQS queue's raises each time)."""
    key = (arn, config.short_queue_urls, config.long_queue_urls)
    try:
        url = _URL_OF_ARN.get(key)
    except TypeError:  # URLs given in lists, not tuples: not kept
        url = None
    if url is None:
        url = queue_url_for_arn(arn, [*config.short_queue_urls, *config.long_queue_urls])
        if len(_URL_OF_ARN) < _ARNS_KEPT:
            with contextlib.suppress(TypeError):  # (not kept either)
                _URL_OF_ARN[key] = url
    return url


def queue_url_for_arn(arn: str, urls: Sequence[str]) -> str:
    """The queue URL of an SQS queue ARN: a configured URL with that name, else the AWS form.

    Parameters
    ----------
    arn
        ``arn:aws:sqs:<region>:<account>:<name>`` (a Lambda event's ``eventSourceARN``).
    urls
        The configured queue URLs (local mode and moto use other hosts).
    """
    parts = arn.split(":")
    if len(parts) < 6:
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    region, account, name = parts[3], parts[4], parts[5]
    for url in urls:
        if url.rstrip("/").rsplit("/", 1)[-1] == name:
            return url
    return f"https://sqs.{region}.amazonaws.com/{account}/{name}"


class BatchWorker(Protocol):
    """What the batch adapter needs of a worker (:class:`punctual.execution.worker.Worker` is one).

    Declared here, where it is used, so that this module never imports the worker that builds it.
    """

    @property
    def config(self) -> WorkerConfig: ...

    @property
    def metrics(self) -> MetricsSink: ...

    @property
    def queues(self) -> QueuePort: ...

    def process(
        self,
        message: DispatchMessage,
        delivery: Delivery | None = None,
        time_left_s: float | None = None,
        *,
        settle: bool = True,
    ) -> HandleResult: ...

    def after_error(
        self, message: DispatchMessage, delivery: Delivery | None, error: BaseException
    ) -> bool: ...


class SqsBatch:
    """Feeds the records of a Lambda SQS event to a worker."""

    def __init__(self, worker: BatchWorker) -> None:
        self.worker = worker

    @property
    def _urls(self) -> list[str]:
        config = self.worker.config
        return [*config.short_queue_urls, *config.long_queue_urls]

    def process_record(self, record: Mapping[str, Any], time_left_s: float | None = None) -> HandleResult:
        """Process one record (its raw dict); see :meth:`punctual.execution.worker.Worker.process`.
        Its deliveries run on: the batch's shell waits for them once, at the batch's end
        (:meth:`punctual.execution.worker.Worker.settle`).

        Raises
        ------
        MessageReturned
            The message stays in the queue.
        """
        delivery = made_at_once(
            Delivery,
            {
                "queue_url": queue_url_of(record["eventSourceARN"], self.worker.config),
                "receipt": record["receiptHandle"],
                "receive_count": int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")),
                "message_id": str(record.get("messageId") or ""),
            },
        )
        try:
            message = DispatchMessage.from_body(record["body"])
        except (ValueError, TypeError) as exc:
            # No sender writes one: as forged (QA24: counted apart, MalformedMessages, which nothing
            # watched, so a truncated or made-up body written to a work queue raised no alarm)
            log.error("dropping a malformed message %s: %s", record.get("messageId"), exc)
            self.worker.metrics.add(FORGED_MESSAGES, 1)
            return HandleResult("malformed", True)
        try:
            handled = self.worker.process(message, delivery, time_left_s, settle=False)
        except Exception as exc:
            if self.worker.after_error(message, delivery, exc):
                return HandleResult("parked", True)
            raise
        if not handled.ack:
            raise MessageReturned(handled.outcome, handled.return_after_s)
        return handled

    def return_blocked_records(self, event: Mapping[str, Any], failed_ids: set[str]) -> int:
        """Make a batch's records that a FIFO processor skipped visible again at once.

        After a record fails, the processor fails its group's later records without running
        them; they would stay in flight for the queue's whole visibility timeout and block
        their group. The first failed record of each group keeps its own visibility (it sets
        when the group resumes); the rest become visible now and queue up behind it.

        Returns
        -------
        int
            How many records were made visible.
        """
        seen_groups: set[str] = set()
        returned = 0
        urls = self._urls
        for record in event.get("Records", []):
            if record.get("messageId") not in failed_ids:
                continue
            group = str(record.get("attributes", {}).get("MessageGroupId", ""))
            if group not in seen_groups:
                seen_groups.add(group)
                continue
            try:
                url = queue_url_for_arn(record["eventSourceARN"], urls)
                self.worker.queues.change_visibility(url, record["receiptHandle"], 0)
                returned += 1
            except Exception:  # best effort: the visibility timeout brings it back anyway
                log.warning("could not return skipped record %s", record.get("messageId"), exc_info=True)
        return returned
