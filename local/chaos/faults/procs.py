"""The processes a chaos run starts beside local mode, and how it restarts and kills them.

``python -m local.chaos.faults.procs poller|worker|ecs-worker --name N ...`` runs a local-mode
component (the same :mod:`local.poller`, :mod:`local.event_source` or :mod:`local.ecs_worker` the
supervisor runs) under its own name, so its pid and in-flight files do not collide with the
supervised ones, with two faults the supervised processes do not get:

``--clock-offset S``
    ``PUNCTUAL_CLOCK_OFFSET_S``: every clock read of the core in this process is S seconds
    off (a poller on the same shard group whose clock disagrees with the others).
``--throttle-rate R``
    every DynamoDB and SQS client the process makes (the core's, local mode's event source
    mapping, the worker's) answers a share R of its requests with the service's throttling
    error under botocore's retry layer (:func:`local.chaos.faults.throttle.install_throttling`,
    seeded per client), and appends each to ``<fault-log-dir>/faults-<pid>.jsonl``.

The chaos driver keeps each one running (:class:`ChaosProcess`), restarting it after it
dies, as the supervisor does for local mode's own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from local.component import SUPERVISED_ENV
from local.harness import stop_group

COMPONENTS = ("poller", "worker", "ecs-worker")
RESTART_AFTER_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local.chaos.faults.procs")
    parser.add_argument("component", choices=COMPONENTS)
    parser.add_argument("--name", required=True, help="process name: pid and in-flight files")
    parser.add_argument("--state-dir", type=Path, required=True, help="local mode's state directory")
    parser.add_argument("--aws-port", type=int, required=True)
    parser.add_argument("--api-port", type=int, required=True)
    parser.add_argument("--receiver-port", type=int, required=True)
    parser.add_argument("--lease-s", type=int, default=0, help="0: the deployment's lease")
    parser.add_argument("--clock-offset", type=float, default=0.0)
    parser.add_argument("--throttle-rate", type=float, default=0.0)
    parser.add_argument("--throttle-seed", type=int, default=0)
    parser.add_argument("--fault-log-dir", default="")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from local.component import run_component
    from local.config import LocalConfig

    config = LocalConfig.from_env(
        state_dir=args.state_dir,
        aws_port=args.aws_port,
        api_port=args.api_port,
        receiver_port=args.receiver_port,
        lease_s=args.lease_s,
    )
    if args.clock_offset:
        os.environ["PUNCTUAL_CLOCK_OFFSET_S"] = str(args.clock_offset)
    if args.throttle_rate > 0:
        from local.chaos.faults.throttle import install_throttling

        install_throttling(args.throttle_rate, args.throttle_seed, args.fault_log_dir or None)
    name = str(args.name)
    body: Callable[..., None]
    if args.component == "poller":
        from local import poller

        body = poller.run
    elif args.component == "worker":
        from local import event_source as worker

        def body(cfg: LocalConfig, stop: threading.Event) -> None:
            worker.run(cfg, stop, name=name)
    else:
        from local import ecs_worker

        body = ecs_worker.run
    return run_component(name, body, config)


class ChaosProcess:
    """One extra process: started, watched, restarted after it dies, killed at the end.

    Each runs in its own process group (teardown kills the group) and with
    ``PUNCTUAL_LOCAL_SUPERVISED=1``, so it exits by itself if the chaos driver disappears.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = {**env, SUPERVISED_ENV: "1", "PYTHONUNBUFFERED": "1"}
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.restarts = 0
        self.dead_since: float | None = None
        self.stopped = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        with self._lock:
            if self.stopped:
                return
            with self.log.open("ab") as sink:
                self.process = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            self.started_at = time.monotonic()
            self.dead_since = None

    def check(self) -> bool:
        """Restart the process if it died a moment ago; True when it was restarted."""
        if self.stopped or self.running():
            return False
        now = time.monotonic()
        if self.dead_since is None:
            self.dead_since = now
            return False
        if now - self.dead_since < RESTART_AFTER_S:
            return False
        self.restarts += 1
        self.start()
        return True

    def kill9(self) -> int | None:
        """SIGKILL the process itself (not its group: it has no children); returns its pid."""
        with self._lock:
            process = self.process
            if process is None or process.poll() is not None:
                return None
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            return process.pid

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM its group, wait, then SIGKILL what is left. Never restarts again."""
        with self._lock:
            self.stopped = True
            process = self.process
        if process is not None:
            stop_group(process, timeout_s)


def procs_argv(component: str, name: str, options: dict[str, Any]) -> list[str]:
    """The command line of one extra process."""
    argv = [sys.executable, "-m", "local.chaos.faults.procs", component, "--name", name]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


if __name__ == "__main__":
    sys.exit(main())
