"""Sending messages to an SQS queue in requests of ten, and saying which may have gone when it fails.

A send of more than ten messages is several requests side by side, and a request's entries
succeed or fail one by one: a send that fails may have put some of its messages in the queue.
Those wait there for a worker, and the poller must not judge their slots late again when it
retries (:class:`punctual.dispatch.polling.release.ReleaseFailed`): a slot recorded MISSED over
its own message is dropped at the claim, a run lost. So a failed send says (:func:`maybe_sent`)
every message SQS may have taken: the entries it acknowledged, and those of a request that got
no answer (a timeout, a connection dropped: taken or not, no one knows). An entry SQS answered
with an error, or a request it refused whole, was not taken. The error raised is the client's own
(a ClientError, a timeout: the API answers them 503/504) or :class:`SendFailed` (entries refused,
retries spent), the messages attached to it.
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


_SENT = "punctual_maybe_sent"  # the attribute of a send's error naming what may have gone


def maybe_sent(exc: BaseException) -> list[Any]:
    """The messages a failed send says SQS may have taken (none when it says nothing)."""
    return list(getattr(exc, _SENT, ()))


def _saying(exc: BaseException, sent: Sequence[DispatchMessage]) -> BaseException:
    setattr(exc, _SENT, list(sent))
    return exc


class SendFailed(RuntimeError):
    """A send SQS refused entries of (for good, or past the retries); ``sent``: what it took."""

    def __init__(self, reason: str, sent: Sequence[DispatchMessage]) -> None:
        super().__init__(reason)
        _saying(self, sent)

    @property
    def sent(self) -> list[Any]:
        return maybe_sent(self)


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
                _saying(exc, taken)
                raise
            _sleep_backoff(round_no)
            continue
        except Exception as exc:  # no answer: the request may have been taken
            _saying(exc, [*taken, *pending.values()])
            raise
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
    the first error, saying what every one of them may have sent (:func:`maybe_sent`)."""
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
            sent.extend(maybe_sent(exc))  # (none said: it failed before a request)
            failure = failure or exc
    if failure is not None:
        raise _saying(failure, sent)


__all__ = ["SendFailed", "maybe_sent", "send_batch", "send_batches"]
