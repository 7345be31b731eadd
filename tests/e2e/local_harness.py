"""Starting ``punctual-local up`` as real processes, and talking to it (API, receiver, CLI).

Everything binds 127.0.0.1 on free ports; state lives in a directory the caller gives
(the synthesised template cache under .local/cache/ is shared).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TENANT = "e2e"
START_TIMEOUT_S = 300.0  # a cold machine synthesises the template first
T = TypeVar("T")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env() -> dict[str, str]:
    """The environment of a process the tests start: no endpoint or credentials of ours leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PUNCTUAL_", "POWERTOOLS_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def http(
    url: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
) -> tuple[int, Any]:
    """A plain urllib request; returns (status, JSON body or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            raw = reply.read()
            return int(reply.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@dataclass
class LocalMode:
    """A running ``punctual-local up`` and ways to talk to it."""

    process: subprocess.Popen[bytes]
    state: Path
    output: Path
    api_url: str
    receiver_url: str
    aws_url: str

    # -------------------------------------------------------------- observing

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def pid(self, component: str) -> int | None:
        try:
            pid = int((self.state / "run" / f"{component}.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def inflight(self, component: str) -> list[dict[str, Any]]:
        try:
            messages: list[dict[str, Any]] = json.loads(
                (self.state / "run" / f"{component}.inflight.json").read_text()
            )["messages"]
            return messages
        except (OSError, ValueError, KeyError):
            return []

    def wait(self, condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.5) -> T:
        """Poll ``condition`` until it returns something truthy; fail with the log's tail if it never does."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = condition()
            if result:
                return result
            if self.process.poll() is not None:
                pytest.fail(
                    f"local mode exited ({self.process.returncode}) while waiting for {what}\n{self.tail()}"
                )
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}\n{self.tail()}")
            time.sleep(interval_s)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    # -------------------------------------------------------------- talking

    def api(self, method: str, path: str, body: Any = None, tenant: str = TENANT) -> tuple[int, Any]:
        return http(self.api_url + path, method, body, {"X-Punctual-Tenant": tenant})

    def records(self) -> list[dict[str, Any]]:
        status, body = http(self.receiver_url + "/records")
        assert status == 200
        return list(body["records"])

    def hook(self, name: str) -> str:
        return f"{self.receiver_url}/hook/{name}"

    def cli(self, *args: str) -> tuple[int, Any, str]:
        """Run the ``punctual`` command against this API as tenant e2e; JSON output parsed."""
        done = subprocess.run(
            [
                str(BIN / "punctual"),
                *args,
                "--endpoint",
                self.api_url,
                "--tenant",
                TENANT,
                "--output",
                "json",
            ],
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


def stop_group(process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """SIGTERM the supervisor's process group (every component is in it), then SIGKILL what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def start_local_mode(state: Path, *extra: str) -> LocalMode:
    """Start ``punctual-local up`` in its own process group; returns once it is starting."""
    ports = {"--api-port": free_port(), "--aws-port": free_port(), "--receiver-port": free_port()}
    output = state / "up.out"
    argv = [sys.executable, "-m", "local", "up", "--state-dir", str(state), "--no-table"]
    for flag, port in ports.items():
        argv += [flag, str(port)]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*argv, *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env=child_env(),
            start_new_session=True,  # its own process group: the teardown kills all of it
        )
    return LocalMode(
        process=process,
        state=state,
        output=output,
        api_url=f"http://127.0.0.1:{ports['--api-port']}",
        receiver_url=f"http://127.0.0.1:{ports['--receiver-port']}",
        aws_url=f"http://127.0.0.1:{ports['--aws-port']}",
    )


def wait_ready(local: LocalMode, demo: bool = True) -> None:
    def ready() -> bool:
        try:
            if http(local.api_url + "/v1/openapi.json", timeout_s=2)[0] != 200:
                return False
            if http(local.receiver_url + "/health", timeout_s=2)[0] != 200:
                return False
        except OSError:
            return False
        return not demo or "demo registered" in local.log()

    local.wait(ready, START_TIMEOUT_S, "local mode to be ready", interval_s=1.0)
