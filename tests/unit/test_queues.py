"""Message identity: dedup ids per attempt, and FIFO groups per job only for overlap 'queue'."""

from __future__ import annotations

from datetime import UTC, datetime

from factories import job
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind, message_for, pick_queue

T = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def test_dedup_id_is_per_attempt_and_stable() -> None:
    j = job("a")
    first = message_for(j, "s1", T, 1, MessageKind.FIRE, T)
    again = message_for(j, "s1", T, 1, MessageKind.RETRY, T)
    assert first.dedup_id == again.dedup_id  # the kind does not change what the attempt is
    assert first.dedup_id != message_for(j, "s1", T, 2, MessageKind.FIRE, T).dedup_id
    assert first.dedup_id != message_for(job("a", tenant="other"), "s1", T, 1, MessageKind.FIRE, T).dedup_id
    # a slot released for the job's old version and again for its new one is two messages
    assert first.dedup_id != message_for(job("a", version=2), "s1", T, 1, MessageKind.FIRE, T).dedup_id
    assert DispatchMessage.from_body(first.to_body()) == first


def test_queue_overlap_jobs_share_one_group_others_get_one_per_slot() -> None:
    ordered, loose = job("a", overlap="queue"), job("b", overlap="allow")
    assert (
        message_for(ordered, "s1", T, 1, "fire", T).group_id
        == message_for(ordered, "s2", T, 1, "fire", T).group_id
    )
    assert (
        message_for(loose, "s1", T, 1, "fire", T).group_id
        != message_for(loose, "s2", T, 1, "fire", T).group_id
    )
    # every attempt of one slot stays in its group
    assert (
        message_for(loose, "s1", T, 1, "fire", T).group_id
        == message_for(loose, "s1", T, 3, "retry", T).group_id
    )


def test_memory_queue_drops_a_resend_inside_the_window_only() -> None:
    now = [T]
    queues = MemoryQueues(now=lambda: now[0])
    message = message_for(job("a"), "s1", T, 1, "fire", T)
    queues.send("q", [message, message])
    assert len(queues.all_messages()) == 1
    now[0] = T.replace(minute=6)
    queues.send("q", [message])
    assert len(queues.all_messages()) == 2


def test_pick_queue_spreads_jobs_stably() -> None:
    urls = ["q0", "q1", "q2"]
    picks = {pick_queue(urls, f"job-{i}") for i in range(50)}
    assert picks == set(urls)
    assert pick_queue(urls, "job-7") == pick_queue(list(urls), "job-7")
