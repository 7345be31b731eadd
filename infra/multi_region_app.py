"""The multi-Region CDK app: ``python infra/multi_region_app.py`` synthesises one stack per Region.

The same construct library as ``infra/app.py`` (:mod:`punctual_cdk.multi_region`), configured
from the same context plus:

``regions``        the Regions that run the scheduler, home first (``-c regions=us-east-1,us-east-2``)
``witnessRegion``  with two Regions, the MRSC witness (``-c witnessRegion=us-west-2``)
``account``        the account of every stack (default: ``CDK_DEFAULT_ACCOUNT``)
``tableName``      the global table's name (default ``punctual``): a second multi-Region deployment
                   in the same account and Regions needs a name of its own

cdk-nag's AwsSolutions pack runs on every synth, as in the single-Region app. Deploy with
``npx aws-cdk@2 deploy --app "python infra/multi_region_app.py" --all`` (the home Region first;
the CLI orders the stacks by their dependencies). docs/multi-region.md says what this profile
promises and costs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == REPO_ROOT / "infra":
    sys.path[0] = str(REPO_ROOT)

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from infra.app import cdk_json_context  # noqa: E402
from punctual_cdk import constants as c  # noqa: E402
from punctual_cdk.config import ConfigError, PunctualConfig, synth_or_exit  # noqa: E402
from punctual_cdk.multi_region import DEFAULT_TABLE_NAME, MultiRegionPunctual, RegionPlan  # noqa: E402

TABLE_NAME = re.compile(r"[a-zA-Z0-9_.-]{3,255}")
ACCOUNT_ID = re.compile(r"[0-9]{12}")


def plan_from(context: Callable[[str], Any]) -> RegionPlan:
    """The Region plan of the context (``regions``, ``witnessRegion``, ``tableName``).

    Each refusal names the key it is about (QA22: a list holding a number, or a number, was a
    traceback; the plan's refusals named no key, and a witness also listed in ``regions`` read
    as "a Region appears twice").
    """
    raw = context("regions")
    if not raw:
        raise ConfigError("regions: set -c regions=<home>,<region>[,<region>] (multi-Region)")
    if isinstance(raw, str) and raw.strip().startswith("["):  # as JSON, as every context list may be (QA28)
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ConfigError(f"regions: {raw!r} is not a JSON list") from None
    listed = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
        raise ConfigError(f"regions: {raw!r} is not a list of Region names (-c regions=us-east-1,us-east-2)")
    regions = tuple(r.strip() for r in listed if r.strip())
    witness = context("witnessRegion") or None
    if witness is not None and not isinstance(witness, str):
        raise ConfigError(f"witnessRegion: {witness!r} is not one Region name (-c witnessRegion=us-west-2)")
    if witness is not None and witness.strip() in regions:
        raise ConfigError(
            f"witnessRegion: {witness.strip()} is also in regions; the witness is a third Region that"
            " runs nothing (two Regions in regions and the witness, or three in regions and none)"
        )
    table = context("tableName") or DEFAULT_TABLE_NAME
    if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
        raise ConfigError(
            f"tableName: {table!r} is not a DynamoDB table name (3 to 255 of a-z, A-Z, 0-9, '_', '-', '.')"
        )
    keys = "regions, witnessRegion" if witness else "regions"
    try:
        return RegionPlan(regions=regions, witness=witness.strip() if witness else None, table_name=table)
    except ConfigError as exc:
        raise ConfigError(f"{keys}: {str(exc).removeprefix('multi-Region: ')}") from None


def build_multi_region_app(
    context: Mapping[str, Any] | None = None, outdir: str | None = None
) -> tuple[cdk.App, MultiRegionPunctual]:
    merged = {**cdk_json_context(), **(context or {})}
    app = cdk.App(outdir=outdir or os.environ.get("CDK_OUTDIR", c.CDK_OUTDIR), context=merged)
    config = PunctualConfig.from_context(app.node.try_get_context)
    context_of = app.node.try_get_context  # the CLI's -c values too (CDK_CONTEXT_JSON)
    account = str(context_of("account") or os.environ.get("CDK_DEFAULT_ACCOUNT") or "").strip()
    if not account:
        raise ConfigError(
            "multi-Region: set -c account=<id> (or CDK_DEFAULT_ACCOUNT): stacks name their Region"
        )
    if not ACCOUNT_ID.fullmatch(account):  # (QA28: 'abc' synthesised, for a deploy that cannot be)
        raise ConfigError(f"account: {account!r} is not an AWS account id (12 digits)")
    profile = MultiRegionPunctual(app, plan=plan_from(context_of), account=account, config=config)
    cdk.Tags.of(app).add("app", c.APP_NAME)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, profile


def main() -> None:
    synth_or_exit(lambda: build_multi_region_app()[0].synth())


if __name__ == "__main__":
    main()
