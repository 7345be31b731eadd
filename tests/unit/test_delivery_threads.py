"""DeliveryThreads: deliveries beside the runs, and settle() waiting for them."""

from __future__ import annotations

import threading
import time

import pytest

from punctual.delivery.notifications.background import DeliveryThreads


def test_settle_beside_a_submit_never_joins_a_thread_not_yet_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """A submit on one thread (the lease keeper's flush of a long batch's events) and the batch's
    settle() on another: settle saw the thread before it was started and joined it, 'cannot join
    thread before it is started' (found by the suite: a RuntimeError at a Lambda batch's end)."""
    deliveries = DeliveryThreads()
    starting = threading.Event()
    real_start = threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name == "delivery":
            starting.set()
            time.sleep(0.2)  # the window between the thread's registration and its start
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    done = threading.Event()
    submitter = threading.Thread(target=lambda: deliveries.submit(done.set))
    submitter.start()
    assert starting.wait(5)
    assert deliveries.settle(5) == 0  # raised RuntimeError before
    submitter.join(5)
    assert done.is_set()


def test_settle_raises_a_delivery_that_died_of_more_than_an_error() -> None:
    deliveries = DeliveryThreads()

    def dying() -> None:
        raise KeyboardInterrupt

    deliveries.submit(dying)
    with pytest.raises(KeyboardInterrupt):
        deliveries.settle(5)
    assert deliveries.pending == 0


def test_a_delivery_whose_thread_cannot_start_leaves_nothing_for_settle_to_wait_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deliveries = DeliveryThreads()

    def no_thread(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with pytest.raises(RuntimeError):
        deliveries.submit(lambda: None)
    monkeypatch.undo()
    assert deliveries.pending == 0 and deliveries.settle(1) == 0
