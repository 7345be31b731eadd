"""The ``worker`` component: the worker Lambda fed by an emulated SQS event source mapping.

One process is one Lambda "container": it runs one batch at a time, like a Lambda
execution environment; local mode starts several for concurrency. The loop does what the
event source mapping does for a FIFO queue with ``ReportBatchItemFailures``:

1. long-poll the short queue(s) for up to the mapping's ``BatchSize`` messages;
2. shape them as Lambda's SQS event (``Records`` with ``messageId``, ``receiptHandle``,
   ``body``, ``attributes``, ``messageAttributes``, ``md5OfBody``, ``eventSource``,
   ``eventSourceARN``, ``awsRegion``) and call ``functions/worker/handler.py`` with a
   stand-in context counting down from the function's timeout in the template;
3. delete every record not named in ``batchItemFailures``; the failed ones stay in the
   queue (the handler already set their visibility). If the handler raises, nothing is
   deleted, as on AWS.

A container killed mid-batch (``kill -9``) lets its batch come back as it would on AWS: the
handler leased every message of the batch for seconds as it arrived
(:mod:`punctual.execution.batch`), so they are visible again within a lease of the death, and
the claim takes a run whose lease lapsed over as the next attempt. One killed between its
receive and its handler leaves the batch in flight for the queue's visibility timeout (960 s,
the template's): the pollers re-send those slots (:mod:`punctual.dispatch.polling.resend`). The process
records each batch in ``<state>/run/<component>.inflight.json`` while it works it, for people
and for the chaos run (which reads what a killed worker held); nothing returns it early.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from local.component import STARTED_ENV, LambdaContext, load_handler, prepare
from local.config import REGION, LocalConfig
from local.scaling import BURST_PREFIX, scaling_file

log = logging.getLogger("local.event_source")

LONG_POLL_S = 2  # short enough to stop promptly; moto answers as soon as a message arrives


def lambda_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of Lambda's SQS event, from a ReceiveMessage result."""
    attributes = dict(message.get("Attributes", {}))
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": value.get("StringListValues", []),
                "binaryListValues": value.get("BinaryListValues", []),
                "dataType": value.get("DataType"),
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _inflight_entry(url: str, message: dict[str, Any]) -> dict[str, Any]:
    """What a successor needs to return the message, and what it is (for people and tests)."""
    try:
        body = json.loads(message["Body"])
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    return {
        "queue_url": url,
        "receipt": message["ReceiptHandle"],
        "message_id": message["MessageId"],
        "job_id": body.get("job_id"),
        "slot": body.get("slot"),
        "attempt": body.get("attempt"),
    }


class EventSourceMapping:
    """Receives batches and invokes the handler, one batch at a time."""

    def __init__(
        self,
        handler: Any,
        sqs: Any,
        queues: list[tuple[str, str]],
        batch_size: int,
        timeout_s: int,
        inflight: Path,
        name: str,
        tally: Path | None = None,
    ) -> None:
        self.handler = handler
        self.sqs = sqs
        self.queues = queues  # (url, arn)
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.inflight = inflight
        self.name = name
        # Messages this process handled, kept in a file (tests tell the burst workers' share).
        self.tally = tally
        try:
            self.handled = int(tally.read_text()) if tally is not None else 0  # a restart goes on
        except (OSError, ValueError):
            self.handled = 0

    def poll_once(self, url: str, arn: str) -> int:
        reply = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=LONG_POLL_S,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = reply.get("Messages", [])
        if not messages:
            return 0
        log.debug("%s: received %d message(s) from %s", self.name, len(messages), url.rsplit("/", 1)[-1])
        self.inflight.write_text(json.dumps({"messages": [_inflight_entry(url, m) for m in messages]}))
        event = {"Records": [lambda_record(m, arn) for m in messages]}
        context = LambdaContext(f"punctual-worker-local-{self.name}", timeout_s=self.timeout_s)
        try:
            response = self.handler(event, context)
        except Exception:
            log.exception(
                "the worker handler failed: its batch of %d returns after the visibility timeout",
                len(messages),
            )
            self.inflight.unlink(missing_ok=True)
            return len(messages)
        failed = {item["itemIdentifier"] for item in (response or {}).get("batchItemFailures", [])}
        done = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(messages)
            if m["MessageId"] not in failed
        ]
        if done:
            reply = self.sqs.delete_message_batch(QueueUrl=url, Entries=done)
            for error in reply.get("Failed", []):
                log.warning("could not delete a finished message: %s", error.get("Message"))
        self.inflight.unlink(missing_ok=True)
        log.debug("%s: batch of %d done", self.name, len(messages))
        self.handled += len(done)
        if self.tally is not None:
            self.tally.write_text(str(self.handled))
        return len(messages)

    def run(self, stop: threading.Event, on_first_receive: Callable[[], None] | None = None) -> None:
        from botocore.exceptions import EndpointConnectionError

        turn = 0
        unreachable = False
        while not stop.is_set():
            if on_first_receive is not None and turn == 0:
                on_first_receive()
            url, arn = self.queues[turn % len(self.queues)]
            turn += 1
            try:
                self.poll_once(url, arn)
                if unreachable:
                    log.info("AWS is back")
                unreachable = False
            except EndpointConnectionError:  # moto restarting: say so once, not every second
                if not unreachable:
                    log.warning("AWS is unreachable at %s; waiting for it", url.rsplit("/", 2)[0])
                unreachable = True
                stop.wait(1.0)
            except Exception:
                log.exception("receiving from %s failed", url)
                stop.wait(1.0)


def run(config: LocalConfig, stop: threading.Event, name: str = "worker") -> None:
    import boto3

    deployment = prepare(config, stop=stop)
    handler = load_handler("worker")
    handler.init()  # what Lambda's init phase does, after the fork (a zygote holds no client)
    sqs = boto3.client("sqs")
    inflight = config.inflight_file(name)
    inflight.unlink(missing_ok=True)  # a killed predecessor's batch comes back within its lease
    queues = [(url, deployment.queue_arns[url]) for url in deployment.short_queue_urls]
    mapping = EventSourceMapping(
        handler.handler,
        sqs,
        queues,
        deployment.worker_batch_size,
        deployment.worker_timeout_s,
        inflight,
        name,
        config.run_dir / f"{name}.handled",
    )
    log.info(
        "%s: batches of up to %d from %s", name, deployment.worker_batch_size, ", ".join(u for u, _ in queues)
    )
    asked_at = os.environ.get(STARTED_ENV)
    mapping.run(stop, lambda: log.info("%s", first_receive_note(config, name, asked_at, time.time())))


def first_receive_note(config: LocalConfig, name: str, asked_at: str | None, now: float) -> str:
    """How long the process took from the supervisor's asking for it (and, for a burst worker,
    from the scaling decision: ``run/scaling.json``) to its first receive: the start-up a warm
    start (local.zygote) shortens."""
    parts: list[str] = []
    try:
        asked = float(asked_at) if asked_at else None
    except ValueError:
        asked = None
    if asked is not None:
        parts.append(f"{now - asked:.2f} s after its start was asked")
    if name.startswith(BURST_PREFIX):
        try:
            record = json.loads(scaling_file(config).read_text())
            decided = datetime.fromisoformat(str(record["decided_at"]).replace("Z", "+00:00")).timestamp()
        except (OSError, ValueError, KeyError, TypeError):
            decided = None
        if decided is not None and (asked is None or decided <= asked):
            parts.append(f"{now - decided:.2f} s after the scaling decision")
    return f"{name}: first receive" + (" " + ", ".join(parts) if parts else "")
