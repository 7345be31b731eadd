"""The chain auditor: every ENABLED job has a live chain, checked in production, repaired when not.

The invariant, per kind of job (:mod:`.liveness` holds the definitions):

* ``cron``, ``rate``, ``at``: a FIRE/CATCHUP timer of the job's current version for its *head*, the
  first slot released after ``now - grace`` (kept after it fires, so a slot released a moment ago
  still counts), or a timer of the chain written within the grace (a catch-up in progress); a job
  with no slot left is COMPLETED within the grace of its last slot.
* ``delay(...)``: its newest run in flight, or the timer its last run's end (or its last change)
  wrote, not yet released long ago (released past the grace, its message perhaps lost, it is
  released again: a run still waiting is kept to one by the claim; counted
  ``DelayRunsReleasedAgain``, not reported as a repair).
* ``after(...)``: every parent that exists lists it as a dependant (the link that dispatches it).
* in flight, for ``delay`` jobs' newest run and ``skip``/``queue`` jobs' turn: a RETRY_WAIT slot
  is retried, a lapsed lease taken over, a queued slot handed the turn, each within
  ``inflight_grace`` of when its own timer was due; a running backfill steps.

:mod:`.auditor` checks it segment by segment (no leader: each minute's run takes its share),
:mod:`.repairs` repairs what is broken from the job's next slot, with the slots lost recorded as
one MISSED record (``chain repaired``), and reports each repair (``Chain Repaired`` event,
``ChainsBroken``/``ChainsRepaired`` metrics, the alarm on them).
"""

from __future__ import annotations

from punctual.auditing.auditor import AuditConfig, AuditReport, ChainAuditor, segments_for
from punctual.auditing.repairs import CHAIN_REPAIRED, Repair, Repairer

__all__ = [
    "CHAIN_REPAIRED",
    "AuditConfig",
    "AuditReport",
    "ChainAuditor",
    "Repair",
    "Repairer",
    "segments_for",
]
