"""What a failed SQS send says it may have put in the queue (:mod:`punctual.dispatch.sqs_send`).

A send that fails after some of its entries went leaves their messages waiting for a worker: the
poller's retry must take them for maybe sent (release.ReleaseFailed), not judge their slots late
again and record them MISSED over their own messages. A client double that refuses chosen
entries, refuses whole requests, or gives no answer (moto never does either).
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from punctual.dispatch.queues import DispatchMessage, SqsQueues
from punctual.dispatch.sqs_send import SendFailed, maybe_sent

URL = "https://sqs.example/q.fifo"


def _messages(count: int) -> list[DispatchMessage]:
    return [
        DispatchMessage(
            tenant="t",
            job_id=f"j{i:02d}",
            slot="2026-12-01T12:00:00Z",
            scheduled_at="",
            attempt=1,
            job_version=1,
        )
        for i in range(count)
    ]


class _Client:
    """Takes every entry but those of ``throttled`` (refused as throttled, every round) and
    ``refused`` (refused for good); ``down``: job ids whose request gets an error reply whole,
    ``silent``: job ids whose request gets no answer (after SQS took it)."""

    def __init__(
        self,
        throttled: frozenset[str] = frozenset(),
        refused: frozenset[str] = frozenset(),
        down: frozenset[str] = frozenset(),
        silent: frozenset[str] = frozenset(),
    ) -> None:
        self.throttled, self.refused, self.down, self.silent = throttled, refused, down, silent
        self.taken: set[str] = set()

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        jobs = {entry["Id"]: DispatchMessage.from_body(entry["MessageBody"]).job_id for entry in Entries}
        if self.down & set(jobs.values()):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "SendMessageBatch")
        failed = []
        for entry_id, job in jobs.items():
            if job in self.throttled or job in self.refused:
                code, fault = (
                    ("RequestThrottled", False) if job in self.throttled else ("InvalidParameterValue", True)
                )
                failed.append({"Id": entry_id, "Code": code, "SenderFault": fault, "Message": "x"})
            else:
                self.taken.add(job)
        if self.silent & set(jobs.values()):
            raise ReadTimeoutError(endpoint_url=QueueUrl)
        return {"Successful": [], "Failed": failed}


def _failure(client: _Client, count: int, kind: type[Exception] = SendFailed) -> Exception:
    """The send's error: the client's own when SQS answered a request with one, or gave none (the
    API answers those 503/504), else SendFailed."""
    with pytest.raises(kind) as caught:
        SqsQueues(client, max_rounds=2).send(URL, _messages(count))
    return caught.value


def _jobs(failure: Exception) -> set[str]:
    return {message.job_id for message in maybe_sent(failure)}


def test_a_send_whose_entry_stays_throttled_says_every_other_message_went() -> None:
    # Given 35 messages (four requests side by side), one entry of the third throttled every round
    client = _Client(throttled=frozenset({"j23"}))
    # Then the send fails, saying the 34 SQS took may have gone (all but the throttled one)
    failure = _failure(client, 35)
    assert _jobs(failure) == client.taken == {f"j{i:02d}" for i in range(35)} - {"j23"}


def test_a_send_refused_for_good_says_what_went_before_and_beside_it() -> None:
    # Given an entry SQS refuses for good (sender's fault) in a request of its own
    client = _Client(refused=frozenset({"j05"}))
    failure = _failure(client, 10)
    assert _jobs(failure) == client.taken == {f"j{i:02d}" for i in range(10)} - {"j05"}


def test_a_request_answered_with_an_error_took_none_of_its_messages() -> None:
    # Given the second of two requests refused whole (an error reply): only the first one's went
    client = _Client(down=frozenset({"j12"}))
    failure = _failure(client, 20, ClientError)
    assert _jobs(failure) == client.taken == {f"j{i:02d}" for i in range(10)}


def test_a_request_that_got_no_answer_may_have_taken_all_of_its_messages() -> None:
    # Given the only request timing out after SQS took it: its messages may have gone
    client = _Client(silent=frozenset({"j03"}))
    failure = _failure(client, 10, ReadTimeoutError)
    assert _jobs(failure) == client.taken == {f"j{i:02d}" for i in range(10)}


def test_a_send_that_goes_through_raises_nothing() -> None:
    client = _Client()
    SqsQueues(client).send(URL, _messages(25))
    assert client.taken == {f"j{i:02d}" for i in range(25)}
