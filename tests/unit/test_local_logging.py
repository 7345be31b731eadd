"""Local mode's log set-up writes each record once (issue found running ``make run``)."""

from __future__ import annotations

import errno
import io
import json
import logging
from collections.abc import Iterator
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
