"""Local mode from the outside: start ``punctual-local up`` as real processes, wait, talk, stop.

The one launcher of the e2e tests, the benchmarks and the chaos run; the demo shares its
HTTP call and its readiness probe. :func:`start` runs ``python -m local up --no-table`` in
its own process group, every port a free loopback one and its state in a directory the
caller gives (the synthesised template cache under ``.local/cache/`` is shared).
:meth:`LocalMode.wait` polls a condition until a deadline, failing early, with the log's
tail, when local mode exits; the deadlines are generous, for a busy machine that may first
synthesise the template. :meth:`LocalMode.stop` (and :func:`running` in any case) ends the
whole process group: SIGTERM, so that the supervisor stops its components in order, then
SIGKILL for whatever is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from local.config import LOOPBACK, REPO_ROOT, LocalModeError, alive, free_port, http_ok

REPO = REPO_ROOT
BIN = Path(sys.executable).parent  # the venv's scripts: the ``punctual`` command
START_TIMEOUT_S = 300.0  # a cold machine synthesises the template first
STOP_TIMEOUT_S = 60.0  # the supervisor stops its components one after another
TENANT_HEADER = "X-Punctual-Tenant"
T = TypeVar("T")


# --------------------------------------------------------------------------- HTTP


# A job batch of 500 writes each job and its timer: ~25 s on moto server under load, more on a busy
# two-core machine; its callers wait this long for the answer.
BATCH_TIMEOUT_S = 180.0
BATCH_ROUNDS = 3  # a job batch's items that failed for load, sent again (LocalMode.register)
RETRIED_BATCH_CODES = frozenset({429, 503, 504})


def request(
    url: str,
    method: str = "GET",
    body: Any = None,
    *,
    tenant: str | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, Any]:
    """One JSON request (to the API, or the receiver); returns (status, parsed body or None).

    An error status is returned, not raised; a connection that fails raises ``OSError``.
    """
    data = json.dumps(body).encode() if body is not None else None
    call = urllib.request.Request(url, data=data, method=method)
    if tenant is not None:
        call.add_header(TENANT_HEADER, tenant)
    if data is not None:
        call.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(call, timeout=timeout_s) as reply:
            raw = reply.read()
            return int(reply.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, None


def answering(api_url: str, receiver_url: str | None, timeout_s: float = 2.0) -> bool:
    """The API serves its OpenAPI document and (when given) the receiver its health check."""
    if not http_ok(api_url + "/v1/openapi.json", timeout_s):
        return False
    return receiver_url is None or http_ok(receiver_url + "/health", timeout_s)


# --------------------------------------------------------------------------- processes


def child_env() -> dict[str, str]:
    """The environment of a process started here: no endpoint or credentials of ours leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PUNCTUAL_", "POWERTOOLS_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def spawn(args: Sequence[str], output: Path) -> subprocess.Popen[bytes]:
    """``python -m local <args>`` from the repository, in its own process group, output to ``output``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "local", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env=child_env(),
            start_new_session=True,  # its own process group: stop_group ends all of it
            # As from a terminal, whatever ran the caller: under nohup (SIGHUP ignored, which a
            # child inherits) local mode would keep ignoring a hang-up, as nohup asks of it
            preexec_fn=_hang_up_as_in_a_terminal,
        )


def _hang_up_as_in_a_terminal() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def stop_group(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process group of ``process``, wait up to ``timeout_s``, then SIGKILL what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return  # the group is gone
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


# --------------------------------------------------------------------------- local mode


@dataclass
class LocalMode:
    """A running local mode (or one component run alone), and ways to watch it and talk to it.

    ``tenant`` is who :meth:`api` and :meth:`cli` speak as unless told otherwise; ``demo``
    says whether its demo jobs are registered (readiness then waits for them too).
    """

    process: subprocess.Popen[bytes]
    state: Path
    output: Path
    api_url: str
    receiver_url: str = ""
    aws_url: str = ""
    tenant: str = "local"
    demo: bool = False

    # -------------------------------------------------------------- watching

    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def pids(self) -> dict[str, int]:
        """Each component's pid (and the supervisor's), from the pid files, while it runs."""
        out = {}
        for path in sorted((self.state / "run").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                pid = int(path.read_text().strip())
                if alive(pid):
                    out[path.stem] = pid
        return out

    def pid(self, component: str) -> int | None:
        return self.pids().get(component)

    def inflight(self, component: str) -> list[dict[str, Any]]:
        """The messages a worker has received and not yet finished (its in-flight file)."""
        try:
            messages: list[dict[str, Any]] = json.loads(
                (self.state / "run" / f"{component}.inflight.json").read_text()
            )["messages"]
            return messages
        except (OSError, ValueError, KeyError):
            return []

    def wait(
        self, condition: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.5
    ) -> T:
        """Poll ``condition`` until it returns something truthy, and return that.

        Raises :class:`LocalModeError`, with the log's tail, when local mode exits first or
        ``timeout_s`` passes.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            result = condition()
            if result:
                return result
            if not self.running():
                raise LocalModeError(
                    f"local mode exited ({self.process.returncode}) while waiting for {what}\n{self.tail()}"
                )
            if time.monotonic() >= deadline:
                raise LocalModeError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{self.tail()}")
            time.sleep(interval_s)

    def ready(self) -> bool:
        """The API and the receiver answer, the poller runs, and the demo (if on) is registered."""
        try:
            if not answering(self.api_url, self.receiver_url):
                return False
        except OSError:
            return False
        return "poller" in self.pids() and (not self.demo or "demo registered" in self.log())

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.wait(self.ready, timeout_s, "local mode to be ready", interval_s=1.0)

    def interrupt(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Ctrl-C in its terminal (SIGINT to the process group: the supervisor stops the
        components in order); its exit code (None: still running after ``timeout_s``)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout_s)
        return self.process.poll()

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM to the process group, as ``timeout`` or ``kill -- -PGID`` send it (the supervisor
        stops the components in order, AWS last); its exit code (None: still running after
        ``timeout_s``)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout_s)
        return self.process.poll()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop local mode: its whole process group (see :func:`stop_group`)."""
        stop_group(self.process, timeout_s)

    # -------------------------------------------------------------- talking

    def api(
        self, method: str, path: str, body: Any = None, tenant: str | None = None, timeout_s: float = 30.0
    ) -> tuple[int, Any]:
        """One request to the API as ``tenant`` (by default this local mode's)."""
        return request(self.api_url + path, method, body, tenant=tenant or self.tenant, timeout_s=timeout_s)

    def register(self, jobs: Sequence[dict[str, Any]], tenant: str | None = None) -> int:
        """Register ``jobs`` (``{"id", "job"}`` items) with ``POST /v1/job-batches``, as a client
        does: the items that failed for load (429, 503, 504: the API shed or storage did not
        answer; their ids are given, so a repeat of one that was made answers ``exists``) are sent
        again, up to :data:`BATCH_ROUNDS` times; any other failure, or one left, raises, naming
        each reason and how many items had it. Returns how many were created (or existed)."""
        left, done, reasons = list(jobs), 0, dict[str, int]()
        for _ in range(BATCH_ROUNDS):
            status, body = self.api(
                "POST", "/v1/job-batches", {"jobs": left}, tenant=tenant, timeout_s=BATCH_TIMEOUT_S
            )
            if status != 200:
                raise LocalModeError(f"POST /v1/job-batches answered {status}: {str(body)[:300]}")
            failed = {r["id"]: r for r in body["results"] if r["status"] == "failed"}
            done += len(left) - len(failed)
            reasons = {}
            for result in failed.values():
                reason = f"{result['code']} {result['problem'].get('detail', '')[:160]}"
                reasons[reason] = reasons.get(reason, 0) + 1
            if any(r["code"] not in RETRIED_BATCH_CODES for r in failed.values()) or not failed:
                break
            left = [job for job in left if job["id"] in failed]
        if reasons:
            raise LocalModeError(f"{sum(reasons.values())} of {len(jobs)} jobs not registered: {reasons}")
        return done

    def hook(self, name: str) -> str:
        """The receiver's URL for webhooks recorded under ``name``."""
        return f"{self.receiver_url}/hook/{name}"

    def records(self, since: int = 0) -> list[dict[str, Any]]:
        """What the receiver recorded, from the ``since``-th request on."""
        status, body = request(f"{self.receiver_url}/records?since={since}")
        if status != 200 or not isinstance(body, dict):
            raise LocalModeError(f"the receiver answered {status}: {body}")
        return list(body["records"])

    def cli(self, *args: str) -> tuple[int, Any, str]:
        """Run the ``punctual`` command against this API as this tenant; its JSON output parsed."""
        command = [str(BIN / "punctual"), *args, "--endpoint", self.api_url, "--tenant", self.tenant]
        done = subprocess.run(
            [*command, "--output", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
            check=False,
        )
        try:
            parsed = json.loads(done.stdout) if done.stdout.strip() else None
        except ValueError:
            parsed = done.stdout
        return done.returncode, parsed, done.stderr


def start(state: Path, *extra: str, tenant: str, like: LocalMode | None = None) -> LocalMode:
    """Start ``punctual-local up`` on free ports with its state in ``state``; returns once started.

    ``extra`` are more ``up`` options (``--no-demo``, ``--workers 1``, ...); call
    :meth:`LocalMode.wait_ready` before talking to it, and :meth:`LocalMode.stop` in any case.
    ``like``: on the ports of that (stopped) local mode, as ``make run`` again would be, with the
    AWS state its clean stop kept; without it the start is ``--fresh`` (a bench's or test's state
    directory reused never brings back an earlier run's jobs).
    """
    if like is not None:
        ports = {
            f"--{name}-port": int(url.rsplit(":", 1)[1])
            for name, url in (("api", like.api_url), ("aws", like.aws_url), ("receiver", like.receiver_url))
        }
    else:
        ports = {"--api-port": free_port(), "--aws-port": free_port(), "--receiver-port": free_port()}
    args = ["up", "--state-dir", str(state), "--no-table", *(["--fresh"] if like is None else [])]
    for flag, port in ports.items():
        args += [flag, str(port)]
    state.mkdir(parents=True, exist_ok=True)
    output = state / "up.out"
    return LocalMode(
        process=spawn([*args, *extra], output),
        state=state,
        output=output,
        api_url=f"http://{LOOPBACK}:{ports['--api-port']}",
        receiver_url=f"http://{LOOPBACK}:{ports['--receiver-port']}",
        aws_url=f"http://{LOOPBACK}:{ports['--aws-port']}",
        tenant=tenant,
        demo="--no-demo" not in extra,
    )


@contextlib.contextmanager
def running(state: Path, *extra: str, tenant: str) -> Iterator[LocalMode]:
    """:func:`start`, wait until ready, and stop at the end whatever happened."""
    local = start(state, *extra, tenant=tenant)
    try:
        local.wait_ready()
        yield local
    finally:
        local.stop()
