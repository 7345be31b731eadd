"""The ledger: what the chaos run asked of Punctual, and which slots that made due.

Everything the run does to the system is appended to ``ledger.jsonl`` as it happens: each
registration, pause, resume and update with the instants the request was *sent* and
*answered* and the job the API returned, and the run's phases (faults started, faults
ended, collection). From that alone, :func:`time_slots` computes every slot a job's
schedule had during the run and whether it was **owed** (must end in the job's expected
terminal state exactly once) or only **optional** (may run, at most once, or not at all).

What "due" means at the edges (every bound is a correctness bound, not a performance one):

* **registration**: slots before the first one the API reported (``next_fire_at`` of the
  201) are optional; the server computed it between *sent* and *answered*.
* **the end**: a slot is owed only if its instant is at or before the *cut* (the moment
  the faults stopped); the run then keeps going, fault-free, until every owed slot has
  ended or the settle bound passes. Later slots are optional.
* **pause**: a slot due within ``guard_s`` before the pause request was sent may be
  released late (a killed poller restarts and drains from its watermark) and then find the
  job paused, so it is optional; so is every slot until the resume was answered, except
  under the catch-up policy ``all`` (the default): a resume then runs every slot the pause
  owes (docs/how-it-works.md, "Resuming"), so a slot due strictly inside the pause (more than
  the clock skew and ``PAUSE_MARGIN_S`` after the pause was answered, more than ``SLACK_S``
  before the resume was sent) is owed (:data:`CAUGHT_UP`), once the resume was answered
  before the cut. Its lateness is by design (it waited for the resume).
* **update** (a replaced spec, new version): old-version slots within ``guard_s`` before
  the request are optional (a late release finds the new version and is dropped as stale);
  no old-version slot may run later than the answer plus the clock skew; new-version slots
  follow the new first slot the API reported.
* ``delay(...)`` and ``after(...)`` slots depend on what ran: the verdict derives them from
  the stored executions (:mod:`local.chaos.verdict`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from punctual.timing.schedules import Schedule, parse_schedule

GUARD_S = 60.0  # a slot due this long before a pause/update may be released after it (see above)
SLACK_S = 1.0  # whole-second slots against float request times
MAX_SLOTS_PER_EPOCH = 100_000
BACKFILLED = "backfilled"  # the reason of a slot a backfill owes
CAUGHT_UP = "paused, owed by the resume's catch-up (all)"  # the reason of a slot a resume owes
# A poller may release a slot this long after the pause landed (its read of the job up to 1 s
# behind, and the timestamps' slack), besides its clock skew: such a slot may be SKIPPED.
PAUSE_MARGIN_S = 2 * SLACK_S


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def slot_key(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_s(moment: datetime) -> float:
    return moment.timestamp()


def at_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


# --------------------------------------------------------------------------- writing


class LedgerWriter:
    """Appends one JSON object per line; thread-safe; flushed at every line (a crash loses nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, "t": time.time(), **fields}
        with self._lock, self.path.open("a") as out:
            out.write(json.dumps(record, default=str) + "\n")
        return record


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(item, dict):
            out.append(item)
    return out


# --------------------------------------------------------------------------- reading


@dataclass
class Epoch:
    """A stretch of one job's life with one version of its spec, enabled or paused."""

    version: int
    schedule: str
    timezone: str
    enabled: bool
    begins_sent: float
    begins_answered: float
    first_slot: datetime | None  # next_fire_at of the answer that began it
    begun_by: str  # register | pause | resume | update
    ends_sent: float | None = None
    ends_answered: float | None = None
    ended_by: str | None = None
    jitter_s: int = 0  # the spec's jitter_seconds: a slot is released at its instant plus its jitter


@dataclass
class JobRecord:
    """The ledger's view of one job: what it is meant to do, and its epochs."""

    key: str
    kind: str
    job_id: str
    spec: dict[str, Any]
    fail_times: int
    meant_to_fail: bool
    parents: tuple[str, ...]
    runtime: str
    registered_sent: float
    registered_answered: float
    epochs: list[Epoch] = field(default_factory=list)
    # Backfill requests answered 202: (start, end, backfill id); every slot of the job's schedule
    # in [start, end) is owed exactly once (none had run: they are before the registration).
    backfills: list[tuple[datetime, datetime, str]] = field(default_factory=list)

    @property
    def max_attempts(self) -> int:
        return int((self.spec.get("retry") or {}).get("max_attempts", 3))

    @property
    def catches_up_all(self) -> bool:
        """The job's catch-up policy is ``all`` (the default): a resume runs every slot the pause owes."""
        return str((self.spec.get("catchup") or {}).get("policy", "all")) == "all"


@dataclass
class Run:
    """A finished run's ledger: the jobs, the phases, the run's own settings."""

    meta: dict[str, Any]
    jobs: dict[str, JobRecord]  # by key
    phases: dict[str, float]
    events: list[dict[str, Any]]

    @property
    def cut(self) -> float:
        return self.phases["faults_end"]

    def by_id(self) -> dict[str, JobRecord]:
        return {job.job_id: job for job in self.jobs.values()}


def _epoch_from(body: dict[str, Any], sent: float, answered: float, begun_by: str) -> Epoch:
    nxt = body.get("next_fire_at")
    return Epoch(
        version=int(body["version"]),
        schedule=str(body["schedule"]),
        timezone=str(body.get("timezone") or "UTC"),
        enabled=body.get("state") == "ENABLED",
        begins_sent=sent,
        begins_answered=answered,
        first_slot=instant(nxt) if nxt else None,
        begun_by=begun_by,
        jitter_s=int(body.get("jitter_seconds") or 0),
    )


def load(path: Path) -> Run:
    """Read ``ledger.jsonl`` into jobs with epochs."""
    events = read_jsonl(path)
    meta: dict[str, Any] = {}
    jobs: dict[str, JobRecord] = {}
    phases: dict[str, float] = {}
    for event in events:
        kind = event["event"]
        if kind == "run":
            meta = dict(event)
        elif kind == "phase":
            phases[str(event["name"])] = float(event["t"])
        elif kind == "register" and int(event.get("status", 0)) == 201:
            body = event["job"]
            job = JobRecord(
                key=event["key"],
                kind=event["kind"],
                job_id=str(body["id"]),
                spec=event["spec"],
                fail_times=int(event.get("fail_times", 0)),
                meant_to_fail=bool(event.get("meant_to_fail", False)),
                parents=tuple(event.get("parents", ())),
                runtime=str(body.get("runtime", "lambda")),
                registered_sent=float(event["sent"]),
                registered_answered=float(event["answered"]),
            )
            job.epochs.append(_epoch_from(body, job.registered_sent, job.registered_answered, "register"))
            jobs[job.key] = job
        elif kind == "backfill" and event.get("key") in jobs and int(event.get("status", 0)) == 202:
            body, asked = event["job"], event["spec"]
            jobs[event["key"]].backfills.append(
                (instant(asked["start"]), instant(asked["end"]), str(body["id"]))
            )
        elif kind in ("pause", "resume", "update") and event.get("key") in jobs:
            job = jobs[event["key"]]
            sent, answered = float(event["sent"]), float(event["answered"])
            if int(event.get("status", 0)) != 200:
                continue  # refused: nothing changed (the verdict still sees the event)
            body = event["job"]
            current = job.epochs[-1]
            if int(body["version"]) == current.version:
                continue  # a no-op (pausing a paused job)
            current.ends_sent, current.ends_answered, current.ended_by = sent, answered, kind
            job.epochs.append(_epoch_from(body, sent, answered, kind))
    return Run(meta=meta, jobs=jobs, phases=phases, events=events)


# --------------------------------------------------------------------------- what was due


@dataclass(frozen=True)
class SlotExpectation:
    """One slot of a time-scheduled job: owed or optional, and why."""

    slot: str
    instant: datetime
    owed: bool
    reason: str
    version: int


def _grid(schedule: Schedule, anchor: datetime | None, start: datetime, end: datetime) -> Iterator[datetime]:
    """The schedule's slots in ``[start, end]``; rate grids run through ``anchor``."""
    if schedule.kind == "rate" and anchor is not None:
        period = getattr(schedule, "period", None)
        if isinstance(period, timedelta) and period.total_seconds() > 0:
            step = period.total_seconds()
            k = math.floor((start.timestamp() - anchor.timestamp()) / step)
            moment = anchor + period * k
            count = 0
            while moment <= end and count < MAX_SLOTS_PER_EPOCH:
                if moment >= start:
                    yield moment
                moment += period
                count += 1
            return
    after = start - timedelta(seconds=1)
    count = 0
    while count < MAX_SLOTS_PER_EPOCH:
        nxt = schedule.next_after(after)
        if nxt is None or nxt > end:
            return
        yield nxt
        after = nxt
        count += 1


def backfilled_slots(job: JobRecord) -> dict[str, SlotExpectation]:
    """The slots a job's backfills owe: each slot of its schedule in a backfilled range."""
    out: dict[str, SlotExpectation] = {}
    if not job.backfills or not job.epochs:
        return out
    schedule = parse_schedule(job.epochs[0].schedule, job.epochs[0].timezone)
    for start, end, _ in job.backfills:
        for moment in _grid(schedule, None, start, end):
            if moment < end:
                out[slot_key(moment)] = SlotExpectation(slot_key(moment), moment, True, BACKFILLED, 1)
    return out


def time_slots(
    job: JobRecord, cut: float, horizon: float, skew_s: float, guard_s: float = GUARD_S
) -> dict[str, SlotExpectation]:
    """Every slot a time-scheduled job (rate, cron, at) had, owed or optional.

    Parameters
    ----------
    job
        The job and its epochs.
    cut
        Slots after this instant are optional (the faults ended here).
    horizon
        Nothing of the job is looked at after this (collection time).
    skew_s
        The largest clock offset any poller had: an old version's slot may be released
        this much before its instant, so up to this long after an update was answered.
    guard_s
        See the module docstring (pause and update edges).
    """
    out: dict[str, SlotExpectation] = {}
    anchor: datetime | None = None  # rate grids: a known slot of the current grid
    for index, epoch in enumerate(job.epochs):
        schedule = parse_schedule(epoch.schedule, epoch.timezone)
        if epoch.first_slot is not None and (anchor is None or not epoch.first_slot.microsecond):
            # (a resume that owes caught-up slots answers next_fire_at "now", milliseconds and all:
            # no slot of the grid, which goes on as it was; slots are whole seconds)
            anchor = epoch.first_slot
        start = at_epoch(epoch.begins_sent - SLACK_S)
        if epoch.ended_by is None:
            end = at_epoch(horizon)
        elif epoch.ended_by == "update":
            end = at_epoch((epoch.ends_answered or horizon) + skew_s + SLACK_S)
        else:
            end = at_epoch((epoch.ends_answered or horizon) + SLACK_S)
        previous = job.epochs[index - 1] if index else None
        for moment in _grid(schedule, anchor, start, end):
            t = moment.timestamp()
            owed, reason = True, "scheduled"
            if not epoch.enabled:
                owed, reason = False, "paused (catch-up may release it)"
                if _caught_up(job, epoch, t, cut, skew_s):
                    owed, reason = True, CAUGHT_UP
            elif epoch.first_slot is not None and moment < epoch.first_slot:
                owed, reason = False, f"before the first slot the {epoch.begun_by} answer reported"
            elif (
                epoch.ended_by is not None and epoch.ends_sent is not None and t >= epoch.ends_sent - guard_s
            ):
                owed, reason = False, f"within {guard_s:.0f}s before a {epoch.ended_by}"
            elif previous is not None and not previous.enabled and t <= epoch.begins_answered + SLACK_S:
                owed, reason = False, "released by the resume's catch-up"
            elif t > cut:
                owed, reason = False, "after the cut"
            key = slot_key(moment)
            known = out.get(key)
            if known is None or (known.owed and not owed):
                out[key] = SlotExpectation(key, moment, owed, reason, epoch.version)
    return out


def _caught_up(job: JobRecord, epoch: Epoch, t: float, cut: float, skew_s: float) -> bool:
    """A paused epoch's slot at ``t`` that the resume owes under catch-up ``all`` (module docstring)."""
    if not job.catches_up_all or epoch.ended_by != "resume" or epoch.ends_sent is None:
        return False
    resumed = epoch.ends_answered if epoch.ends_answered is not None else math.inf
    return epoch.begins_answered + skew_s + PAUSE_MARGIN_S < t < epoch.ends_sent - SLACK_S and resumed <= cut
