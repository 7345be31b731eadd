"""The ``punctual-local`` command: ``up`` runs everything; each component can also run alone."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from local.arg_types import seconds_behind, share
from local.config import LocalConfig, LocalModeError, alive, free_port, port_in_use, started_after
from local.variables import unknown_variable

COMPONENTS = ("aws", "api", "poller", "worker", "ecs-worker", "receiver", "auditor")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="logs, pid files, receiver records (default: .local/)")
    parser.add_argument("--cache-dir", type=Path, help="synthesised template cache (default: .local/cache/)")
    parser.add_argument("--aws-port", type=int, help="moto server port (default 4566; 0: a free one)")
    parser.add_argument("--api-port", type=int, help="REST API port (default 8080)")
    parser.add_argument("--receiver-port", type=int, help="demo webhook receiver port (default 8081)")
    parser.add_argument("--shards", type=int, dest="shard_count", help="far shards (default 4)")
    parser.add_argument("--near-shards", type=int, dest="near_shard_count", help="near shards (default 2)")
    parser.add_argument(
        "--lease-s", type=int, dest="lease_s", help="PUNCTUAL_LEASE_S (default: the deployment's, 12)"
    )
    parser.add_argument(
        "--template", help="deploy this CloudFormation template instead of synthesising infra/"
    )
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument(
        "--stale-reads",
        type=seconds_behind,
        dest="stale_reads_s",
        metavar="SECONDS",
        help="answer DynamoDB's eventually consistent reads up to SECONDS behind, as DynamoDB"
        " may (default 0)",
    )
    parser.add_argument(
        "--transaction-conflicts",
        type=share,
        dest="transaction_conflicts",
        metavar="SHARE",
        help="cancel this share (0-1) of the writes on items a transaction holds with DynamoDB's"
        " transaction conflict errors (default 0)",
    )
    parser.add_argument(
        "--attach-aws",
        action="store_const",
        const=True,
        help="another Region: use the moto server already on --aws-port (its table) and the"
        " receiver on --receiver-port; create only this Region's queues (--name-prefix)",
    )
    parser.add_argument(
        "--no-transactions",
        dest="table_transactions",
        action="store_const",
        const=False,
        help="write the store's transactions one item at a time, as on an MRSC global table",
    )
    parser.add_argument("--name-prefix", help="queue name prefix (default punctual; one per Region)")
    parser.add_argument(
        "--no-moto-patch",
        dest="moto_patch",
        action="store_const",
        const=False,
        help="run moto unpatched (see local/motopatch.py)",
    )


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:  # (NaN too)
        raise argparse.ArgumentTypeError(f"a duration is more than 0 seconds, not {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """Errors in one line, as every other refusal of ``punctual-local`` (QA24: ``--duration -5``
    or ``--stale-reads x`` printed the 17-line usage of ``up`` above the error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="punctual-local",
        description="Punctual on one machine: moto server as AWS, the API on loopback, pollers and workers.",
    )
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND")
    verbs.required = True
    up = verbs.add_parser("up", help="run every component under a supervisor (what `make run` does)")
    _common(up)
    up.add_argument(
        "--no-demo", dest="demo", action="store_false", help="start clean: no demo jobs, no table"
    )
    up.add_argument(
        "--duration",
        type=_positive_seconds,
        metavar="S",
        help="stop S seconds after the demo is registered and print one summary line",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start with empty AWS state (a clean stop keeps jobs and runs for the next start)",
    )
    up.add_argument("--json-logs", action="store_true", help="one JSON object per log line")
    up.add_argument("--workers", type=int, help="worker Lambda processes (default 2)")
    up.add_argument(
        "--ecs-workers", type=int, help="ECS worker processes (default 2, the deployment's ecsReadyTasks)"
    )
    up.add_argument(
        "--set",
        dest="settings",
        action="append",
        metavar="PUNCTUAL_NAME=VALUE",
        help="a setting of every function (repeatable), e.g. PUNCTUAL_BURST_TRIGGERS_PER_POLLER=40",
    )
    up.add_argument(
        "--cloud-cadence",
        dest="tick_cadence_s",
        action="store_const",
        const=60,
        help="plan and scale as the cloud's tick: every minute, two ahead, with its 75 s start lead",
    )
    up.add_argument("--api-processes", type=int, help="API Lambda processes sharing the API port (default 1)")
    up.add_argument(
        "--event-source-workers",
        dest="event_source_workers_max",
        type=int,
        help="at most this many more worker processes while every worker holds a batch (default 2; 0: none)",
    )
    up.add_argument(
        "--cold-burst-workers",
        dest="warm_burst_workers",
        action="store_const",
        const=False,
        help="start each burst worker as a new process, not forked from its prepared zygote",
    )
    up.add_argument(
        "--no-table", dest="table", action="store_false", help="no live table, even on a terminal"
    )
    helps = {
        "aws": "moto server with the template's table and queues",
        "api": "the API Lambda behind http://127.0.0.1:8080",
        "poller": "the tick: one poller per shard group and minute",
        "worker": "one worker Lambda container fed by the SQS event source mapping",
        "ecs-worker": "the ECS worker service on the long queue",
        "receiver": "the demo's webhook receiver",
        "auditor": "the chain auditor: every job's chain checked, broken ones repaired",
    }
    for name in COMPONENTS:
        sub = verbs.add_parser(name, help=helps[name])
        _common(sub)
        if name in ("worker", "api", "poller", "ecs-worker"):
            sub.add_argument("--name", default=name, help="process name (pid and in-flight files)")
        if name == "poller":
            sub.add_argument(
                "--replica", type=int, default=0, help="which of each shard group's pollers it runs (0, 1)"
            )
    __import__("local.chaos.cli").chaos.cli.register(verbs)  # `punctual-local chaos ...`: local/chaos/cli.py
    return parser


def config_from(args: argparse.Namespace) -> LocalConfig:
    overrides: dict[str, Any] = {
        key: getattr(args, key, None)
        for key in (
            "state_dir",
            "cache_dir",
            "aws_port",
            "api_port",
            "receiver_port",
            "shard_count",
            "near_shard_count",
            "lease_s",
            "template",
            "log_level",
            "moto_patch",
            "stale_reads_s",
            "transaction_conflicts",
            "workers",
            "ecs_workers",
            "api_processes",
            "attach_aws",
            "name_prefix",
            "table_transactions",
            "tick_cadence_s",
            "warm_burst_workers",
            "event_source_workers_max",
        )
    }
    if getattr(args, "json_logs", False):
        overrides["json_logs"] = True
    settings = getattr(args, "settings", None) or []
    if settings:
        extra = dict(LocalConfig.from_env().extra)
        for item in settings:
            name, sep, value = item.partition("=")
            if not sep or not name.startswith("PUNCTUAL_"):
                raise LocalModeError(f"--set {item!r}: expected PUNCTUAL_NAME=VALUE")
            if (unknown := unknown_variable(name)) is not None:
                raise LocalModeError(f"--set {item!r}: {unknown}")
            extra[name] = value
        overrides["extra"] = extra
    # A private --state-dir still shares the default template cache (tests rely on it).
    return checked(LocalConfig.from_env(**overrides))


# The option that sets a variable of chosen_settings (else --set did).
_SETTING_OPTIONS = {
    "PUNCTUAL_SHARD_COUNT": "--shards",
    "PUNCTUAL_NEAR_SHARD_COUNT": "--near-shards",
    "PUNCTUAL_LEASE_S": "--lease-s",
    "PUNCTUAL_AUDIT_GRACE_S": "PUNCTUAL_LOCAL_AUDIT_GRACE_S",
}


def checked(config: LocalConfig) -> LocalConfig:
    """``config``, once what it gives every function is one the settings model accepts: a value it
    refuses is one line and exit 2 here, before anything starts (it was a traceback in every
    component, restarted again and again, and a start that never ended)."""
    from local.resources import chosen_settings
    from punctual.runtime.settings import Settings, SettingsError

    config.check()
    try:
        Settings.from_env(chosen_settings(config))
    except SettingsError as exc:
        variable = str(exc).partition(":")[0]
        source = "--set" if variable in config.extra else _SETTING_OPTIONS.get(variable, "--set")
        raise LocalModeError(f"{source}: {exc}") from None
    return config


def _component(name: str) -> Callable[..., None]:
    if name == "aws":
        from local import aws_server

        return aws_server.run
    if name == "api":
        from local import api

        return api.run
    if name == "poller":
        from local import poller

        return poller.run
    if name == "worker":
        from local import event_source as worker

        return worker.run
    if name == "ecs-worker":
        from local import ecs_worker

        return ecs_worker.run
    if name == "auditor":
        from local import auditor

        return auditor.run
    from local import receiver

    return receiver.run


def run_component(args: argparse.Namespace) -> int:
    from local.component import run_component as run

    config = config_from(args)
    body = _component(args.command)
    if args.command in ("worker", "api"):
        name = args.name
        return run(name, lambda cfg, stop: body(cfg, stop, name=name), config)
    if args.command == "poller":
        name, replica = args.name, args.replica
        return run(name, lambda cfg, stop: body(cfg, stop, name=name, replica=replica), config)
    if args.command == "ecs-worker":
        return run(args.name, body, config)
    return run(args.command, body, config)


def _ports(config: LocalConfig) -> LocalConfig:
    """Free ports for 0; the default AWS and receiver ports move aside when taken (the API's does not,
    nor a port given)."""
    aws_port = config.aws_port
    receiver_port = config.receiver_port
    if config.attach_aws:  # another Region: AWS and the receiver are the first Region's, running
        if not (aws_port and port_in_use(aws_port)):
            raise LocalModeError(f"--attach-aws: nothing listens on --aws-port {aws_port}")
    else:
        aws_port = _own_port(aws_port, LocalConfig.aws_port, "--aws-port")
        receiver_port = _own_port(receiver_port, LocalConfig.receiver_port, "--receiver-port")
    api_port = _own_port(config.api_port, None, "--api-port")
    return replace(config, aws_port=aws_port, api_port=api_port, receiver_port=receiver_port)


def _own_port(port: int, default: int | None, option: str) -> int:
    """``port``, or a free one for 0 or for the default when it is taken; a port asked for that is
    taken is refused (QA22: it was swapped for a random one, so what was pointed at it, a webhook or
    ``AWS_ENDPOINT_URL``, reached the other local mode listening there)."""
    if port == 0 or (port == default and port_in_use(port)):
        return free_port()
    if port_in_use(port):
        raise LocalModeError(  # (QA31: make run had no way to pass the option)
            f"port {port} is taken (is local mode already running?): use another {option}"
            f" (make run RUN_ARGS='{option} N')"
        )
    return port


def prepare_zygote(argv: Sequence[str]) -> str:
    """A zygote's preparation (:mod:`local.zygote`): what the component's own start does before it
    runs (logging, the deployment, the environment); answers the component's verb."""
    from local.component import configure_logging, prepare

    args = build_parser().parse_args(argv)
    config = config_from(args)
    configure_logging(config)
    prepare(config)
    return str(args.command)


def with_demo_console(config: LocalConfig, demo: bool) -> LocalConfig:
    """With the demo on, a bare ``/console`` shows the demo's tenant (it showed the empty ``default``)."""
    if not demo or "PUNCTUAL_CONSOLE_TENANT" in config.extra:
        return config
    from local.demo import DEMO_TENANT

    return replace(config, extra={**config.extra, "PUNCTUAL_CONSOLE_TENANT": DEMO_TENANT})


def refuse_if_running(config: LocalConfig) -> None:
    """Refuse to start over a live supervisor of the same state directory; forget a dead one's pid
    file. A supervisor killed with ``kill -9`` (a Region lost whole) whose parent has not reaped it
    is a zombie: dead, so local mode starts again (``os.kill(pid, 0)`` alone took it for live)."""
    existing = config.pid_file("supervisor")
    if not existing.exists():
        return
    text = existing.read_text().strip()
    # (a live process that started after the file was written only got the dead supervisor's pid)
    if text.isdigit() and alive(int(text)) and not started_after(int(text), existing.stat().st_mtime):
        raise LocalModeError(f"local mode is already running from {config.state_dir} (pid {text})")
    existing.unlink(missing_ok=True)


def _off_the_terminal() -> None:
    """After a hang-up, output to the terminal (or a pipe to a program of it, ``| tee``) fails with
    EIO or EPIPE, and the supervisor died of it mid-stop: what went there but to a file goes nowhere
    now (the log file under the state directory keeps it), so that the stop goes on to save AWS's
    state. (``isatty`` is no test: a hung-up terminal answers it False.)"""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.dup2(devnull, fd)
    os.close(devnull)


def up(args: argparse.Namespace) -> int:
    from local.demo import run_up

    config = with_demo_console(_ports(config_from(args)), args.demo)
    refuse_if_running(config)
    from local.aws_state import STATE_FILE, refuse_other_layout

    if args.fresh:
        (config.state_dir / STATE_FILE).unlink(missing_ok=True)
    else:
        refuse_other_layout(config.state_dir / STATE_FILE, config.shard_count, config.near_shard_count)
    stop_requested: list[float] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            _off_the_terminal()
        # (a hang-up is no second Ctrl-C: a window closed after one cut the clean stop short)
        if signum != signal.SIGHUP and stop_requested and time.monotonic() - stop_requested[0] > 1.0:
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting for a clean stop
        stop_requested.append(time.monotonic())

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # the terminal closed: a clean stop too, AWS state saved; unless started to outlive it (nohup:
    # the hang-up ignored, as before e07fae9, and as it asked)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, on_signal)
    return run_up(
        config,
        demo=args.demo,
        duration_s=args.duration,
        show_table=args.table,
        stop_requested=lambda: bool(stop_requested),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            return up(args)
        return run_component(args)
    except LocalModeError as exc:
        sys.stderr.write(f"punctual-local: error: {exc}\n")
        return 2
