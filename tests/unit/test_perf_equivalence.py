"""The hot-path shortcuts give exactly what the plain forms they replace gave.

Each fast form (hand-written message body, integer minute keys, fromisoformat slot
parsing, the single-slot release plan, the shallow record copy, the near-lane hold key)
is checked against the straightforward code it replaced, on ordinary and edge inputs.
"""

from __future__ import annotations

import copy
import json
import os
import random
import uuid
from dataclasses import asdict
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from factories import job
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind, message_for
from punctual.execution import new_owner, owner_of
from punctual.models import AttemptRecord, CatchupKind, Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.schedules import ScheduleError, cached_schedule, parse_schedule
from punctual.timing.slots import (
    MAX_RELEASE_PER_TIMER,
    MISSED_AFTER_S,
    dispatch_instant,
    next_slot,
    plan_release,
)
from punctual.timing.timers import (
    MINUTE_FMT,
    Lane,
    Timer,
    TimerKind,
    TimerLayout,
    bucket_pk,
    minute_key,
    minute_of,
    slot_instant,
    slot_key,
)

T = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
rng = random.Random(20261130)


def _instants(count: int) -> list[datetime]:
    zones = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    out = [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(999, 5, 6, 7, 8, 9, tzinfo=UTC),
        datetime(5, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    for _ in range(count):
        seconds = rng.uniform(-2e9, 5e9)
        out.append(datetime.fromtimestamp(seconds, UTC).astimezone(rng.choice(zones)))
    return out


# --------------------------------------------------------------------------- messages


def test_message_body_is_what_asdict_gave() -> None:
    messages = [
        message_for(job("a"), "2026-11-30T10:00:00Z", T, 1, MessageKind.FIRE, T),
        message_for(job("b", overlap="queue"), "2026-11-30T10:00:00Z~x", T, 7, MessageKind.RETRY, T),
        DispatchMessage('t\u00e9nant "q"', "j", "s", "", 0, 0),
        DispatchMessage("t", "j\n", "s\\", "2026", 2**40, -1, "child", "now", True),
        DispatchMessage("t", "j", "s", "", 1, 1, sig='a"b\\c'),
        DispatchMessage("t", "j", "s", "", 1, 1, not_before="2026-11-30T10:00:03.000Z", sig="x"),
        DispatchMessage("t", "j", "s", "", 1, 1, "backfill", backfill="0123+", sig="x"),
        DispatchMessage("t", "j", "s", "", 1, 1, "alert", "now", alert="late", sig="x"),
        message_for(job("c"), "2026-11-30T10:00:00Z", T, 1, MessageKind.FIRE, T, last=True),
        DispatchMessage("t", "j", "s", "", 1, 1, spec="", last=True, sig="x"),
    ]
    for message in messages:
        fields = asdict(message)
        if not message.sig:
            del fields["sig"]  # an unsigned body carries no signature field
        if not message.not_before:
            del fields["not_before"]  # nor an unsmoothed one an instant to wait for
        if not message.backfill:
            del fields["backfill"]  # nor a message of no backfill a backfill field
        if not message.alert:
            del fields["alert"]  # nor any but an alert's sweep a condition
        if not message.resend:
            del fields["resend"]  # nor any but a poller's re-send its count
        if not message.spec:
            del fields["spec"]  # nor a message whose job is too large to carry its spec
        if not message.last:
            del fields["last"]  # nor a slot that does not end its chain a last mark
        if not message.incarnation:
            del fields["incarnation"]  # nor any but an overlap 'queue' job's message its job's creation
        assert message.to_body() == json.dumps(fields, separators=(",", ":"))
        assert DispatchMessage.from_body(message.to_body()) == message


def _texts(rng: random.Random, count: int) -> list[str]:
    """Texts of every kind a spec may hold: JSON documents, every ASCII character, DEL, non-ASCII
    (accents, emoji, a lone surrogate), long and empty."""
    alphabet = [chr(c) for c in range(128)] + ['"', "\\", "\u00e9", "\U0001f600", "\ud800", "\u2028", "\x7f"]
    out = ["", '{"a":"b\\"c"}', job("s").model_dump_json(), "x" * 5000]
    for _ in range(count):
        weights = rng.choice([None, [20 if c.isalnum() or c in '{}":,' else 1 for c in alphabet]])
        out.append("".join(rng.choices(alphabet, weights=weights, k=rng.randrange(0, 700))))
    return out


def test_a_long_text_is_escaped_as_the_json_encoder_escapes_it() -> None:
    from punctual.dispatch.queues import _escape, _escape_long

    for code in range(128):  # every ASCII character, alone and between others
        for text in (chr(code), f"ab{chr(code)}cd", chr(code) * 3):
            assert _escape_long(text) == _escape(text) == json.dumps(text)
    for text in _texts(random.Random(7), 3000):
        assert _escape_long(text) == _escape(text) == json.dumps(text)

    class Text(str):
        pass

    assert _escape_long(Text('a"b')) == _escape(Text('a"b'))
    for not_text in (None, 12, b"bytes", ["a"]):
        with pytest.raises(TypeError):
            _escape_long(not_text)  # type: ignore[arg-type]


def test_a_message_carrying_any_spec_has_the_body_json_gave() -> None:
    for index, spec in enumerate(_texts(random.Random(11), 300)):
        message = DispatchMessage("t", "j", "s", "2026", 1, 1, spec=spec, sig=f"{index:064x}")
        fields = {k: v for k, v in asdict(message).items() if k in _BODY_FIELDS or (k == "spec" and v)}
        assert message.to_body() == json.dumps(fields, separators=(",", ":"))
        if "\ud800" not in spec:  # (a lone surrogate's escape is not read back, as before)
            assert DispatchMessage.from_body(message.to_body()) == message


_BODY_FIELDS = (
    "tenant",
    "job_id",
    "slot",
    "scheduled_at",
    "attempt",
    "job_version",
    "kind",
    "released_at",
    "ordered",
    "sig",
)


def test_memory_queue_still_dedups_on_one_computed_id() -> None:
    queues = MemoryQueues(now=lambda: T)
    message = message_for(job("a"), "s1", T, 1, MessageKind.FIRE, T)
    queues.send("q", [message, message])
    assert queues.drain("q") == [message]
    assert list(queues.sent_ids["q"]) == [message.dedup_id]


# --------------------------------------------------------------------------- timer keys


def test_slot_key_is_what_strftime_gave() -> None:
    for instant in _instants(2000):
        assert slot_key(instant) == instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_minute_keys_are_what_strftime_gave() -> None:
    for instant in _instants(2000):
        expected = instant.astimezone(UTC).strftime(MINUTE_FMT)
        assert minute_key(instant) == expected
        assert minute_key(minute_of(instant)) == expected


def test_timer_pk_is_the_bucket_of_its_due_minute() -> None:
    layout = TimerLayout()
    for instant in _instants(500):
        due_ms = round(instant.timestamp() * 1000)
        for lane in Lane:
            timer = Timer(lane, 7, due_ms, "job-1", "t", "s", 1, TimerKind.FIRE, 1)
            assert timer.pk == bucket_pk(lane, minute_of(timer.due), 7)
    kwargs: dict[str, Any] = {"job_id": "j", "tenant": "t", "slot": "s", "attempt": 1, "job_version": 1}
    timer = layout.make(now=T, due=T + timedelta(minutes=10), kind=TimerKind.FIRE, **kwargs)
    assert timer.pk == f"timer#{minute_key(T + timedelta(minutes=10))}#{timer.shard}"


def _strptime_slot(key: str) -> datetime:
    return datetime.strptime(key.split("~", 1)[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_slot_instant_is_what_strptime_gave() -> None:
    keys = [slot_key(i) for i in _instants(1000) if i.astimezone(UTC).year >= 1000]
    keys += [k + "~manual-1" for k in keys[:50]]
    keys += ["2026-1-5T1:2:3Z", "2026-11-30T10:00:00Z~a~b", "0999-01-01T00:00:00Z"]
    for key in keys:
        parsed = slot_instant(key)
        assert parsed == _strptime_slot(key)
        assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "key",
    [
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T10:00:60Z",
        "0000-01-01T00:00:00Z",
        "2026-11-30 10:00:00Z",
        "2026-11-30T10:00:00",
        "2026-11-30T10:00:00+00:00",
        "",
        "~x",
    ],
)
def test_slot_instant_refuses_what_strptime_refused_with_its_message(key: str) -> None:
    with pytest.raises(ValueError) as expected:
        _strptime_slot(key)
    with pytest.raises(ValueError) as got:
        slot_instant(key)
    assert str(got.value) == str(expected.value)


# --------------------------------------------------------------------------- the poller


def test_a_timer_read_again_is_held_once() -> None:
    clock = ManualClock(T)
    dispatcher = Poller(MemoryStore(), MemoryQueues(now=clock.now), clock, PollerConfig())
    run = dispatcher.minute_poll(T)
    base = dict(
        lane=Lane.NEAR, shard=3, due_ms=round(T.timestamp() * 1000) + 500, job_id="j", tenant="t", slot="s"
    )
    first = Timer(**base, attempt=1, kind=TimerKind.FIRE, job_version=1)  # type: ignore[arg-type]
    same_row = Timer(**base, attempt=1, kind=TimerKind.FIRE, job_version=1)  # type: ignore[arg-type]
    next_attempt = Timer(**base, attempt=2, kind=TimerKind.RETRY, job_version=1)  # type: ignore[arg-type]
    other_shard = Timer(**{**base, "shard": 4, "job_id": "k"}, attempt=1, kind=TimerKind.FIRE, job_version=1)  # type: ignore[arg-type]
    run.drain.hold([first])
    run.drain.hold([same_row, next_attempt, first])
    run.drain.hold([other_shard, next_attempt])
    assert [entry[-1] for entry in sorted(run.drain.heap)] == sorted(
        [first, next_attempt, other_shard], key=lambda t: (t.due_ms, t.sk)
    )
    # One key per (pk, sk) row, as before.
    assert len(run.drain.held) == len({(t.pk, t.sk) for t in (first, next_attempt, other_shard)})


def test_the_same_timer_object_read_again_is_known_by_identity() -> None:
    # A near bucket's pack comes back from the DynamoDB store's cache as the very Timer objects
    # of the poll before: held once, by identity; a copy of one (another object, the same row)
    # is still known by its key, and a new row is held.
    clock = ManualClock(T)
    dispatcher = Poller(MemoryStore(), MemoryQueues(now=clock.now), clock, PollerConfig())
    run = dispatcher.minute_poll(T)
    due = round(T.timestamp() * 1000) + 500
    pack = [
        Timer(Lane.NEAR, 3, due + i, f"j{i}", "t", "s", 1, TimerKind.FIRE, 1)  # type: ignore[arg-type]
        for i in range(5)
    ]
    for _ in range(8):  # a near bucket read at every poll of its look-back
        run.drain.hold(pack)
    new_row = Timer(Lane.NEAR, 3, due, "j9", "t", "s", 1, TimerKind.FIRE, 1)  # type: ignore[arg-type]
    run.drain.hold([copy.copy(pack[0]), new_row])
    held = [entry[-1] for entry in sorted(run.drain.heap)]
    assert held == sorted([*pack, new_row], key=lambda t: (t.due_ms, t.sk))
    assert all(
        a is b for a, b in zip(held, sorted([*pack, new_row], key=lambda t: (t.due_ms, t.sk)), strict=True)
    )
    assert len(run.drain.held) == 6


def test_one_timer_in_both_lanes_is_held_twice_and_released() -> None:
    # Two pollers with skewed clocks can write the same next timer (same due, same sort key)
    # into the far and the near lane; holding both must not make the heap compare Timers.
    clock = ManualClock(T)
    store, queues = MemoryStore(), MemoryQueues(now=clock.now)
    dispatcher = Poller(store, queues, clock, PollerConfig())
    run = dispatcher.minute_poll(T)
    base = dict(due_ms=round(T.timestamp() * 1000) + 500, job_id="j", tenant="t", slot="s", attempt=1)
    far = Timer(lane=Lane.FAR, shard=7, kind=TimerKind.FIRE, job_version=1, **base)  # type: ignore[arg-type]
    near = Timer(lane=Lane.NEAR, shard=3, kind=TimerKind.FIRE, job_version=1, **base)  # type: ignore[arg-type]
    run.drain.hold([far])
    run.drain.hold([near])
    assert sorted(entry[-1].lane for entry in run.drain.heap) == [Lane.NEAR, Lane.FAR]
    clock.set(T + timedelta(seconds=1))
    run._release_due()  # one slot: released once (here stale: the job does not exist), no raise
    assert run.drain.heap == [] and (run.report.stale, run.report.superseded) == (1, 1)


def _plan_reference(
    job: Job, slot: datetime, now: datetime
) -> tuple[list[datetime], int, datetime | None, bool]:
    """``plan_release`` as it was written before its single-slot shortcut."""
    if cached_schedule(job.schedule, job.timezone).kind == "delay":
        return [slot], 0, None, False
    due: list[datetime] = []
    current: datetime | None = slot
    while current is not None and dispatch_instant(job, current) <= now and len(due) < MAX_RELEASE_PER_TIMER:
        due.append(current)
        current = next_slot(job, current)
    if not due:
        return [slot], 0, next_slot(job, slot), True
    missed_before = now - timedelta(seconds=MISSED_AFTER_S)
    sendable: dict[datetime, datetime] = {}  # when the chain can send it: after every earlier slot (QA17)
    for s in due:
        sendable[s] = max([dispatch_instant(job, s), *sendable.values()])
    on_time = [s for s in due if sendable[s] >= missed_before]
    missed = [s for s in due if sendable[s] < missed_before]
    window_start = now - timedelta(seconds=job.catchup.window_seconds)
    in_window = [s for s in missed if sendable[s] >= window_start]
    if job.catchup.policy is CatchupKind.ALL:
        chosen = in_window
    elif job.catchup.policy is CatchupKind.LATEST:  # (none when more are due past the cap: newer)
        more_due = (
            len(due) == MAX_RELEASE_PER_TIMER
            and current is not None
            and dispatch_instant(job, current) <= now
        )
        chosen = in_window[-1:] if not on_time and not more_due else []
    else:
        chosen = []
    release = chosen + on_time
    return release, len(due) - len(release), current, True


@pytest.mark.parametrize(
    "schedule", ["rate(1 minute)", "rate(7 seconds)", "cron(0/5 * * * ? *)", "delay(1 minute)"]
)
def test_release_plan_is_what_it_was(schedule: str) -> None:
    for index in range(300):
        overrides: dict[str, Any] = {
            "jitter_seconds": rng.choice([0, 0, 5, 90]),
            "catchup": {
                "policy": rng.choice(["all", "latest", "none"]),
                "window_seconds": rng.choice([0, 120, 3600]),
            },
        }
        if rng.random() < 0.2:
            overrides["end_at"] = (T + timedelta(minutes=rng.randint(1, 30))).isoformat()
        j = job(f"job-{index}", schedule, **overrides)
        slot = next_slot(j, T - timedelta(seconds=rng.randint(0, 7200))) or T
        now = slot + timedelta(seconds=rng.choice([-5, 0, 1, 30, 59, 61, 300, 4000, 20000]))
        plan = plan_release(j, slot, now)
        if (
            plan.ranges
        ):  # a long run dropped in bulk (punctual.timing.missed_ranges): every slot accounted once
            _assert_accounted(j, slot, plan)
            continue
        assert (plan.release, plan.skipped, plan.next_slot, plan.chain) == _plan_reference(j, slot, now)


def _assert_accounted(j: Job, slot: datetime, plan: Any) -> None:
    """Every slot from ``slot`` up to the plan's next one is released, missed, or in one range."""
    covered = [s for r in plan.ranges for s in _slots_between(j, r.first, r.last)]
    assert sum(r.count for r in plan.ranges) == len(covered)
    dropped = covered + [s for s, _ in plan.missed]
    assert len(set(dropped) | set(plan.release)) == len(dropped) + len(plan.release)
    end = plan.next_slot or datetime.max.replace(tzinfo=T.tzinfo)
    assert sorted(dropped + plan.release) == [s for s in _slots_between(j, slot, end) if s < end]


def _slots_between(j: Job, first: datetime, last: datetime) -> list[datetime]:
    out: list[datetime] = []
    current: datetime | None = first
    while current is not None and current <= last:
        out.append(current)
        current = next_slot(j, current)
    return out


def test_cached_schedule_is_parse_schedule_and_errors_every_time() -> None:
    for expression in ["rate(1 minute)", "cron(0 9 ? * MON-FRI *)", "0 9 * * *", "at(2027-01-01T00:00:00)"]:
        assert cached_schedule(expression, "Europe/Berlin") == parse_schedule(expression, "Europe/Berlin")
        assert cached_schedule(expression, "Europe/Berlin") is cached_schedule(expression, "Europe/Berlin")
    for _ in range(2):
        with pytest.raises(ScheduleError):
            cached_schedule("rate(0 minutes)")


# --------------------------------------------------------------------------- records


def test_record_copies_are_what_pydantic_copies_were() -> None:
    record = Execution(
        job_id="j",
        slot="s",
        scheduled_at=T,
        status=ExecutionStatus.RUNNING,
        attempts=[AttemptRecord(attempt=1, status=ExecutionStatus.FAILED, error="x")],
    )
    for model in (record, record.attempts[0]):
        ours, theirs = copy.copy(model), BaseModel.__copy__(model)
        for attr in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            assert getattr(ours, attr) == getattr(theirs, attr)
        assert ours.__dict__ is not model.__dict__
        assert ours.__pydantic_fields_set__ is not model.__pydantic_fields_set__
    updated = record.model_copy(update={"status": ExecutionStatus.SUCCEEDED, "result": "ok"})
    assert updated.status is ExecutionStatus.SUCCEEDED and record.status is ExecutionStatus.RUNNING
    assert updated.model_fields_set == record.model_fields_set | {"status", "result"}
    assert updated.attempts is record.attempts  # shallow, as model_copy always was
    assert copy.deepcopy(record) == record


def test_backlog_counts_every_held_timer_already_due() -> None:
    clock = ManualClock(T)
    dispatcher = Poller(MemoryStore(), MemoryQueues(now=clock.now), clock, PollerConfig())
    run = dispatcher.minute_poll(T)
    start_ms = round(T.timestamp() * 1000)
    dues = [start_ms + rng.randint(0, 60_000) for _ in range(500)] + [start_ms] * 20
    run.drain.hold(
        Timer(Lane.FAR, 1, due, f"job-{i}", "t", "s", 1, TimerKind.FIRE, 1) for i, due in enumerate(dues)
    )
    assert run.backlog(T - timedelta(seconds=1)) == 0
    for offset_ms in [0, 1, 999, 20_000, 30_000, 59_999, 60_000, 90_000]:
        now = T + timedelta(milliseconds=offset_ms)
        assert run.backlog(now) == sum(1 for due in dues if due <= start_ms + offset_ms)


def test_a_fresh_owner_is_a_uuid4_hex() -> None:
    for _ in range(2000):
        raw = os.urandom(16)
        assert owner_of(raw) == uuid.UUID(bytes=raw, version=4).hex
    owner = new_owner()
    assert uuid.UUID(hex=owner).version == 4 and len(owner) == 32 and owner != new_owner()


def test_message_bodies_with_other_keys_decode_as_before() -> None:
    message = message_for(job("a"), "s1", T, 1, MessageKind.FIRE, T)
    data = json.loads(message.to_body())
    assert DispatchMessage.from_body(json.dumps({**data, "future_field": 1})) == message
    older = {k: v for k, v in data.items() if k not in ("ordered", "released_at")}
    assert DispatchMessage.from_body(json.dumps(older)) == DispatchMessage(**older)
    with pytest.raises(TypeError):
        DispatchMessage.from_body(json.dumps({"tenant": "t"}))


def test_zone_check_refuses_unknown_zones_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown time zone"):
            job("a", timezone="Mars/Olympus")
    assert job("a", timezone="Europe/Berlin").timezone == "Europe/Berlin"


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:00:00.250Z",
        "2026-11-30T10:00:00+00:00",
        "2026-11-30T11:00:00+01:00",
        "2026-11-30T10:00:00",  # naive
        "2026-11-30",
        "",
        "Z",
        "2026-11-30T10:00:00ZZ",
        "not an instant",
        None,
        12,
    ],
)
def test_a_message_instant_reads_as_fromisoformat_did(text: Any) -> None:
    from punctual.timing.instants import message_instant

    def plain() -> Any:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    for _ in range(2):  # (the second read from the cache)
        try:
            expected: Any = plain()
        except Exception as exc:  # the same error, whatever it is
            with pytest.raises(type(exc)) as got:
                message_instant(text)
            assert str(got.value) == str(exc)
            continue
        got_instant = message_instant(text)
        assert got_instant == expected and got_instant.tzinfo == expected.tzinfo
        assert type(got_instant) is datetime and got_instant.utcoffset() == expected.utcoffset()
