"""A batch that reaches a Lambda worker that could not be built goes back to its queue in seconds.

A worker is built once per execution environment, in Lambda's init phase
(``functions/worker/handler.py``): its store, queues and the dispatch key, read from Secrets
Manager. When a dependency cannot be reached then (Secrets Manager or the table unreachable or
throttled at start-up), the init failed, the invocation with it, and the event source mapping
left the batch in flight for the queue's whole visibility timeout, which it requires to be at
least the function's (960 s by default): every slot of the batch ran a quarter of an hour late,
however short the fault (QA25: a cold environment's batch during a Secrets Manager outage; the
pollers' re-sends reach another environment only while they watch, three times).

Now the init logs the failure and the handler tries the build again for each batch; a batch that
still finds no worker is made visible again after the error backoff of its receives (10 s, 30 s,
90 s, ..., as a message that meets an error in a built worker:
:func:`punctual.execution.parking.error_backoff_s`, so a long outage does not dead-letter it),
and the invocation still fails, so the function's ``Errors`` (and its alarm) count it as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from punctual.dispatch.queues import SqsQueues
from punctual.execution.parking import error_backoff_s
from punctual.execution.sqs import queue_url_for_arn

log = logging.getLogger("punctual.execution")


def configured_queue_urls() -> list[str]:
    """The work queues the environment names (local mode's hosts), or none if it cannot say."""
    try:
        from punctual.runtime.settings import Settings

        settings = Settings.from_env()
        return [*settings.short_queue_urls, *settings.long_queue_urls]
    except Exception:  # the settings are what failed: the queues' AWS form is used
        return []


def return_unbuilt_batch(event: Mapping[str, Any], sqs: Any, urls: Sequence[str]) -> int:
    """Make each record of ``event`` visible again after its error backoff (``sqs``: a boto3 SQS
    client); how many were returned so. Never raises: a record it cannot return comes back at
    the end of the queue's visibility timeout, as before."""
    by_queue: dict[tuple[str, int], list[str]] = {}
    for record in event.get("Records") or ():
        try:
            receives = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1"))
            url = queue_url_for_arn(str(record["eventSourceARN"]), urls)
            by_queue.setdefault((url, error_backoff_s(receives)), []).append(str(record["receiptHandle"]))
        except (KeyError, TypeError, ValueError):
            log.warning("a record of the batch names no queue or receipt: left to its visibility")
    queues = SqsQueues(sqs, concurrency=1)
    returned = 0
    for (url, seconds), receipts in by_queue.items():
        try:
            returned += len(receipts) - len(queues.change_visibility_batch(url, receipts, seconds))
        except Exception:
            log.warning("could not return %d messages to %s", len(receipts), url, exc_info=True)
    return returned
