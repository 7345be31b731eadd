"""``punctual-admin``: an operator's commands on a deployment's table (``python -m punctual.admin``).

Run from a clone (``make install``), never by the stack: the package stays out of the Lambda
layer (``infra/build_layer.py``). ``punctual-admin migrate-keys`` moves timers written before
the tenant was part of their key (:mod:`punctual.admin.key_migration`). It runs with the
operator's AWS credentials and the deployment's settings (``PUNCTUAL_TABLE_NAME``, or
``--table``; ``AWS_DEFAULT_REGION`` or a profile's region, as boto3 reads it; ``AWS_ENDPOINT_URL``
for local mode's moto server), while the stack runs; it is safe to stop and to run again (it
resumes). Exit status 0 when every segment was scanned to its end, 1 when it was cut short, 2 for
bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from punctual.admin.key_migration import TimerKeyMigration, table_layout
from punctual.runtime import aws
from punctual.runtime.clock import SystemClock
from punctual.runtime.settings import Settings, SettingsError
from punctual.store.dynamo import DynamoStore

READ_UNIT_BYTES = 4096  # an eventually consistent read of up to 4 KB is half a read unit (DynamoDB docs)


class UsageError(Exception):
    """Bad input: reported on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(" ".join(message.split()))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="punctual-admin", description="Operator commands on a Punctual deployment's table.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    migrate = commands.add_parser(
        "migrate-keys",
        help="move timers written before the tenant was in their key (safe while the stack runs; resumes)",
    )
    migrate.add_argument("--table", help="the table (default: PUNCTUAL_TABLE_NAME)")
    migrate.add_argument("--segments", type=int, default=16, help="parallel scan segments (default 16)")
    migrate.add_argument("--restart", action="store_true", help="scan from the start, not from the last run")
    migrate.add_argument("--dry-run", action="store_true", help="count what would move; write nothing")
    return parser


def migrate_keys(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        raise UsageError(f"settings: {' '.join(str(exc).split())}") from None
    if not 1 <= args.segments <= 1000:
        raise UsageError("--segments must be 1 to 1000")
    table = args.table or settings.table_name
    try:
        client = aws.client("dynamodb")
    except NoRegionError:
        raise UsageError(
            "no AWS region: set AWS_DEFAULT_REGION (or AWS_REGION), or AWS_PROFILE to a profile with a region"
        ) from None
    try:
        size = int(client.describe_table(TableName=table)["Table"].get("TableSizeBytes", 0))
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            raise UsageError(f"table {table!r} not found") from None
        raise
    layout = table_layout(client, table, settings.far_threshold_s)
    if layout is None:
        print(f"table {table}: no timer was ever written; nothing to move")
        return 0
    store = DynamoStore(client, table, layout)
    migration = TimerKeyMigration(store, layout, SystemClock(), segments=args.segments)
    earlier = None if args.restart or args.dry_run else migration.finished()
    if earlier is not None:
        print(
            f"table {table}: already complete (every one of {args.segments} segments scanned to its end by an"
            f" earlier run; nothing read now; --restart scans again). That run: {earlier.summary()}"
        )
        return 0
    print(
        f"table {table}: {layout.shard_count} far / {layout.near_shard_count} near shards; reading every item"
        f" once, about {size / READ_UNIT_BYTES / 2:,.0f} read units"
    )
    report = migration.run(restart=args.restart, dry_run=args.dry_run)
    print(report.summary())
    return 0 if report.complete else 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return migrate_keys(args)
    except UsageError as exc:
        sys.stderr.write(f"punctual-admin: error: {exc}\n")
        return 2
    except (ClientError, BotoCoreError) as exc:
        sys.stderr.write(f"punctual-admin: AWS error: {' '.join(str(exc).split())}\n")
        return 1
