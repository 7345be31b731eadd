"""Next-slot computations per second: punctual's schedule engine against bare croniter
and cronsim on the same expressions, with and without a time zone.

Each measurement walks successive slots (``t = next(t)``) from 2026-01-01 in chunks of
200, restarting the chain each chunk, for a fixed time budget per cell; the figure is
the best of three rounds. punctual is timed on both the AWS form and the equivalent
Unix form of each expression (croniter and cronsim only read the Unix form; AWS
expressions must never be handed to croniter, which misreads them). The "agree"
column says whether the three engines produce the same first 400 slots; where they
do not, it names the first slot that differs (theirs vs punctual's): DST handling
(see NOTES: croniter fires a fixed-time job twice on a fall-back night) or a
feature the library lacks.

Usage: ``python bench/schedule_bench.py [--budget SECONDS] [--json PATH | --no-json]``
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from zoneinfo import ZoneInfo

import croniter
import cronsim

from punctual.timing.schedules import parse_schedule

START = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 200
AGREE = 400  # slots compared for the "agree" column: daily slots reach both DST nights of 2026
ROUNDS = 3
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "schedule.json"

# (label, AWS expression, equivalent Unix expression)
EXPRESSIONS: list[tuple[str, str, str]] = [
    ("every minute", "cron(* * * * ? *)", "* * * * *"),
    ("every 5 minutes", "cron(0/5 * * * ? *)", "*/5 * * * *"),
    ("weekdays 09:00", "cron(0 9 ? * MON-FRI *)", "0 9 * * 1-5"),
    ("business quarter-hours", "cron(0/15 8-18 ? * MON-FRI *)", "*/15 8-18 * * 1-5"),
    ("daily 02:30", "cron(30 2 * * ? *)", "30 2 * * *"),
    ("1st and 15th 02:30", "cron(30 2 1,15 * ? *)", "30 2 1,15 * *"),
    ("last day of month", "cron(0 12 L * ? *)", "0 12 L * *"),
    ("first Monday 09:00", "cron(0 9 ? * 2#1 *)", "0 9 * * 1#1"),
    ("yearly", "cron(0 0 1 1 ? *)", "0 0 1 1 *"),
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York"]

Step = Callable[[], object]


@dataclass
class Row:
    label: str
    aws: str
    unix: str
    zone: str
    punctual_aws: float
    punctual_unix: float | None  # None: the Unix form is beyond Vixie cron (L, #)
    croniter: float
    cronsim: float
    agree: str


def rate(make_chain: Callable[[], Step], budget: float) -> float:
    """Best-of-ROUNDS next-slot computations per second within ``budget`` seconds."""
    best = 0.0
    for _ in range(ROUNDS):
        done = 0
        began = time.perf_counter()
        deadline = began + budget / ROUNDS
        while True:
            step = make_chain()
            for _ in range(CHUNK):
                step()
            done += CHUNK
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, done / (now - began))
    return best


def punctual_chain(expression: str, zone: str) -> Callable[[], Step]:
    schedule = parse_schedule(expression, zone)  # parsed once, as a poller's cache would

    def make() -> Step:
        state = [START]

        def step() -> object:
            nxt = schedule.next_after(state[0])
            state[0] = nxt if nxt is not None else START
            return nxt

        return step

    return make


def start_in(zone: str) -> datetime:
    # croniter and cronsim compute in the zone of the start datetime; naive = no zone.
    return START.replace(tzinfo=None) if zone == "UTC" else START.astimezone(ZoneInfo(zone))


def croniter_chain(expression: str, zone: str) -> Callable[[], Step]:
    def make() -> Step:
        it = croniter.croniter(expression, start_in(zone))
        return lambda: it.get_next(datetime)

    return make


def cronsim_chain(expression: str, zone: str) -> Callable[[], Step]:
    def make() -> Step:
        it = cronsim.CronSim(expression, start_in(zone))
        return lambda: next(it)

    return make


def first_slots(make_chain: Callable[[], Step], count: int) -> list[int]:
    step = make_chain()
    out = []
    for _ in range(count):
        value = step()
        if not isinstance(value, datetime):  # punctual stops after 2199
            break
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        out.append(int(stamp.timestamp()))
    return out


def stamp(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%MZ")


def agreement(aws: str, unix: str, zone: str) -> str:
    ours = first_slots(punctual_chain(aws, zone), AGREE)
    if vixie(unix) and first_slots(punctual_chain(unix, zone), AGREE) != ours:
        return "AWS/Unix differ!"
    verdicts = []
    for name, chain in (("croniter", croniter_chain), ("cronsim", cronsim_chain)):
        try:
            theirs = first_slots(chain(unix, zone), AGREE)[: len(ours)]
        except Exception as exc:  # a library that cannot read the expression
            verdicts.append(f"{name}: {type(exc).__name__}")
            continue
        if theirs != ours:
            index = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b)
            verdicts.append(f"{name} {stamp(theirs[index])} vs {stamp(ours[index])}")
    return "; ".join(verdicts) or "yes"


def vixie(unix: str) -> bool:
    """Whether punctual reads the Unix form (it keeps 5-field cron to Vixie's syntax)."""
    return not any(marker in unix for marker in ("L", "#", "W"))


def measure(budget: float) -> list[Row]:
    rows = []
    per_cell = budget
    for zone in ZONES:
        for label, aws, unix in EXPRESSIONS:
            rows.append(
                Row(
                    label=label,
                    aws=aws,
                    unix=unix,
                    zone=zone,
                    punctual_aws=rate(punctual_chain(aws, zone), per_cell),
                    punctual_unix=rate(punctual_chain(unix, zone), per_cell) if vixie(unix) else None,
                    croniter=rate(croniter_chain(unix, zone), per_cell),
                    cronsim=rate(cronsim_chain(unix, zone), per_cell),
                    agree=agreement(aws, unix, zone),
                )
            )
    return rows


def kilo(value: float | None) -> str:
    return f"{value / 1000:8.1f}k" if value is not None else f"{'-':>9}"


def table(rows: list[Row]) -> str:
    head = (
        f"{'expression':<24} {'zone':<16} {'punctual':>9} {'(unix)':>9} {'croniter':>9} {'cronsim':>9}"
        f" {'x croniter':>10} {'x cronsim':>9}  agree"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        speeds = " ".join(kilo(v) for v in (r.punctual_aws, r.punctual_unix, r.croniter, r.cronsim))
        ratios = f"{r.punctual_aws / r.croniter:9.1f}x {r.punctual_aws / r.cronsim:8.1f}x"
        lines.append(f"{r.label:<24} {r.zone:<16} {speeds} {ratios}  {r.agree}")
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--budget", type=float, default=0.15, help="seconds per library and cell (default 0.15)"
    )
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"write results here (default {DEFAULT_JSON})"
    )
    parser.add_argument("--no-json", action="store_true", help="do not write the JSON file")
    args = parser.parse_args()

    began = time.perf_counter()
    rows = measure(args.budget)
    elapsed = time.perf_counter() - began
    print("Next-slot computations per second (successive slots from 2026-01-01; best of 3)")
    print(table(rows))
    ratio_croniter = geomean([r.punctual_aws / r.croniter for r in rows])
    ratio_cronsim = geomean([r.punctual_aws / r.cronsim for r in rows])
    print(
        f"\ngeometric mean: punctual {ratio_croniter:.1f}x croniter, {ratio_cronsim:.1f}x cronsim"
        f"  ({platform.python_implementation()} {platform.python_version()}, croniter {version('croniter')},"
        f" cronsim {version('cronsim')}; {elapsed:.0f} s)"
    )
    if not args.no_json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "benchmark": "schedule next-slot computations per second",
            "python": platform.python_version(),
            "versions": {name: version(name) for name in ("punctual", "croniter", "cronsim")},
            "machine": platform.machine(),
            "start": START.isoformat(),
            "rows": [asdict(r) for r in rows],
            "geomean_ratio": {"croniter": ratio_croniter, "cronsim": ratio_cronsim},
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
