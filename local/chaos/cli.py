"""``python -m local.chaos`` (also ``punctual-local chaos``): run a chaos run, judge one, show a plan.

``run``      start local mode, register the workload, inject faults for ``--minutes`` /
             ``--seconds``, settle, collect, judge; prints the fault log and the verdict's
             details on stderr and the one-line verdict last on stdout; exits 1 on any
             violation (each named, a p99 fire delay over ``--max-p99-delay-s`` included),
             2 if the run itself could not be carried out
``verdict``  judge a finished run again from its directory (``--max-p99-delay-s`` overrides
             the bound the run recorded)
``plan``     print the fault plan a seed gives (the same seed, the same faults)
``region-loss``  two or three Regions over one table, one of them lost whole for a minute and
             brought back (:mod:`local.chaos.region_loss`); the same verdict, and the fire
             delay while the Region was down
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from local.arg_types import parsed, seconds_behind, share

if TYPE_CHECKING:  # imported when a command runs: `punctual-local` builds this parser on every start
    from local.chaos.faults.driver import FaultOptions
    from local.chaos.verdict_data import Verdict


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_parser(prog: str = "python -m local.chaos") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Chaos runs of local mode: faults, then a verdict."
    )
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND")
    verbs.required = True
    for name in ("run", "plan"):
        sub = verbs.add_parser(name, help="run a chaos run" if name == "run" else "print a seed's fault plan")
        length = sub.add_mutually_exclusive_group()
        length.add_argument("--minutes", type=_positive, help="faults for this long (default 10)")
        length.add_argument("--seconds", type=_positive, help="faults for this long")
        sub.add_argument("--seed", type=int, help="the run's seed (default: random, printed)")
        sub.add_argument("--kill-every", type=_positive, metavar="S", help="mean seconds between kills (5)")
        sub.add_argument("--duplicate-every", type=_positive, metavar="S", help="... between re-sends (2.5)")
        sub.add_argument("--skew-every", type=_positive, metavar="S", help="... between clock offsets (120)")
        sub.add_argument("--max-skew", type=_not_negative, metavar="S", help="largest clock offset (5)")
        sub.add_argument("--throttle", type=share, metavar="RATE", help="share of AWS calls throttled (0.05)")
        sub.add_argument(
            "--stale-reads",
            type=seconds_behind,
            metavar="S",
            help="DynamoDB's eventually consistent reads up to S behind (1)",
        )
        sub.add_argument(
            "--transaction-conflicts",
            type=share,
            metavar="SHARE",
            help="share of writes on items a transaction holds cancelled for a conflict (0.1)",
        )
        sub.add_argument(
            "--phase",
            choices=("pollers", "workers", "both"),
            help="a sustained-fault phase instead of the mixed faults: a kill every 2-4 s of its "
            "processes, nothing else (default length 60 s)",
        )
        if name == "run":
            sub.add_argument(
                "--dir", type=Path, help="run directory (default .local/chaos/<time>-seed<seed>)"
            )
            sub.add_argument(
                "--settle", type=_positive, metavar="S", help="longest wait for owed slots to end"
            )
            _delay_bound(sub)
    lose = verbs.add_parser(
        "region-loss", help="Regions over one table, one lost for a minute (docs/multi-region.md)"
    )
    lose.add_argument("--seconds", type=_positive, default=240.0, help="the run before settling (240)")
    lose.add_argument("--seed", type=int, help="the run's seed (default: random, printed)")
    lose.add_argument("--regions", type=int, default=3, help="2 or 3 Regions (3)")
    lose.add_argument("--lose", default="b", help="the Region lost: b or c (a hosts the embedded AWS)")
    lose.add_argument("--down-at", type=float, default=60.0, metavar="S", help="lost at +S seconds (60)")
    lose.add_argument("--down-for", type=float, default=60.0, metavar="S", help="for S seconds (60)")
    lose.add_argument("--workers", type=int, default=2, help="Lambda worker processes per Region (2)")
    lose.add_argument("--dir", type=Path, help="run directory (default .local/chaos/<time>-seed<seed>)")
    lose.add_argument("--settle", type=_positive, metavar="S", help="longest wait for owed slots to end")
    _delay_bound(lose)
    judge = verbs.add_parser("verdict", help="judge a finished run again")
    judge.add_argument("dir", type=Path)
    _delay_bound(judge)
    return parser


def _positive(text: str) -> float:
    """A length of time or a bound: a number above 0 (QA22: ``--minutes -1`` ran "-60s of faults")."""
    value = parsed(text, "a number")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a number above 0, not {text}")
    return value


def _not_negative(text: str) -> float:
    """A fault's size: 0 or more (QA22: ``--max-skew -5`` ran, its offsets drawn between -5 and 1)."""
    value = parsed(text, "a number")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a number 0 or above, not {text}")
    return value


def _delay_bound(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--max-p99-delay-s",
        type=_positive,
        metavar="S",
        help="fail when the p99 fire delay (slot instant to first request) is above this (10)",
    )


def _seconds(args: argparse.Namespace) -> float:
    if args.seconds is not None:
        return float(args.seconds)
    if args.minutes is None and args.phase:
        return 60.0
    return float(args.minutes if args.minutes is not None else 10.0) * 60.0


def _options(args: argparse.Namespace) -> FaultOptions:
    from local.chaos.faults.driver import FaultOptions

    given = {
        "kill_every_s": args.kill_every,
        "duplicate_every_s": args.duplicate_every,
        "skew_every_s": args.skew_every,
        "max_skew_s": args.max_skew,
        # A sustained-fault phase throttles nothing unless asked: only its kills.
        "throttle_rate": args.throttle if args.throttle is not None or not args.phase else 0.0,
        "stale_reads_s": args.stale_reads,
        "transaction_conflicts": args.transaction_conflicts,
    }
    return FaultOptions(**{k: v for k, v in given.items() if v is not None})


SHOWN_VIOLATIONS = 25


def report(verdict: Verdict, run_dir: Path | None = None) -> None:
    """Details on stderr (notes, then violations), the one line on stdout; every violation to a file."""
    for note in verdict.notes:
        _err(f"chaos: {note}")
    if verdict.violations:
        kinds: dict[str, int] = {}
        for violation in verdict.violations:
            kinds[violation.kind] = kinds.get(violation.kind, 0) + 1
        _err("chaos: violations by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        for violation in verdict.violations[:SHOWN_VIOLATIONS]:
            _err(f"chaos: VIOLATION {violation}")
        if run_dir is not None:
            path = run_dir / "violations.txt"
            path.write_text("".join(f"{violation}\n" for violation in verdict.violations))
            if len(verdict.violations) > SHOWN_VIOLATIONS:
                _err(f"chaos: ... and {len(verdict.violations) - SHOWN_VIOLATIONS} more in {path}")
    print(verdict.line(), flush=True)


def _interrupt_on_sigterm() -> None:
    """A SIGTERM (``timeout``, a CI job cancelled) ends a run as Ctrl-C does, through the runs'
    ``finally``, which stops the local modes they started: each runs in a process group of its own,
    out of the signal's reach (QA22: a runner ended by ``timeout`` left a whole local mode running)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: Sequence[str] | None = None, prog: str = "python -m local.chaos") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command in ("run", "region-loss"):  # the commands that start local modes
        _interrupt_on_sigterm()
    try:
        return _command(args)
    except KeyboardInterrupt:
        _err("chaos: interrupted; the local modes it started are stopped")
        return 130


def _command(args: argparse.Namespace) -> int:
    from local.chaos.verdict import judge_dir

    if args.command == "verdict":
        try:
            verdict = judge_dir(args.dir, args.max_p99_delay_s)
        except (OSError, ValueError) as exc:  # not a finished run's directory
            _err(f"chaos: cannot judge {args.dir}: {exc}")
            return 2
        report(verdict, args.dir)
        return 0 if verdict.ok else 1
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    if args.command == "region-loss":
        return region_loss(args, seed)
    seconds = _seconds(args)
    if args.command == "plan":
        from local.chaos.faults.driver import plan_faults
        from local.chaos.workload import Scale, plan_jobs, plan_mutations

        rng = random.Random(seed)
        jobs = plan_jobs(rng, Scale.for_duration(seconds), datetime.now(UTC), seconds)
        if args.phase:
            from local.chaos.faults.sustained import plan_sustained

            plan = plan_sustained(rng, seconds, args.phase)
        else:
            plan = plan_faults(rng, seconds, _options(args), plan_mutations(rng, jobs, seconds))
        print(f"seed {seed}: {len(jobs)} jobs, {len(plan)} faults")
        for fault in plan:
            print(f"+{fault.at_s:7.2f}s {fault.describe()}")
        return 0
    from local.chaos.runner import ChaosConfig, ChaosRun

    config = ChaosConfig(
        seconds=seconds, seed=seed, run_dir=args.dir, settle_max_s=args.settle, phase=args.phase or ""
    )
    config = replace(config, faults=_options(args))
    if args.max_p99_delay_s is not None:
        config = replace(config, max_p99_delay_s=args.max_p99_delay_s)
    phase = (
        (
            lambda run, verdict: _err(
                f"chaos: sustained-fault phase '{args.phase}' (a kill every 2-4 s for {seconds:.0f} s):"
            )
        )
        if args.phase
        else None
    )
    return _run_and_report(lambda: ChaosRun(config, _err), "chaos", phase)


def _run_and_report(make: Any, name: str, after: Any = None) -> int:
    """Run ``make()``'s run and report its verdict: 0 when it holds, 1 on a violation, 2 when the
    run itself failed; ``after(run, verdict)`` adds its lines before the verdict's."""
    try:
        chaos_run = make()
        verdict = chaos_run.run()
    except Exception as exc:
        _err(f"{name}: the run failed: {type(exc).__name__}: {exc}")
        return 2
    if after is not None:
        after(chaos_run, verdict)
    report(verdict, chaos_run.run_dir)
    return 0 if verdict.ok else 1


def region_loss(args: argparse.Namespace, seed: int) -> int:
    """``region-loss``: exit 0 when the verdict holds, 1 on a violation, 2 when the run failed."""
    from local.chaos.region_loss import RegionLossConfig, RegionLossRun, outage_line

    config = RegionLossConfig(
        seconds=args.seconds,
        seed=seed,
        run_dir=args.dir,
        settle_max_s=args.settle,
        regions=args.regions,
        lost=args.lose,
        down_at_s=args.down_at,
        down_for_s=args.down_for,
        workers=args.workers,
    )
    if args.max_p99_delay_s is not None:
        config = replace(config, max_p99_delay_s=args.max_p99_delay_s)
    try:
        config.check()
    except ValueError as exc:
        _err(f"region-loss: {exc}")
        return 2
    return _run_and_report(
        lambda: RegionLossRun(config, _err),
        "region-loss",
        lambda run, verdict: _err(outage_line(run.run_dir, verdict)),
    )


class _RunChaos(argparse.Action):
    """``punctual-local chaos ...``: hand everything after ``chaos`` to :func:`main`."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        parser.exit(main(list(values) or ["--help"], prog="punctual-local chaos"))


def register(verbs: Any) -> None:
    """Add ``chaos`` to ``punctual-local``'s subcommands (called from :mod:`local.cli`)."""
    sub = verbs.add_parser("chaos", help="chaos runs: faults while jobs fire, then a verdict", add_help=False)
    sub.add_argument("args", nargs=argparse.REMAINDER, action=_RunChaos)
