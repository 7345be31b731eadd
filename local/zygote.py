"""A warm start for local mode's components: one process imported and prepared once, forking a
fresh child for each start of its component.

In the cloud a poller, or a worker Lambda, that dies is replaced in about a second: the state
machine retries the task (or the event source invokes again) on one of the Lambda service's
idle execution environments, with no cold start. A local component's cold start is a new Python
process importing boto3, Powertools and the core: two seconds on an idle machine, thirty on a
busy one. So the supervisor runs a *zygote* per warm component (``ComponentSpec.warm``): a
process started with ``PUNCTUAL_LOCAL_ZYGOTE=1`` that prepares (waits for the deployment, sets the
environment), imports what the component needs, and then waits, with no thread and no open
connection, for ``fork ASKED_AT`` lines on its stdin (ASKED_AT: when the supervisor asked, which
the child logs its start-up against). Each forks a child that runs the component as usual
(``python -m local <verb> ...``, from the same arguments); the zygote reports ``@@zygote forked
PID`` and, when it reaps one, ``@@zygote exited PID CODE`` on its stdout, which the supervisor
reads (:class:`Forked`). A ``kill -9`` of the child kills that child only: the next start is a
fork, not a cold start. The zygote ignores the process group's SIGINT and SIGTERM (it reports its
children's exits while they stop) and exits when its supervisor closes its stdin or is gone.
Burst workers (``burst-N``) have a zygote each too, started with the supervisor before any burst
is planned.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from local.component import STARTED_ENV

ZYGOTE_ENV = "PUNCTUAL_LOCAL_ZYGOTE"
PREFIX = "@@zygote "
FORK = "fork"


def fork_line(asked_at: float) -> bytes:
    """The supervisor's request for one child: ``fork ASKED_AT``."""
    return f"{FORK} {asked_at:.3f}\n".encode()


def serve(
    argv: Sequence[str],
    child_main: Callable[[Sequence[str]], int],
    prepare: Callable[[Sequence[str]], str],
) -> int:
    """The zygote's life: ``prepare(argv)`` (it answers the component's verb), then fork a child
    running ``child_main(argv)`` per ``fork``. Both come from the command line's module
    (``local.cli``), which this module does not import: the supervisor imports this one.
    """
    # Ctrl-C (SIGINT) and a harness's SIGTERM reach the whole process group, this zygote too: it
    # outlives them, since only it can report its children's exits to the supervisor (without
    # it the supervisor waited each one's stop timeout, then again after SIGKILL: two minutes to
    # stop local mode). It ends when the supervisor closes its stdin, or is gone. Ignored from
    # its first instruction: a Ctrl-C during the seconds of its warm-up killed it too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    _warm_imports(prepare(argv))
    out = sys.stdout
    while True:
        if os.getppid() != parent:
            return 0  # the supervisor is gone: so are we (the children notice it too)
        _reap(out)
        ready, _, _ = select.select([sys.stdin], [], [], 0.2)
        if not ready:
            continue
        line = sys.stdin.readline()
        if not line:
            return 0  # the supervisor closed the pipe
        words = line.split()
        if not words or words[0] != FORK:
            continue
        # SIGTERM held, not ignored, across the fork: the supervisor sends a stop asked for during
        # the warm-up as soon as it reads the child's pid, and the child, a moment old, let it go
        # by with the zygote's SIG_IGN (its component then ran until its stop timeout's SIGKILL).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        pid = os.fork()
        if pid == 0:  # the child: the component, as ``python -m local <verb> ...`` runs it
            os.environ.pop(ZYGOTE_ENV, None)
            if len(words) > 1:
                os.environ[STARTED_ENV] = words[1]
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the component's own (Ctrl-C stays ignored)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one sent meanwhile: now
            os._exit(_run_child(child_main, argv))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # (the zygote's own: ignored)
        out.write(f"{PREFIX}forked {pid}\n")
        out.flush()


def _run_child(child_main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    try:
        code = child_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _reap(out: object) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(f"{PREFIX}exited {pid} {os.waitstatus_to_exitcode(status)}\n")  # type: ignore[attr-defined]
        out.flush()  # type: ignore[attr-defined]


def _warm_imports(verb: str) -> None:
    """What the component imports before its work: imported once here, shared by every fork."""
    import boto3  # noqa: F401

    import punctual.runtime.composition
    from local.component import load_handler

    if verb == "poller":
        import local.poller
        import punctual.dispatch.polling
        import punctual.dispatch.tick

        load_handler("poller")
    elif verb == "worker":
        import local.event_source
        import punctual.execution

        load_handler("worker")
    elif verb == "ecs-worker":
        import local.ecs_worker  # noqa: F401
        import punctual.execution.worker_service  # noqa: F401
    sys.modules.pop("handler", None)  # each child loads its handler afresh (as the runtime does)


class Forked:
    """A component's child forked by its zygote, as the supervisor sees it (Popen's interface)."""

    def __init__(self, zygote_pid: int) -> None:
        self.zygote_pid = zygote_pid
        self.pid: int | None = None  # until the zygote says which
        self.returncode: int | None = None
        self._known = threading.Event()
        self._lock = threading.Lock()
        # A signal sent before the zygote said which pid (it forks once its warm-up is done, which
        # can outlast a Ctrl-C on a busy machine): delivered as soon as it does. Before, it was
        # dropped, and the child ran on until its stop timeout's SIGKILL.
        self._pending: int | None = None

    def forked(self, pid: int) -> None:
        with self._lock:
            self.pid = pid
            pending, self._pending = self._pending, None
        self._known.set()
        if pending is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, pending)

    def exited(self, code: int) -> None:
        self.returncode = code

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            if self.pid is None:
                self._pending = signum if self._pending != signal.SIGKILL else self._pending
                # Not forked yet (its zygote still warming up, waiting for AWS): no component runs
                # to wait for, so it is stopped now (the supervisor waited out its stop timeout and
                # reported it "did not stop"); a fork still to come gets the signal first thing.
                self.returncode = -signum
                return
            pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)
        return self.returncode
