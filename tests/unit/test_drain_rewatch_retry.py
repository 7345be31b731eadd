"""A poller's watch of what an earlier poller sent (punctual.dispatch.polling.rewatch) that failed
is tried again at the drain's next pass, whether or not that pass has timers due: a quiet
stretch after a failed watch must not leave a slot whose worker died unwatched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from punctual.dispatch.polling import drain as drain_module
from punctual.dispatch.polling.drain import MinuteDrain
from punctual.runtime.clock import ManualClock
from punctual.timing.timers import TimerKind, TimerLayout, slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class _Releaser:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.released: list[Any] = []

    def release(
        self, timers: Any, uncertain: bool = False, sent_by_ms: int | None = None
    ) -> drain_module.ReleaseReport:
        self.released.extend(timers)
        return drain_module.ReleaseReport(released=len(timers))


def _timer() -> Any:
    return TimerLayout().make(
        now=T0,
        due=T0,
        job_id="j",
        tenant="t",
        slot=slot_key(T0),
        attempt=1,
        kind=TimerKind.FIRE,
        job_version=1,
    )


def test_a_failed_watch_is_tried_again_when_nothing_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a drain holding one superseded fire timer to watch, whose first watch failed
    calls: list[int] = []
    failing = [True]

    def watch(releaser: Any, timers: list[Any], now: datetime) -> None:
        calls.append(len(timers))
        if failing[0]:
            raise RuntimeError("job read throttled")

    monkeypatch.setattr(drain_module, "watch_earlier_sends", watch)
    drain = MinuteDrain(_Releaser(), uncertain_through_ms=None)  # type: ignore[arg-type]
    drain._watch_earlier([_timer()])
    assert drain.to_watch and calls == [1]

    # When the drain's next passes find no timer due, the store having recovered
    failing[0] = False
    drain.release_due(now_ms=0)

    # Then the watch was tried again and is done: nothing left to watch, nothing released
    assert calls == [1, 1]
    assert drain.to_watch == []
    drain.release_due(now_ms=0)
    assert calls == [1, 1]  # and not again once it succeeded


def test_nothing_due_and_nothing_to_watch_does_no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(drain_module, "watch_earlier_sends", lambda r, t, n: calls.append(len(t)))
    drain = MinuteDrain(_Releaser(), uncertain_through_ms=None)  # type: ignore[arg-type]
    report = drain.release_due(now_ms=0)
    assert report.released == 0 and calls == []
