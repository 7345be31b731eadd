"""after(A, B) whose parents never share a slot is refused, not stored to never run (QA finding)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from factories import job, spec
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting
from punctual.usecases.shared_slots import no_shared_slot

NOW = datetime(2026, 11, 30, 10, 0, 1, tzinfo=UTC)


def _parents(*schedules: tuple[str, dict[str, Any]]) -> list[Any]:
    return [job(f"p{i}", expression, now=NOW, **more) for i, (expression, more) in enumerate(schedules)]


@pytest.mark.parametrize(
    ("a", "b", "never"),
    [
        (("cron(0 * * * ? *)", {}), ("cron(30 * * * ? *)", {}), "in the year from"),
        (("cron(0 * * * ? *)", {}), ("cron(0 */2 * * ? *)", {}), None),
        (("cron(0 * * * ? *)", {"timezone": "Asia/Kolkata"}), ("cron(0 * * * ? *)", {}), "in the year from"),
        (("cron(0 * * * ? *)", {"timezone": "Europe/Berlin"}), ("cron(0 * * * ? *)", {}), None),
        # two rate(1 minute) jobs registered 12 s apart: their slots are 12 s apart for ever
        (
            ("rate(1 minute)", {"anchor": NOW + timedelta(seconds=4)}),
            ("rate(1 minute)", {"anchor": NOW + timedelta(seconds=16)}),
            "ever",
        ),
        (("rate(7 minutes)", {}), ("rate(11 minutes)", {}), None),
        (
            ("rate(6 minutes)", {}),
            ("rate(4 minutes)", {"anchor": NOW + timedelta(minutes=1)}),
            "ever",
        ),  # odd/even minutes
        (("rate(6 minutes)", {}), ("rate(4 minutes)", {"anchor": NOW + timedelta(minutes=2)}), None),
        # 09:00 Berlin and 08:00 UTC are one instant in winter only: shared, so accepted
        (("cron(0 9 * * ? *)", {"timezone": "Europe/Berlin"}), ("cron(0 8 * * ? *)", {}), None),
        (("cron(0 10 L * ? *)", {}), ("cron(0 10 ? * MON *)", {}), None),
        (("cron(0 10 * * ? *)", {}), ("cron(0 10 * * ? 2028)", {}), None),  # shared from 2028 on
        (("at(2026-12-01T10:00:00)", {}), ("cron(0 10 * * ? *)", {}), None),
        (("at(2026-12-01T10:00:00)", {}), ("cron(30 10 * * ? *)", {}), "no slot left"),
    ],
)
def test_parents_that_share_no_slot_are_named(a: Any, b: Any, never: str | None) -> None:
    found = no_shared_slot(_parents(a, b), NOW)
    assert (found is None) == (never is None), found
    if never is not None:
        assert found is not None and never in found and "'p0'" in found


def test_parents_without_fixed_slots_are_not_judged() -> None:
    assert no_shared_slot(_parents(("delay(5 minutes)", {}), ("cron(30 * * * ? *)", {})), NOW) is None


def _service() -> tuple[JobService, MemoryStore]:
    clock = ManualClock(NOW)
    store = MemoryStore()
    return JobService(
        store, MemoryQueues(now=clock.now), clock, TimerLayout(4, 2, 180), QueueRouting(("s",), ())
    ), store


def test_the_api_refuses_such_a_child_and_stores_nothing() -> None:
    service, store = _service()
    service.register("t", spec("cron(0 * * * ? *)"), job_id="a")
    service.register("t", spec("cron(30 * * * ? *)"), job_id="b")
    with pytest.raises(InvalidJobError, match="share no slot") as refused:
        service.register("t", spec("after(a, b)"), job_id="c")
    assert refused.value.field == "schedule"
    assert store.get_job("t", "c") is None
    service.register("t", spec("after(a)"), job_id="c")
    with pytest.raises(InvalidJobError, match="share no slot"):
        service.replace("t", "c", spec("after(a, b)"))


def test_a_parent_replaced_so_that_its_child_would_never_run_again_is_refused() -> None:
    service, store = _service()
    service.register("t", spec("cron(0 * * * ? *)"), job_id="a")
    service.register("t", spec("cron(0 */2 * * ? *)"), job_id="b")
    service.register("t", spec("after(a, b)"), job_id="c")
    with pytest.raises(InvalidJobError, match="after\\(\\) job 'c' would never run again"):
        service.replace("t", "b", spec("cron(30 */2 * * ? *)"))
    assert store.get_job("t", "b").schedule == "cron(0 */2 * * ? *)"
    service.replace("t", "b", spec("cron(0 */3 * * ? *)"))  # still shares a's slots


def test_twenty_rate_parents_a_second_apart_are_refused_at_once() -> None:
    parents = [job(f"p{i}", "rate(1 minute)", now=NOW, anchor=NOW + timedelta(seconds=i)) for i in range(20)]
    assert "share no slot ever" in (no_shared_slot(parents, NOW) or "")


def test_edits_that_leave_the_timing_alone_are_never_refused() -> None:
    """Once a parent's end_at passed the child shares no slot any more: an edit of the other parent
    or of the child that changes no timing is still accepted (review of c4e34c6)."""
    service, store = _service()
    service.register(
        "t", spec("cron(0 * * * ? *)", end_at=(NOW + timedelta(hours=3)).isoformat()), job_id="a"
    )
    service.register("t", spec("cron(0 * * * ? *)"), job_id="b")
    service.register("t", spec("after(a, b)"), job_id="child")
    service.clock.set(NOW + timedelta(days=1))  # type: ignore[attr-defined]
    service.replace("t", "b", spec("cron(0 * * * ? *)", description="rotated"))
    service.replace("t", "child", spec("after(a, b)", description="x"))
    service.replace("t", "b", spec("cron(0 */2 * * ? *)"))  # the child shared nothing already: not judged
    assert store.get_job("t", "b").version == 3  # two replaces of b
