"""The ``punctual runs`` verbs: a job's execution history through the API (``runs list``, ``runs
get``), as tables or JSON."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from punctual.models import ExecutionStatus
from punctual.timing.timers import is_slot_key, slot_key_of
from punctual_cli import verb_kit as kit
from punctual_cli.client import follow_pages


def _range_of(run: Mapping[str, Any]) -> tuple[int, str] | None:
    """A MISSED range record's slot count and last slot (None: the record is one slot's)."""
    count, last = run.get("slot_count") or 1, run.get("last_slot")
    return (count, last) if count > 1 and last else None


def _run_rows(runs: Sequence[Mapping[str, Any]]) -> str:
    # A range record stands for many slots: say so (QA23: it read as one missed slot)
    rows = [
        [
            f"{r['slot']}..{span[1]}" if (span := _range_of(r)) else r["slot"],
            kit.marked_status(r),
            str(r["attempt"]),
            r.get("started_at") or "-",
            r.get("finished_at") or "-",
            kit.cut((f"{span[0]} slots: " if span else "") + (r.get("error") or ""), 40),
        ]
        for r in runs
    ]
    return kit.table(rows, ["SLOT", "STATUS", "ATTEMPT", "STARTED", "FINISHED", "ERROR"])


def _run_detail(run: Mapping[str, Any]) -> str:
    head = (
        f"job        {run['job_id']}\nslot       {run['slot']}\nscheduled  {run['scheduled_at']}\n"
        f"status     {kit.marked_status(run)} (attempt {run['attempt']})\n"
    )
    if span := _range_of(run):  # (a slot inside a range is answered with it: range_slot its first)
        mine = " (this slot is one of them)" if run.get("range_slot") else ""
        head += f"slots      {span[0]}, {run.get('range_slot') or run['slot']} to {span[1]}{mine}\n"
    if run.get("result"):
        head += f"result     {kit.cut(run['result'], 100)}\n"
    attempts = [
        [
            str(a["attempt"]),
            a["status"],
            a.get("started_at") or "-",
            a.get("finished_at") or "-",
            kit.cut(a.get("error") or "", 50),
        ]
        for a in run.get("attempts", [])
    ]
    return head + "\n" + kit.table(attempts, ["ATTEMPT", "STATUS", "STARTED", "FINISHED", "ERROR"])


def _cmd_runs_list(args: argparse.Namespace, out: TextIO) -> int:
    client = kit.api_client(args)
    window = {"since": args.since, "until": args.until}
    if args.all:  # (the pages' job_deleted kept: review of QA32, -o json dropped it)
        deleted: list[bool] = []

        def fetch(size: int, token: str | None) -> dict[str, Any]:
            page = client.list_executions(args.job_id, args.status, size, token, **window)
            deleted.append(bool(page.get("job_deleted")))
            return page

        runs = list(follow_pages(fetch))
        whole = {"items": runs, "next_token": None, "job_deleted": any(deleted)}
        return kit.emit(args, out, whole, lambda p: _run_rows(p["items"]))
    page = client.list_executions(args.job_id, args.status, args.limit, args.next_token, **window)
    items = list(page["items"])
    # A filtered page may be short, even empty (the API reads 2,000 records a page): fill it.
    while len(items) < args.limit and page.get("next_token"):
        size = args.limit - len(items)
        page = client.list_executions(args.job_id, args.status, size, page["next_token"], **window)
        items += page["items"]
    page = {**page, "items": items}

    def human(p: Mapping[str, Any]) -> str:
        text = _run_rows(p["items"])
        return text + (f"\nmore: --next-token {p['next_token']}\n" if p.get("next_token") else "")

    return kit.emit(args, out, page, human)


def _cmd_runs_get(args: argparse.Namespace, out: TextIO) -> int:
    first, dots, last = (args.slot or "").partition("..")
    if dots and is_slot_key(first) and is_slot_key(last):
        args.slot = first  # a MISSED range as runs list prints it (QA24: "is not a slot key", exit 2)
    args.slot = slot_key_of(args.slot) or args.slot  # (its instant in another RFC 3339 form: QA32)
    if args.slot and not is_slot_key(args.slot):  # (QA: the API's 404, exit 1, for what is bad input)
        raise kit.CliInputError(
            f"{args.slot[:80]!r} is not a slot key: its UTC instant, as 2026-11-30T02:00:00Z"
        )
    return kit.emit(args, out, kit.api_client(args).get_execution(args.job_id, args.slot), _run_detail)


def add_runs(verbs: Any) -> None:
    """``punctual runs list JOB`` and ``punctual runs get JOB SLOT``."""
    common, sub = kit.verb_group(verbs, "runs", "a job's execution history through the API")

    listing = sub.add_parser("list", parents=[common], help="a job's executions, newest first")
    listing.add_argument("job_id", metavar="JOB", type=kit.job_id_arg)
    listing.add_argument("--status", choices=[status.value for status in ExecutionStatus])
    listing.add_argument(
        "--since", metavar="INSTANT", help="slots at or after it (RFC 3339, e.g. 2026-11-30T02:00:00+01:00)"
    )
    listing.add_argument("--until", metavar="INSTANT", help="slots before it (RFC 3339)")
    kit.listing_options(listing, default_limit=20)
    listing.set_defaults(handler=kit.guarded(_cmd_runs_list))

    get = sub.add_parser("get", parents=[common], help="one execution with every attempt")
    get.add_argument("job_id", metavar="JOB", type=kit.job_id_arg)
    get.add_argument("slot", metavar="SLOT", help="e.g. 2026-11-30T09:32:00Z")
    get.set_defaults(handler=kit.guarded(_cmd_runs_get))
