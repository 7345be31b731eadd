"""Headless Chromium driven over the DevTools protocol: load a page, read its DOM, catch console errors.

Chromium is the Debian package (``make browser`` installs it); the protocol client is
``websocket-client``. The browser runs in its own process group with a private profile
directory and is always stopped, its whole group, when the ``with`` block ends.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT_S = 90.0  # a busy two-core machine starts Chromium slowly
CALL_TIMEOUT_S = 60.0


class BrowserError(RuntimeError):
    """Chromium did not start, or did not answer a protocol call."""


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """One headless Chromium with one page.

    ``errors`` collects what the page logged as an error: ``console.error`` calls, uncaught
    exceptions, and browser log entries of level error (a resource that failed to load).
    """

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        binary = chromium_binary()
        if binary is None:
            raise BrowserError("chromium is not installed (make browser)")
        self.profile = profile
        self.errors: list[str] = []
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        profile.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--headless",
            "--no-sandbox",  # CI and this machine run as root, where the sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.log_path = profile.parent / f"{profile.name}.log"
        with self.log_path.open("wb") as sink:
            self.process = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ protocol

    def _connect(self) -> None:
        import websocket

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text().strip():
            if self.process.poll() is not None:
                raise BrowserError(f"chromium exited ({self.process.returncode}): {self.log_tail()}")
            if time.monotonic() > deadline:
                raise BrowserError(f"chromium did not open its DevTools port: {self.log_tail()}")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        targets: list[dict[str, Any]] = []
        while not targets:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
                targets = [t for t in json.loads(reply.read()) if t.get("type") == "page"]
            if not targets:
                if time.monotonic() > deadline:
                    raise BrowserError("chromium has no page target")
                time.sleep(0.2)
        self.socket = websocket.create_connection(
            targets[0]["webSocketDebuggerUrl"], timeout=CALL_TIMEOUT_S, suppress_origin=True
        )
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _receive(self) -> dict[str, Any]:
        import websocket

        try:
            message: dict[str, Any] = json.loads(self.socket.recv())
        except websocket.WebSocketException as exc:  # a timeout, or the browser went away
            raise BrowserError(f"DevTools connection: {exc!r}") from exc
        if "method" in message:
            self._on_event(message)
        return message

    def _on_event(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        params = event.get("params", {})
        method = event["method"]
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])]
            self.errors.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(
                "exception: " + str(details.get("exception", {}).get("description") or details)
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} ({entry.get('url', '')})")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol call; its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        call_id = self._next_id
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            message = self._receive()
            if message.get("id") == call_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
        raise BrowserError(f"{method}: no answer in {CALL_TIMEOUT_S:.0f}s")

    # ------------------------------------------------------------------ pages

    def load(self, url: str) -> None:
        """Navigate to ``url`` and wait for its load event."""
        seen = len(self._events)
        answer = self.call("Page.navigate", url=url)
        if answer.get("errorText"):
            raise BrowserError(f"navigating to {url}: {answer['errorText']}")
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not any(e["method"] == "Page.loadEventFired" for e in self._events[seen:]):
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not finish loading in {CALL_TIMEOUT_S:.0f}s")
            self._receive()

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    # ------------------------------------------------------------------ lifetime

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.socket.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
