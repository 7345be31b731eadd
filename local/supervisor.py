"""The supervisor: each component its own OS process, restarted when it dies, one log stream.

Children run ``python -m local <component>`` in the supervisor's process group with
``PUNCTUAL_LOCAL_SUPERVISED=1``: they ignore the terminal's Ctrl-C (the supervisor stops
them in order with SIGTERM: pollers and API first, workers next, AWS last, so nothing
loses its table half-way through a drain), and they exit by themselves if the
supervisor is killed. A child that exits while the supervisor runs is restarted after
a back-off (0.5 s, doubling to 10 s; back to 0.5 s once it ran a minute).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import Empty, Queue

from local.component import SUPERVISED_ENV
from local.config import LocalConfig
from local.logs import Entry, LogSink, parse_line

RESTART_MIN_S = 0.5
RESTART_MAX_S = 10.0
HEALTHY_AFTER_S = 60.0


@dataclass(frozen=True)
class ComponentSpec:
    """A component: its process name, its ``punctual-local`` verb and arguments, when it stops."""

    name: str
    args: tuple[str, ...]
    stop_stage: int  # lower stops first
    stop_timeout_s: float = 10.0


def default_components(config: LocalConfig) -> list[ComponentSpec]:
    """The whole system: what ``punctual-local up`` runs."""
    specs = [
        ComponentSpec("aws", ("aws",), 4),
        ComponentSpec("receiver", ("receiver",), 3),
        ComponentSpec("api", ("api",), 0),
        ComponentSpec("poller", ("poller",), 0),
        ComponentSpec("ecs-worker", ("ecs-worker",), 1, stop_timeout_s=20.0),
    ]
    for index in range(2, config.api_processes + 1):
        specs.append(ComponentSpec(f"api-{index}", ("api", "--name", f"api-{index}"), 0))
    for index in range(1, config.workers + 1):
        specs.append(ComponentSpec(f"worker-{index}", ("worker", "--name", f"worker-{index}"), 1))
    return specs


@dataclass
class Child:
    spec: ComponentSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = RESTART_MIN_S
    restart_at: float | None = None
    reader: threading.Thread | None = None
    exits: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class Supervisor:
    """Starts, watches, restarts and stops the components.

    Parameters
    ----------
    config
        Passed to every child through ``PUNCTUAL_LOCAL_*`` variables.
    specs
        The components to run.
    sink
        Where every line of every child goes.
    """

    def __init__(self, config: LocalConfig, specs: list[ComponentSpec], sink: LogSink) -> None:
        self.config = config
        self.children = {spec.name: Child(spec) for spec in specs}
        self.sink = sink
        self.lines: Queue[Entry] = Queue()
        self.stopping = False
        self.on_restart: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ processes

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.config.to_env())
        env[SUPERVISED_ENV] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("AWS_ENDPOINT_URL", None)  # each child sets its own, to this run's moto
        return env

    def _spawn(self, child: Child) -> None:
        argv = [sys.executable, "-m", "local", *child.spec.args]
        child.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self._env(),
            close_fds=True,
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        child.reader = threading.Thread(
            target=self._read,
            args=(child.spec.name, child.process),
            name=f"log-{child.spec.name}",
            daemon=True,
        )
        child.reader.start()

    def _read(self, name: str, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            self.lines.put(parse_line(name, raw.decode("utf-8", "replace")))
        process.stdout.close()

    def start(self) -> None:
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.config.pid_file("supervisor").write_text(f"{os.getpid()}\n")
        for child in self.children.values():
            self._spawn(child)
            self.sink.info(f"started {child.spec.name} (pid {child.pid})")

    def check(self) -> None:
        """Restart what died (call often); never while stopping."""
        now = time.monotonic()
        for child in self.children.values():
            if self.stopping or child.process is None:
                continue
            code = child.process.poll()
            if code is None:
                if now - child.started_at >= HEALTHY_AFTER_S:
                    child.backoff_s = RESTART_MIN_S
                continue
            if child.restart_at is None:
                child.exits.append(describe_exit(code))
                child.restart_at = now + child.backoff_s
                exited = f"{child.spec.name} (pid {child.pid}) {describe_exit(code)}"
                self.sink.warning(f"{exited}; restarting in {child.backoff_s:.1f}s")
                child.backoff_s = min(child.backoff_s * 2, RESTART_MAX_S)
            elif now >= child.restart_at:
                self._spawn(child)
                child.restarts += 1
                self.sink.info(f"restarted {child.spec.name} (pid {child.pid}, restart {child.restarts})")
                for callback in self.on_restart:
                    callback(child.spec.name)

    def pump(self, timeout_s: float = 0.1) -> None:
        """Write the lines the children printed (waits up to ``timeout_s`` for the first)."""
        try:
            entry = self.lines.get(timeout=timeout_s)
        except Empty:
            return
        self.sink.write(entry)
        while True:
            try:
                self.sink.write(self.lines.get_nowait())
            except Empty:
                return

    def stop(self) -> None:
        """Stop every child in stages (SIGTERM, then SIGKILL after its timeout)."""
        self.stopping = True
        for stage in sorted({c.spec.stop_stage for c in self.children.values()}):
            group = [c for c in self.children.values() if c.spec.stop_stage == stage and c.running]
            for child in group:
                assert child.process is not None
                child.process.send_signal(signal.SIGTERM)
            for child in group:
                assert child.process is not None
                deadline = time.monotonic() + child.spec.stop_timeout_s
                while child.process.poll() is None and time.monotonic() < deadline:
                    self.pump(0.05)
                if child.process.poll() is None:
                    self.sink.warning(
                        f"{child.spec.name} did not stop in {child.spec.stop_timeout_s:.0f}s: killing it"
                    )
                    child.process.kill()
                    child.process.wait()
                self.sink.info(f"stopped {child.spec.name} ({describe_exit(child.process.returncode)})")
        for child in self.children.values():
            if child.reader is not None:
                child.reader.join(timeout=2)
        self.pump(0)
        with contextlib.suppress(OSError):
            self.config.pid_file("supervisor").unlink()

    def pids(self) -> dict[str, int | None]:
        return {name: child.pid for name, child in self.children.items()}
