"""A Ctrl-C (or a SIGTERM) in the first seconds of ``make run``, while local mode's processes are
still starting, stops each of them by itself: none dies of a KeyboardInterrupt before its code runs,
and none lets the supervisor's SIGTERM go by and runs on until its stop timeout's SIGKILL."""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from test_local_poller_retries import QuietSink

from local.component import ORDERED_STOP_ENV, SUPERVISED_ENV
from local.config import LocalConfig, free_port
from local.supervisor import Supervisor, default_components
from local.zygote import PREFIX, Forked, fork_line

REPO = Path(__file__).resolve().parents[2]


def _line(process: subprocess.Popen[bytes], deadline_s: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], deadline_s)
    assert ready, "no line from the zygote in time"
    return process.stdout.readline().decode().strip()


def test_a_sigterm_sent_as_the_zygote_forks_stops_its_child() -> None:
    """The supervisor sends a stop asked for during a zygote's warm-up as soon as the zygote names
    its child: the child, a moment old, still had the zygote's SIGTERM ignored and let it go by,
    then ran its component until the stop timeout's SIGKILL (Ctrl-C 6 s into ``make run``: both
    pollers and a worker "did not stop in 10s"). The child here is slow to take SIGTERM back, as
    on a busy machine."""
    script = textwrap.dedent(
        """
        import os, sys, time
        from local import zygote

        dup2 = os.dup2
        def slow_dup2(a, b):  # only the child calls it, before it takes SIGTERM back
            time.sleep(1.0)
            return dup2(a, b)

        os.dup2 = slow_dup2
        zygote._warm_imports = lambda verb: None
        def child_main(argv):
            time.sleep(60)
            return 0
        sys.exit(zygote.serve([], child_main, lambda argv: "api"))
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        assert process.stdin is not None
        process.stdin.write(fork_line(time.time()))
        process.stdin.flush()
        forked = _line(process, 60)
        assert forked.startswith(PREFIX + "forked "), forked
        child = int(forked.split()[-1])
        os.kill(child, signal.SIGTERM)  # Forked.forked(): the pending stop, sent at once
        exited = _line(process, 30)
        assert exited == f"{PREFIX}exited {child} {-signal.SIGTERM}", exited
    finally:
        if process.stdin is not None:
            process.stdin.close()
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_a_component_stopped_before_its_zygote_forked_it_is_stopped_at_once() -> None:
    """Its zygote still waiting for AWS, the component does not run: the supervisor waited out its
    stop timeout for it ("poller did not stop in 10s: killing it"), then again after SIGKILL."""
    child = Forked(zygote_pid=os.getpid())
    child.send_signal(signal.SIGTERM)
    assert child.poll() == -signal.SIGTERM
    assert child.wait(timeout=0) == -signal.SIGTERM


def _ignored(pid: int) -> set[int]:
    mask = next(
        int(line.split()[1], 16)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("SigIgn:")
    )
    return {signum for signum in range(1, 64) if mask & (1 << (signum - 1))}


def test_components_and_zygotes_ignore_the_groups_ctrl_c_from_their_first_instruction(
    tmp_path: Path,
) -> None:
    """A Ctrl-C while a component's interpreter imported its site packages, before ``local/__main__``
    could ignore it: ``Fatal Python error: init_import_site``, a KeyboardInterrupt traceback from
    every process (Ctrl-C 2 s into ``make run``). Ignored from exec now, as a terminal's own
    ``nohup`` would have it; the components that only the supervisor stops ignore SIGTERM too."""
    config = LocalConfig(state_dir=tmp_path)
    specs = {spec.name: spec for spec in default_components(config)}
    supervisor = Supervisor(config, list(specs.values()), QuietSink())
    started = []
    try:
        for name, zygote in (("api", False), ("aws", False), ("poller", True)):
            child = supervisor.children[name]
            process = supervisor._popen(child, zygote=zygote)
            started.append(process)
            ignored = _ignored(process.pid)  # at once: before the interpreter ran a line of ours
            assert {signal.SIGINT, signal.SIGHUP} <= ignored, (name, ignored)
            assert (signal.SIGTERM in ignored) == specs[name].ordered_stop, (name, ignored)
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=30)


def test_a_stop_that_reaches_aws_as_it_starts_keeps_the_saved_state(tmp_path: Path) -> None:
    """The supervisor marks a stop in order (``stopped-in-order``) and then signals AWS. AWS, still
    starting (its stop handler set, moto still importing), cleared that mark as its start does,
    then loaded the saved state (removing its file) and, the stop already asked for, stopped
    without saving: the next ``make run`` had none of the jobs. Ctrl-C's prompt stop in the first
    seconds made it likely."""
    from local.aws_state import STATE_FILE, STOPPED_IN_ORDER

    state = tmp_path / STATE_FILE
    state.write_bytes(pickle.dumps({}))  # a clean stop's state (no service: what is in it is moot)
    config = LocalConfig(state_dir=tmp_path, aws_port=free_port(), moto_patch=False)
    config.run_dir.mkdir(parents=True)
    (config.run_dir / STOPPED_IN_ORDER).touch()  # the supervisor's stop, marked before its signal
    script = textwrap.dedent(
        """
        import sys, threading, types
        from local import aws_server
        from local.config import LocalConfig

        config = LocalConfig.from_env()
        # (no template to deploy here: the table and queues are beside the point)
        aws_server.deploy_and_describe = lambda config: types.SimpleNamespace(table_name="t", queue_arns=[])
        stop = threading.Event()
        stop.set()  # the supervisor's SIGUSR1, come while it started
        aws_server.run(config, stop)
        """
    )
    env = {**os.environ, **config.to_env(), SUPERVISED_ENV: "1", ORDERED_STOP_ENV: "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert state.exists(), done.stderr.decode()[-2000:]  # saved again for the next start
