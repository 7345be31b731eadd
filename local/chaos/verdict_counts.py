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
    under a claim older than :data:`STUCK_AFTER_S` when the ledger is read is a violation (a
    younger one is counted as still being delivered). Each rule's copy reached its endpoint (the receiver's
    ``/alert/<name>``) no more often than the tries it records, unless a worker of the job's lane
    was killed between two arrivals (delivery is at least once after a lost worker, as a target's
    call is), and a copy recorded SENT reached it at least once. ``failed`` alerts are complete:
    one per slot that ended FAILED or TIMED_OUT, none for any other slot. Violations of kind
    ``alert``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from local.chaos.ledger import JobRecord, instant
from punctual.models import AttemptRecord, Execution, ExecutionStatus

S = ExecutionStatus
TARGET_CALLS = "target calls"
ALERT = "alert"
FINISHED = ("SENT", "FAILED", "HELD")

Violate = Callable[[str, JobRecord, str, str], None]
# An alert still SENDING under a claim this old when the ledger is read is stuck: a live owner
# renews its claim after each rule (a rule takes at most 35 s), and a dead one's sweep takes it
# over 55 s after its last claim (punctual.delivery.notifications.sweep).
STUCK_AFTER_S = 120.0


def _age_s(alert: dict[str, Any], now: float) -> float:
    claimed = alert.get("claimed_at")
    if not claimed:
        return float("inf")
    return now - datetime.fromisoformat(str(claimed).replace("Z", "+00:00")).timestamp()


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
    """Counts the target's calls per attempt (see the module docstring).

    ``receiver_at``: when the receiver's records were taken; an attempt that ended after it may
    have called the target after it too, so it is not held to a call.
    """

    def __init__(self, receiver_at: float) -> None:
        self.figures: Counter[str] = Counter()
        self.receiver_at = receiver_at

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
                ended = attempt.finished_at.timestamp() if attempt.finished_at else None
                if ended is None or ended >= self.receiver_at:
                    continue  # not ended before the receiver's records were taken
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
    """Counts alerts per (slot, condition) and their arrivals (see the module docstring).

    ``collected_at``: when the ledger was read. An alert SENDING then under a claim (or a renewal)
    younger than :data:`STUCK_AFTER_S` is still being delivered by a live owner, or its sweep is
    not due yet: counted, not judged. ``cut``: only the failures of slots due by then (owed,
    settled before the collection) are compared with the ledger; later slots may still be running
    while the records and the alerts are read, one after the other. ``alerts_before``: the ledger
    as read before the records (None: not read), which tells an alert made while the records were
    read from a stray one.
    """

    def __init__(
        self,
        arrivals: list[dict[str, Any]],
        collected_at: float,
        alerts_before: dict[str, list[dict[str, Any]]] | None = None,
        cut: float | None = None,
    ) -> None:
        self.figures: Counter[str] = Counter()
        self.cut = cut
        self.collected_at = collected_at
        self.alerts_before = alerts_before
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
        in_flight = status not in FINISHED and _age_s(alert, self.collected_at) < STUCK_AFTER_S
        self.figures[f"{condition} {'still being delivered' if in_flight else status}"] += 1
        if status not in FINISHED and not in_flight:
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
            if in_flight and name not in tries:
                continue  # its tries are recorded once the rule's delivery ends
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
        cut = self.cut

        def owed(slot: str) -> bool:
            return cut is None or instant(slot).timestamp() <= cut

        failed = {s for s, e in records.items() if e.status in (S.FAILED, S.TIMED_OUT) and owed(s)}
        ledger = Counter(
            str(a.get("key_slot"))
            for a in alerts
            if a.get("condition") == "failed" and owed(str(a.get("key_slot")))
        )
        self.figures["failed slots"] += len(failed)
        for slot in sorted(failed - set(ledger)):
            violate(ALERT, job, slot, "ended FAILED but has no failed alert")
        before = self.alerts_before
        early = None
        if before is not None:
            early = {
                str(a.get("key_slot")) for a in before.get(job.job_id, []) if a.get("condition") == "failed"
            }
        for slot in sorted(set(ledger) - failed):
            record = records.get(slot)
            ended = record is not None and record.status.terminal
            if early is None and record is not None and not ended:
                continue  # it failed after its record was read (the ledger is read after the records)
            if early is not None and slot not in early and not ended:
                continue  # made while the table was read: its slot failed after its record was read
            status = record.status.value if record is not None else "no record"
            violate(ALERT, job, slot, f"a failed alert for a slot that did not fail ({status})")
        for slot, count in sorted(ledger.items()):
            if count > 1:
                violate(ALERT, job, slot, f"{count} failed alerts in the ledger")

    def note(self) -> str:
        return "alerts per (slot, condition): " + (
            ", ".join(f"{k} {v}" for k, v in sorted(self.figures.items())) or "-"
        )
