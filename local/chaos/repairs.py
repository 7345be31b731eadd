"""The chain auditor's repairs in a chaos run (issue 28): the expected number is zero.

Local mode runs the auditor (:mod:`local.auditor`) through the whole run, faults and settling
included; each chain it repaired published a ``Chain Repaired`` event, which the receiver kept
(``GET /events``). A repair means some path ended a job's chain while the job was ENABLED (or left
a slot in flight for good): every one is a violation of kind ``chain repaired``, naming the job,
what was repaired and why, so that the run fails and the bug is chased.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from typing import Any

CHAIN_REPAIRED = "Chain Repaired"
KIND = "chain repaired"


def fetch(receiver_url: str) -> list[dict[str, Any]]:
    """Every ``Chain Repaired`` event the receiver got (its ``detail``)."""
    try:
        with urllib.request.urlopen(f"{receiver_url}/events", timeout=10) as reply:
            events = json.loads(reply.read())["events"]
    except (OSError, ValueError, KeyError):
        return []
    return [dict(e["detail"]) for e in events if e.get("detail-type") == CHAIN_REPAIRED and "detail" in e]


def describe(repair: dict[str, Any]) -> str:
    """One repair as the verdict names it."""
    missed = int(repair.get("missed_count") or 0)
    lost = f", {missed} slot(s) lost from {repair.get('missed_from')}" if missed else ""
    return f"{repair.get('repair')} repair ({repair.get('error')}); next {repair.get('next_slot')}{lost}"


def violations(found: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """One violation (kind, job, slot, detail) per repair: every one is a bug to chase."""
    return [
        (KIND, str(r.get("job_id")), str(r.get("missed_from") or r.get("next_slot") or ""), describe(r))
        for r in found
    ]


def count_text(violations_: Iterable[Any]) -> str:
    """``chain repairs N`` for the verdict's line (expected 0)."""
    return f"chain repairs {sum(1 for v in violations_ if v.kind == KIND)}"
