"""Local-mode figures of issue 32, run by ``bench/local_mode.py``: bursts of one-time and recurring jobs
side by side (registered inside the near lane and beyond it), and registration through job batches.

* **Bursts, at() vs recurring.** The same burst of ``n`` jobs due at one instant, as one-time
  ``at()`` jobs and as ``rate(1 day)`` jobs, registered a few seconds before the instant (near
  lane: their timers are read every second) and more than the far threshold before it (far lane:
  read once, ahead). A one-time job's slot used to cost the poller a transaction per job on its
  release path (its COMPLETED mark); now the worker marks it, so both kinds should drain alike.
* **Registration through job batches.** ``POST /v1/job-batches`` (up to 500 jobs per request,
  each validated on its own) beside the single-job ``POST /v1/jobs`` the other sections use.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from local.harness import BATCH_TIMEOUT_S, LocalMode

FAR_LEAD_S = 200.0  # more than the 180 s far threshold: the burst's timers are far timers
BATCH = 500


def _wait_until(instant: datetime) -> None:
    while (left := (instant - datetime.now(UTC)).total_seconds()) > 0:
        time.sleep(min(left, 1.0))


def _batched(local: LocalMode, specs: list[dict[str, Any]], prefix: str, threads: int = 2) -> float:
    """Register ``specs`` through ``POST /v1/job-batches``; the seconds it took."""

    def one(start: int) -> None:
        chunk = specs[start : start + BATCH]
        body = {"jobs": [{"id": f"{prefix}-{start + i:07d}", "job": spec} for i, spec in enumerate(chunk)]}
        for attempt in range(5):
            status, reply = local.api("POST", "/v1/job-batches", body, timeout_s=BATCH_TIMEOUT_S)
            if status == 200 and reply["failed"] == 0:
                return
            if status == 200:  # some failed for good: a repeat registers what is missing
                problems = {r["problem"]["title"] for r in reply["results"] if r["status"] == "failed"}
                if not problems <= {"Too many requests", "Service unavailable"}:
                    raise RuntimeError(f"a batch failed: {problems}")
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeError("a batch kept failing")

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(0, len(specs), BATCH)))
    return time.perf_counter() - began


def one_burst(local: LocalMode, n: int, kind: str, lead_s: float | None) -> dict[str, Any]:
    """``n`` jobs of ``kind`` ("at" or "recurring") due at one instant, ``lead_s`` after they are
    registered (None: as soon as they are); slot -> receipt of each, and the last."""
    hook = f"kind-{kind}-{'far' if lead_s else 'near'}-{n}"
    since = len(local.records())
    slot = (datetime.now(UTC) + timedelta(seconds=max(lead_s or 0.0, 8.0 + n / 40))).replace(microsecond=0)
    if lead_s:
        slot = slot.replace(second=0) + timedelta(minutes=1)  # a whole minute: the far lane's bucket
    schedule = (
        {"schedule": f"at({slot:%Y-%m-%dT%H:%M:%S})"}
        if kind == "at"
        else {"schedule": "rate(1 day)", "start_at": slot.isoformat()}
    )
    specs = [
        {
            "name": f"{kind} {i}",
            **schedule,
            "target": {"type": "http", "url": local.hook(hook)},
            "timeout_seconds": 30,
        }
        for i in range(n)
    ]
    registered_s = _batched(local, specs, hook)
    ahead_s = (slot - datetime.now(UTC)).total_seconds()

    def arrived() -> list[dict[str, Any]]:
        records = [r for r in local.records(since) if r.get("name") == hook]
        return records if len({r["key"] for r in records}) >= n else []

    _wait_until(slot)
    records = local.wait(arrived, timeout_s=max(120.0, n * 0.3), what=f"{n} {kind} receipts", interval_s=1.0)
    first: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r["arrived"]):
        first.setdefault(str(r["key"]), r)
    receipt = sorted(r["arrived"] - slot.timestamp() for r in first.values())
    return {
        "jobs": n,
        "kind": kind,
        "lane": "far" if lead_s else "near",
        "registered_s": registered_s,
        "registered_ahead_s": ahead_s,
        "p50_s": receipt[len(receipt) // 2],
        "p99_s": receipt[min(len(receipt) - 1, int(len(receipt) * 0.99))],
        "last_s": receipt[-1],
        "duplicates": len(records) - len(first),
    }


def burst_matrix(local: LocalMode, n: int) -> list[dict[str, Any]]:
    """One-time and recurring bursts of ``n``, near lane and far lane."""
    out = []
    for lead_s in (None, FAR_LEAD_S):
        for kind in ("at", "recurring"):
            result = one_burst(local, n, kind, lead_s)
            out.append(result)
            print(
                f"  {n:,} {kind} ({result['lane']} lane,"
                f" registered {result['registered_ahead_s']:.0f} s ahead):"
                f" p50 {result['p50_s']:.1f} s, p99 {result['p99_s']:.1f} s, last {result['last_s']:.1f} s",
                flush=True,
            )
    return out


def batch_registration(local: LocalMode, jobs: int) -> dict[str, Any]:
    """``jobs`` daily jobs (their slots far off) registered through job batches: jobs a second."""
    now = datetime.now(UTC)
    spec = {
        "schedule": f"cron({now.minute} {(now.hour + 12) % 24} * * ? *)",
        "target": {"type": "http", "url": local.hook("batch-registered")},
    }
    seconds = _batched(local, [dict(spec, name=f"batch {i}") for i in range(jobs)], "batch")
    status, page = local.api("GET", "/v1/jobs?limit=1")
    assert status == 200, page
    return {"jobs": jobs, "batch_size": BATCH, "seconds": seconds, "jobs_per_s": jobs / seconds}
