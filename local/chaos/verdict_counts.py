"""Two counts the verdict keeps beside its per-slot checks: target calls and alerts.

target calls
    per attempt of every slot, the requests the job's target (the receiver's hook) got: each
    attempt is called at most once (a second call of one attempt is also a ``duplicate``,
    named by the verdict's own check), and an attempt whose record holds the target's answer
    (SUCCEEDED, or FAILED with an ``HTTP`` status) was called exactly once; one that was not is
    a violation of kind ``target calls``. An attempt lost with its worker, or handed back, may
    have called it or not.

alerts
    per (job, key slot, condition) of the alert ledger (every alert record of the run's jobs, read
    from the table; one record per key by construction): it ended delivered (SENT), visibly
    given up (FAILED, with its tries and last error) or held back (HELD); one still SENDING
    after the settle is a violation. Each rule's copy reached its endpoint (the receiver's
    ``/alert/<name>``) no more often than the tries it records, unless a worker of the job's lane
    was killed between two arrivals (delivery is at least once after a lost worker, as a target's
    call is), and a copy recorded SENT reached it at least once. ``failed`` alerts are complete:
    one per slot that ended FAILED or TIMED_OUT, none for any other slot. Violations of kind
    ``alert``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from local.chaos.ledger import JobRecord
from punctual.models import AttemptRecord, Execution, ExecutionStatus

S = ExecutionStatus
TARGET_CALLS = "target calls"
ALERT = "alert"
FINISHED = ("SENT", "FAILED", "HELD")

Violate = Callable[[str, JobRecord, str, str], None]


def _answered(attempt: AttemptRecord | Execution) -> bool:
    """The attempt's record holds the target's own answer (so the target was called)."""
    return attempt.status is S.SUCCEEDED or (
        attempt.status is S.FAILED and (attempt.error or "").startswith("HTTP ")
    )


def _attempts(record: Execution) -> list[AttemptRecord | Execution]:
    """Every attempt the record knows of: those it lists, and its current one once ended."""
    listed: list[AttemptRecord | Execution] = list(record.attempts)
    if record.status.terminal and not any(a.attempt == record.attempt for a in record.attempts):
        listed.append(record)
    return listed


class TargetCalls:
    """Counts the target's calls per attempt (see the module docstring)."""

    def __init__(self) -> None:
        self.figures: Counter[str] = Counter()

    def count(
        self,
        job: JobRecord,
        records: dict[str, Execution],
        requests: dict[str, list[dict[str, Any]]],
        violate: Violate,
    ) -> None:
        for slot in sorted(set(records) | set(requests)):
            calls = Counter(int(r.get("attempt") or 0) for r in requests.get(slot, []))
            for n in calls.values():
                self.figures["attempts called once" if n == 1 else "attempts called more than once"] += 1
            record = records.get(slot)
            if record is None:
                continue
            for attempt in _attempts(record):
                if _answered(attempt) and calls.get(attempt.attempt, 0) == 0:
                    self.figures["answered attempts never called"] += 1
                    violate(
                        TARGET_CALLS,
                        job,
                        slot,
                        f"attempt {attempt.attempt} is recorded {attempt.status.value} by the target, "
                        "which the receiver never saw called",
                    )

    def note(self) -> str:
        return "target calls per attempt: " + (
            ", ".join(f"{k} {v}" for k, v in sorted(self.figures.items())) or "-"
        )


def endpoint_of(rule: dict[str, Any]) -> str:
    """The receiver endpoint an alert rule's HTTP target names (``/alert/<name>``)."""
    url = str((rule.get("target") or {}).get("url") or "")
    return urlsplit(url).path.removeprefix("/alert/").strip("/")


def _key_of(arrival: dict[str, Any]) -> str:
    """An alert arrival's Idempotency-Key (``<job>:<key slot>#alert-<condition>``)."""
    if arrival.get("key"):
        return str(arrival["key"])
    body = arrival.get("body") or {}
    return f"{body.get('job_id')}:{body.get('slot')}#alert-{body.get('condition')}"


class AlertCounts:
    """Counts alerts per (slot, condition) and their arrivals (see the module docstring)."""

    def __init__(self, arrivals: list[dict[str, Any]]) -> None:
        self.figures: Counter[str] = Counter()
        self.arrivals: dict[tuple[str, str], list[float]] = defaultdict(list)
        for arrival in arrivals:
            name = str(arrival.get("name") or "")
            self.arrivals[(name, _key_of(arrival))].append(float(arrival.get("arrived") or 0.0))

    def count(
        self,
        job: JobRecord,
        records: dict[str, Execution],
        alerts: list[dict[str, Any]],
        kills: list[float],
        violate: Violate,
    ) -> None:
        rules = list(job.spec.get("alerts") or [])
        if not rules:
            return
        for alert in alerts:
            self._one(job, rules, alert, kills, violate)
        if any("failed" in (rule.get("on") or []) for rule in rules):
            self._failed_complete(job, records, alerts, violate)

    def _one(
        self,
        job: JobRecord,
        rules: list[dict[str, Any]],
        alert: dict[str, Any],
        kills: list[float],
        violate: Violate,
    ) -> None:
        slot, condition, status = (
            str(alert.get("key_slot")),
            str(alert.get("condition")),
            str(alert.get("status")),
        )
        self.figures[f"{condition} {status}"] += 1
        if status not in FINISHED:
            violate(ALERT, job, slot, f"the {condition} alert was left {status}")
        key = f"{job.job_id}:{slot}#alert-{condition}"
        tries: Counter[str] = Counter()
        sent: set[str] = set()
        for delivery in alert.get("deliveries") or []:
            index = int(delivery.get("rule", -1))
            if not 0 <= index < len(rules):
                continue
            name = endpoint_of(rules[index])
            tries[name] += int(delivery.get("tries") or 0)
            if delivery.get("status") == "SENT":
                sent.add(name)
        names = set(tries) or {endpoint_of(rule) for rule in rules if condition in (rule.get("on") or [])}
        for name in sorted(names):
            times = sorted(self.arrivals.get((name, key), []))
            self.figures["arrivals"] += len(times)
            self.figures["tries recorded"] += tries.get(name, 0)
            if name in sent and not times:
                violate(
                    ALERT, job, slot, f"the {condition} alert is recorded SENT to {name} but never reached it"
                )
            allowed = tries.get(name, 1)
            if len(times) > allowed:
                if times and any(times[0] <= t <= times[-1] for t in kills):
                    self.figures["re-sent after a lost worker"] += len(times) - allowed
                else:
                    self.figures["arrivals over the tries"] += len(times) - allowed
                    violate(
                        ALERT,
                        job,
                        slot,
                        f"the {condition} alert reached {name} {len(times)} times "
                        f"for {allowed} recorded tries",
                    )

    def _failed_complete(
        self, job: JobRecord, records: dict[str, Execution], alerts: list[dict[str, Any]], violate: Violate
    ) -> None:
        failed = {slot for slot, e in records.items() if e.status in (S.FAILED, S.TIMED_OUT)}
        ledger = Counter(str(a.get("key_slot")) for a in alerts if a.get("condition") == "failed")
        self.figures["failed slots"] += len(failed)
        for slot in sorted(failed - set(ledger)):
            violate(ALERT, job, slot, "ended FAILED but has no failed alert")
        for slot in sorted(set(ledger) - failed):
            status = records[slot].status.value if slot in records else "no record"
            violate(ALERT, job, slot, f"a failed alert for a slot that did not fail ({status})")
        for slot, count in sorted(ledger.items()):
            if count > 1:
                violate(ALERT, job, slot, f"{count} failed alerts in the ledger")

    def note(self) -> str:
        return "alerts per (slot, condition): " + (
            ", ".join(f"{k} {v}" for k, v in sorted(self.figures.items())) or "-"
        )
