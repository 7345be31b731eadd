"""``punctual-local up``: the supervisor, the demo jobs, the live table and the summary line.

The demo registers, through the API and as tenant ``demo``, jobs whose webhooks go to the
local receiver: ``rate(5 seconds)``; a Unix cron every minute; an AWS cron every minute; a
one-time ``at(...)`` 15 s ahead; a ``rate(30 seconds)`` job whose receiver answers 500
twice per slot (retried, then succeeds); ``after(A, B)`` on the two cron jobs; and a
``rate(10 seconds)`` job whose receiver fails every request for its first 25 s, with an alert
rule on ``failed`` and ``recovered`` (the receiver's ``/alert/recovers``): one alert per failed
slot, then one ``recovered``. A live table shows each job's slots as the receiver saw them, and
the alerts each job raised. That job fails by design, so the summary's counts leave it out.
When local mode stops (Ctrl-C, or ``--duration``), one line sums the demo up::

    punctual-local: 90s demo, slots due 23, executed 23, duplicates 0, missed 0,
    fire delay p50 40 ms p99 114 ms

(on one line)

*Due* counts the slots scheduled between registration and 10 s before the end (so that a
slot still in its retries is not counted missed); *executed*, those the receiver answered
2xx; *duplicates*, requests that repeated an attempt of a slot the receiver had already
seen (a retry, or a takeover after a worker died, is a new attempt, not a duplicate:
the target can tell them apart by ``Idempotency-Key``); the fire delay is the first
request's arrival minus the slot's instant.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from local.config import LocalConfig, LocalModeError
from local.harness import answering, request
from local.logs import LogSink
from local.supervisor import Supervisor, default_components

DEMO_TENANT = "demo"
SETTLE_S = 10.0  # slots younger than this at the end are not yet due for the summary
READY_TIMEOUT_S = 240.0
POLL_RECEIVER_S = 1.0
POLL_API_S = 3.0
TABLE_COLUMNS = (
    ("job", "left"),
    ("schedule", "left"),
    ("fired", "right"),
    ("last slot", "left"),
    ("delay", "right"),
    ("attempts", "left"),
    ("status", "left"),
    ("next", "left"),
    ("alerts", "left"),
)
ONE_LINE_COLUMNS = {"fired", "last slot", "delay", "status"}  # never wrapped nor cut
PAYLOAD = {
    "job": "<job_id>",
    "slot": "<slot>",
    "attempt": "<attempt>",
    "scheduled_at": "<scheduled_at>",
}


# --------------------------------------------------------------------------- jobs


@dataclass
class DemoJob:
    key: str
    label: str
    schedule: str
    hook: str
    retry: dict[str, Any] | None = None
    parents: tuple[str, ...] = ()
    job_id: str = ""
    first_slot: datetime | None = None
    next_fire: str | None = None
    state: str = ""
    last_status: str = ""
    generation: int = 0  # bumped when the demo is registered again (moto restarted empty)
    ended: datetime | None = None  # no slot of this job is due after this instant
    alerts: tuple[str, ...] = ()  # alert rule conditions, sent to the receiver's /alert/<key>
    counted: bool = True  # in the summary's due/executed counts (a job failing by design is not)

    def spec(self, receiver_url: str, ids: dict[str, str]) -> dict[str, Any]:
        schedule = self.schedule
        if self.parents:
            schedule = f"after({', '.join(ids[p] for p in self.parents)})"
        spec: dict[str, Any] = {
            "name": f"demo: {self.label}",
            "schedule": schedule,
            "target": {"type": "http", "url": f"{receiver_url}/hook/{self.hook}"},
            "payload": {**PAYLOAD, "demo": self.key},
            "timeout_seconds": 10,
            "tags": {"demo": self.key},
        }
        if self.retry:
            spec["retry"] = self.retry
        if self.alerts:
            target = {"type": "http", "url": f"{receiver_url}/alert/{self.key}"}
            spec["alerts"] = [{"on": list(self.alerts), "target": target}]
        return spec


def demo_jobs(now: datetime) -> list[DemoJob]:
    once = (now + timedelta(seconds=15)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fixed = {"backoff": "fixed", "base_seconds": 2, "max_seconds": 2, "jitter": False, "max_attempts": 3}
    return [
        DemoJob("every-5s", "every 5 seconds", "rate(5 seconds)", "every-5s"),
        DemoJob("cron", "Unix cron, every minute", "* * * * *", "cron"),
        DemoJob("aws-cron", "AWS cron, every minute", "cron(* * * * ? *)", "aws-cron"),
        DemoJob("once", "one time, in 15 s", f"at({once})", "once"),
        DemoJob("flaky", "fails twice, then succeeds", "rate(30 seconds)", "flaky?fail=2", retry=fixed),
        DemoJob("after", "after(cron, aws-cron)", "", "after", parents=("cron", "aws-cron")),
        DemoJob(
            "recovers",
            "fails 25 s, then recovers (alerts)",
            "rate(10 seconds)",
            "recovers?failfor=25",
            retry={"max_attempts": 1},
            alerts=("failed", "recovered"),
            counted=False,
        ),
    ]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _slot_instant(slot: str) -> datetime | None:
    try:
        return _instant(slot)
    except ValueError:
        return None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Figures:
    due: int = 0
    executed: int = 0
    duplicates: int = 0
    missed: int = 0
    delays_ms: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float | None:
        return percentile(self.delays_ms, 50)

    @property
    def p99(self) -> float | None:
        return percentile(self.delays_ms, 99)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


class Demo:
    """Registers the demo jobs, follows the receiver and the API, and sums up."""

    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self.jobs: list[DemoJob] = []
        self.records: list[dict[str, Any]] = []  # the demo's own requests, as the receiver saw them
        self._all_records: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []  # the alerts the receiver got at /alert/<key>
        self.registered_at: datetime | None = None
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ set-up

    def clear_previous(self) -> int:
        """Delete the demo tenant's jobs a clean stop kept (:mod:`local.aws_state`): each start
        registers its own (children first: a parent is not deleted while after() jobs name it)."""
        ids: list[str] = []
        token = ""
        while True:
            status, body = self._api(
                "GET", "/v1/jobs?limit=100" + (f"&next_token={quote(token)}" if token else "")
            )
            if status != 200 or not isinstance(body, dict):
                raise LocalModeError(f"listing the last run's demo jobs failed: HTTP {status} {body}")
            ids += [str(item["id"]) for item in body.get("items", [])]
            token = body.get("next_token") or ""
            if not token:
                break
        left = list(ids)
        for _ in range(len(ids) + 1):  # each pass deletes at least the jobs no other job names
            left = [job_id for job_id in left if self._api("DELETE", f"/v1/jobs/{quote(job_id)}")[0] == 409]
            if not left:
                break
        return len(ids) - len(left)

    def register(self) -> None:
        now = datetime.now(UTC)
        if self.registered_at is None:
            self.clear_previous()
        self.registered_at = self.registered_at or now
        generation = max((job.generation for job in self.jobs), default=-1) + 1
        ids: dict[str, str] = {}
        for job in demo_jobs(now):
            job.generation = generation
            status, body = self._api("POST", "/v1/jobs", job.spec(self.config.receiver_url, ids))
            if status != 201 or not isinstance(body, dict):
                raise LocalModeError(f"registering the demo job {job.key!r} failed: HTTP {status} {body}")
            job.job_id = str(body["id"])
            job.first_slot = _instant(body["next_fire_at"]) if body.get("next_fire_at") else None
            job.next_fire = body.get("next_fire_at")
            job.state = str(body.get("state", ""))
            ids[job.key] = job.job_id
            self.jobs.append(job)

    def register_again(self) -> None:
        """moto restarted empty: the jobs so far end now, and the demo is registered anew."""
        now = datetime.now(UTC)
        for job in self.jobs:
            job.ended = job.ended or now
        self.register()

    def _api(self, method: str, path: str, body: Any = None, timeout_s: float = 30.0) -> tuple[int, Any]:
        return request(self.config.api_url + path, method, body, tenant=DEMO_TENANT, timeout_s=timeout_s)

    def current(self) -> list[DemoJob]:
        return [job for job in self.jobs if job.ended is None]

    def start_following(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="demo-follow", daemon=True)
        self._thread.start()

    def stop_following(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        last_api = 0.0
        while not self._stop.is_set():
            self.refresh_records()
            if time.monotonic() - last_api >= POLL_API_S:
                last_api = time.monotonic()
                self._refresh_jobs()
            self._stop.wait(POLL_RECEIVER_S)

    def refresh_records(self) -> None:
        """Fetch what the receiver recorded since the first request still unanswered here."""
        seen = self._all_records
        cursor = next((i for i, r in enumerate(seen) if r.get("status") is None), len(seen))
        try:
            status, body = request(f"{self.config.receiver_url}/records?since={cursor}", timeout_s=5)
            fresh = body.get("records", []) if status == 200 and isinstance(body, dict) else None
            if fresh and fresh[0].get("seq") != cursor + 1:  # the receiver restarted: read it all
                status, body = request(f"{self.config.receiver_url}/records", timeout_s=5)
                ok = status == 200 and isinstance(body, dict)
                fresh, cursor = (body.get("records", []) if ok else None), 0
        except OSError:
            return
        if fresh is None:
            return
        self._all_records = seen[:cursor] + fresh
        ours = {job.job_id for job in self.jobs}
        records = [r for r in self._all_records if r.get("job") in ours]
        alerts = self._fetch_alerts()
        with self._lock:
            self.records = records
            if alerts is not None:
                self.alerts = [a for a in alerts if (a.get("body") or {}).get("job_id") in ours]

    def _fetch_alerts(self) -> list[dict[str, Any]] | None:
        try:
            status, body = request(f"{self.config.receiver_url}/alerts", timeout_s=5)
        except OSError:
            return None
        return body.get("alerts", []) if status == 200 and isinstance(body, dict) else None

    def alert_counts(self, job_id: str | None = None) -> dict[str, int]:
        """Alerts received per condition (of one job, or of the demo)."""
        with self._lock:
            alerts = list(self.alerts)
        counts: dict[str, int] = {}
        for alert in alerts:
            body = alert.get("body") or {}
            if job_id is None or body.get("job_id") == job_id:
                counts[str(body.get("condition"))] = counts.get(str(body.get("condition")), 0) + 1
        return counts

    def _refresh_jobs(self) -> None:
        for job in self.current():
            try:
                status, body = self._api("GET", f"/v1/jobs/{job.job_id}", timeout_s=5)
                if status == 200 and isinstance(body, dict):
                    job.next_fire = body.get("next_fire_at")
                    job.state = str(body.get("state", ""))
                status, body = self._api("GET", f"/v1/jobs/{job.job_id}/executions?limit=1", timeout_s=5)
                if status == 200 and isinstance(body, dict) and body.get("items"):
                    job.last_status = str(body["items"][0].get("status", ""))
            except OSError:
                continue

    # ------------------------------------------------------------------ figures

    def by_key(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            records = list(self.records)
        out: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            out.setdefault(str(record.get("key")), []).append(record)
        return out

    def due_slots(self, job: DemoJob, until: datetime, succeeded: set[str]) -> list[str]:
        """The slots of ``job`` scheduled at or before ``until``."""
        from punctual.timing.schedules import format_instant, parse_schedule

        until = min(until, job.ended or until)
        if job.parents:
            parent_ids = [
                next(j.job_id for j in self.jobs if j.key == p and j.generation == job.generation)
                for p in job.parents
            ]
            slots: set[str] | None = None
            for parent in parent_ids:
                done = {key.split(":", 1)[1] for key in succeeded if key.startswith(parent + ":")}
                slots = done if slots is None else slots & done
            return sorted(s for s in slots or set() if (_slot_instant(s) or until) <= until)
        if job.first_slot is None or job.first_slot > until:
            return []
        schedule = parse_schedule(job.schedule, "UTC")
        out = [job.first_slot]
        while len(out) < 10_000:
            nxt = schedule.next_after(out[-1], anchor=job.first_slot)
            if nxt is None or nxt > until:
                break
            out.append(nxt)
        return [format_instant(slot) for slot in out]

    def figures(self, until: datetime) -> Figures:
        figures = Figures()
        records = self.by_key()
        succeeded = {
            key for key, rs in records.items() if any(200 <= (r.get("status") or 0) < 300 for r in rs)
        }
        for job in self.jobs:
            if not job.counted:
                continue
            for slot in self.due_slots(job, until, succeeded):
                key = f"{job.job_id}:{slot}"
                figures.due += 1
                if key in succeeded:
                    figures.executed += 1
                seen = records.get(key, [])
                if seen and not job.parents:
                    instant = _slot_instant(slot)
                    if instant is not None:
                        first = min(float(r["arrived"]) for r in seen)
                        figures.delays_ms.append(max(0.0, (first - instant.timestamp()) * 1000))
        for seen in records.values():
            attempts = [record.get("attempt") for record in seen]
            figures.duplicates += len(attempts) - len(set(attempts))
        figures.missed = figures.due - figures.executed
        return figures

    def summary_line(self, ended: datetime | None = None) -> str:
        ended = ended or datetime.now(UTC)
        self.refresh_records()
        figures = self.figures(ended - timedelta(seconds=SETTLE_S))
        ran = (ended - self.registered_at).total_seconds() if self.registered_at else 0.0
        return (
            f"punctual-local: {ran:.0f}s demo, slots due {figures.due}, executed {figures.executed}, "
            f"duplicates {figures.duplicates}, missed {figures.missed}, "
            f"fire delay p50 {_ms(figures.p50)} p99 {_ms(figures.p99)}"
        )

    # ------------------------------------------------------------------ the table

    def table(self, supervisor: Supervisor | None = None, console: Console | None = None) -> Group:
        """The live table; on a ``console`` too narrow for it whole (80 columns) without the
        schedule and alerts columns (the footer counts the alerts), so that each row keeps its
        figures on one line and the footer stays on screen (QA24: an 80x24 terminal wrapped every
        row, cut "SUCCEEDED" to "SUCCE…" and pushed the footer below the screen's last line)."""
        now = datetime.now(UTC)
        records = self.by_key()
        rows: list[tuple[str | Text, ...]] = []
        for job in self.current():
            mine = {k: v for k, v in records.items() if k.startswith(job.job_id + ":")}
            last_key = max(mine, default=None)
            delay = attempts = "-"
            last_slot = "-"
            if last_key is not None:
                slot = last_key.split(":", 1)[1]
                last_slot = slot[11:19]
                seen = sorted(mine[last_key], key=lambda r: float(r["arrived"]))
                instant = _slot_instant(slot)
                if instant is not None and not job.parents:
                    delay = _ms(max(0.0, (float(seen[0]["arrived"]) - instant.timestamp()) * 1000))
                attempts = " ".join(str(r.get("status") or "…") for r in seen)
            status = job.last_status or job.state
            style = {"SUCCEEDED": "green", "RETRY_WAIT": "yellow", "FAILED": "red", "RUNNING": "cyan"}.get(
                status, ""
            )
            nxt = "-"
            if job.next_fire:
                seconds = (_instant(job.next_fire) - now).total_seconds()
                nxt = f"in {max(0, seconds):.0f}s"
            elif job.parents:
                nxt = "when both succeed"
            elif job.state == "COMPLETED":
                nxt = "done"
            rows.append(
                (
                    job.key,
                    job.schedule if not job.parents else f"after({', '.join(job.parents)})",
                    str(len(mine)),
                    last_slot,
                    delay,
                    attempts,
                    Text(status, style=style),
                    nxt,
                    ", ".join(f"{n} {c}" for c, n in sorted(self.alert_counts(job.job_id).items())) or "-",
                )
            )
        # The live display crops what is wider than the terminal (it does not wrap): the title
        # and footer are laid out in lines that fit (QA24: the footer's p99 and counts were cut)
        width = console.width if console is not None else None
        title = _fit(
            [
                "Punctual local mode",
                f"API {self.config.api_url}",
                f"tenant '{DEMO_TENANT}'",
                f"console {self.config.api_url}/console?tenant={DEMO_TENANT}",
            ],
            width,
        )
        table = self._layout(title, rows, set())
        if console is not None:
            natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
            if natural > console.width:
                table = self._layout(title, rows, {"schedule", "alerts"})
        figures = self.figures(now - timedelta(seconds=SETTLE_S))
        footer = [
            f"slots due {figures.due}",
            f"executed {figures.executed}",
            f"duplicates {figures.duplicates}",
            f"missed {figures.missed}",
            f"fire delay p50 {_ms(figures.p50)} p99 {_ms(figures.p99)}",
        ]
        demo_alerts = self.alert_counts()
        if demo_alerts:
            footer.append("alerts " + ", ".join(f"{n} {c}" for c, n in sorted(demo_alerts.items())))
        if supervisor is not None:
            restarts = sum(child.restarts for child in supervisor.children.values())
            footer.append(f"{len(supervisor.children)} processes, {restarts} restarts")
        return Group(table, Text(_fit(footer, width), style="dim"))

    def _layout(self, title: str, rows: list[tuple[str | Text, ...]], left_out: set[str]) -> Table:
        table = Table(title=title, title_justify="left", expand=False)
        kept = [i for i, (column, _) in enumerate(TABLE_COLUMNS) if column not in left_out]
        for i in kept:
            column, justify = TABLE_COLUMNS[i]
            table.add_column(column, justify=justify, no_wrap=column in ONE_LINE_COLUMNS)  # type: ignore[arg-type]
        for row in rows:
            table.add_row(*(row[i] for i in kept))
        return table


def _fit(parts: list[str], width: int | None) -> str:
    """``parts`` joined by `` · ``, in lines of at most ``width`` characters where they fit."""
    lines: list[str] = []
    for part in parts:
        if lines and (width is None or len(lines[-1]) + 3 + len(part) <= width):
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


# --------------------------------------------------------------------------- up


def _wait_ready(supervisor: Supervisor, config: LocalConfig, stop_requested: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if stop_requested():
            return False
        supervisor.check()
        supervisor.pump(0.2)
        if answering(config.api_url, config.receiver_url, timeout_s=1.0):
            return True
    raise LocalModeError(f"local mode was not ready after {READY_TIMEOUT_S:.0f}s (see the log above)")


def _fresh_state(config: LocalConfig) -> Path:
    """A new moto starts empty: forget the previous run's receiver journal and in-flight batches.

    Returns the log file, the previous run's kept as ``local.log.1``.
    """
    config.run_dir.mkdir(parents=True, exist_ok=True)
    for path in [config.receiver_log, config.deployment_file, *config.run_dir.glob("*.inflight.json")]:
        path.unlink(missing_ok=True)
    log_file = config.state_dir / "logs" / "local.log"
    if log_file.exists():
        log_file.replace(log_file.with_name("local.log.1"))
    return log_file


class _Reregistration:
    """Registers the demo again once a restarted ``aws`` component has created its resources."""

    def __init__(self, demo: Demo, config: LocalConfig, sink: LogSink) -> None:
        self.demo = demo
        self.config = config
        self.sink = sink
        self.since: float | None = None
        self.next_try = 0.0

    def on_restart(self, component: str) -> None:
        if component == "aws":
            self.since = time.time()
            self.sink.warning("AWS (moto) restarted empty: the demo will be registered again", "demo")

    def poll(self) -> None:
        if self.since is None or time.monotonic() < self.next_try:
            return
        self.next_try = time.monotonic() + 2.0
        try:
            if self.config.deployment_file.stat().st_mtime < self.since:
                return
            self.demo.register_again()
        except (OSError, LocalModeError) as exc:
            self.sink.warning(f"registering the demo again: {exc}; will try again", "demo")
            return
        self.since = None
        self.sink.info("demo registered again", "demo")


def run_up(
    config: LocalConfig,
    *,
    demo: bool,
    duration_s: float | None,
    show_table: bool,
    stop_requested: Callable[[], bool],
) -> int:
    """Run local mode until ``stop_requested()`` or ``duration_s``; returns the exit status."""
    console = Console(highlight=False, soft_wrap=True)
    live_table = demo and show_table and console.is_terminal and not config.json_logs
    sink = LogSink(config.json_logs, _fresh_state(config), console)
    supervisor = Supervisor(config, default_components(config), sink)
    sink.info(f"state in {config.state_dir}; AWS (moto) on {config.aws_endpoint}")
    supervisor.start()
    the_demo: Demo | None = None
    try:
        if not _wait_ready(supervisor, config, stop_requested):
            return 0
        sink.info(
            f"ready: API {config.api_url} (header X-Punctual-Tenant), console {config.api_url}/console, "
            f"receiver {config.receiver_url}, AWS {config.aws_endpoint}"
        )
        if demo:
            the_demo = Demo(config)
            the_demo.register()
            the_demo.start_following()
            again = _Reregistration(the_demo, config, sink)
            supervisor.on_restart.append(again.on_restart)
            sink.info(
                f"demo registered as tenant '{DEMO_TENANT}': watch it at "
                f"{config.api_url}/console?tenant={DEMO_TENANT} or try "
                f"curl -H 'X-Punctual-Tenant: {DEMO_TENANT}' {config.api_url}/v1/jobs"
            )
        started = time.monotonic()
        live = Live(console=console, refresh_per_second=2, transient=False) if live_table else None
        last_status = time.monotonic()
        if live is not None and the_demo is not None:
            live.start()
        try:
            while not stop_requested():
                if duration_s is not None and time.monotonic() - started >= duration_s:
                    break
                supervisor.check()
                supervisor.pump(0.2)
                if the_demo is not None:
                    again.poll()
                    if live is not None:
                        live.update(the_demo.table(supervisor, console))
                    elif not config.json_logs and time.monotonic() - last_status >= 30:
                        last_status = time.monotonic()
                        sink.info(the_demo.summary_line().removeprefix("punctual-local: "), "demo")
        finally:
            if live is not None:
                live.stop()
        line = the_demo.summary_line() if the_demo is not None else None
    except KeyboardInterrupt:
        line = None
    finally:
        if the_demo is not None:
            the_demo.stop_following()
        supervisor.stop()
        sink.close()
    if line is not None:
        print(line, flush=True)
    return 0
