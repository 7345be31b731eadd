"""``punctual-local up`` refuses a bad option or ``PUNCTUAL_LOCAL_*`` value with one line and exit 2,
before it starts anything (QA22).

Regression: ``--shards 0``, ``--lease-s 1`` or ``--set PUNCTUAL_LEASE_S=abc`` started local mode,
and every function then died at start on its settings with a traceback, was restarted, died
again, for as long as one waited; ``--template`` naming no file did the same in the ``aws``
component; ``--aws-port 70000`` and ``PUNCTUAL_LOCAL_WORKERS=x`` were a Python traceback;
``--workers -1`` and ``--duration -5`` were taken as they came.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from local import aws_state, cli
from local.config import LOOPBACK, LocalConfig
from local.variables import known_variables

BAD_OPTIONS = [
    (["--shards", "0"], "--shards: PUNCTUAL_SHARD_COUNT"),
    (["--near-shards", "-2"], "--near-shards: PUNCTUAL_NEAR_SHARD_COUNT"),
    (["--lease-s", "1"], "--lease-s: PUNCTUAL_LEASE_S"),
    (["--set", "PUNCTUAL_LEASE_S=abc"], "--set: PUNCTUAL_LEASE_S"),
    (["--set", "PUNCTUAL_POLL_INTERVAL_MS=1"], "--set: PUNCTUAL_POLL_INTERVAL_MS"),
    # a name nothing reads did nothing, silently
    (
        ["--set", "PUNCTUAL_LEASE=12"],
        "--set 'PUNCTUAL_LEASE=12': no setting is named PUNCTUAL_LEASE: nothing would read it; did you mean"
        " PUNCTUAL_LEASE_S",
    ),
    (["--set", "PUNCTUAL_SHARDCOUNT=2"], "did you mean PUNCTUAL_SHARD_COUNT"),
    (
        ["--set", "PUNCTUAL_NO_SUCH_THING=1"],
        "no setting is named PUNCTUAL_NO_SUCH_THING: nothing would read it",
    ),
    # a far threshold under the minute + lead + skew: far timers written after their bucket was read
    (["--set", "PUNCTUAL_FAR_THRESHOLD_S=60"], "far_threshold_s 60 is under 75 (60 + poller_lead_s 10"),
    (["--template", "/nonexistent/template.json"], "--template /nonexistent/template.json: no such file"),
    (["--aws-port", "70000"], "--aws-port (PUNCTUAL_LOCAL_AWS_PORT) must be 0 to 65535, not 70000"),
    (["--workers", "-1"], "--workers (PUNCTUAL_LOCAL_WORKERS) must be at least 0, not -1"),
    (["--ecs-workers", "-1"], "--ecs-workers"),
    (["--api-processes", "0"], "--api-processes (PUNCTUAL_LOCAL_API_PROCESSES) must be at least 1, not 0"),
    (["--event-source-workers", "-1"], "--event-source-workers"),
]

BAD_VARIABLES = [
    ("PUNCTUAL_LOCAL_WORKERS", "x", "PUNCTUAL_LOCAL_WORKERS='x': not a whole number"),
    ("PUNCTUAL_LOCAL_AUDIT_INTERVAL_S", "0", "PUNCTUAL_LOCAL_AUDIT_INTERVAL_S must be at least 1, not 0"),
    ("PUNCTUAL_LOCAL_STALE_READS_S", "soon", "PUNCTUAL_LOCAL_STALE_READS_S='soon': not a number"),
    ("PUNCTUAL_LOCAL_EXTRA", "[1]", "PUNCTUAL_LOCAL_EXTRA='[1]': not a JSON object"),
]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What ``up`` would have run (nothing is started: the supervisor's entry point is replaced)."""
    for name in [n for n in os.environ if n.startswith("PUNCTUAL_LOCAL_")]:
        monkeypatch.delenv(name)
    runs: list[object] = []
    monkeypatch.setattr("local.demo.run_up", lambda config, **kwargs: runs.append(config) or 0)
    monkeypatch.setattr("local.cli.signal.signal", lambda *args: None)  # pytest's Ctrl-C stays its own
    return runs


def _up(tmp_path: Path, *options: str) -> list[str]:
    return ["up", "--no-demo", "--state-dir", str(tmp_path), "--api-port", "0", *options]


@pytest.mark.parametrize(("options", "named"), BAD_OPTIONS, ids=[" ".join(o) for o, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_and_exit_2_before_anything_starts(
    options: list[str], named: str, tmp_path: Path, started: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_up(tmp_path, *options)) == 2
    err = capsys.readouterr().err
    assert err.startswith("punctual-local: error: ") and err.count("\n") == 1, err
    assert named in err
    assert started == []


@pytest.mark.parametrize(("variable", "value", "named"), BAD_VARIABLES, ids=[v for v, _, _ in BAD_VARIABLES])
def test_a_bad_local_variable_is_one_line_and_exit_2(
    variable: str,
    value: str,
    named: str,
    tmp_path: Path,
    started: list[object],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert cli.main(_up(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err == f"punctual-local: error: {named}\n"
    assert started == []


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--duration", "-5"], "argument --duration: a duration is more than 0 seconds, not -5"),
        (["--stale-reads", "x"], "argument --stale-reads: not a number of seconds: 'x'"),
        (["--workers", "x"], "argument --workers: invalid int value: 'x'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_value_the_parser_refuses_is_one_line_too(
    options: list[str], said: str, tmp_path: Path, started: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    """QA24: these printed up's whole usage (17 lines) above the error."""
    with pytest.raises(SystemExit) as refused:
        cli.main(_up(tmp_path, *options))
    assert refused.value.code == 2 and started == []
    err = capsys.readouterr().err
    assert re.match(r"punctual-local( up)?: error: ", err) and err.count("\n") == 1 and said in err, err


def test_good_options_start(tmp_path: Path, started: list[object]) -> None:
    options = ["--shards", "2", "--lease-s", "12", "--workers", "0", "--set", "PUNCTUAL_LEASE_S=9"]
    assert cli.main(_up(tmp_path, *options, "--duration", "1")) == 0
    (config,) = started
    assert config.shard_count == 2 and config.workers == 0  # type: ignore[attr-defined]


def test_a_saved_state_is_not_started_with_other_shard_counts(
    tmp_path: Path, started: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``up --shards 8`` over the state a stop with 4 saved started, and then every
    poller failed each minute and every job write was a 503 (the table's counts are fixed)."""
    state = tmp_path / aws_state.STATE_FILE
    aws_state.save(state, (4, 2))
    assert cli.main(_up(tmp_path, "--shards", "8")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "4 far / 2 near shards" in err and "--shards 4 --near-shards 2" in err
    assert cli.main(_up(tmp_path, "--near-shards", "3")) == 2
    assert started == [] and state.exists()
    assert cli.main(_up(tmp_path, "--shards", "4", "--near-shards", "2")) == 0  # its own counts: it starts
    assert cli.main(_up(tmp_path, "--shards", "8", "--fresh")) == 0  # or empty
    assert len(started) == 2


def test_a_state_saved_before_any_timer_starts_with_any_counts(tmp_path: Path, started: list[object]) -> None:
    aws_state.save(tmp_path / aws_state.STATE_FILE, (4, 2))
    aws_state.save(tmp_path / aws_state.STATE_FILE, None)  # saved again, its table never laid out
    assert cli.main(_up(tmp_path, "--shards", "8")) == 0 and len(started) == 1


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something listens on (another local mode's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("option", ["--aws-port", "--receiver-port", "--api-port"])
def test_a_port_asked_for_that_is_taken_is_refused_not_swapped(
    option: str, taken_port: int, tmp_path: Path, started: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (QA22): ``--aws-port`` or ``--receiver-port`` naming a port another local mode held
    was swapped for a random one without a word, so what the user pointed at the port they asked for
    (``AWS_ENDPOINT_URL`` for ``punctual-admin``, a job's webhook) reached the other local mode."""
    assert cli.main([*_up(tmp_path), option, str(taken_port)]) == 2
    assert capsys.readouterr().err == (
        f"punctual-local: error: port {taken_port} is taken (is local mode already running?): use another {option}"
        f" (make run RUN_ARGS='{option} N')\n"
    )
    assert started == []


def test_the_default_ports_move_aside_when_taken(
    taken_port: int, tmp_path: Path, started: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LocalConfig, "aws_port", taken_port)  # the default is the port taken
    monkeypatch.setattr(LocalConfig, "receiver_port", taken_port)
    ports = ["--aws-port", str(taken_port), "--receiver-port", str(taken_port)]
    assert cli.main(_up(tmp_path, *ports, "--duration", "1")) == 0
    (config,) = started
    assert taken_port not in (config.aws_port, config.receiver_port)  # type: ignore[attr-defined]


READ = re.compile(r"""(?:environ(?:\.get)?|getenv|env(?:\.get)?)\s*[\[(]\s*["'](PUNCTUAL_[A-Z0-9_]+)["']""")
NAMED = re.compile(r"""^[A-Z_]*ENV\s*=\s*["'](PUNCTUAL_[A-Z0-9_]+)["']""", re.MULTILINE)


def test_set_refuses_no_name_the_code_reads() -> None:
    # Every PUNCTUAL_* name read outside the settings models (the fault injection's, the
    # supervisor's, ...), by environ/getenv or as an *_ENV constant, in local mode's processes
    root = Path(__file__).resolve().parents[2]
    read: set[str] = set()
    for folder in ("local", "functions", "layers/core/python/punctual"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            read.update(READ.findall(text) + NAMED.findall(text))
    assert {"PUNCTUAL_FAULT_THROTTLE_RATE", "PUNCTUAL_FAULT_LOG_DIR", "PUNCTUAL_LOCAL_ZYGOTE"} <= read
    assert sorted(read - known_variables()) == []
    # and the settings models' own, as read_env names them
    assert {"PUNCTUAL_LEASE_S", "PUNCTUAL_CONSOLE_TENANT", "PUNCTUAL_WORKER_GRACE_S"} <= known_variables()
    assert {
        "PUNCTUAL_MARKS_SCOPE",
        "PUNCTUAL_BURST_TRIGGERS_PER_POLLER",
    } <= known_variables()  # (local/, tests/e2e)
