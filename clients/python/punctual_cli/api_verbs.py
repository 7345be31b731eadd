"""The API verbs of the ``punctual`` command: ``jobs ...``, and ``runs ...`` (:mod:`punctual_cli.run_verbs`).

Registered by :mod:`punctual_cli.cli` through :data:`API_VERBS`. Every verb talks to the API
with :class:`~punctual_cli.client.PunctualClient`: endpoint from ``--endpoint`` or
``PUNCTUAL_ENDPOINT`` (default: local mode's ``http://127.0.0.1:8080``), SigV4 when the
endpoint is API Gateway (or ``--sign``). Output is a table for people, ``--output json``
for scripts. An API error prints the problem in one or two lines on stderr and exits 2
for invalid input (400, 413, 415, 422), 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, TextIO, cast

from punctual.models import JobSpec, KeyGivenTwice, unique_keys
from punctual.models.targets import target_arn
from punctual_cli.calendar_verbs import add_backfill_action, add_backfills, add_calendars
from punctual_cli.client import ApiError, PunctualClient
from punctual_cli.retries import RetryPolicy
from punctual_cli.run_verbs import add_runs
from punctual_cli.spec_check import require_schedule_and_target
from punctual_cli.verb_kit import (
    CliInputError,
    api_client,
    cut,
    emit,
    guarded,
    job_id_arg,
    limit_arg,
    listing_options,
    marked_status,
    no_json_constant,
    read_input,
    table,
    verb_group,
    version_arg,
    zone_arg,
)

# --------------------------------------------------------------------------- output


TEXT_PAYLOAD_TYPE = "text/plain; charset=utf-8"  # what --payload-text sends a webhook as


def _unreadable(job: Mapping[str, Any]) -> str | None:
    """What to show for a stored job the API cannot read (``unreadable: true``: only its id, state,
    version and reason), else None (QA24: ``jobs list`` and ``jobs get`` failed with an internal
    error, KeyError 'schedule', so one such job hid the tenant's every job from the table)."""
    if not job.get("unreadable"):
        return None
    return (
        f"cannot be read by this version: {job.get('reason')} "
        f"(replace it: jobs update {job['id']} --file SPEC --replace --if-match {job['version']};"
        " or delete it)"
    )


def _job_rows(jobs: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            j["id"],
            cut(j.get("name"), 30),
            j["state"],
            cut("(unreadable: see jobs get)" if j.get("unreadable") else j["schedule"], 32),
            j.get("timezone", ""),
            j.get("next_fire_at") or "-",
            str(j["version"]),
        ]
        for j in jobs
    ]
    return table(rows, ["ID", "NAME", "STATE", "SCHEDULE", "TZ", "NEXT FIRE", "VERSION"])


def _job_detail(job: Mapping[str, Any]) -> str:
    if (why := _unreadable(job)) is not None:
        return f"id       {job['id']}\nstate    {job['state']}\nversion  {job['version']}\nerror    {why}\n"
    target = job.get("target") or {}
    pairs = [
        ("id", job["id"]),
        ("name", job.get("name") or ""),
        ("state", job["state"] + (f" ({job['state_reason']})" if job.get("state_reason") else "")),
        ("schedule", f"{job['schedule']}  [{job.get('timezone', 'UTC')}]"),
        ("next fire", job.get("next_fire_at") or "-"),
        ("target", _target_text(target)),
        ("runtime", f"{job.get('runtime')}, timeout {job.get('timeout_seconds')} s"),
        ("retry", ", ".join(f"{k}={v}" for k, v in (job.get("retry") or {}).items())),
        ("tags", ", ".join(f"{k}={v}" for k, v in (job.get("tags") or {}).items()) or "-"),
        ("alerts", "; ".join(_alert_rule(rule) for rule in job.get("alerts") or []) or "-"),
        ("version", str(job["version"])),
        ("created", job.get("created_at", "")),
        ("updated", job.get("updated_at", "")),
    ]
    width = max(len(k) for k, _ in pairs)
    return "".join(f"{key.ljust(width)}  {value}\n" for key, value in pairs)


def _target_text(target: Mapping[str, Any]) -> str:
    """``sqs arn:aws:sqs:...``: a target's type and what it calls, its URL or the ARN the core names
    (:func:`~punctual.models.targets.target_arn`: the queue's, the function's ..., never ``role_arn``,
    the role the worker assumes, nor a null)."""
    where = target.get("url") or target_arn(cast(Any, SimpleNamespace(**target)))
    return f"{target.get('type', '?')} {where}".strip()


def _alert_rule(rule: Mapping[str, Any]) -> str:
    """``failed,late after 30 s -> http URL (slack, at most one per 300 s)``: what a rule asks (QA28:
    its format and min_interval_seconds were left out, so a held-back alert had no visible cause)."""
    target = rule.get("target") or {}
    late = f" after {rule['late_after_seconds']} s" if rule.get("late_after_seconds") else ""
    how = [rule["format"]] if rule.get("format", "json") != "json" else []
    if rule.get("min_interval_seconds"):
        how.append(f"at most one per {rule['min_interval_seconds']} s")
    said = f" ({', '.join(how)})" if how else ""
    return f"{','.join(rule.get('on') or [])}{late} -> {_target_text(target)}{said}"


def _deliveries(alert: Mapping[str, Any]) -> str:
    """What became of each rule's copy: ``#0 SENT, #1 FAILED (HTTP 500)`` (QA23: only ``-o json``
    said it, though the docs promise the listing does)."""
    said = []
    for d in alert.get("deliveries") or []:
        error = f" ({d['error']})" if d.get("error") else ""
        said.append(f"#{d.get('rule')} {d.get('status')}{error}")
    return ", ".join(said) or "-"


def _alert_rows(alerts: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            a["slot"],
            a["condition"],
            marked_status(a),
            a.get("created_at") or "-",
            cut(_deliveries(a), 50),
            cut(a.get("summary") or "", 60),
        ]
        for a in alerts
    ]
    return table(rows, ["SLOT", "CONDITION", "STATUS", "RAISED", "DELIVERIES", "SUMMARY"])


# --------------------------------------------------------------------------- input


MAX_SPEC_VALUES = 1_000_000  # far past any job's spec (a payload is at most 256 KB)


def _expanded_size(data: Any) -> int:
    """How many values ``data`` holds once written out: a YAML alias shares its anchor's value, so
    a few lines of aliases of aliases stand for billions, which the JSON encoding would write out
    (it hung). Counted once per distinct container; stops counting past the bound."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        known = sizes.get(id(value))
        if known is None:
            members = value.values() if isinstance(value, dict) else value
            known = 1
            for member in members:
                known += size(member)
                if known > MAX_SPEC_VALUES:
                    break
            sizes[id(value)] = known
        return known

    try:
        return size(data)
    except RecursionError:
        return MAX_SPEC_VALUES + 1


def _read_spec_file(path: str) -> dict[str, Any]:
    text = read_input(path)
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except RecursionError:  # (QA21: an internal error) YAML would recurse as deep: not tried
        raise CliInputError(f"{path} is nested too deeply to read") from None
    except KeyGivenTwice as exc:
        raise CliInputError(f"{path}: {exc}") from None
    except ValueError:
        try:
            import yaml
        except ImportError:  # pragma: no cover - pyyaml ships with the dev tools
            raise CliInputError(f"{path} is not JSON, and YAML needs the pyyaml package") from None
        try:
            data = yaml.load(text, Loader=_json_like_yaml())
        except RecursionError:
            raise CliInputError(f"{path} is nested too deeply to read") from None
        except KeyGivenTwice as exc:
            raise CliInputError(f"{path}: {exc}") from None
        except (yaml.YAMLError, ValueError) as exc:
            raise CliInputError(f"{path} is neither JSON nor YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        # in JSON's words (QA24: an empty stdin, `--file -`, was "not NoneType")
        held = (
            "nothing"
            if data is None
            else "a list"
            if isinstance(data, list)
            else f"the value {text.strip()[:40]!r}"
        )
        raise CliInputError(
            f"{'stdin' if path == '-' else path} must hold one job spec (a mapping), not {held}"
        )
    if _expanded_size(data) > MAX_SPEC_VALUES:  # YAML aliases of aliases: "billion laughs"
        raise CliInputError(f"{path} expands to more than {MAX_SPEC_VALUES:,} values (YAML aliases)")
    try:
        json.dumps(data, allow_nan=False)
    except RecursionError:
        raise CliInputError(f"{path} is nested too deeply to read") from None
    except (TypeError, ValueError) as exc:
        raise CliInputError(f"{path} holds a value JSON cannot carry: {exc}") from None
    return data


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`: keys merged in, which the mapping's own override


def _json_like_yaml() -> Any:
    """A YAML SafeLoader that reads plain scalars as JSON would (YAML 1.2's core schema), not as
    YAML 1.1 does: ``on``/``no``/``yes`` stay text (``alerts: [{on: [failed]}]`` keeps its key,
    ``country: NO`` its value), ``12:30`` is not 750, a date or a time stamp stays the text the
    API parses, ``012`` is twelve. Only ``true``/``false``, ``null``, decimal numbers are typed."""
    import yaml

    class JsonLikeLoader(yaml.SafeLoader):  # type: ignore[misc]  # (no stubs for PyYAML here)
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # a key written twice is refused (a merge key's, `<<: *base`, are overridden, as meant)
            own = [_json_key(self.construct_object(key)) for key, _ in node.value if key.tag != MERGE_TAG]
            unique_keys((key, None) for key in own if key is not None)
            return super().construct_mapping(node, deep=deep)

    typed = ("bool", "int", "float", "timestamp", "null")
    dropped = {f"tag:yaml.org,2002:{name}" for name in typed}
    JsonLikeLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in entries if tag not in dropped]
        for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    for name, pattern, first in (
        ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
        ("null", r"~|null|Null|NULL|", "~nN"),
        ("int", r"[-+]?[0-9]+", "-+0123456789"),
        ("float", r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", "-+0123456789."),
    ):
        JsonLikeLoader.add_implicit_resolver(
            f"tag:yaml.org,2002:{name}", re.compile(f"^(?:{pattern})$"), [*first]
        )
    JsonLikeLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile("^$"), [""])
    JsonLikeLoader.add_constructor(
        "tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node).replace("_", ""))
    )
    return JsonLikeLoader


def _json_key(key: Any) -> str | None:
    """A YAML mapping's key as the JSON sent names it (``1`` and ``"1"`` are one key there), or
    None: a key JSON has no name for, as ``? [a, b]`` (QA30: its ``unhashable type`` was an internal
    error), is left to PyYAML's own check ("found unhashable key") or to the JSON check after."""
    try:
        return str(next(iter(json.loads(json.dumps({key: None})))))
    except TypeError:
        return None


def _json_payload(text: str) -> Any:
    """``--payload``: JSON only; text goes in ``--payload-text`` (never guessed)."""
    try:
        return json.loads(text, parse_constant=no_json_constant, object_pairs_hook=unique_keys)
    except RecursionError:  # (QA21: an internal error)
        raise CliInputError("--payload is nested too deeply to read") from None
    except KeyGivenTwice as exc:
        raise CliInputError(f"--payload: {exc}") from None
    except ValueError as exc:
        raise CliInputError(
            f"--payload is not valid JSON ({exc}); for a text payload use --payload-text"
        ) from None


_TARGET_FLAGS = (
    ("http_url", "http", "url"),
    ("lambda_arn", "lambda", "function_arn"),
    ("sqs_arn", "sqs", "queue_arn"),
)


def _target_from_flags(args: argparse.Namespace, current: Any) -> dict[str, Any] | None:
    """The target the flags give over ``current`` (None: they name none).

    A flag of the target's own type changes what it names and keeps the rest (QA21: ``--http-url``
    dropped a webhook's headers, its credential among them, its method and rate budget;
    ``--lambda-arn`` a function's ``role_arn`` and invocation type); a flag of another type makes
    a new target of that type, as the old one's fields do not apply to it."""
    given = [(flag, kind, key) for flag, kind, key in _TARGET_FLAGS if getattr(args, flag)]
    if len(given) > 1:
        raise CliInputError("give one target: --http-url, --lambda-arn or --sqs-arn")
    kind = given[0][1] if given else None
    same = isinstance(current, dict) and current.get("type") == (kind or "http")
    if not given:
        if args.http_method is None:
            return None
        if not same:  # (QA: dropped, exit 0, on a Lambda or SQS job)
            raise CliInputError("--http-method is for a webhook (--http-url, or a job whose target is http)")
        return {**current, "method": args.http_method}
    flag, kind, key = given[0]
    if args.http_method is not None and kind != "http":
        raise CliInputError(f"--http-method is for a webhook, not with --{flag.replace('_', '-')}")
    target: dict[str, Any] = dict(current) if same else {"type": kind}
    target[key] = getattr(args, flag)
    if kind == "http":
        target["method"] = args.http_method or target.get("method") or "POST"
    return target


# What _spec_flags adds (but --file): the flags an update takes its changes from.
# fmt: off
_SPEC_DESTS = (
    "name", "description", "schedule", "tz", "http_url", "http_method", "lambda_arn", "sqs_arn",
    "payload", "payload_text", "tag", "timeout", "max_attempts", "runtime", "exclude_calendar",
)
# fmt: on


def _spec_from_args(
    args: argparse.Namespace, base: Mapping[str, Any] | None = None, filed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The spec the flags give over ``base``; ``filed``: ``--file`` as already read."""
    spec: dict[str, Any] = dict(base or {})
    if args.file:
        spec.update(filed if filed is not None else _read_spec_file(args.file))
    for flag, key in (
        ("name", "name"),
        ("schedule", "schedule"),
        ("tz", "timezone"),
        ("description", "description"),
    ):
        value = getattr(args, flag)
        if value is not None:
            spec[key] = value
    target = _target_from_flags(args, spec.get("target"))
    if target is not None:
        spec["target"] = target
    if args.payload is not None:
        spec["payload"] = _json_payload(args.payload)
        target = spec.get("target")
        if (
            isinstance(target, dict)
            and (target.get("headers") or {}).get("Content-Type") == TEXT_PAYLOAD_TYPE
        ):
            # the header --payload-text added: a JSON payload again (QA: refused, 422, with no way back)
            headers = {k: v for k, v in target["headers"].items() if k != "Content-Type"}
            spec["target"] = {**target, "headers": headers}
    elif args.payload_text is not None:
        spec["payload"] = args.payload_text
        target = spec.get("target")
        if isinstance(target, dict) and target.get("type") == "http":
            headers = dict(target.get("headers") or {})
            if not any(name.lower() == "content-type" for name in headers):
                headers["Content-Type"] = TEXT_PAYLOAD_TYPE  # sent as it is, not as JSON
            spec["target"] = {**target, "headers": headers}
    if args.tag:
        tags = dict(spec.get("tags") or {})
        for item in args.tag:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliInputError(f"--tag takes KEY=VALUE, got {item!r}")
            tags[key] = value
        spec["tags"] = tags
    if args.timeout is not None:
        spec["timeout_seconds"] = args.timeout
    if args.max_attempts is not None:
        spec["retry"] = {**(spec.get("retry") or {}), "max_attempts": args.max_attempts}
    if args.runtime is not None:
        spec["runtime"] = args.runtime
    if args.exclude_calendar:  # added to the job's, as --tag adds (QA: the others were dropped)
        named = [*(spec.get("exclude_calendars") or []), *args.exclude_calendar]
        spec["exclude_calendars"] = list(dict.fromkeys(named))
    return spec


# --------------------------------------------------------------------------- verbs


def _cmd_jobs_create(args: argparse.Namespace, out: TextIO) -> int:
    spec = _spec_from_args(args)
    require_schedule_and_target(spec, args.file)
    if args.paused:
        spec["state"] = "PAUSED"  # stored paused in the create's write: nothing fires until resumed
    client = api_client(args)
    job = client.create_job(spec, args.idempotency_key)
    if args.output != "json" and not args.no_name_check:  # (QA17: up to 10 list reads a create, each a
        _warn_duplicate_name(client, job)  # request of the tenant's quota: scripts hit 429 soon)

    def human(created: Mapping[str, Any]) -> str:
        return f"created job {created['id']}\n" + _job_detail(created) + _shown_secret(created, "\n")

    return emit(args, out, job, human)


def _shown_secret(job: Mapping[str, Any], before: str = "") -> str:
    """The webhook signing secret a reply shows (once: a create, a rotation, a replace that gave the
    job its first webhook), as the human output prints it; nothing when the reply has none."""
    if not job.get("signing_secret"):
        return ""
    return f"{before}webhook signing secret (shown once, store it now):\n  {job['signing_secret']}\n"


DUPLICATE_SCAN_JOBS = 1000  # a name check reads at most this many jobs (10 pages)


def _warn_duplicate_name(client: PunctualClient, job: Mapping[str, Any]) -> None:
    """Names need not be unique, but two jobs of one name are usually a mistake: say so."""
    name = job.get("name")
    if not name:
        return
    same: list[str] = []
    once = dataclasses.replace(client, retry=RetryPolicy(max_attempts=1))  # no wait for a courtesy
    try:
        for other in once.iter_jobs(limit=DUPLICATE_SCAN_JOBS):
            if other.get("name") == name and other.get("id") != job.get("id"):
                same.append(str(other.get("id")))
    except ApiError:
        return  # the job was created; the check is a courtesy
    if same:
        sys.stderr.write(
            f"punctual: warning: {len(same)} other job(s) are also named {name!r}: {', '.join(same[:5])}"
            f"{' ...' if len(same) > 5 else ''}\n"
        )


def _cmd_jobs_list(args: argparse.Namespace, out: TextIO) -> int:
    if args.tag is not None and not args.tag.strip():  # (QA: silently unfiltered)
        raise CliInputError("--tag takes KEY=VALUE (or KEY), not an empty text")
    client = api_client(args)
    if args.all:
        jobs = list(client.iter_jobs(args.state, args.tag))
        return emit(args, out, {"items": jobs, "next_token": None}, lambda p: _job_rows(p["items"]))
    page = client.list_jobs(args.state, args.tag, args.limit, args.next_token)

    def human(p: Mapping[str, Any]) -> str:
        text = _job_rows(p["items"])
        return text + (f"\nmore: --next-token {p['next_token']}\n" if p.get("next_token") else "")

    return emit(args, out, page, human)


def _cmd_jobs_get(args: argparse.Namespace, out: TextIO) -> int:
    return emit(args, out, api_client(args).get_job(args.job_id), _job_detail)


def _cmd_jobs_update(args: argparse.Namespace, out: TextIO) -> int:
    if args.replace and not args.file:
        raise CliInputError("--replace goes with --file: the file is the whole new spec")
    client = api_client(args)
    current = client.get_job(args.job_id)
    if not args.replace and (why := _unreadable(current)) is not None:  # (QA24: 422 "schedule: Field
        raise CliInputError(f"job {args.job_id} {why}")  # required", its fields being unknown)
    base = {} if args.file and args.replace else {k: current[k] for k in JobSpec.model_fields if k in current}
    filed = _read_spec_file(args.file) if args.file else None
    spec = _spec_from_args(args, base, filed)
    if not args.file and spec == base:  # (QA: a new version, exit 0, for nothing)
        if any(getattr(args, dest) not in (None, []) for dest in _SPEC_DESTS):
            # (QA24: "give a flag" to a user who gave one, its value the job's already)
            raise CliInputError(
                f"nothing to change: job {args.job_id} already has what the flags give (version"
                f" {current['version']})"
            )
        raise CliInputError("nothing to change: give a flag (--schedule, --payload, ...) or --file")
    # Read-modify-write: the version read is the precondition, so a concurrent change is a 412;
    # a whole spec from a file that says its version (jobs get -o json > f, edited) is guarded by
    # that version (QA: by the one just read, so a change made meanwhile was silently undone)
    version = args.if_match if args.if_match is not None else current["version"]
    if args.if_match is None and filed is not None and args.replace:
        stated = filed.get("version")
        if isinstance(stated, int) and not isinstance(stated, bool):
            version = stated
        elif stated is not None:  # (QA24: "3", 3.5, true: replaced unguarded, as if it said none)
            raise CliInputError(
                f"{args.file}: version {stated!r} is not a job version (a whole number, as jobs get -o json"
                " writes it); fix it, drop it, or give --if-match"
            )
    job = client.replace_job(args.job_id, spec, version)
    # A replace that gives the job its first webhook answers its new secret, once (QA24: not shown)
    return emit(
        args, out, job, lambda j: f"updated job {j['id']} to version {j['version']}\n" + _shown_secret(j)
    )


def _state_verb(action: str) -> Callable[[argparse.Namespace, TextIO], int]:
    def run(args: argparse.Namespace, out: TextIO) -> int:
        client = api_client(args)
        call = client.pause_job if action == "pause" else client.resume_job
        job = call(args.job_id, args.if_match)
        return emit(args, out, job, lambda j: f"job {j['id']} is {j['state']} (version {j['version']})\n")

    return run


def _cmd_jobs_delete(args: argparse.Namespace, out: TextIO) -> int:
    api_client(args).delete_job(args.job_id, args.if_match)
    return emit(args, out, {"id": args.job_id, "deleted": True}, lambda d: f"deleted job {d['id']}\n")


def _cmd_jobs_rotate_secret(args: argparse.Namespace, out: TextIO) -> int:
    job = api_client(args).rotate_secret(args.job_id, args.drop_previous, args.if_match)

    def human(j: Mapping[str, Any]) -> str:
        if not j.get("signing_secret"):
            return f"job {j['id']}: only its current signing secret signs now (version {j['version']})\n"
        return (
            f"job {j['id']} has a new signing secret (version {j['version']}); the previous one signs"
            " too until the next rotation or --drop-previous\n" + _shown_secret(j)
        )

    return emit(args, out, job, human)


def _cmd_jobs_trigger(args: argparse.Namespace, out: TextIO) -> int:
    accepted = api_client(args).trigger_job(args.job_id, args.idempotency_key)
    return emit(
        args,
        out,
        accepted,
        lambda a: (
            f"queued a run of {a['job_id']}: slot {a['slot']}\n"
            f"follow it: punctual runs get {a['job_id']} '{a['slot']}'\n"
        ),
    )


def _cmd_jobs_alerts(args: argparse.Namespace, out: TextIO) -> int:
    reply = api_client(args).list_alerts(args.job_id, args.limit)
    return emit(args, out, reply, lambda r: _alert_rows(r["items"]))


def _cmd_jobs_upcoming(args: argparse.Namespace, out: TextIO) -> int:
    def human(r: Mapping[str, Any]) -> str:
        if not r["slots"]:
            return f"no upcoming slot: {r['note']}\n"
        rows = [
            f"{s['slot']}" + (f"  fires {s['fires_at']} (jitter)" if s["fires_at"] != s["slot"] else "")
            for s in r["slots"]
        ]
        return "\n".join(rows) + "\n"

    return emit(args, out, api_client(args).upcoming(args.job_id, args.count), human)


# --------------------------------------------------------------------------- parsers


def _spec_flags(
    parser: argparse.ArgumentParser, method_help: str = "a webhook's method (default POST)"
) -> None:
    parser.add_argument("--file", "-f", metavar="PATH", help="job spec as JSON or YAML ('-': stdin)")
    parser.add_argument("--name")
    parser.add_argument("--description")
    parser.add_argument("--schedule", metavar="EXPR", help="cron(...), 5-field cron, rate(...), at(...), ...")
    parser.add_argument("--tz", type=zone_arg, metavar="ZONE", help="IANA time zone of the schedule")
    parser.add_argument("--http-url", metavar="URL", help="target: a webhook")
    parser.add_argument(
        "--http-method",
        choices=("GET", "POST", "PUT", "PATCH", "DELETE"),
        help=method_help,
    )
    parser.add_argument("--lambda-arn", metavar="ARN", help="target: a Lambda function")
    parser.add_argument("--sqs-arn", metavar="ARN", help="target: an SQS queue")
    payload = parser.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="JSON", help="payload sent to the target, as JSON")
    payload.add_argument(
        "--payload-text",
        metavar="TEXT",
        help="a text payload (HTTP targets: sent as text/plain unless a Content-Type is set)",
    )
    parser.add_argument("--tag", action="append", metavar="KEY=VALUE", help="a tag (repeatable)")
    parser.add_argument("--timeout", type=int, metavar="SECONDS", help="timeout_seconds")
    parser.add_argument("--max-attempts", type=int, metavar="N", help="retry.max_attempts")
    parser.add_argument("--runtime", choices=("lambda", "ecs"))
    parser.add_argument(
        "--exclude-calendar",
        action="append",
        metavar="NAME",
        help="a calendar whose days it skips (repeatable)",
    )


def add_jobs(verbs: Any) -> None:
    """``punctual jobs create|list|get|update|pause|resume|delete|rotate-secret|trigger|alerts|upcoming``."""
    common, sub = verb_group(verbs, "jobs", "register, inspect and change jobs through the API")

    create = sub.add_parser("create", parents=[common], help="register a job (from --file or flags)")
    _spec_flags(create)
    create.add_argument("--idempotency-key", metavar="KEY", help="makes a retried create return the same job")
    create.add_argument("--paused", action="store_true", help="create it paused (nothing fires till resumed)")
    create.add_argument(
        "--no-name-check",
        action="store_true",
        help="skip the warning about jobs of the same name (it lists up to 1,000 jobs; not with -o json)",
    )
    create.set_defaults(handler=guarded(_cmd_jobs_create))

    listing = sub.add_parser("list", parents=[common], help="list jobs")
    listing.add_argument("--state", choices=("ENABLED", "PAUSED", "COMPLETED"))
    listing.add_argument("--tag", metavar="KEY[=VALUE]")
    listing_options(listing)
    listing.set_defaults(handler=guarded(_cmd_jobs_list))

    get = sub.add_parser("get", parents=[common], help="show a job")
    get.add_argument("job_id", metavar="JOB", type=job_id_arg)
    get.set_defaults(handler=guarded(_cmd_jobs_get))

    update = sub.add_parser(
        "update", parents=[common], help="change a job: flags (and --file fields) over its current spec"
    )
    update.add_argument("job_id", metavar="JOB", type=job_id_arg)
    # an update keeps the webhook's method unless this flag names one (QA31: "default POST")
    _spec_flags(update, method_help="a webhook's new method (default: it keeps its own)")
    update.add_argument("--replace", action="store_true", help="with --file: the file is the whole new spec")
    update.add_argument(
        "--if-match",
        type=version_arg("job"),
        metavar="VERSION",
        help="default: with --file --replace, the file's version (jobs get -o json); else the one just read",
    )
    update.set_defaults(handler=guarded(_cmd_jobs_update))

    for action, text in (("pause", "pause a job"), ("resume", "resume a paused job")):
        parser = sub.add_parser(action, parents=[common], help=text)
        parser.add_argument("job_id", metavar="JOB", type=job_id_arg)
        parser.add_argument("--if-match", type=version_arg("job"), metavar="VERSION")
        parser.set_defaults(handler=guarded(_state_verb(action)))

    delete = sub.add_parser("delete", parents=[common], help="delete a job")
    delete.add_argument("job_id", metavar="JOB", type=job_id_arg)
    delete.add_argument("--if-match", type=version_arg("job"), metavar="VERSION")
    delete.set_defaults(handler=guarded(_cmd_jobs_delete))

    rotate = sub.add_parser(
        "rotate-secret", parents=[common], help="give a webhook job a new signing secret (shown once)"
    )
    rotate.add_argument("job_id", metavar="JOB", type=job_id_arg)
    rotate.add_argument(
        "--drop-previous",
        action="store_true",
        help="make no new secret: end the previous one's signing (after receivers have the new one)",
    )
    rotate.add_argument("--if-match", type=version_arg("job"), metavar="VERSION")
    rotate.set_defaults(handler=guarded(_cmd_jobs_rotate_secret))

    trigger = sub.add_parser("trigger", parents=[common], help="run a job now")
    trigger.add_argument("job_id", metavar="JOB", type=job_id_arg)
    trigger.add_argument("--idempotency-key", metavar="KEY", help="a retried trigger names the same slot")
    trigger.set_defaults(handler=guarded(_cmd_jobs_trigger))

    alerts = sub.add_parser("alerts", parents=[common], help="a job's last alerts, newest slot first")
    alerts.add_argument("job_id", metavar="JOB", type=job_id_arg)
    alerts.add_argument(
        "--limit", type=limit_arg, default=50, metavar="N", help="at most N, 1-100 (default 50)"
    )
    alerts.set_defaults(handler=guarded(_cmd_jobs_alerts))
    upcoming = sub.add_parser(
        "upcoming", parents=[common], help="a job's next slots, as it will release them"
    )
    upcoming.add_argument("job_id", metavar="JOB", type=job_id_arg)
    upcoming.add_argument(
        "--count", type=limit_arg, default=10, metavar="N", help="how many, 1-100 (default 10)"
    )
    upcoming.set_defaults(handler=guarded(_cmd_jobs_upcoming))
    add_backfill_action(sub, common)


API_VERBS: list[Callable[[Any], None]] = [add_jobs, add_runs, add_calendars, add_backfills]
