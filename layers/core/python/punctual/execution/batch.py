"""The Lambda lane's batch: an SQS event worked as the event source mapping expects, with leases
of seconds.

The event source mapping receives a batch with the queue's visibility timeout, which must be at
least the function's timeout (AWS refuses a mapping otherwise; 960 s for the 900 s worker). A
message is leased for seconds instead, by the worker itself:

1. **Hold.** As soon as the batch arrives, every message's visibility is set to the message
   lease (``message_lease_s``, 8 s; one ChangeMessageVisibilityBatch request per ten messages;
   with a :class:`~punctual.execution.hold_gate.HoldGate`, beside the claims rather than before
   them, a record's own visibility change waiting for it) and renewed by the
   process's :class:`~punctual.execution.keeper.LeaseKeeper` until the invocation returns (the
   mapping deletes the records that succeeded only then), or until a record that failed sets a
   visibility of its own: a message whose run is under way for the record's lease (``lease_s``,
   10 s, heartbeated in the same step), any other for the message lease, in one request. A
   worker that dies anywhere after this (mid-batch, mid-run, out of memory, a timeout) lets the
   messages it had not started (or had run) come back within the message lease, and its runs'
   as their records' leases lapse, for the next claim to take them over; FIFO holds a message
   group only while one of its messages is in flight, so the group is free again as soon (a
   group's later messages come back behind its first). A run's message back before its lease
   lapsed (its worker died after the claim, before the first renewal) finds the lease live and
   is returned until it has lapsed (:mod:`punctual.execution.decisions`: WAIT), then taken over.
2. **Groups side by side.** Records of different message groups run at once (one thread each,
   at most ten); a group's records run in order, and after one fails the rest of its group are
   failed unrun (``skip_group_on_error``, as Powertools' FIFO processor does) and made visible
   behind it (:meth:`~punctual.execution.sqs.SqsBatch.return_blocked_records`). Most groups are
   one slot (:attr:`~punctual.dispatch.queues.DispatchMessage.group_id`), so a batch lasts about as long
   as its longest run, not the sum of its runs: a batch of short runs is done before its lease
   needs renewing, and a worker's death leaves few messages unstarted.
3. **Partial batch response.** The failed records' ids are returned in ``batchItemFailures``;
   the mapping deletes the others. A record whose attempt failed with a retry due is deleted
   as soon as it is recorded: its retry comes in the same message group, which FIFO keeps closed
   while the message is in flight, and a batch mate's long run would hold it past its backoff.
   So is an overlap ``queue`` job's record beside other groups: the job's next slots and turns
   come in its one group, and another tenant's slow target would hold them past their instants.

A worker that dies *before* step 1 (an init failure, a crash while the runtime starts) leaves its
messages in flight for the queue's visibility timeout: the pollers re-send such slots under a new
group and deduplication id once no worker has claimed them for a few seconds
(:mod:`punctual.dispatch.polling.resend`), and the claim keeps it to one run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from punctual.delivery.notifications.alerts import DELIVERY_TIMEOUT_S
from punctual.execution.hold_gate import HoldGate
from punctual.execution.keeper import LeaseKeeper
from punctual.execution.ports import ClaimOutcome, HandleResult
from punctual.execution.sqs import queue_url_of
from punctual.models import ExecutionStatus

if TYPE_CHECKING:
    from punctual.execution.worker import Worker

log = logging.getLogger("punctual.execution")

MAX_GROUPS_AT_ONCE = 10  # an SQS batch holds at most ten messages
SETTLE_MARGIN_S = 5.0  # of the invocation, left after waiting for the batch's alert deliveries
# How long the invocation waits, at most, for the batch's alert deliveries once its runs ended: a
# try's length and a second. A tenant's alert endpoint that hangs would otherwise hold the
# invocation (one of the lane's concurrency, shared by every tenant) for every try of every rule
# (QA 2026-12-06: another tenant's slots 22 to 27 s late in local mode). A delivery still going
# is not lost: its alert stays SENDING, its thread goes on in the next invocation of this
# environment, and the alert's sweep takes it over once stale (given up FAILED after
# MAX_STALLS takeovers with nothing delivered, :mod:`punctual.delivery.notifications.alerts`).
SETTLE_S = DELIVERY_TIMEOUT_S + 1.0


def _group_of(record: Mapping[str, Any]) -> str:
    return str(record.get("attributes", {}).get("MessageGroupId", ""))


def _ordered(record: Mapping[str, Any]) -> bool:
    """Whether the record's message is an overlap ``queue`` job's (its job's one message group):
    its body, as :meth:`~punctual.dispatch.queues.DispatchMessage.to_body` writes it, holds the
    member ``"ordered":true`` (a string field's quotes are escaped: none can hold that text). Not
    parsed again (the worker parsed it: ~12 us a record of every mixed batch, on the hot path); a
    body in another form is kept to the batch's end, as before."""
    body = record.get("body")
    return isinstance(body, str) and '"ordered":true' in body


class LambdaBatch:
    """Works one Lambda SQS event at a time for a worker (see the module docstring).

    Parameters
    ----------
    worker
        The execution core (its queues, clock, live claims).
    keeper
        Renews the batch's messages and heartbeats its runs (started here if not yet running).
    gate
        The worker's queue port, when it is a :class:`HoldGate`: the hold is then made beside the
        claims (None: before them).
    """

    def __init__(
        self, worker: Worker, keeper: LeaseKeeper | None = None, gate: HoldGate | None = None
    ) -> None:
        self.worker = worker
        self.keeper = (keeper or LeaseKeeper(worker)).start()
        self.gate = gate
        self._pool = ThreadPoolExecutor(max_workers=MAX_GROUPS_AT_ONCE, thread_name_prefix="record")
        self._holder = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="hold") if gate is not None else None
        )

    def handle(self, event: Mapping[str, Any], time_left_s: Callable[[], float]) -> dict[str, Any]:
        """Work the event's records; return the partial batch response.

        Parameters
        ----------
        event
            Lambda's SQS event (``Records``).
        time_left_s
            Seconds left in the invocation (a run that could outlast it is not started).
        """
        records: Sequence[Mapping[str, Any]] = event.get("Records", [])
        config = self.worker.config
        located = [(queue_url_of(str(r["eventSourceARN"]), config), r) for r in records]
        released: set[tuple[str, str]] = set()  # let go of by their group before the hold landed
        hold = self._hold_beside(located, released) if self._holder is not None else None
        if hold is None:
            self._hold(located)
        groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for url, record in located:
            groups.setdefault(_group_of(record), []).append((url, record))
        runs = list(groups.values())
        mates = len(runs) > 1  # a group's ended record would be held for the others' runs
        last = runs.pop() if runs else []
        # Every group but the last on the pool, the last on this thread, which would only wait for
        # it: a batch of one group (a quiet queue's) hands nothing to a thread (~20 µs a record).
        futures = [self._pool.submit(self._work_group, items, time_left_s, released, mates) for items in runs]
        failed: list[str] = []
        try:
            here = self._work_here(last, time_left_s, released, mates)
            for future in [*futures, here]:  # (in the groups' order, as when each had a thread)
                failed.extend(future.result())
            # The batch's alerts were delivered beside its runs: wait for them before the
            # invocation ends, a try's length at most (one left over stays SENDING, and its
            # sweep finishes it).
            self.worker.settle(min(SETTLE_S, max(0.0, time_left_s() - SETTLE_MARGIN_S)))
        finally:
            if hold is not None:
                hold.result()  # never a visibility change of this batch's after the invocation
            # The mapping deletes the records that succeeded once this returns: held until then.
            for url, record in located:
                self.keeper.release(url, str(record["receiptHandle"]))
        ids = set(failed)
        self.worker.return_blocked_records(event, ids)
        # In the batch's order, as the mapping lists them back.
        return {
            "batchItemFailures": [
                {"itemIdentifier": str(r["messageId"])} for r in records if str(r["messageId"]) in ids
            ]
        }

    def _work_here(
        self,
        items: list[tuple[str, Mapping[str, Any]]],
        time_left_s: Callable[[], float],
        released: set[tuple[str, str]],
        mates: bool,
    ) -> Future[list[str]]:
        """:meth:`_work_group` on this thread, its end kept as the pool keeps a group's (a result,
        or whatever it raised, raised again by ``result()`` in its turn)."""
        done: Future[list[str]] = Future()
        try:
            done.set_result(self._work_group(items, time_left_s, released, mates))
        except BaseException as exc:  # (as the pool's work item keeps it)
            done.set_exception(exc)
        return done

    def _hold(self, located: list[tuple[str, Mapping[str, Any]]]) -> None:
        began = time.monotonic()
        by_queue: dict[str, list[str]] = {}
        for url, record in located:
            by_queue.setdefault(url, []).append(str(record["receiptHandle"]))
        now = self.worker.clock.now()
        for url, receipts in by_queue.items():
            self.keeper.hold(url, receipts, now)  # never raises: a failed hold keeps the queue's
        log.debug("batch of %d held in %.0f ms", len(located), (time.monotonic() - began) * 1000)

    def _hold_beside(
        self, located: list[tuple[str, Mapping[str, Any]]], released: set[tuple[str, str]]
    ) -> Future[None]:
        """The hold in a thread of its own, the gate making a record's own visibility change wait
        for it; a message its group let go of meanwhile is not kept renewed."""
        gate, holder = self.gate, self._holder
        assert gate is not None and holder is not None
        keys = [(url, str(record["receiptHandle"])) for url, record in located]
        event = gate.holding(keys)

        def hold() -> None:
            try:
                self._hold(located)
            finally:
                gate.held(keys, event)
                for url, receipt in list(released):
                    self.keeper.release(url, receipt)

        return holder.submit(hold)

    def _deleted_early(self, handled: HandleResult, url: str, record: Mapping[str, Any], mates: bool) -> bool:
        """Whether ``record``'s message was deleted at once: its attempt failed with a retry due,
        it waits and was sent afresh near its dead-letter limit (no need to hold it in flight), or
        it is an overlap ``queue`` job's (one message group per job) and other groups share the
        batch.

        The retry is sent in the slot's message group, and a ``queue`` job's next slot and turn in
        the job's, which FIFO keeps closed while this message is in flight: held to the batch's end
        (its longest run, another tenant's slow target's up to 840 s), it would hold them back past
        their backoff or instant. One DeleteMessage per such record (the mapping's own delete of it
        later finds it gone); a failed delete leaves it to the batch's end, as before.
        """
        execution = handled.execution
        retry = execution is not None and execution.status is ExecutionStatus.RETRY_WAIT
        resent = handled.outcome == ClaimOutcome.WAITING  # (acked: sent afresh in its place)
        if not retry and not resent and not (mates and _ordered(record)):
            return False
        try:
            self.worker.queues.delete(url, str(record["receiptHandle"]))
        except Exception:
            log.warning("could not delete a retrying slot's message early", exc_info=True)
            return False
        return True

    def _work_group(
        self,
        items: list[tuple[str, Mapping[str, Any]]],
        time_left_s: Callable[[], float],
        released: set[tuple[str, str]],
        mates: bool = False,
    ) -> list[str]:
        """One message group's records in order; the ids of those that failed (or were skipped)."""
        failed: list[str] = []
        for url, record in items:
            message_id = str(record["messageId"])
            if failed:
                failed.append(message_id)  # a record of its group failed: it waits behind it
            else:
                try:
                    handled = self.worker.process_sqs_record(record, time_left_s())
                    if not self._deleted_early(handled, url, record, mates):
                        continue  # done: held (renewed) until the mapping deletes it after the batch
                except Exception as exc:  # MessageReturned included: the message stays in the queue
                    log.info("record %s stays in the queue: %s", message_id, exc)
                    failed.append(message_id)
            # Returned with a visibility of its own (made visible behind its group's first failure,
            # or deleted before its retry): no longer renewed.
            released.add((url, str(record["receiptHandle"])))  # before the release: see _hold_beside
            self.keeper.release(url, str(record["receiptHandle"]))
        return failed
