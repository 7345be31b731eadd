"""The ``receiver`` component: a webhook receiver on loopback that records every request.

Jobs point their HTTP target at ``http://127.0.0.1:<port>/hook/<name>``; query parameters
shape the answer, so a job says in its own URL how its receiver behaves:

``fail=N``
    answer 500 to the first N requests of each slot (``Punctual-Tenant`` and ``Idempotency-Key``),
    then 200;
``delay=S``
    wait S seconds before answering (a run that lasts, to kill a worker in the middle).
``failfor=S``
    answer 500 to every request that arrives in the first S seconds after the first request
    to this hook name, then 200 (a job that fails for a while and then recovers).

Alerts (``/alert/<name>``: a job's alert rule pointing here) and execution events (``POST
/events``: local mode's stand-in for the EventBridge bus, ``PUNCTUAL_EVENTS_URL``) are recorded
apart from the hooks' requests, and listed by ``GET /alerts`` and ``GET /events`` (each also
journalled, ``alerts.jsonl`` and ``events.jsonl``). Events are answered 200; an alert endpoint's
URL says how it answers, as a hook's does: ``fail=N`` (500 to the first N requests of each
``Punctual-Tenant`` and ``Idempotency-Key`` at that endpoint), ``hang=S`` (hold every answer S
seconds: longer than the sender's timeout, it never answers in time). Each alert is recorded when
it arrives, with the answer it will get.

Each request is recorded with its ``Idempotency-Key`` and ``Punctual-Tenant``, the attempt and
slot from the payload (jobs send ``{"attempt": "<attempt>", "slot": "<slot>", ...}``), when it arrived
and what it was answered. ``GET /records`` lists them (pending ones too, ``status``
null); finished ones are also appended to ``<state>/run/receiver.jsonl``, which a
restarted receiver reads back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from local.config import LOOPBACK, LocalConfig, LocalModeError, LoopbackServer, port_in_use
from local.priority import run_ahead

log = logging.getLogger("local.receiver")

MAX_BODY_BYTES = 1024 * 1024
MAX_DELAY_S = 600.0


class Recorder:
    """Every request seen, in arrival order; thread-safe."""

    def __init__(self, journal: Path | None = None) -> None:
        self.journal = journal
        self.records: list[dict[str, Any]] = []
        self.seen: dict[tuple[str, str], int] = {}  # requests per slot: (Punctual-Tenant, Idempotency-Key)
        self.first_seen: dict[str, float] = {}  # per hook name: its first request's arrival
        # alert requests per (endpoint, Punctual-Tenant, Idempotency-Key)
        self.alert_seen: dict[tuple[str, str, str], int] = {}
        self.kept: dict[str, list[dict[str, Any]]] = {"alerts": [], "events": []}
        self._lock = threading.Lock()
        for kind, items in self.kept.items():
            side = self._side_journal(kind)
            if side is not None and side.exists():
                for line in side.read_text().splitlines():
                    try:
                        items.append(json.loads(line))
                    except ValueError:
                        continue
        if journal is not None and journal.exists():
            for line in journal.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                record["seq"] = len(self.records) + 1  # seq is always the 1-based position
                self.records.append(record)
                slot = _slot_of(record)
                self.seen[slot] = self.seen.get(slot, 0) + 1

    def arrive(self, record: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Record an arrival; returns the record and how many requests its slot had before."""
        with self._lock:
            slot = _slot_of(record)
            before = self.seen.get(slot, 0)
            self.seen[slot] = before + 1
            record["seq"] = len(self.records) + 1
            self.records.append(record)
            return record, before

    def _side_journal(self, kind: str) -> Path | None:
        return self.journal.with_name(f"{kind}.jsonl") if self.journal is not None else None

    def keep(self, kind: str, items: list[dict[str, Any]]) -> None:
        """Record alerts or events (journalled beside the requests)."""
        with self._lock:
            self.kept[kind].extend(items)
            side = self._side_journal(kind)
            if side is not None:
                with side.open("a") as handle:
                    handle.writelines(json.dumps(item) + "\n" for item in items)

    def alert_arrival(self, name: str, tenant: str, key: str) -> int:
        """Count an alert's arrival at endpoint ``name``; how many of its tenant's key came before."""
        with self._lock:
            before = self.alert_seen.get((name, tenant, key), 0)
            self.alert_seen[(name, tenant, key)] = before + 1
            return before

    def kept_since(self, kind: str, since: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(item) for item in self.kept[kind][since:]]

    def first_arrival(self, name: str, arrived: float) -> float:
        with self._lock:
            return self.first_seen.setdefault(name, arrived)

    def answer(self, record: dict[str, Any], status: int) -> None:
        with self._lock:
            record["status"] = status
            record["answered"] = time.time()
            if self.journal is not None:
                with self.journal.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")

    def snapshot(self, since: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.records[since:]]


def _slot_of(record: dict[str, Any]) -> tuple[str, str]:
    """The slot a hook request is of: its tenant and its ``Idempotency-Key`` (``<job_id>:<slot>``,
    the same in two tenants' jobs of one id: QA, ``?fail=N`` failed only the first tenant's)."""
    return str(record.get("tenant") or ""), str(record.get("key") or "")


def _number(values: dict[str, list[str]], name: str, default: float = 0.0) -> float:
    try:
        return float(values[name][-1]) if name in values else default
    except ValueError:
        return default


def make_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "punctual-local-receiver"
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The caller gave up first (its timeout, a ?delay= longer than it): the request is on
                # record; no one is left to answer (QA: each was a traceback in local mode's log).
                self.close_connection = True

        def _hook(self) -> None:
            arrived = time.time()
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            fields = body if isinstance(body, dict) else {}
            try:
                attempt: int | None = int(fields.get("attempt"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                attempt = None
            record, before = recorder.arrive(
                {
                    "name": split.path.removeprefix("/hook/").strip("/"),
                    "method": self.command,
                    "key": self.headers.get("Idempotency-Key"),
                    "tenant": self.headers.get("Punctual-Tenant"),
                    "job": fields.get("job"),
                    "slot": fields.get("slot"),
                    "scheduled_at": fields.get("scheduled_at"),
                    "attempt": attempt,
                    "arrived": arrived,
                    "status": None,
                    "answered": None,
                    "signed": bool(self.headers.get("webhook-signature")),
                }
            )
            delay = min(_number(query, "delay"), MAX_DELAY_S)
            if delay > 0:
                time.sleep(delay)
            status = 500 if before < int(_number(query, "fail")) else 200
            failfor = _number(query, "failfor")
            if failfor > 0 and arrived - recorder.first_arrival(record["name"], arrived) < failfor:
                status = 500
            # Journalled before the reply goes out: a receiver stopped right after answering
            # (local mode's end) has the request on record whenever its caller saw the answer.
            recorder.answer(record, status)
            self._reply(status, {"ok": status == 200, "request": record["seq"]})

        def _body(self) -> Any:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
            try:
                return json.loads(self.rfile.read(length)) if length else None
            except ValueError:
                return None

        def _alert(self) -> None:
            body = self._body()
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            name = split.path.removeprefix("/alert/").strip("/")
            key = self.headers.get("Idempotency-Key") or ""
            tenant = self.headers.get("Punctual-Tenant") or ""
            before = recorder.alert_arrival(name, tenant, key)
            status = 500 if before < int(_number(query, "fail")) else 200
            hang = min(_number(query, "hang"), MAX_DELAY_S)
            recorder.keep(
                "alerts",
                [
                    {
                        "name": name,
                        "key": key,
                        "tenant": tenant,
                        "signed": bool(self.headers.get("webhook-signature")),
                        "arrived": time.time(),
                        "status": status,
                        "hang_s": hang,
                        "body": body,
                    }
                ],
            )
            if hang > 0:
                time.sleep(hang)
            with contextlib.suppress(OSError):  # the sender gave up waiting
                self._reply(status, {"ok": status == 200})

        def _events(self) -> None:
            body = self._body()
            recorder.keep(
                "events", [e for e in body if isinstance(e, dict)] if isinstance(body, list) else []
            )
            self._reply(200, {"ok": True})

        def do_GET(self) -> None:
            split = urlsplit(self.path)
            if split.path == "/records":
                since = int(_number(parse_qs(split.query), "since"))
                self._reply(200, {"records": recorder.snapshot(since)})
            elif split.path in ("/alerts", "/events"):
                since = int(_number(parse_qs(split.query), "since"))
                kind = split.path.strip("/")
                self._reply(200, {kind: recorder.kept_since(kind, since)})
            elif split.path == "/health":
                self._reply(200, {"ok": True})
            elif split.path.startswith("/hook/"):
                self._hook()
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            if path.startswith("/hook/"):
                self._hook()
            elif path.startswith("/alert/"):
                self._alert()
            elif path == "/events":
                self._events()
            else:
                self._reply(404, {"error": "not found"})

        do_PUT = do_PATCH = do_DELETE = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


def server_for(port: int, recorder: Recorder) -> LoopbackServer:
    """The receiver's server on loopback ``port`` (0: a free one), not yet serving."""
    return LoopbackServer((LOOPBACK, port), make_handler(recorder))


def run(config: LocalConfig, stop: threading.Event) -> None:
    if port_in_use(config.receiver_port):
        raise LocalModeError(f"port {config.receiver_port} is taken: choose another with --receiver-port")
    config.run_dir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(config.receiver_log)
    run_ahead("the webhook receiver")  # the tenants' endpoints are not on the deployment's cores
    server = server_for(config.receiver_port, recorder)
    thread = threading.Thread(target=server.serve_forever, name="receiver", daemon=True)
    thread.start()
    log.info(
        "webhook receiver on %s/hook/<name> (%d earlier requests)", config.receiver_url, len(recorder.records)
    )
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
