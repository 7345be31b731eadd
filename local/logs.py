"""One log stream for every component: each line prefixed by its component, or JSON with ``--json-logs``.

Components write what they write: Powertools JSON lines from the handlers, plain
``LEVEL logger: message`` lines from local mode and the core, EMF metric documents from
Powertools Metrics. :class:`LogSink` turns each into one entry; EMF documents appear only
in JSON mode (they are figures for CloudWatch, not messages for a person).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.markup import escape

_PLAIN_RE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ([\w.\-]+): (.*)$")
_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta", "bright_green")
_LEVEL_STYLES = {"WARNING": "yellow", "ERROR": "bold red", "CRITICAL": "bold red"}


@dataclass
class Entry:
    component: str
    level: str
    message: str
    time: float = field(default_factory=time.time)
    fields: dict[str, Any] = field(default_factory=dict)
    metrics: bool = False  # an EMF document


def parse_line(component: str, line: str) -> Entry:
    """Classify one line a component printed."""
    text = line.rstrip("\n")
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            if "_aws" in data:
                return Entry(component, "INFO", "metrics", fields=data, metrics=True)
            level = str(data.get("level", "INFO")).upper()
            message = str(data.get("message", ""))
            if data.get("exception"):
                message += "\n" + str(data["exception"])
            return Entry(component, level, message, fields=data)
    match = _PLAIN_RE.match(text)
    if match:
        return Entry(component, match.group(1), match.group(3), fields={"logger": match.group(2)})
    return Entry(component, "INFO", text)


class LogSink:
    """Writes entries to the terminal (prefixed, or JSON) and to ``<state>/logs/local.log`` (JSON).

    ``console`` is the rich console the live table uses, so log lines print above it.
    """

    def __init__(self, json_logs: bool, log_file: Path | None, console: Console | None = None) -> None:
        self.json_logs = json_logs
        self.console = console or Console(stderr=False, highlight=False, soft_wrap=True)
        self._styles: dict[str, str] = {}
        self._lock = threading.Lock()
        self._to_terminal = True  # till a write to it fails: the supervisor died of that mid-stop
        self._file: IO[str] | None = None
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            self._file = log_file.open("a", buffering=1)

    def style(self, component: str) -> str:
        if component not in self._styles:
            self._styles[component] = _STYLES[len(self._styles) % len(_STYLES)]
        return self._styles[component]

    @staticmethod
    def as_json(entry: Entry) -> str:
        stamp = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(entry.time))
            + f".{int(entry.time * 1000) % 1000:03d}Z"
        )
        document: dict[str, Any] = {"time": stamp, "component": entry.component, "level": entry.level}
        if entry.metrics:
            document["metrics"] = entry.fields
        else:
            document["message"] = entry.message
            extra = {k: v for k, v in entry.fields.items() if k not in ("level", "message", "timestamp")}
            if extra:
                document["fields"] = extra
        return json.dumps(document, default=str)

    def write(self, entry: Entry) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write(self.as_json(entry) + "\n")
            if not self._to_terminal:
                return
            try:
                self._show(entry)
            except OSError:  # the terminal hung up (EIO), its pipe closed: the log file goes on alone
                self._to_terminal = False

    def _show(self, entry: Entry) -> None:
        """The entry on the terminal: prefixed by its time and component, or as JSON."""
        if self.json_logs:
            sys.stdout.write(self.as_json(entry) + "\n")
            sys.stdout.flush()
            return
        if entry.metrics:
            return
        clock = (
            time.strftime("%H:%M:%S", time.localtime(entry.time)) + f".{int(entry.time * 1000) % 1000:03d}"
        )
        level = "" if entry.level == "INFO" else f"[{_LEVEL_STYLES.get(entry.level, 'dim')}]{entry.level}[/] "
        prefix = f"[dim]{clock}[/] [{self.style(entry.component)}]{entry.component:<10}[/]│ "
        self.console.print(prefix + level + escape(entry.message), highlight=False)

    def info(self, message: str, component: str = "local") -> None:
        self.write(Entry(component, "INFO", message))

    def warning(self, message: str, component: str = "local") -> None:
        self.write(Entry(component, "WARNING", message))

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
