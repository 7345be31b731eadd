"""An after() child linked to a parent that no job waited on, while one of the parent's slots was
in flight, runs that slot when the parent succeeds it (punctual.execution.relinks).

The worker that claims a slot within the trust window runs it with the copy of the job the
poller read at the release, and looks the job's dependants up only when that copy counts any: a
child linked after the release was left out of that success, its slot neither run nor recorded
(the after() oracle's seed 173). The link now writes a RELINK timer whose check passes the
parent's successes since the link on, and looks again at an attempt that was still running.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from audit_harness import all_timers
from test_replace_owed import Recording, Run, T, _slot

from execution_harness import LAYOUT
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution.relinks import RECHECK_MARGIN_S, Relinks, relink_timer
from punctual.models import Execution, ExecutionStatus
from punctual.store.base import Expect, JobStore
from punctual.timing.timers import TimerKind, slot_key

TENANT = "default"


def _child_runs(run: Run) -> Counter[str]:
    return Counter(slot for slot, payload in run.payloads if payload == {"who": "child"})


def test_a_child_linked_between_its_parents_release_and_claim_runs_that_slot(store: JobStore) -> None:
    run = Run(T(9, 59), store)  # (both stores: the RELINK timer is packed as DynamoDB keeps it)
    run.jobs.register(TENANT, spec("cron(* * * * ? *)", payload={"who": "parent"}), job_id="p")
    run.until(T(9, 59, 59), step_s=5)
    # The poller releases the parent's 10:00 slot; no worker has taken it yet
    run.clock.set(T(10, 0))
    run.rig.poll()
    # Half a second later a child of it is registered (the parent had no dependant until now)
    run.clock.set(T(10, 0, 0.5))
    run.jobs.register(TENANT, spec("after(p)", payload={"who": "child"}), job_id="c")
    # A worker takes the slot 2 s after its release: within the trust window, with the poller's copy
    run.clock.set(T(10, 0, 2))
    run.rig.work_until_idle(run.worker)
    run.until(T(10, 1, 30), step_s=5)
    # Then the child ran the 10:00 slot (its parent's success since the link), and 10:01, each once
    assert _child_runs(run) == Counter({_slot(T(10, 0)): 1, _slot(T(10, 1)): 1})
    assert run.rig.store.get_execution(TENANT, "c", _slot(T(10, 0))).status is ExecutionStatus.SUCCEEDED


class LinkingTarget(Recording):
    """The parent's 10:00 call: the child is registered while it runs, which lasts 40 s."""

    def __init__(self, run: Run) -> None:
        super().__init__(run.payloads)
        self.run = run

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        if payload == {"who": "parent"} and ctx.slot == _slot(T(10, 0)):
            self.run.clock.advance(3)
            self.run.jobs.register(TENANT, spec("after(p)", payload={"who": "child"}), job_id="c")
            self.run.clock.advance(37)
        return super().invoke(target, payload, ctx)


def test_a_child_linked_while_its_parents_slot_runs_gets_that_success() -> None:
    run = Run(T(9, 59))
    run.rig.target = LinkingTarget(run)
    run.worker = run.rig.worker()
    run.jobs.register(TENANT, spec("cron(* * * * ? *)", payload={"who": "parent"}), job_id="p")
    run.until(T(10, 1, 30))
    assert _child_runs(run) == Counter({_slot(T(10, 0)): 1, _slot(T(10, 1)): 1})


def _relink_timers(store: Any, linked: datetime) -> list[Any]:
    return [t for t in all_timers(store) if t.kind is TimerKind.RELINK and t.slot == slot_key(linked)]


class Dispatched:
    """An AfterEffects stand-in that records what it was asked to pass on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def dispatch_dependants(self, job: Any, execution: Execution, now: datetime) -> None:
        self.calls.append((job.id, execution.slot))


def test_an_attempt_running_at_the_link_is_checked_again_once_it_must_have_ended() -> None:
    run = Run(T(9, 59))
    store, after = run.rig.store, Dispatched()
    run.jobs.register(TENANT, spec("cron(* * * * ? *)", timeout_seconds=60), job_id="p")
    run.jobs.register(TENANT, spec("after(p)"), job_id="c")
    parent = store.get_job(TENANT, "p")
    assert parent is not None and parent.dependents == 1
    # The parent's 10:00 attempt started at 10:00:00.5, before a link at 10:00:01
    record = Execution(
        tenant=TENANT,
        job_id="p",
        slot=_slot(T(10, 0)),
        scheduled_at=T(10, 0),
        attempt=1,
        job_version=parent.version,
        status=ExecutionStatus.RUNNING,
        started_at=T(10, 0, 0.5),
        lease_until=T(10, 0, 8.5),
    )
    store.save_execution(record, None, 0)
    linked = T(10, 0, 1)
    relinks = Relinks(store, after, LAYOUT)  # type: ignore[arg-type]
    timer = relink_timer(LAYOUT, parent, linked, linked + timedelta(seconds=12), linked)
    message = message_for(parent, timer.slot, timer.due, 1, MessageKind.RELINK, timer.due, spec="")
    # While it runs: nothing is passed on; the check is written again for after its timeout
    relinks.check(message, T(10, 0, 13))
    assert after.calls == []
    again = _relink_timers(store, linked)
    expected_due = T(10, 0, 0.5) + timedelta(seconds=60 + RECHECK_MARGIN_S)
    assert [(t.slot, t.due) for t in again] == [(slot_key(linked), expected_due)]
    # Once it succeeded: its success is passed on, and nothing more is written
    ended = record.model_copy(update={"status": ExecutionStatus.SUCCEEDED, "finished_at": T(10, 0, 50)})
    store.save_execution(ended, Expect(statuses=frozenset({ExecutionStatus.RUNNING})), 0)
    relinks.check(message, expected_due)
    assert after.calls == [("p", _slot(T(10, 0)))]
    assert len(_relink_timers(store, linked)) == 1


def test_a_link_whose_relink_timer_is_throttled_stores_nothing_so_a_retry_stores_one_child(
    store: JobStore,
) -> None:
    from botocore.exceptions import ClientError

    # Given a parent no job waits on, and the store throttling timer writes
    run = Run(T(9, 59), store)
    run.jobs.register(TENANT, spec("cron(* * * * ? *)"), job_id="p")
    put_timers = store.put_timers

    def throttled(timers: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}}, "put"
        )

    store.put_timers = throttled  # type: ignore[method-assign]
    # When a child of it is created with an id of the API's making, Then the request fails (503)
    # with nothing stored (QA24: the job was stored before its RELINK timer failed, so the client's
    # retry of the 503 stored a second child, and each parent success ran two)
    with pytest.raises(ClientError):
        run.jobs.register(TENANT, spec("after(p)"))
    assert [job.id for job in store.list_jobs(TENANT, 10).items] == ["p"]
    # And when the client tries again once the throttling is over, one child is stored, linked
    store.put_timers = put_timers  # type: ignore[method-assign]
    child, _ = run.jobs.register(TENANT, spec("after(p)"))
    assert sorted(job.id for job in store.list_jobs(TENANT, 10).items) == sorted(["p", child.id])
    assert TimerKind.RELINK in {t.kind for t in all_timers(store)}
