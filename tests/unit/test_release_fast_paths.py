"""The release path's shortcuts give what the plain code gave: a timer made without its frozen
``__init__``, a minute's load counted without the intermediate loads."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.dispatch.load_forecast import add_ecs_slot, add_slot
from punctual.store.loads import MinuteLoad
from punctual.timing.timers import Lane, Timer, TimerKind, TimerLayout, to_ms

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(
    layout=st.builds(
        TimerLayout,
        shard_count=st.integers(1, 600),
        near_shard_count=st.integers(1, 64),
        far_threshold_s=st.integers(0, 600),
    ),
    now_ms=st.integers(0, 10**7),
    due_ms=st.integers(-(10**6), 10**7),
    job_id=st.text(min_size=1, max_size=12),
    tenant=st.text(min_size=1, max_size=8),
    attempt=st.integers(1, 50),
    kind=st.sampled_from(list(TimerKind)),
    version=st.integers(1, 10**6),
    owner=st.one_of(st.none(), st.text(max_size=8)),
)
def test_a_made_timer_is_the_one_its_constructor_gives(
    layout: TimerLayout,
    now_ms: int,
    due_ms: int,
    job_id: str,
    tenant: str,
    attempt: int,
    kind: TimerKind,
    version: int,
    owner: str | None,
) -> None:
    now, due = T0 + timedelta(milliseconds=now_ms), T0 + timedelta(milliseconds=due_ms)
    made = layout.make(
        now=now,
        due=due,
        job_id=job_id,
        tenant=tenant,
        slot="s",
        attempt=attempt,
        kind=kind,
        job_version=version,
        owner=owner,
    )
    lane = Lane.FAR if max(to_ms(due), to_ms(now)) - to_ms(now) > layout.far_threshold_s * 1000 else Lane.NEAR
    expected = Timer(
        lane,
        layout.shard_for(lane, tenant, job_id),
        max(to_ms(due), to_ms(now)),
        job_id,
        tenant,
        "s",
        attempt,
        kind,
        version,
        owner,
    )
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert vars(made) == vars(expected) and list(vars(made)) == list(vars(expected))
    assert dataclasses.replace(made, attempt=attempt + 1) == dataclasses.replace(
        expected, attempt=attempt + 1
    )
    assert pickle.loads(pickle.dumps(made)) == expected


def _plain_add(loads: dict[datetime, MinuteLoad], instant: datetime, head_s: float, count: int) -> None:
    """add_slot as it was written: three loads made a call."""
    minute = instant.astimezone(UTC).replace(second=0, microsecond=0)
    head = count if (instant - minute).total_seconds() < head_s else 0
    loads[minute] = loads.get(minute, MinuteLoad()) + MinuteLoad(count, head)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 5 * 60_000), st.integers(-3, 3), st.booleans()), min_size=1, max_size=30
    ),
    head_s=st.floats(0, 60),
)
def test_a_minutes_load_adds_up_as_before(steps: list[tuple[int, int, bool]], head_s: float) -> None:
    fast: dict[datetime, MinuteLoad] = {}
    plain: dict[datetime, MinuteLoad] = {}
    for offset_ms, count, ecs in steps:
        instant = T0 + timedelta(milliseconds=offset_ms)
        if ecs:  # the ECS counter is kept beside the others
            add_ecs_slot(fast, instant, count)
            add_ecs_slot(plain, instant, count)
            continue
        add_slot(fast, instant, head_s, count)
        _plain_add(plain, instant, head_s, count)
    assert fast == plain
