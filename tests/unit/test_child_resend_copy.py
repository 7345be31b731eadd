"""The copy a CHILD timer sends of a slot no worker claimed (an after() child's, a run-now slot's)
stands for the message it checks (QA21): the job's version that message was sent for, and its
scheduled instant. Built from the job as it was at the re-send, the copy of a child's slot ran at
once under a replace that had added a parent, before that parent succeeded for the slot (or when it
failed); and every copy named the re-send's instant as its slot's scheduled one, so its record and
events said it started on time, 5 s late."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.dispatch.queues import MessageKind
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

CHECK_S = 5


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def jobs(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


def child_sent_and_lost(rig: Rig, t0: datetime) -> tuple[Job, datetime]:
    """extract-a's slot an hour on succeeds; the message it sends for its child ``load`` is
    received by a worker that dies before its handler runs (in flight for the queue's timeout)."""
    service = jobs(rig)
    a, _ = service.register("default", spec("rate(1 hour)"), job_id="extract-a")
    service.register("default", spec("rate(1 hour)"), job_id="extract-b")
    child, _ = service.register("default", spec("after(extract-a)"), job_id="load")
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    rig.send(rig.message(a, slot))
    rig.work(rig.worker())
    [lost] = rig.queues.receive(SHORT, 10, 0, 960)
    assert (lost.message.kind, lost.message.job_id) == (MessageKind.CHILD, child.id)
    return child, slot


def release_check(rig: Rig) -> None:
    rig.clock.advance(CHECK_S)
    assert TimerKind.CHILD in [t.kind for t in rig.poll()]


def test_a_resent_childs_slot_waits_for_a_parent_a_replace_added_meanwhile(rig: Rig, t0: datetime) -> None:
    child, _ = child_sent_and_lost(rig, t0)
    # the child is made to wait on extract-b too, 2 s after its slot was sent
    rig.clock.advance(2)
    jobs(rig).replace("default", child.id, spec("after(extract-a, extract-b)"))
    rig.clock.advance(-2)
    release_check(rig)
    rig.work_until_idle(rig.worker())
    # extract-b has not succeeded for the slot: the copy is SUPERSEDED, as the original taken late is
    # (a parent the replace added counts from its next success: docs/how-it-works.md)
    assert rig.target.calls_for(child.id) == []
    assert [r.status.value for r in rig.history(child)] == ["SUPERSEDED"]


def test_a_resent_childs_slot_runs_a_payload_edit_made_meanwhile(rig: Rig, t0: datetime) -> None:
    child, slot = child_sent_and_lost(rig, t0)
    rig.clock.advance(2)
    edited = jobs(rig).replace("default", child.id, spec("after(extract-a)", payload={"v": 2}))
    rig.clock.advance(-2)
    release_check(rig)
    rig.work_until_idle(rig.worker())
    # the new spec waits on no parent the old one did not: its slot runs under it, as the original would
    [record] = rig.history(child)
    assert (record.status.value, record.job_version) == ("SUCCEEDED", edited.version)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]


def test_a_resent_childs_slot_keeps_the_instant_it_was_sent_for(rig: Rig, t0: datetime) -> None:
    child, slot = child_sent_and_lost(rig, t0)
    release_check(rig)
    [copy] = [m for m in rig.queues.all_messages() if m.job_id == child.id and m.resend]
    assert copy.job_version == child.version and copy.spec  # unchanged job: carried, as the first
    rig.work_until_idle(rig.worker())
    [record] = rig.history(child)
    # its parents' success sent it at the slot: it started 5 s late, and says so
    assert record.status.value == "SUCCEEDED"
    assert record.scheduled_at == slot
    assert record.started_at is not None and record.started_at - record.scheduled_at >= timedelta(
        seconds=CHECK_S
    )


def test_a_check_keeps_what_its_copy_needs_and_an_older_check_reads_as_before(rig: Rig, t0: datetime) -> None:
    from dataclasses import replace

    from punctual.timing.slots import CheckedSend, sent_check_timer

    service = jobs(rig)
    for parent in ("a", "b"):
        service.register("default", spec("rate(1 hour)"), job_id=parent)
    child, _ = service.register("default", spec("after(b, a)"), job_id="load")
    check = sent_check_timer(LAYOUT, child, slot_key(t0), t0 + timedelta(milliseconds=250))
    assert CheckedSend.of(check) == CheckedSend(t0 + timedelta(milliseconds=250), frozenset({"a", "b"}))
    assert (
        CheckedSend.of(sent_check_timer(LAYOUT, child, slot_key(t0), t0, after_s=0)) is None
    )  # nothing sent yet
    assert CheckedSend.of(replace(check, owner=None)) is None  # written by an earlier version
    assert CheckedSend.of(replace(check, owner="not json")) is None


def test_a_resent_run_now_slot_keeps_the_instant_it_was_asked_for(rig: Rig, t0: datetime) -> None:
    service = jobs(rig)
    job, _ = service.register("default", spec("rate(1 day)"))
    asked = t0 + timedelta(seconds=10, milliseconds=250)
    rig.clock.set(asked)
    slot = service.trigger("default", job.id, request_key="now")
    rig.queues.receive(SHORT, 10, 0, 960)  # its worker dies before its handler runs
    release_check(rig)
    rig.work_until_idle(rig.worker())
    [record] = rig.history(job)
    assert (record.slot, record.status.value, record.scheduled_at) == (slot, "SUCCEEDED", asked)
