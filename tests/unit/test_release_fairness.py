"""Issue 31, point 3: a release goes out one tenant's slot at a time, so one tenant's burst cannot
push another tenant's slots back (the rule itself, and the poller's send order)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from factories import spec
from punctual.dispatch.polling.fairness import interleave_tenants
from punctual.dispatch.polling.release import CHUNK, HEAD_CHUNK, release_chunks
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, Timer, TimerKind, minute_of
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def timer(tenant: str, job_id: str, due_ms: int = 0) -> Timer:
    return Timer(Lane.FAR, 0, due_ms, job_id, tenant, "2026-11-30T10:00:00Z", 1, TimerKind.FIRE, 1, "")


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 3)), max_size=60))
def test_interleaving_is_a_permutation_that_keeps_each_tenants_order_and_takes_turns(
    drawn: list[tuple[str, int]],
) -> None:
    timers = [timer(tenant, f"{tenant}-{i}", due) for i, (tenant, due) in enumerate(drawn)]

    out = interleave_tenants(timers)

    assert sorted(map(id, out)) == sorted(map(id, timers))
    for tenant in {t.tenant for t in timers}:
        assert [t for t in out if t.tenant == tenant] == [t for t in timers if t.tenant == tenant]
    # Turns: in the first k * (number of tenants) positions, every tenant with at least k
    # timers has exactly k of them.
    tenants = list(dict.fromkeys(t.tenant for t in timers))
    counts = {tenant: sum(t.tenant == tenant for t in timers) for tenant in tenants}
    for k in range(1, max(counts.values(), default=0) + 1):
        head = out[: sum(min(k, c) for c in counts.values())]
        for tenant, count in counts.items():
            assert sum(t.tenant == tenant for t in head) == min(k, count)


def test_one_tenant_is_left_as_it_is() -> None:
    timers = [timer("a", f"j{i}", i) for i in range(5)]
    assert interleave_tenants(timers) == timers


def test_a_small_tenants_slots_go_out_first_beside_a_big_tenants_burst() -> None:
    """The poller's own send order: 500 slots of one tenant and 5 of another at one instant."""
    # Given a big tenant's 500 one-time jobs and a small tenant's 5, all due at T0, the small
    # tenant's job ids sorting after every one of the big tenant's (the timers' key order)
    sim = _burst_beside(small=5, small_id="z{}")

    # When the poller of that minute releases them
    sim.run([minute_of(T0)], until=T0 + timedelta(seconds=5))

    # Then the small tenant's five went out in the first chunk, sent before any other, among the
    # first ten messages: not as the last five
    order = [message.tenant for _, message in sim.queues.log]
    assert len(order) == 505
    assert order[:10].count("small") == 5, [i for i, t in enumerate(order) if t == "small"]
    assert CHUNK >= 10


def test_a_bursts_first_chunk_is_sent_in_its_order_one_request_after_another() -> None:
    """The port sends a list's requests of ten side by side (SqsQueues: eight at once), so they
    enter the FIFO queue in any order: in local mode the small tenant's slots, among the first 40
    of the interleaved release, arrived among the first 110 of the burst. A burst's first chunk
    goes out one request of ten after another, in the interleaved order; the rest as before."""
    # Given a big tenant's 500 one-time jobs and a small tenant's 20 at one instant
    sim = _burst_beside(small=20, small_id="z{:02d}")
    calls: list[list[str]] = []
    send = sim.queues.send

    def recording(queue_url, messages):  # type: ignore[no-untyped-def]
        calls.append([message.tenant for message in messages])
        return send(queue_url, messages)

    sim.queues.send = recording  # type: ignore[method-assign]

    # When the poller of that minute releases them
    sim.run([minute_of(T0)], until=T0 + timedelta(seconds=5))

    # Then the first chunk went out in requests of at most ten, one after another, in the
    # interleaved order: the small tenant's 20 in the first four requests, taking turns
    head = calls[: HEAD_CHUNK // 10]
    assert [len(call) for call in head] == [10] * (HEAD_CHUNK // 10), [len(call) for call in calls[:12]]
    assert [call.count("small") for call in head[:4]] == [5, 5, 5, 5]
    assert sum(call.count("small") for call in calls) == 20


def test_a_release_has_a_head_chunk_of_its_own_then_full_chunks() -> None:
    """The head goes alone before the rest (every tenant's first slots): it is half a chunk, so
    that the burst's first messages leave after one smaller job read; every timer is in one
    chunk, in order."""
    timers = list(range(HEAD_CHUNK + 2 * CHUNK + 7))
    chunks = release_chunks(timers)  # type: ignore[arg-type]
    assert [len(c) for c in chunks] == [HEAD_CHUNK, CHUNK, CHUNK, 7]
    assert [t for c in chunks for t in c] == timers
    assert [len(c) for c in release_chunks(list(range(HEAD_CHUNK)))] == [HEAD_CHUNK]  # type: ignore[arg-type]
    assert [len(c) for c in release_chunks(list(range(3)))] == [3]  # type: ignore[arg-type]
    assert release_chunks([]) == []
    assert 20 <= HEAD_CHUNK < CHUNK


def _burst_beside(small: int, small_id: str) -> Simulation:
    """A big tenant's 500 one-time jobs and a small tenant's ``small``, all due at T0."""
    sim, jobs = _simulated()
    at = "at(2026-11-30T10:00:00)"
    for i in range(500):
        jobs.register("big", spec(at), job_id=f"a{i:04d}")
    for i in range(small):
        jobs.register("small", spec(at), job_id=small_id.format(i))
    return sim


def _simulated() -> tuple[Simulation, JobService]:
    """A simulated poller five minutes before T0, and the job service registering for it."""
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(minutes=5))
    sim = Simulation(store, clock)
    return sim, JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))


SQS_BATCH_BYTES = 262_144  # SendMessageBatch: the sum of its (at most ten) bodies


def test_a_tenants_large_payloads_do_not_keep_another_tenants_slot_from_the_queue() -> None:
    """A message carries its job when its document is at most ``SPEC_MAX_CHARS`` characters, and
    its body writes each character outside ASCII as ``\\uXXXX`` (12 bytes for an emoji) and each
    quote escaped again: one tenant's job with 8,000 emoji in its payload made a 97 KB message, so
    three of them in one SendMessageBatch passed SQS's 256 KiB a request and SQS refused the
    request whole, the other tenant's slot sent beside them (the fair release puts it there)
    included, at every attempt of the release."""
    sim, jobs = _simulated()
    at = "at(2026-11-30T10:00:00)"
    for i in range(10):
        jobs.register("big", spec(at, payload={"note": "\U0001f600" * 8_000}), job_id=f"a{i}")
        jobs.register("quoted", spec(at, payload={"json": '"' * 7_000}), job_id=f"q{i}")
    jobs.register("small", spec(at), job_id="z")
    send = sim.queues.send

    def as_sqs(queue_url, messages):  # type: ignore[no-untyped-def]
        for start in range(0, len(messages), 10):  # as SqsQueues sends them: ten a request
            request = messages[start : start + 10]
            size = sum(len(message.to_body().encode()) for message in request)
            if size > SQS_BATCH_BYTES:
                raise RuntimeError(f"SQS refused a message: BatchRequestTooLong ({size} bytes)")
        return send(queue_url, messages)

    sim.queues.send = as_sqs  # type: ignore[method-assign]

    # When the poller of that minute releases them
    sim.run([minute_of(T0)], until=T0 + timedelta(seconds=30))

    # Then every slot went out, the small tenant's too
    assert sorted(message.tenant for message in sim.sent()) == ["big"] * 10 + ["quoted"] * 10 + ["small"]


def test_a_caught_up_minutes_slots_go_out_one_tenant_at_a_time_across_its_slices() -> None:
    """A minute no poller released is caught up by the next one in slices of
    ``catchup_timers_per_slice`` timers, in the timers' key order (due, then tenant): a tenant
    whose id sorts first and had 400 slots at the instant went out whole, slice after slice, and
    another tenant's slots at the same instant only after it (the fair release ordering only each
    slice of 20)."""
    # Given a big tenant's 400 one-time jobs and a small tenant's 5, all due at T0, the small
    # tenant's id sorting after the big one's
    sim, jobs = _simulated()
    at = "at(2026-11-30T10:00:00)"
    for i in range(400):
        jobs.register("aaa-big", spec(at), job_id=f"a{i:04d}")
    for i in range(5):
        jobs.register("zzz-small", spec(at), job_id=f"z{i}")

    # When no poller ran T0's minute, and the next minute's poller catches it up
    sim.run([minute_of(T0) + timedelta(minutes=1)], until=T0 + timedelta(minutes=2))

    # Then the small tenant's slots went out in the first slice, beside the burst's first ones
    order = [message.tenant for _, message in sim.queues.log]
    assert len(order) == 405
    slice_size = sim.config.catchup_timers_per_slice
    assert order[:slice_size].count("zzz-small") == 5, [i for i, t in enumerate(order) if t == "zzz-small"]
