"""The supervisor: each component its own OS process, restarted when it dies, one log stream.

Children run ``python -m local <component>`` in the supervisor's process group with
``PUNCTUAL_LOCAL_SUPERVISED=1``: they ignore the terminal's Ctrl-C (the supervisor stops
them in order with SIGTERM: pollers and API first, workers next, AWS last, so nothing
loses its table half-way through a drain), and they exit by themselves if the
supervisor is killed. The webhook receiver and AWS ignore a SIGTERM sent to the whole group
too (``timeout``, ``kill -- -PGID``): the supervisor stops them, last, with SIGUSR1
(ComponentSpec.ordered_stop). A child that exits while the supervisor runs is restarted after
a back-off (0.5 s, doubling to 10 s; back to the first delay once it ran a minute), except
where the cloud's figure differs: the deployed state machine retries a poller that died
(``Runtime.ExitError``) at once, with the delays of its poller task's retriers (1 s, then x1.5
up to 2 s by default), and local mode restarts its poller processes (``poller``, ``poller-2``:
each runs one of every shard group's two pollers) with the same delays, read from the
deployment (``poller_retry``, from the template), beyond the retriers' attempts keeping to
their longest delay (the next minute's execution would start afresh); a worker Lambda process
is restarted at once (the event source mapping invokes another environment as soon as it has
messages). An ECS worker is replaced after a second: a service replaces a stopped task in
about a minute, but it runs several (``ecsReadyTasks``, 2, while ECS-lane slots are due), and
local mode runs as many (``ecs-worker``, ``ecs-worker-2``), the restarted one standing for a task
that was already running. Each is
started by forking its zygote (ComponentSpec.warm, local.zygote: a process kept imported and
prepared), as the Lambda service keeps idle environments: a restart costs its delay, not a cold
start.

Burst workers: the supervisor also obeys the predictive-scaling planner (:mod:`local.scaling`,
run in the poller process): it starts ``burst-1``, ``burst-2``, ... worker processes when the
planner asks for them ahead of a burst, and stops the highest-numbered ones (SIGTERM, then
SIGKILL after their stop timeout; one still working a batch is let finish it, within the worker
function's timeout, as the event source mapping never cuts an invocation short) when it scales
back. A burst worker that dies while wanted is
restarted like any component; one scaled back is forgotten once it has exited. Each ``burst-N`` is
forked from a zygote of its own, started with the supervisor (``burst_workers_max`` of them,
kept imported and prepared while no burst is planned): a burst worker polls within a second or
two of the decision, not after a cold start of imports and clients that a busy machine
stretches to half a minute (the 3-Region chaos run's late burst minute, issue 35). Its lines are
named by the zygote that forked it (``burst-N``) like the standing components'.

The supervisor also scales as the event source mapping does on its own: while every worker
process has been working one batch for a second (a slow target holds its batch), one more
burst worker starts (:class:`local.scaling.ReactiveWorkers`), so one tenant's slow runs do not
hold back every other slot; they go again once no worker has held a batch for a while.
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

from local.aws_state import STOPPED_IN_ORDER
from local.component import (
    ORDERED_STOP_ENV,
    ORDERED_STOP_SIGNAL,
    STARTED_ENV,
    SUPERVISED_ENV,
    read_deployment,
)
from local.config import LocalConfig, alive
from local.logs import Entry, LogSink, parse_line
from local.retriers import PROCESS_EXITED, retrier_for, retriers_from
from local.scaling import BURST_PREFIX, BUSY_S, ReactiveWorkers, desired_burst_workers
from local.zygote import PREFIX as ZYGOTE_PREFIX
from local.zygote import ZYGOTE_ENV, Forked, fork_line

SCALE_CHECK_S = 0.5  # how often the desired burst workers are read
DEFAULT_BATCH_ALLOWANCE_S = 900.0  # a scaled-back worker's batch, when the deployment is unknown
KILLED_WAIT_S = 3.0  # after SIGKILL, for its exit to be seen (its zygote reports it within 0.2 s)
ZYGOTE_STOP_S = 5.0  # the zygotes, stdin closed, all together

# A burst worker's zygote that exited is started again (prepared before the next burst) this long
# after it last started: a zygote that cannot start is not retried in a tight loop.
ZYGOTE_RETRY_S = 10.0
RESTART_MIN_S = 0.5
RESTART_MAX_S = 10.0
HEALTHY_AFTER_S = 60.0

# How long to wait before the n-th restart in a row (1-based) of a component.
RestartDelay = Callable[[int], float]


def supervisor_backoff_s(restart: int) -> float:
    """The default: 0.5 s, doubling, at most 10 s."""
    return float(min(RESTART_MIN_S * 2 ** (restart - 1), RESTART_MAX_S))


def lambda_restart_s(restart: int) -> float:
    """A worker Lambda "container" that died is replaced at once: the event source mapping
    invokes another execution environment as soon as it has messages (its cold start is the
    process's start here)."""
    return 0.0


def ecs_worker_name(index: int) -> str:
    """The ``index``-th ECS worker's process name (from 1): ``ecs-worker``, ``ecs-worker-2``, ..."""
    return "ecs-worker" if index == 1 else f"ecs-worker-{index}"


def ecs_restart_s(restart: int) -> float:
    """An ECS worker: a service runs several tasks, and another takes a dead one's messages as
    they come back (within their lease); local mode runs as many, and forks a dead one again from
    its zygote after a second (a replacement Fargate task takes about a minute to start)."""
    return 1.0


def state_machine_backoff(config: LocalConfig) -> RestartDelay:
    """Restart delays of the poller: the state machine's retrier for a poller that died.

    Read from the deployment when a restart is due (the ``aws`` component writes it from the
    template); the supervisor's own back-off while there is none.
    """

    def delay_s(restart: int) -> float:
        deployment = read_deployment(config)
        retriers = retriers_from(deployment.poller_retry) if deployment is not None else []
        retrier = retrier_for(retriers, PROCESS_EXITED)
        if retrier is None:
            return supervisor_backoff_s(restart)
        return retrier.delay_s(restart)

    return delay_s


@dataclass(frozen=True)
class ComponentSpec:
    """A component: its process name, its ``punctual-local`` verb and arguments, when it stops.

    ``restart_delay`` gives the wait before its n-th restart in a row (default: the
    supervisor's back-off).
    """

    name: str
    args: tuple[str, ...]
    stop_stage: int  # lower stops first
    stop_timeout_s: float = 10.0
    restart_delay: RestartDelay = supervisor_backoff_s
    # Started by forking a zygote kept prepared (local.zygote): the Lambda service's idle execution
    # environment, so that a restart costs its delay, not a cold start (seconds of imports).
    warm: bool = False
    # Stopped by the supervisor alone, with ORDERED_STOP_SIGNAL: it ignores the process group's
    # SIGTERM and SIGINT (local.component.stopped_in_order). AWS, which every other component needs.
    ordered_stop: bool = False


def default_components(config: LocalConfig) -> list[ComponentSpec]:
    """The whole system: what ``punctual-local up`` runs."""
    specs = [
        ComponentSpec("aws", ("aws",), 4, ordered_stop=True),
        # (the webhooks' receiver: the workers' runs still call it while they drain)
        *([] if config.attach_aws else [ComponentSpec("receiver", ("receiver",), 3, ordered_stop=True)]),
        ComponentSpec("api", ("api",), 0),
        ComponentSpec("poller", ("poller",), 0, restart_delay=state_machine_backoff(config), warm=True),
        ComponentSpec("auditor", ("auditor",), 0),
    ]
    for replica in range(1, config.pollers):  # each shard group's other pollers, in processes of their own
        name = f"poller-{replica + 1}"
        args = ("poller", "--name", name, "--replica", str(replica))
        specs.append(ComponentSpec(name, args, 0, restart_delay=state_machine_backoff(config), warm=True))
    for index in range(2, config.api_processes + 1):
        specs.append(ComponentSpec(f"api-{index}", ("api", "--name", f"api-{index}"), 0))
    for index in range(1, config.ecs_workers + 1):
        name = ecs_worker_name(index)
        specs.append(
            ComponentSpec(
                name,
                ("ecs-worker", "--name", name),
                1,
                stop_timeout_s=20.0,
                restart_delay=ecs_restart_s,
                warm=True,
            )
        )
    for index in range(1, config.workers + 1):
        name = f"worker-{index}"
        specs.append(
            ComponentSpec(name, ("worker", "--name", name), 1, restart_delay=lambda_restart_s, warm=True)
        )
    return specs


@dataclass
class Zygote:
    """A warm component's zygote (local.zygote) as the supervisor holds it: the process, and the
    children it forked (by pid once it said which; ``pending`` in the order they were asked for)."""

    process: subprocess.Popen[bytes] | None = None
    forks: dict[int, Forked] = field(default_factory=dict)
    pending: list[Forked] = field(default_factory=list)
    started_at: float = 0.0  # supervisor clock

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Child:
    spec: ComponentSpec
    process: subprocess.Popen[bytes] | Forked | None = None
    started_at: float = 0.0
    restarts: int = 0
    failures_in_a_row: int = 0  # exits since it last ran HEALTHY_AFTER_S
    restart_at: float | None = None
    reader: threading.Thread | None = None
    exits: list[str] = field(default_factory=list)
    retiring_until: float | None = None  # a burst worker scaled back: SIGTERM sent, gone by then
    # A warm component's (ComponentSpec.warm); a burst worker's outlives it (Supervisor.burst_zygotes)
    zygote: Zygote = field(default_factory=Zygote)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _burst_index(name: str) -> int:
    return int(name.removeprefix(BURST_PREFIX))


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def _supervisor_stops_it() -> None:
    """A child's signals from its exec on (``preexec_fn``): the terminal's Ctrl-C and a closed
    terminal's SIGHUP, which reach the whole group, are the supervisor's to act on (it stops its
    children in order). ``local/__main__`` ignores them too, but only once the interpreter has
    imported its site packages: a Ctrl-C in that second killed every process just started with
    ``Fatal Python error: init_import_site`` and a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _ordered_stop_only() -> None:
    """As :func:`_supervisor_stops_it`, and the group's SIGTERM too (ComponentSpec.ordered_stop)."""
    _supervisor_stops_it()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


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
        self.clock: Callable[[], float] = time.monotonic
        self._next_scale_at = 0.0
        self._forks_lock = threading.Lock()
        # burst-N's zygote, started with the supervisor so that a burst worker starts warm
        self.burst_zygotes: dict[str, Zygote] = {}
        self.reactive = ReactiveWorkers(config)  # the event source's own scaling (local.scaling)

    # ------------------------------------------------------------------ processes

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.config.to_env())
        env[SUPERVISED_ENV] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("AWS_ENDPOINT_URL", None)  # each child sets its own, to this run's moto
        return env

    def _popen(self, child: Child, zygote: bool = False) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "local", *child.spec.args]
        env = self._env()
        if zygote:
            env[ZYGOTE_ENV] = "1"
        else:
            env[STARTED_ENV] = f"{time.time():.3f}"
        if child.spec.ordered_stop:
            env[ORDERED_STOP_ENV] = "1"
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if zygote else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            close_fds=True,
            preexec_fn=_ordered_stop_only if child.spec.ordered_stop else _supervisor_stops_it,
        )
        reader = threading.Thread(
            target=self._read,
            args=(child.spec.name, process, child.zygote if zygote else None),
            name=f"log-{child.spec.name}",
            daemon=True,
        )
        reader.start()
        if not zygote:
            child.reader = reader
        return process

    def _spawn(self, child: Child) -> None:
        child.process = self._fork(child) if child.spec.warm else self._popen(child)
        child.started_at = self.clock()
        child.restart_at = None

    def _fork(self, child: Child) -> Forked | subprocess.Popen[bytes]:
        """A warm start: ask the component's zygote for a child (the zygote started first when it
        is not running); a cold start when it cannot be asked."""
        zygote = child.zygote
        if not zygote.running:
            zygote.process = self._popen(child, zygote=True)
        assert zygote.process is not None
        forked = Forked(zygote.process.pid)
        with self._forks_lock:
            zygote.pending.append(forked)  # the zygote's next "forked" line names it
        try:
            assert zygote.process.stdin is not None
            zygote.process.stdin.write(fork_line(time.time()))
            zygote.process.stdin.flush()
        except (OSError, AssertionError):
            with self._forks_lock:
                zygote.pending.remove(forked)
            return self._popen(child)
        return forked

    def _zygote_said(self, zygote: Zygote, words: list[str]) -> None:
        """``forked PID`` or ``exited PID CODE``, from a component's zygote."""
        with self._forks_lock:
            if words[0] == "forked" and zygote.pending:
                forked = zygote.pending.pop(0)
                forked.forked(int(words[1]))
                zygote.forks[int(words[1])] = forked
            elif words[0] == "exited":
                exited = zygote.forks.pop(int(words[1]), None)
                if exited is not None:
                    exited.exited(int(words[2]))

    def _read(self, name: str, process: subprocess.Popen[bytes], zygote_of: Zygote | None = None) -> None:
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            text = raw.decode("utf-8", "replace")
            if zygote_of is not None and text.startswith(ZYGOTE_PREFIX):
                self._zygote_said(zygote_of, text[len(ZYGOTE_PREFIX) :].split())
                continue
            self.lines.put(parse_line(name, text))
        process.stdout.close()
        if zygote_of is not None:  # the zygote is gone: its children it never reported are too
            with self._forks_lock:
                for forked in [*zygote_of.forks.values(), *zygote_of.pending]:
                    if forked.returncode is None and (forked.pid is None or not alive(forked.pid)):
                        forked.exited(-signal.SIGKILL)

    def start(self) -> None:
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.config.pid_file("supervisor").write_text(f"{os.getpid()}\n")
        # An earlier run's mark, cleared before AWS starts: AWS no longer clears it itself, so a
        # stop asked for while it still started (Ctrl-C in make run's first seconds), marked before
        # its signal, is not unmarked by its start, and the state it loads is saved again. (It
        # loaded, removing the file, and then saved nothing: every job was gone.)
        (self.config.run_dir / STOPPED_IN_ORDER).unlink(missing_ok=True)
        for child in self.children.values():
            self._spawn(child)
            how = "forked from its zygote" if child.spec.warm else f"pid {child.pid}"
            self.sink.info(f"started {child.spec.name} ({how})")
        if self.config.warm_burst_workers:
            for index in range(1, self.config.burst_workers_max + 1):  # warm before any burst
                self._burst_zygote(f"{BURST_PREFIX}{index}")

    # ------------------------------------------------------------------ burst workers

    def burst_spec(self, name: str) -> ComponentSpec:
        """``burst-N``: one more worker Lambda process, forked from its own zygote (unless
        ``warm_burst_workers`` is off)."""
        warm = self.config.warm_burst_workers
        return ComponentSpec(name, ("worker", "--name", name), 1, restart_delay=lambda_restart_s, warm=warm)

    def _burst_zygote(self, name: str) -> Zygote:
        """``name``'s zygote, started (prepared and imported, no child yet) when it is not running."""
        zygote = self.burst_zygotes.setdefault(name, Zygote())
        if not zygote.running:
            zygote.process = self._popen(Child(self.burst_spec(name), zygote=zygote), zygote=True)
            zygote.started_at = self.clock()
        return zygote

    def _keep_burst_zygotes(self, now: float) -> None:
        """Start again a burst worker's zygote that exited (it crashed, or was killed), so that the
        next burst forks a prepared process rather than waiting for a cold one."""
        for name, zygote in self.burst_zygotes.items():
            if not zygote.running and now - zygote.started_at >= ZYGOTE_RETRY_S:
                self.sink.warning(f"{name}'s zygote exited: starting it again")
                self._burst_zygote(name)

    def scale(self) -> None:
        """Start or stop ``burst-N`` worker processes to match what the planner asks for
        (:mod:`local.scaling`); the standing components are never touched."""
        now = self.clock()
        if self.stopping or now < self._next_scale_at:
            return
        self._next_scale_at = now + SCALE_CHECK_S
        self._keep_burst_zygotes(now)
        active = [
            c for c in self.children.values() if c.spec.name.startswith(BURST_PREFIX) and not c.retiring_until
        ]
        planned = desired_burst_workers(self.config)
        wanted = max(planned, self._reactive_wanted(active, now))
        index = 1
        # Names past the most burst workers there may be are never used: one still finishing its
        # batch after a scale-back keeps its name (review: a scale-up meanwhile started burst-3,
        # past the maximum, from a cold zygote then kept for good).
        most = max(self.config.burst_workers_max, self.reactive.config.event_source_workers_max)
        while len(active) < wanted and index <= most:
            name = f"{BURST_PREFIX}{index}"
            index += 1
            if name in self.children:
                continue
            spec = self.burst_spec(name)
            child = Child(spec, zygote=self._burst_zygote(name)) if spec.warm else Child(spec)
            self.children[name] = child
            self._spawn(child)
            active.append(child)
            how = "forked from its zygote" if spec.warm else f"pid {child.pid}"
            self.sink.info(f"started {name} ({how}): burst workers {len(active) - 1} -> {len(active)}")
        for child in sorted(active, key=lambda c: _burst_index(c.spec.name))[wanted:]:
            if child.process is not None and child.running:
                child.process.send_signal(signal.SIGTERM)
            child.retiring_until = now + child.spec.stop_timeout_s
            self.sink.info(
                f"stopping {child.spec.name} (pid {child.pid}): burst workers scaled back to {wanted}"
            )

    def _reactive_wanted(self, active: list[Child], now: float) -> int:
        """What the event source's own scaling asks for (:class:`local.scaling.ReactiveWorkers`)."""
        workers = [
            c.spec.name
            for c in self.children.values()
            if c.running and not c.retiring_until and c.spec.args[:1] == ("worker",)
        ]
        before = self.reactive.wanted
        wanted = self.reactive.decide(workers, sum(1 for c in active if c.running), now, time.time())
        if wanted > before:
            self.sink.info(f"every worker has been busy {BUSY_S:.0f} s with a batch: one more worker")
        return wanted

    def _retire(self, child: Child, now: float) -> bool:
        """A scaled-back burst worker: True once it is gone (and forgotten)."""
        if child.process is not None and child.process.poll() is None:
            overdue = child.retiring_until is not None and now >= child.retiring_until
            if overdue and not self._finishing_batch(child, now):
                child.process.kill()  # did not stop in time
            return False
        self.children.pop(child.spec.name, None)
        self.sink.info(f"stopped {child.spec.name} (scaled back)")
        return True

    def _finishing_batch(self, child: Child, now: float) -> bool:
        """A scaled-back burst worker still working a batch (its in-flight file): the event source
        mapping's scaling never cuts an invocation short, so it is given up to the worker function's
        timeout past its stop timeout to finish (killed mid-run, its slot's run was lost: a lease
        lapse, ``TIMED_OUT``, and with one attempt the slot failed)."""
        if child.retiring_until is None or not self.config.inflight_file(child.spec.name).exists():
            return False
        deployment = read_deployment(self.config)
        allowance = deployment.worker_timeout_s if deployment is not None else DEFAULT_BATCH_ALLOWANCE_S
        return now < child.retiring_until + allowance

    def check(self) -> None:
        """Restart what died (call often); never while stopping. Scale the burst workers."""
        self.scale()
        now = self.clock()
        for child in list(self.children.values()):
            if child.retiring_until is not None and not self.stopping:
                self._retire(child, now)
                continue
            if self.stopping or child.process is None:
                continue
            code = child.process.poll()
            if code is None:
                if now - child.started_at >= HEALTHY_AFTER_S:
                    child.failures_in_a_row = 0
                continue
            if child.restart_at is None:
                child.exits.append(describe_exit(code))
                if now - child.started_at >= HEALTHY_AFTER_S:
                    child.failures_in_a_row = 0  # it ran long enough: a fresh start
                child.failures_in_a_row += 1
                delay_s = child.spec.restart_delay(child.failures_in_a_row)
                child.restart_at = now + delay_s
                exited = f"{child.spec.name} (pid {child.pid}) {describe_exit(code)}"
                self.sink.warning(f"{exited}; restarting in {delay_s:.1f}s")
            elif now >= child.restart_at:
                self._spawn(child)
                child.restarts += 1
                how = ", forked from its zygote" if child.spec.warm else f", pid {child.pid}"
                self.sink.info(f"restarted {child.spec.name} (restart {child.restarts}{how})")
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
            if all(c in group or not c.running for c in self.children.values()):
                # The last to stop (AWS): nothing else writes now, so its state may be kept
                (self.config.run_dir / STOPPED_IN_ORDER).touch()
            signalled = time.monotonic()
            for child in group:
                assert child.process is not None
                child.process.send_signal(ORDERED_STOP_SIGNAL if child.spec.ordered_stop else signal.SIGTERM)
            for child in group:  # each one's timeout counts from the signal: they stop side by side
                assert child.process is not None
                deadline = signalled + child.spec.stop_timeout_s
                while child.process.poll() is None and time.monotonic() < deadline:
                    self.pump(0.05)
                if child.process.poll() is None:
                    self.sink.warning(
                        f"{child.spec.name} did not stop in {child.spec.stop_timeout_s:.0f}s: killing it"
                    )
                    child.process.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.process.wait(timeout=KILLED_WAIT_S)
                code = child.process.returncode
                self.sink.info(
                    f"stopped {child.spec.name} ({describe_exit(code if code is not None else -9)})"
                )
        zygotes = [c.zygote for c in self.children.values()] + list(self.burst_zygotes.values())
        live = [z.process for z in zygotes if z.process is not None and z.process.poll() is None]
        for process in live:  # the zygotes last: they reaped the components. Each ends when its
            if process.stdin is not None:  # stdin closes (it ignores the group's signals)
                with contextlib.suppress(OSError):
                    process.stdin.close()
        deadline = time.monotonic() + ZYGOTE_STOP_S
        for process in live:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
        for child in self.children.values():
            if child.reader is not None:
                child.reader.join(timeout=2)
        self.pump(0)
        with contextlib.suppress(OSError):
            self.config.pid_file("supervisor").unlink()

    def pids(self) -> dict[str, int | None]:
        return {name: child.pid for name, child in self.children.items()}
