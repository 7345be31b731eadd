"""Sending messages to an SQS queue in requests of ten, and saying which may have gone when it fails.

A send of more than ten messages is several requests side by side, and a request's entries
succeed or fail one by one: a send that fails may have put some of its messages in the queue.
Those wait there for a worker, and the poller must not judge their slots late again when it
retries (:class:`punctual.dispatch.polling.release.ReleaseFailed`): a slot recorded MISSED over
its own message is dropped at the claim, a run lost. So a failed send raises :class:`SendFailed`
with every message SQS may have taken: the entries it acknowledged, and those of a request that
got no answer (a timeout, a connection dropped: taken or not, no one knows). An entry SQS
answered with an error, or a request it refused whole, was not taken.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol

from botocore.exceptions import ClientError


class DispatchMessage(Protocol):
    """What a send needs of a message (:class:`punctual.dispatch.queues.DispatchMessage`)."""

    @property
    def group_id(self) -> str: ...

    @property
    def dedup_id(self) -> str: ...

    def to_body(self) -> str: ...


class SendFailed(RuntimeError):
    """A send that failed; ``sent``: the messages SQS may have taken before it did."""

    def __init__(self, reason: str, sent: Sequence[DispatchMessage]) -> None:
        super().__init__(reason)
        self.sent: list[Any] = list(sent)  # (the caller's own messages: DispatchMessage)


def _sleep_backoff(round_no: int) -> None:
    time.sleep(random.uniform(0, min(2.0, 0.02 * (2**round_no))))


def send_batch(
    client: Any,
    queue_url: str,
    batch: Sequence[DispatchMessage],
    max_rounds: int,
    throttled: frozenset[str],
) -> None:
    """Send one request's messages (ten at most), failed entries retried for ``max_rounds``."""
    pending = {str(i): message for i, message in enumerate(batch)}
    taken: list[DispatchMessage] = []
    for round_no in range(max_rounds):
        entries = [
            {
                "Id": entry_id,
                "MessageBody": message.to_body(),
                "MessageGroupId": message.group_id,
                "MessageDeduplicationId": message.dedup_id,
            }
            for entry_id, message in pending.items()
        ]
        try:
            reply = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except ClientError as exc:  # (answered: none of this request's entries was taken)
            if exc.response["Error"]["Code"] not in throttled:
                raise SendFailed(str(exc), taken) from exc
            _sleep_backoff(round_no)
            continue
        except Exception as exc:  # no answer: the request may have been taken
            raise SendFailed(str(exc), [*taken, *pending.values()]) from exc
        failed = reply.get("Failed", [])
        refused = {f["Id"] for f in failed}
        taken.extend(message for entry_id, message in pending.items() if entry_id not in refused)
        permanent = [f for f in failed if f.get("SenderFault") and f.get("Code") not in throttled]
        if permanent:
            raise SendFailed(
                f"SQS refused a message: {permanent[0].get('Code')}: {permanent[0].get('Message')}", taken
            )
        pending = {entry_id: pending[entry_id] for entry_id in refused}
        if not pending:
            return
        _sleep_backoff(round_no)
    raise SendFailed(f"{len(pending)} messages could not be sent after {max_rounds} rounds", taken)


def send_batches(
    send_one: Callable[[Sequence[DispatchMessage]], None],
    pool: Executor,
    batches: Sequence[Sequence[DispatchMessage]],
) -> None:
    """Send ``batches`` side by side (one alone in this thread), each waited for; on failure raise
    :class:`SendFailed` with what every one of them may have sent."""
    if len(batches) <= 1:
        for batch in batches:
            send_one(batch)
        return
    futures = [pool.submit(send_one, batch) for batch in batches]
    sent: list[DispatchMessage] = []
    failure: Exception | None = None
    for batch, future in zip(batches, futures, strict=True):
        try:
            future.result()
            sent.extend(batch)
        except Exception as exc:
            sent.extend(exc.sent if isinstance(exc, SendFailed) else ())  # (else: before a request)
            failure = failure or exc
    if failure is not None:
        raise SendFailed(str(failure), sent) from failure


__all__ = ["SendFailed", "send_batch", "send_batches"]
