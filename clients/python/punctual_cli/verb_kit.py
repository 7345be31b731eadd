"""What every API verb of the ``punctual`` command shares: the common options, the API client they
build, argument types, output (a table or JSON) and the guard that turns errors into exit statuses.

The verb modules (:mod:`punctual_cli.api_verbs`, :mod:`punctual_cli.run_verbs`,
:mod:`punctual_cli.calendar_verbs`) build on it; none imports another's helpers (``jobs`` registers
the ``runs`` verbs beside its own).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from punctual.timing.schedules import ScheduleError, check_place, validate_timezone
from punctual_cli.client import DEFAULT_ENDPOINT, ApiError, ClientInputError, PunctualClient

INPUT_STATUSES = frozenset({400, 413, 415, 422})
_JOB_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class CliInputError(Exception):
    """Bad input found by a verb (a file that does not parse, missing flags): exit 2."""


# More than any request the API takes (API Gateway's 10 MB payload): not a spec, calendar or iCalendar
# file (QA24: `--file /dev/zero` read for ever).
MAX_INPUT_BYTES = 10 * 1024 * 1024


def read_input(path: str) -> str:
    """The UTF-8 text of the file at ``path`` ('-': standard input), at most ``MAX_INPUT_BYTES``;
    CliInputError naming the problem."""
    try:
        if path == "-":
            stdin = getattr(sys.stdin, "buffer", None)
            raw = stdin.read(MAX_INPUT_BYTES + 1) if stdin else sys.stdin.read(MAX_INPUT_BYTES + 1).encode()
        else:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise CliInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise CliInputError(f"cannot read {path}: it is over {MAX_INPUT_BYTES // 2**20} MB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CliInputError(f"cannot read {path}: it is not UTF-8 text") from None


def no_json_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON numbers (refused)."""
    raise ValueError(f"{name} is not a JSON number")


def cut(text: Any, width: int) -> str:
    """``text`` in at most ``width`` characters, an ellipsis for what is cut."""
    value = "" if text is None else str(text)
    return value if len(value) <= width else value[: width - 1] + "…"


def marked_status(record: Mapping[str, Any]) -> str:
    """A record's status, marked when it is a deleted job's (the API's ``job_deleted``; QA28: the
    history of a job created again at its id listed the deleted job's failures as its own)."""
    return f"{record['status']} (deleted job)" if record.get("job_deleted") else str(record["status"])


def table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip()
        for row in [headers, *rows]
    ]
    return "\n".join(lines) + "\n"


# C0 and C1 control characters and the bidirectional overrides and isolates: in a text the API
# answered they are written out (``\x1b``), never sent to the terminal
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(data: Any) -> Any:
    """``data`` (an answer of the API) with each control character of its texts written out as an
    escape: ``\\x1b``, ``\\n``, ``\\u202e``. A slot's error quotes what its target answered (a
    webhook receiver's body, a Lambda's error): QA28, an ANSI sequence in it cleared or retitled
    the operator's terminal, a line break split its row of the table."""
    if isinstance(data, str):
        return _UNPRINTABLE.sub(lambda found: found[0].encode("unicode_escape").decode("ascii"), data)
    if isinstance(data, Mapping):
        return {key: printable(value) for key, value in data.items()}
    if isinstance(data, list):
        return [printable(value) for value in data]
    return data


def emit(args: argparse.Namespace, out: TextIO, data: Any, human: Callable[[Any], str]) -> int:
    """``data`` on ``out``: as JSON (which escapes control characters itself), or as ``human``
    writes it for people, from its :func:`printable` texts."""
    if args.output == "json":
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        out.write(human(printable(data)))
    return 0


def api_client(args: argparse.Namespace) -> PunctualClient:
    for option in ("tenant", "endpoint", "idempotency_key"):
        if getattr(args, option, None) == "":  # given, but empty: never silently another value
            raise CliInputError(f"--{option.replace('_', '-')} must not be empty")
    try:
        return PunctualClient(
            endpoint=args.endpoint or os.environ.get("PUNCTUAL_ENDPOINT") or DEFAULT_ENDPOINT,
            sign=True if args.sign else None,
            region=args.region,
            tenant=args.tenant or os.environ.get("PUNCTUAL_TENANT") or None,
        )
    except ValueError as exc:
        raise CliInputError(str(exc)) from None


def common_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--endpoint", metavar="URL", help=f"API base URL (env PUNCTUAL_ENDPOINT; default {DEFAULT_ENDPOINT})"
    )
    parent.add_argument("--output", "-o", choices=("table", "json"), default="table", help="output format")
    parent.add_argument(
        "--sign", action="store_true", help="sign with SigV4 even if the host is not execute-api"
    )
    parent.add_argument("--region", metavar="REGION", help="SigV4 region (default: from the endpoint host)")
    parent.add_argument("--tenant", metavar="NAME", help="local mode only: the tenant (env PUNCTUAL_TENANT)")
    return parent


def job_id_arg(text: str) -> str:
    if not _JOB_ID_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"a job id is 1-64 letters, digits, '-' or '_', got {text[:80]!r}")
    return text


def version_arg(kind: str) -> Callable[[str], int]:
    """The argparse type of ``--if-match`` for a ``kind`` (job, calendar): a whole number."""

    def version(text: str) -> int:
        digits = text.strip('"')
        if not (digits.isascii() and digits.isdigit()):
            raise argparse.ArgumentTypeError(f"a {kind} version is a whole number, got {text[:80]!r}")
        return int(digits)

    return version


def zone_arg(text: str) -> str:
    """The argparse type of a time zone: what a new job may name (the core's rule for a job's
    ``timezone``: a known IANA place; not ``localtime``, ``posixrules``, ``posix/...``)."""
    try:
        validate_timezone(text)
        check_place(text)
    except ScheduleError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("timezone: ")) from None
    return text


def limit_arg(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100, got {text!r}")
    return int(text)


def verb_group(verbs: Any, name: str, help_text: str) -> tuple[argparse.ArgumentParser, Any]:
    """A verb with actions (``punctual NAME ACTION``): the options its actions share, and the
    place to add them."""
    group = verbs.add_parser(name, help=help_text)
    sub = group.add_subparsers(dest=f"{name}_command", metavar="ACTION", parser_class=type(group))
    sub.required = True
    return common_options(), sub


def listing_options(listing: argparse.ArgumentParser, default_limit: int = 50) -> None:
    """A listing's paging flags: ``--limit`` (a page's size), and ``--next-token`` or ``--all``, not
    both (QA24: ``--all`` began at the first page and ignored the token given, even a forged one)."""
    listing.add_argument(
        "--limit",
        type=limit_arg,
        default=default_limit,
        metavar="N",
        help=f"page size, 1-100 (default {default_limit})",
    )
    pages = listing.add_mutually_exclusive_group()
    pages.add_argument("--next-token", metavar="TOKEN")
    pages.add_argument("--all", action="store_true", help="follow every page")


def guarded(run: Callable[[argparse.Namespace, TextIO], int]) -> Callable[[argparse.Namespace, TextIO], int]:
    """Errors become lines on stderr and an exit status, never a traceback: bad input found here
    (:class:`CliInputError`, :class:`ClientInputError`) one line, exit 2; an error the API answers
    (:class:`ApiError`) its summary on one line, then its field errors (if any) on a second, exit 2
    for :data:`INPUT_STATUSES`, else 1 (other 4xx, 5xx, and no answer at all)."""

    def handler(args: argparse.Namespace, out: TextIO) -> int:
        err = sys.stderr
        try:
            return run(args, out)
        except (CliInputError, ClientInputError) as exc:
            err.write(f"punctual: error: {one_line(str(exc))}\n")
            return 2
        except ApiError as exc:
            err.write(f"punctual: error: {one_line(exc.summary())}\n")
            if exc.errors:  # every one of them: fixing five at a time is no way to work
                fields = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in exc.errors)
                err.write(f"  {one_line(fields)}\n")
            return 2 if exc.status in INPUT_STATUSES else 1

    return handler


def one_line(text: str) -> str:
    """``text`` with its whitespace runs as one space: an answer's detail (a proxy's HTML page)
    may hold line breaks, and each error is one line; its control characters written out
    (:func:`printable`): a server that is not the API is quoted in it."""
    folded: str = printable(" ".join(text.split()))
    return folded
