"""The ``punctual`` command.

Each verb is one ``_add_<verb>`` function that registers its sub-parser and sets
``handler`` to a function ``(args, out) -> int``; :data:`VERBS` lists them, so a new
verb is a new pair of functions and one entry there.

Exit statuses and errors (never a traceback; stderr lines start ``punctual: error:``):

- 0: done (``--help`` too). A warning or note (``punctual: warning: ...``, ``punctual: note: ...``)
  may go to stderr beside the output.
- 2, one line on stderr: input found bad here, before or without asking the API (argparse's
  errors, a schedule ``punctual next`` cannot read, a file that does not parse, a time zone that
  is not a place).
- 2 or 1, one or two lines on stderr: an error the API answered
  (:func:`punctual_cli.verb_kit.guarded`). The first line is its status, title and detail
  (``punctual: error: 422 Invalid request: ...``); when the answer lists field errors, a
  second line, indented two spaces, gives them all (``  field: message; field: message``).
  Exit 2 for invalid input (400, 413, 415, 422), 1 for any other (404, 409, 412, 429, 5xx) and
  when the API cannot be reached (``punctual: error: cannot reach URL: ...``) or a request cannot
  be signed.
- 1, one line: a bug (``punctual: error: internal error: ...``).

Nothing is printed on stdout when the status is not 0.
"""

from __future__ import annotations

import argparse
import errno
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn, TextIO

from pydantic import ValidationError

from punctual.runtime.clock import SystemClock
from punctual.timing.schedules import (
    AT_FIRES_ONCE,
    DstOptions,
    ScheduleError,
    check_new_expression,
    format_instant,
    parse_instant,
    parse_schedule,
)
from punctual.usecases.calendars import (
    MAX_SKIPPED_IN_A_ROW,
    Calendar,
    included_slots,
    preview_step,
    stopped_by_cap,
)
from punctual_cli.api_verbs import API_VERBS
from punctual_cli.ics import IcsError, parse_ics
from punctual_cli.verb_kit import CliInputError, one_line, read_input, zone_arg

PROG = "punctual"
MAX_COUNT = 1000

Handler = Callable[[argparse.Namespace, TextIO], int]


class UsageError(Exception):
    """Bad input found after argument parsing; reported like an argparse error."""


# argparse's error that the verb (COMMAND, or a verb's ACTION) is missing or not one it knows
VERB_ARGUMENT = re.compile(
    r"^(?:the following arguments are (required): (?:COMMAND|ACTION)\b"
    r"|argument (?:COMMAND|ACTION): invalid (choice))"
)


_DASHED_ID = re.compile(r"-[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")  # a job id that starts with '-'
_SHORT_FLAGS = ("-o",)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and never exit mid-way through a test."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(" ".join(message.split()))

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """A missing verb after a flag no one knows names that flag (QA: ``punctual --bogus`` said
        only that a COMMAND was required): the flags a verb takes go after it."""
        try:
            return super().parse_known_args(args, namespace)
        except UsageError as exc:
            given = list(args) if args is not None else sys.argv[1:]
            flags = [a for a in given if a.startswith("-") and a not in ("-h", "--help", "--version")]
            if not flags or "after the verb" in str(exc) or "is read as a flag" in str(exc):
                raise
            dashed = [a for a in flags if _DASHED_ID.fullmatch(a) and a[:2] not in _SHORT_FLAGS]
            if "JOB" in str(exc) and dashed:  # (QA32: 'required: JOB' for 'runs list -x1', an id)
                hint = f"put -- before an id that starts with '-' (-- {dashed[0]})"
                raise UsageError(f"{exc}; {dashed[0]} is read as a flag: {hint}") from None
            # Only where the verb is what is missing or wrong (QA24: 'runs list --status FAILED'
            # without its JOB said --status was no flag of runs list, and 'jobs list --state
            # BOGUS' that --state goes after the verb)
            verb = VERB_ARGUMENT.search(str(exc))
            if verb and verb[1] and flags[0] not in self._option_string_actions:
                hint = f"{flags[0]} is not a flag of {self.prog} (a verb's flags go after the verb)"
            elif verb and verb[2] and given and given[0].startswith("-"):
                hint = f"{given[0]} goes after the verb"
            else:
                raise
            raise UsageError(f"{exc}; {hint}") from None


def _instant(text: str) -> datetime:
    try:
        return parse_instant(text)
    except ScheduleError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text[:20]}' is not a whole number") from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_COUNT}, got {value}")
    return value


# -- next ---------------------------------------------------------------------------------


def _add_next(verbs: argparse._SubParsersAction[_Parser]) -> None:
    parser = verbs.add_parser(
        "next",
        help="print the next slots of a schedule expression",
        description=(
            "Print the next slots of EXPRESSION, one per line, as YYYY-MM-DDTHH:MM:SSZ (UTC). "
            "delay(...) prints only its first slot; after(...) has no time slots."
        ),
    )
    parser.add_argument(
        "expression", metavar="EXPRESSION", help="cron(...), 5-field cron, rate(...), at(...), delay(...)"
    )
    parser.add_argument(
        "--tz", type=zone_arg, default="UTC", metavar="ZONE", help="IANA time zone (default: UTC)"
    )
    parser.add_argument(
        "--after", type=_instant, metavar="INSTANT", help="slots strictly after this instant (default: now)"
    )
    parser.add_argument(
        "--start",
        type=_instant,
        metavar="INSTANT",
        help="anchor of rate(...) and delay(...) (default: the --after instant); ignored by other kinds",
    )
    parser.add_argument(
        "--dst-gap",
        choices=("shift", "skip"),
        help="as a job's dst.gap: a local time skipped by spring-forward fires after the gap (shift, "
        "the default) or not at all (skip)",
    )
    parser.add_argument(
        "--dst-repeat",
        choices=("first", "both"),
        help="as a job's dst.repeat: a local time repeated by fall-back fires on its first pass "
        "(first, the default) or on both",
    )
    parser.add_argument(
        "--count", type=_count, default=5, metavar="N", help=f"how many slots, 1-{MAX_COUNT} (default: 5)"
    )
    parser.add_argument(
        "--exclude-ics",
        metavar="PATH",
        help="skip slots on the all-day events of this iCalendar file ('-': stdin)",
    )
    parser.add_argument(
        "--exclude-date", action="append", metavar="YYYY-MM-DD", help="skip slots on this day (repeatable)"
    )
    parser.add_argument(
        "--exclude-tz",
        type=zone_arg,
        metavar="ZONE",
        help="the zone of the excluded days (default: the file's, else --tz)",
    )
    parser.add_argument(
        "--show-excluded", action="store_true", help="also print the slots skipped, marked 'excluded'"
    )
    parser.set_defaults(handler=_cmd_next)


def _cmd_next(args: argparse.Namespace, out: TextIO) -> int:
    # The only place this verb reads the clock; the schedule code never does.
    after: datetime = args.after if args.after is not None else SystemClock().now()
    # No --start: the schedule's own default anchor, `after` (so rate's first slot is after + N).
    anchor: datetime | None = args.start
    dst = DstOptions(args.dst_gap, args.dst_repeat) if args.dst_gap or args.dst_repeat else None
    try:
        check_new_expression(args.expression)  # as a job's schedule is checked
        schedule = parse_schedule(args.expression, args.tz, dst, now=after)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None
    if schedule.kind == "at" and args.dst_repeat == "both":  # as a job of it is refused
        raise UsageError(f"argument --dst-repeat: {AT_FIRES_ONCE}")
    if schedule.kind == "after":
        raise UsageError(
            f"{schedule.expression} has no time slots: after(...) jobs fire when their parents succeed"
        )
    if not (args.exclude_ics or args.exclude_date):
        slots = schedule.slots(after, anchor, args.count)
        if not slots:  # as a job of it would be refused: say so, not an empty answer
            raise UsageError(f"{schedule.compared()} has no slot after {format_instant(after)}")
        out.write("".join(f"{format_instant(slot)}\n" for slot in slots))
        return 0
    calendar = _exclusions(args)
    passed: list[datetime] = []  # listed one by one only when shown: else passed over a day run at once
    listing = passed if args.show_excluded else None
    count = 1 if schedule.kind == "delay" else args.count  # (its first slot only, as without calendars)
    slots = included_slots(preview_step(schedule, after, anchor), after, [calendar], count, listing)
    if len(slots) < count and stopped_by_cap(slots, passed):  # as the API's preview: 422
        raise UsageError(f"the excluded days pass over more than {MAX_SKIPPED_IN_A_ROW} slots in a row")
    shown = [(slot, "") for slot in slots]
    if args.show_excluded:
        last = slots[-1] if slots else None
        shown += [(slot, "  excluded") for slot in passed if last is None or slot < last]
    out.write("".join(f"{format_instant(slot)}{mark}\n" for slot, mark in sorted(shown)))
    return 0


def _exclusions(args: argparse.Namespace) -> Calendar:
    """The days ``punctual next`` skips, as one calendar (from --exclude-ics and --exclude-date),
    in --exclude-tz, else the file's X-WR-TIMEZONE, else the schedule's --tz."""
    body: dict[str, Any] = {"dates": list(args.exclude_date or []), "ranges": []}
    file_zone = None
    if args.exclude_ics:
        try:  # as every file option: '-' is stdin, at most 10 MB (QA26: /dev/zero was read for ever)
            found = parse_ics(read_input(args.exclude_ics))
        except CliInputError as exc:
            raise UsageError(str(exc)) from None
        except IcsError as exc:
            raise UsageError(f"{args.exclude_ics}: {exc}") from None
        file_zone = found.timezone
        if file_zone and not args.exclude_tz:  # checked as --exclude-tz is: a place
            try:
                zone_arg(file_zone)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{args.exclude_ics}: X-WR-TIMEZONE: {exc}") from None
        body["dates"] += found.dates
        body["ranges"] += found.ranges
    body["timezone"] = args.exclude_tz or file_zone or args.tz
    now = SystemClock().now()
    try:
        return Calendar.model_validate({**body, "name": "next", "created_at": now, "updated_at": now})
    except ValidationError as exc:
        raise UsageError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None


# -- the command ----------------------------------------------------------------------------

VERBS: list[Callable[[argparse._SubParsersAction[_Parser]], None]] = [_add_next, *API_VERBS]


def build_parser() -> argparse.ArgumentParser:
    """The ``punctual`` argument parser with every verb in :data:`VERBS`."""
    parser = _Parser(prog=PROG, description="Punctual: a serverless, distributed job scheduler.")
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    verbs.required = True
    for add in VERBS:
        add(verbs)
    return parser


class OutputError(Exception):
    """Standard output could not be written (a full disk, a closed pipe end)."""


class _Output:
    """Standard output whose write errors are :class:`OutputError` (a broken pipe stays one)."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            if self.stream is None:  # started with it closed (`>&-`): Python has no sys.stdout (QA26)
                raise OSError(errno.EBADF, "standard output is closed")
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError from exc

    def flush(self) -> None:
        try:
            if self.stream is not None:
                self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``punctual`` command.

    Parameters
    ----------
    argv
        The arguments after the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 on success, 2 for invalid input, 1 for an error the API answered
        other than invalid input or for a bug (see the module docstring).
    """
    out, err = _Output(sys.stdout), sys.stderr
    try:
        args = build_parser().parse_args(argv)
        handler: Handler = args.handler
        status = handler(args, out)  # type: ignore[arg-type]
        out.flush()
        return status
    except UsageError as exc:
        err.write(f"{PROG}: error: {one_line(str(exc))}\n")
        return 2
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:  # `punctual next ... | head -1`
        return 0
    except KeyboardInterrupt:  # Ctrl-C (QA: a traceback); what was sent may have been done
        err.write(f"{PROG}: interrupted\n")
        return 130
    except OutputError as exc:  # (QA: "internal error", the job it made and its secret unsaid)
        cause = one_line(str(exc.__cause__))
        err.write(
            f"{PROG}: error: the output could not be written ({cause}); what was asked of the API was done\n"
        )
        return 1
    except Exception as exc:  # a bug, not bad input: still one line, but status 1
        err.write(f"{PROG}: error: internal error: {type(exc).__name__}: {one_line(str(exc))}\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
