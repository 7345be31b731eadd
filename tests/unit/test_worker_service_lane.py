"""The ECS worker's lane: which queues it receives from (the burst service polls the short ones)."""

from __future__ import annotations

import pytest

from punctual.execution.worker_service import ServiceSettings, queue_urls_for
from punctual.runtime.settings import Settings, SettingsError

SHORT = "https://sqs.example/short-0.fifo,https://sqs.example/short-1.fifo"
LONG = "https://sqs.example/long-0.fifo"


def settings(**env: str) -> Settings:
    return Settings.from_env({f"PUNCTUAL_{key.upper()}": value for key, value in env.items()})


def test_the_long_lane_is_the_default_and_polls_the_long_queues() -> None:
    knobs = ServiceSettings.from_env({})

    assert knobs.lane == "long"
    assert queue_urls_for(settings(short_queue_urls=SHORT, long_queue_urls=LONG), knobs.lane) == [LONG]


def test_the_long_lane_falls_back_to_the_short_queues_when_there_is_no_long_one() -> None:
    assert queue_urls_for(settings(short_queue_urls=SHORT), "long") == SHORT.split(",")


def test_the_short_lane_polls_only_the_short_queues_and_keeps_every_url_for_sending() -> None:
    knobs = ServiceSettings.from_env({"PUNCTUAL_WORKER_LANE": "short", "PUNCTUAL_WORKER_CONCURRENCY": "32"})
    both = settings(short_queue_urls=SHORT, long_queue_urls=LONG)

    assert (knobs.lane, knobs.concurrency) == ("short", 32)
    assert queue_urls_for(both, knobs.lane) == SHORT.split(",")
    # Only the receiving changes: a takeover or a dependent run can still be sent to the long lane.
    assert both.long_queue_urls == [LONG]


def test_the_short_lane_without_short_queues_polls_nothing() -> None:
    # WorkerService refuses an empty list, so a misconfigured task fails at start, loudly.
    assert queue_urls_for(settings(long_queue_urls=LONG), "short") == []


def test_an_unknown_lane_is_refused_with_its_variable() -> None:
    with pytest.raises(SettingsError, match="PUNCTUAL_WORKER_LANE"):
        ServiceSettings.from_env({"PUNCTUAL_WORKER_LANE": "medium"})


def test_main_receives_from_the_short_queues_in_the_short_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.execution import worker_service

    polled: list[list[str]] = []

    class FakeService:
        def __init__(self, worker: object, urls: list[str], **knobs: object) -> None:
            polled.append(list(urls))

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> None:
            pass

    monkeypatch.setattr(worker_service, "WorkerService", FakeService)
    monkeypatch.setattr("punctual.runtime.composition.Container.worker", lambda self, **knobs: object())
    from punctual.runtime import composition

    composition.reset()  # the container reads the variables below
    for key, value in {
        "PUNCTUAL_SHORT_QUEUE_URLS": SHORT,
        "PUNCTUAL_LONG_QUEUE_URLS": LONG,
        "PUNCTUAL_WORKER_LANE": "short",
    }.items():
        monkeypatch.setenv(key, value)

    assert worker_service.main([]) == 0
    composition.reset()
    assert polled == [SHORT.split(",")]


def test_main_batches_the_tasks_deletes(monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.dispatch.queue_acks import BatchedDeletes
    from punctual.execution import worker_service

    built: list[object] = []

    class FakeService:
        def __init__(self, worker: object, urls: list[str], **knobs: object) -> None:
            pass

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> None:
            pass

    def worker(self: object, **knobs: object) -> object:
        built.append(knobs.get("queues"))
        return object()

    monkeypatch.setattr(worker_service, "WorkerService", FakeService)
    monkeypatch.setattr("punctual.runtime.composition.Container.worker", worker)
    from punctual.runtime import composition

    composition.reset()
    monkeypatch.setenv("PUNCTUAL_SHORT_QUEUE_URLS", SHORT)
    monkeypatch.setenv("PUNCTUAL_WORKER_LANE", "short")

    assert worker_service.main([]) == 0
    composition.reset()
    # The worker core's every delete (runs ended, duplicates dropped) goes through the batcher.
    assert len(built) == 1 and isinstance(built[0], BatchedDeletes)
    built[0].close()
