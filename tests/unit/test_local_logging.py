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


def test_a_closed_terminal_during_a_clean_stop_does_not_cut_it_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given punctual-local up stopping cleanly after a Ctrl-C (AWS's state still to be saved)
    import local.aws_state
    import local.cli
    import local.demo

    monkeypatch.setattr(local.cli, "refuse_if_running", lambda config: None)
    monkeypatch.setattr(local.aws_state, "refuse_other_layout", lambda *args: None)
    monkeypatch.setattr(local.cli, "_off_the_terminal", lambda: None)  # (pytest's own output)

    def run_up(config: object, stop_requested: Callable[[], bool], **kwargs: object) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.2)  # the ordered stop under way
        # When its terminal is closed then (the window closed after the Ctrl-C)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
        return 0  # the stop went on to save AWS's state

    monkeypatch.setattr(local.demo, "run_up", run_up)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        args = local.cli.build_parser().parse_args(["up", "--state-dir", str(tmp_path)])
        # Then the stop goes on: a hang-up is not a second Ctrl-C (QA26: KeyboardInterrupt
        # abandoned the ordered stop, AWS's state unsaved, and the next start had no job)
        assert local.cli.up(args) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
