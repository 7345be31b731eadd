"""Driving ``punctual-local up`` from a benchmark: start it, talk to it, read its processes.

The same way its README section describes it: ``python -m local up --no-demo --no-table``
with loopback ports and a private ``--state-dir``; jobs registered through the API as one
tenant, their webhooks pointed at the local receiver; the receiver's ``GET /records`` says
when each request arrived. The whole process group is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import benchlib

from local import demo

TENANT = "bench"
START_TIMEOUT_S = 300.0
PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>", "scheduled_at": "<scheduled_at>"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(
    url: str, method: str = "GET", body: Any = None, tenant: str = TENANT, timeout_s: float = 60
) -> tuple[int, Any]:
    """One JSON request to local mode; returns (status, parsed body or None)."""
    return demo.call(url, method, "", body, tenant, timeout_s)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PUNCTUAL_", "POWERTOOLS_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def rss_mb(pid: int) -> float | None:
    """Resident memory of one process, from /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU a process has used so far, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Local:
    process: subprocess.Popen[bytes]
    state: Path
    output: Path
    api_url: str
    receiver_url: str
    aws_url: str

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.read_text(errors="replace").splitlines()[-lines:])

    def pids(self) -> dict[str, int]:
        out = {}
        for path in sorted((self.state / "run").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                out[path.stem] = int(path.read_text().strip())
        return out

    def memory(self) -> dict[str, float | None]:
        return {name: rss_mb(pid) for name, pid in self.pids().items()}

    def cpu(self) -> dict[str, float | None]:
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    def hook(self, name: str) -> str:
        return f"{self.receiver_url}/hook/{name}"

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(self.api_url + path, method, body)

    def records(self, since: int = 0) -> list[dict[str, Any]]:
        status, body = http(f"{self.receiver_url}/records?since={since}")
        if status != 200:
            raise RuntimeError(f"receiver answered {status}")
        return list(body["records"])

    def register(self, specs: list[dict[str, Any]], threads: int = 4) -> tuple[list[str], float]:
        """Register jobs through the API (``threads`` clients at once); their ids and the seconds it took."""

        def one(spec: dict[str, Any]) -> str:
            for attempt in range(5):
                status, body = self.api("POST", "/v1/jobs", spec)
                if status in (200, 201):
                    return str(body["id"])
                if status not in (429, 500, 502, 503):
                    raise RuntimeError(f"registration refused ({status}): {body}")
                time.sleep(0.2 * (attempt + 1))
            raise RuntimeError(f"registration kept failing ({status}): {body}")

        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            ids = list(pool.map(one, specs))
        return ids, time.perf_counter() - began

    def wait_for(
        self, condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.5
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            result = condition()
            if result:
                return result
            if not self.alive():
                raise RuntimeError(f"local mode exited while waiting for {what}\n{self.tail()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.tail()}")
            time.sleep(interval_s)


def start(state: Path, *extra: str) -> Local:
    ports = {"--api-port": free_port(), "--aws-port": free_port(), "--receiver-port": free_port()}
    state.mkdir(parents=True, exist_ok=True)
    output = state / "up.out"
    argv = [sys.executable, "-m", "local", "up", "--state-dir", str(state), "--no-table", "--no-demo"]
    for flag, port in ports.items():
        argv += [flag, str(port)]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*argv, *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=benchlib.ROOT,
            env=child_env(),
            start_new_session=True,  # its own process group: stop() ends all of it
        )
    local = Local(
        process=process,
        state=state,
        output=output,
        api_url=f"http://127.0.0.1:{ports['--api-port']}",
        receiver_url=f"http://127.0.0.1:{ports['--receiver-port']}",
        aws_url=f"http://127.0.0.1:{ports['--aws-port']}",
    )

    def ready() -> bool:
        try:
            return (
                http(local.api_url + "/v1/openapi.json", timeout_s=2)[0] == 200
                and http(local.receiver_url + "/health", timeout_s=2)[0] == 200
                and "poller" in local.pids()
            )
        except OSError:
            return False

    local.wait_for(ready, START_TIMEOUT_S, "local mode to be ready", interval_s=1.0)
    return local


def stop(local: Local, timeout_s: float = 60.0) -> None:
    """SIGTERM the process group (the supervisor stops its children in order), then SIGKILL."""
    try:
        os.killpg(local.process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        local.process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(local.process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        local.process.wait(timeout=10)


@contextlib.contextmanager
def running(state: Path, *extra: str) -> Iterator[Local]:
    local = start(state, *extra)
    try:
        yield local
    finally:
        stop(local)
