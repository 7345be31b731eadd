"""The chaos probe of a call whose answer never comes (local.chaos.faults.stall): once per run, in the
thread asked for, once armed; it waits the client's read timeout, then fails as a read timeout."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from botocore.exceptions import ReadTimeoutError

from local.chaos.faults.stall import Stall

QUERY = {"event_name": "before-send.dynamodb.Query"}


def test_one_call_stalls_once_armed_in_the_thread_asked_for(tmp_path: Path) -> None:
    armed = tmp_path / "armed"
    spec = {"operation": "Query", "at": 0, "hold_s": 40, "marker": str(tmp_path / "once")}
    stall = Stall({**spec, "armed_by": str(armed), "thread": "poller-"}, read_timeout_s=0.01)
    request = SimpleNamespace(url="http://aws")
    stall(request, **QUERY)  # not armed yet: goes on
    armed.touch()
    stall(request, event_name="before-send.dynamodb.GetItem")  # another operation: goes on
    stall(request, **QUERY)  # the test's thread is not a minute's poller: goes on
    raised: list[BaseException] = []

    def poller() -> None:
        try:
            stall(request, **QUERY)
        except ReadTimeoutError as exc:
            raised.append(exc)
        stall(request, **QUERY)  # once per run: the next call goes on

    thread = threading.Thread(target=poller, name="poller-1912-g0")
    thread.start()
    thread.join()
    assert len(raised) == 1
    # A hold shorter than the read timeout delays the call, then lets it go
    short = Stall({**spec, "hold_s": 0.01, "marker": str(tmp_path / "short")}, read_timeout_s=5)
    assert short(request, **QUERY) is None
