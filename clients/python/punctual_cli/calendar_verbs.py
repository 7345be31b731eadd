"""The calendar and backfill verbs of the ``punctual`` command.

``punctual calendars put|get|list|delete`` (``put --ics FILE`` imports the all-day events of an
iCalendar file, :mod:`punctual_cli.ics`), ``punctual jobs backfill JOB --from ... --to ...``, and
``punctual backfills get|cancel JOB BACKFILL``. Errors follow :mod:`punctual_cli.verb_kit`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from punctual.models import KeyGivenTwice, unique_keys
from punctual.timing.schedules import ScheduleError, format_instant, parse_instant
from punctual_cli.ics import IcsError, parse_ics
from punctual_cli.verb_kit import (
    CliInputError,
    api_client,
    common_options,
    emit,
    guarded,
    job_id_arg,
    listing_options,
    no_json_constant,
    read_input,
    table,
    version_arg,
    zone_arg,
)

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_RANGE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})\Z")


def _name(text: str) -> str:
    if not _NAME_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"a calendar name is 1-64 letters, digits, '-', '_' or '.', got {text[:80]!r}"
        )
    return text


def _instant_text(text: str) -> str:
    try:
        return format_instant(parse_instant(text))
    except ScheduleError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _day_range(text: str) -> dict[str, str]:
    match = _RANGE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"a range is FIRST..LAST (YYYY-MM-DD..YYYY-MM-DD), got {text[:80]!r}"
        )
    return {"start": match[1], "end": match[2]}


def read_ics(path: str) -> dict[str, Any]:
    """The calendar body of an iCalendar file ('-': stdin); CliInputError naming the problem."""
    text = read_input(path)
    try:
        found = parse_ics(text)
    except IcsError as exc:
        raise CliInputError(f"{path}: {exc}") from None
    if found.skipped_timed:
        sys.stderr.write(
            f"punctual: note: {found.skipped_timed} timed event(s) in {path} skipped (not whole days)\n"
        )
    if found.skipped_cancelled:
        sys.stderr.write(f"punctual: note: {found.skipped_cancelled} cancelled event(s) in {path} skipped\n")
    return found.spec()


# --------------------------------------------------------------------------- output


def _calendar_detail(calendar: Mapping[str, Any]) -> str:
    ranges = ", ".join(f"{r['start']}..{r['end']}" for r in calendar.get("ranges") or [])
    return (
        f"{calendar['name']}  version {calendar['version']}  [{calendar.get('timezone', 'UTC')}]\n"
        f"dates:  {', '.join(calendar.get('dates') or []) or '-'}\n"
        f"ranges: {ranges or '-'}\n"
    )


def _backfill_detail(backfill: Mapping[str, Any]) -> str:
    progress = ", ".join(f"{status} {count}" for status, count in (backfill.get("progress") or {}).items())
    return (
        f"backfill {backfill['id']} of job {backfill['job_id']}: {backfill['state']}"
        + (f" ({backfill['reason']})" if backfill.get("reason") else "")
        + "\n"
        f"range:    {backfill['start']} .. {backfill['end']} (end excluded)\n"
        f"slots:    {backfill['slots']} to run, {backfill['already_run']} already run,"
        f" {backfill['excluded']} excluded by calendars"
        + (f", {backfill['dropped']} dropped by a replace" if backfill.get("dropped") else "")
        + "\n"
        f"progress: {progress or '-'}\n"
        f"follow:   punctual backfills get {backfill['job_id']} {backfill['id']}\n"
    )


# --------------------------------------------------------------------------- verbs


def _cmd_calendars_put(args: argparse.Namespace, out: TextIO) -> int:
    if not (args.file or args.ics or args.date or args.range or args.empty):
        # (QA: it put an empty calendar over the days of the one it named: its jobs then fired on them)
        raise CliInputError(
            f"calendars put {args.name}: give its days (--date, --range, --ics or --file); --empty puts"
            " it with none"
        )
    if args.empty and (args.file or args.ics or args.date or args.range):
        # (QA: --empty --date D put the calendar with D: --empty said the opposite)
        raise CliInputError(
            f"calendars put {args.name}: --empty puts it with no days: give days or --empty, not both"
        )
    body: dict[str, Any] = {"timezone": "UTC", "dates": [], "ranges": []}
    if args.file:
        text = read_input(args.file)  # ('-': stdin, as --ics and jobs' --file)
        try:
            loaded = json.loads(text, parse_constant=no_json_constant, object_pairs_hook=unique_keys)
        except RecursionError:  # (QA21: an internal error)
            raise CliInputError(f"cannot read {args.file} as JSON: it is nested too deeply") from None
        except KeyGivenTwice as exc:
            raise CliInputError(f"{args.file}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise CliInputError(f"cannot read {args.file} as JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise CliInputError(f"{args.file}: a calendar is a JSON object")
        for key, each in (("dates", "a YYYY-MM-DD day"), ("ranges", 'a {"start", "end"} object')):
            # (QA: null was an internal error, a string was split into its characters)
            if key in loaded and not isinstance(loaded[key], list):
                raise CliInputError(f"{args.file}: {key} is a list, each item {each}")
        body.update(loaded)
    if args.ics:
        imported = read_ics(args.ics)
        body["timezone"] = imported["timezone"]
        body["dates"] = [*body["dates"], *imported["dates"]]
        body["ranges"] = [*body["ranges"], *imported["ranges"]]
    body["dates"] = [*body["dates"], *(args.date or [])]
    body["ranges"] = [*body["ranges"], *(args.range or [])]
    if args.tz:
        body["timezone"] = args.tz
    calendar = api_client(args).put_calendar(args.name, body, args.if_match)
    return emit(args, out, calendar, _calendar_detail)


def _cmd_calendars_get(args: argparse.Namespace, out: TextIO) -> int:
    return emit(args, out, api_client(args).get_calendar(args.name), _calendar_detail)


def _cmd_calendars_list(args: argparse.Namespace, out: TextIO) -> int:
    client = api_client(args)
    if args.all:
        page = {"items": list(client.iter_calendars()), "next_token": None}
    else:
        page = client.list_calendars(args.limit, args.next_token)

    def human(p: Mapping[str, Any]) -> str:
        rows = [
            [
                c["name"],
                c.get("timezone", ""),
                str(len(c.get("dates") or [])),
                str(len(c.get("ranges") or [])),
                str(c["version"]),
            ]
            for c in p["items"]
        ]
        text = table(rows, ["NAME", "TZ", "DATES", "RANGES", "VERSION"])
        return text + (f"\nmore: --next-token {p['next_token']}\n" if p.get("next_token") else "")

    return emit(args, out, page, human)


def _cmd_calendars_delete(args: argparse.Namespace, out: TextIO) -> int:
    api_client(args).delete_calendar(args.name, args.if_match)
    return emit(args, out, {"name": args.name, "deleted": True}, lambda d: f"deleted calendar {d['name']}\n")


def _cmd_jobs_backfill(args: argparse.Namespace, out: TextIO) -> int:
    backfill = api_client(args).backfill_job(
        args.job_id, args.start, args.end, args.include_dependants, args.max_parallel
    )
    return emit(args, out, backfill, _backfill_detail)


def _cmd_backfills_get(args: argparse.Namespace, out: TextIO) -> int:
    return emit(args, out, api_client(args).get_backfill(args.job_id, args.backfill_id), _backfill_detail)


def _cmd_backfills_cancel(args: argparse.Namespace, out: TextIO) -> int:
    return emit(args, out, api_client(args).cancel_backfill(args.job_id, args.backfill_id), _backfill_detail)


# --------------------------------------------------------------------------- parsers


def _parallel(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100, got {text!r}")
    return int(text)


def add_backfill_action(sub: Any, common: argparse.ArgumentParser) -> None:
    """``punctual jobs backfill JOB --from INSTANT --to INSTANT``."""
    backfill = sub.add_parser(
        "backfill",
        parents=[common],
        help="run a job's past slots in [--from, --to) that have no execution yet",
    )
    backfill.add_argument("job_id", metavar="JOB", type=job_id_arg)
    backfill.add_argument("--from", dest="start", required=True, type=_instant_text, metavar="INSTANT")
    backfill.add_argument(
        "--to", dest="end", required=True, type=_instant_text, metavar="INSTANT", help="excluded"
    )
    backfill.add_argument("--include-dependants", action="store_true", help="also run its after() jobs")
    backfill.add_argument(
        "--max-parallel", type=_parallel, metavar="N", help="slots in flight at once, 1-100"
    )
    backfill.set_defaults(handler=guarded(_cmd_jobs_backfill))


def add_backfills(verbs: Any) -> None:
    """``punctual backfills get|cancel JOB BACKFILL``."""
    common = common_options()
    group = verbs.add_parser(
        "backfills", help="follow or cancel a backfill (punctual jobs backfill starts one)"
    )
    sub = group.add_subparsers(dest="backfills_command", metavar="ACTION", parser_class=type(group))
    sub.required = True
    for action, text, run in (
        ("get", "a backfill's progress", _cmd_backfills_get),
        ("cancel", "cancel what has not started", _cmd_backfills_cancel),
    ):
        parser = sub.add_parser(action, parents=[common], help=text)
        parser.add_argument("job_id", metavar="JOB", type=job_id_arg)
        parser.add_argument("backfill_id", metavar="BACKFILL")
        parser.set_defaults(handler=guarded(run))


def add_calendars(verbs: Any) -> None:
    """``punctual calendars put|get|list|delete``."""
    common = common_options()
    group = verbs.add_parser("calendars", help="exclusion calendars: days jobs do not fire on")
    sub = group.add_subparsers(dest="calendars_command", metavar="ACTION", parser_class=type(group))
    sub.required = True

    put = sub.add_parser(
        "put", parents=[common], help="create or replace a calendar from --ics, --file, --date and --range"
    )
    put.add_argument("name", metavar="NAME", type=_name)
    put.add_argument(
        "--ics", metavar="PATH", help="import the all-day events of an iCalendar file ('-': stdin)"
    )
    put.add_argument(
        "--file", "-f", metavar="PATH", help="a calendar as JSON (timezone, dates, ranges; '-': stdin)"
    )
    put.add_argument("--empty", action="store_true", help="put the calendar with no days (it excludes none)")
    put.add_argument("--date", action="append", metavar="YYYY-MM-DD", help="a day to exclude (repeatable)")
    put.add_argument(
        "--range", action="append", type=_day_range, metavar="FIRST..LAST", help="days to exclude"
    )
    put.add_argument(
        "--tz", type=zone_arg, metavar="ZONE", help="the calendar's time zone (default: the file's, else UTC)"
    )
    put.add_argument("--if-match", type=version_arg("calendar"), metavar="VERSION")
    put.set_defaults(handler=guarded(_cmd_calendars_put))

    get = sub.add_parser("get", parents=[common], help="show a calendar")
    get.add_argument("name", metavar="NAME", type=_name)
    get.set_defaults(handler=guarded(_cmd_calendars_get))

    listing = sub.add_parser("list", parents=[common], help="list calendars")
    listing_options(listing)
    listing.set_defaults(handler=guarded(_cmd_calendars_list))

    delete = sub.add_parser("delete", parents=[common], help="delete a calendar no job uses")
    delete.add_argument("name", metavar="NAME", type=_name)
    delete.add_argument("--if-match", type=version_arg("calendar"), metavar="VERSION")
    delete.set_defaults(handler=guarded(_cmd_calendars_delete))
