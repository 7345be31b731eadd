"""Local mode's log set-up writes each record once (issue found running ``make run``)."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from local.component import configure_logging
from local.logs import LogSink


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def root_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def test_a_record_a_logger_above_wrote_is_not_written_again_by_the_root(
    root_restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a forked worker has: its service logger with a handler of its own (Powertools'),
    # set up before the component configures the root's.
    service = logging.getLogger("svc-written-above")
    own = Collected()
    service.addHandler(own)
    service.setLevel(logging.INFO)
    try:
        configure_logging(SimpleNamespace(log_level="INFO"))  # type: ignore[arg-type]
        logging.getLogger("svc-written-above.execution").info("claimed a slot")
        logging.getLogger("elsewhere.component").info("started")
        library = logging.getLogger("lib-with-null-handler")  # as botocore and urllib3 set up
        library.addHandler(logging.NullHandler())
        logging.getLogger("lib-with-null-handler.retries").warning("retrying a throttled call")
    finally:
        service.removeHandler(own)
    assert own.messages == ["claimed a slot"]
    err = capsys.readouterr().err
    assert "claimed a slot" not in err  # it was written twice before
    assert "INFO elsewhere.component: started" in err  # a record nobody above wrote still is
    # and a library's NullHandler writes nothing: its warnings still reach the terminal
    assert "WARNING lib-with-null-handler.retries: retrying a throttled call" in err


class HungUp(io.StringIO):
    """A terminal after a hang-up: every write fails with EIO."""

    def write(self, text: str) -> int:
        raise OSError(errno.EIO, "Input/output error")


def test_a_hung_up_terminal_does_not_stop_the_log(tmp_path: Path) -> None:
    # The terminal of `make run` closed: the supervisor's next log line raised EIO and it died in
    # the middle of its stop, AWS's state unsaved (tests/e2e/test_local_restart.py)
    sink = LogSink(json_logs=False, log_file=tmp_path / "local.log", console=Console(file=HungUp()))
    sink.info("stopped api (exit 0)")
    sink.info("AWS state saved")
    sink.close()
    assert [json.loads(line)["message"] for line in (tmp_path / "local.log").read_text().splitlines()] == [
        "stopped api (exit 0)",
        "AWS state saved",
    ]


RunUp = Callable[[Callable[[], bool]], int]


@pytest.fixture
def up_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[RunUp], int]]:
    """``punctual-local up`` with ``run_up`` replaced by a function of its ``stop_requested``; the
    signal handlers it installs are put back after."""
    import local.aws_state
    import local.cli
    import local.demo

    monkeypatch.setattr(local.cli, "refuse_if_running", lambda config: None)
    monkeypatch.setattr(local.aws_state, "refuse_other_layout", lambda *args: None)
    monkeypatch.setattr(local.cli, "_off_the_terminal", lambda: None)  # (pytest's own output)

    def up(body: RunUp) -> int:
        monkeypatch.setattr(local.demo, "run_up", lambda config, stop_requested, **kw: body(stop_requested))
        # a free API port (QA31: the default 8080 failed both tests while any local mode, a
        # developer's make run, held it)
        argv = ["up", "--state-dir", str(tmp_path), "--api-port", "0"]
        return local.cli.up(local.cli.build_parser().parse_args(argv))

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield up
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_closed_terminal_during_a_clean_stop_does_not_cut_it_short(
    up_alone: Callable[[RunUp], int],
) -> None:
    # Given punctual-local up stopping cleanly after a Ctrl-C (AWS's state still to be saved)
    def run_up(stop_requested: Callable[[], bool]) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.2)  # the ordered stop under way
        # When its terminal is closed then (the window closed after the Ctrl-C)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        return 0  # the stop went on to save AWS's state

    # Then the stop goes on: a hang-up is not a second Ctrl-C (QA26: KeyboardInterrupt abandoned
    # the ordered stop, AWS's state unsaved, and the next start had no job)
    assert up_alone(run_up) == 0


def test_local_mode_started_under_nohup_outlives_its_terminal(up_alone: Callable[[RunUp], int]) -> None:
    # Given punctual-local up started with SIGHUP ignored (nohup make run &)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    hung_up: list[bool] = []

    def run_up(stop_requested: Callable[[], bool]) -> int:
        # When its terminal closes (the ssh session that started it logs out)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        hung_up.append(stop_requested())
        return 0

    up_alone(run_up)
    # Then it goes on running, as nohup asked (QA26: the hang-up stopped it)
    assert hung_up == [False]


def test_a_component_run_alone_under_nohup_outlives_its_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a component run alone with SIGHUP ignored (nohup punctual-local worker &)
    from local.component import stop_event

    monkeypatch.delenv("PUNCTUAL_LOCAL_SUPERVISED", raising=False)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        stop = stop_event()
        # When its terminal closes
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        # Then it is not asked to stop (QA26: it was)
        assert not stop.is_set()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
