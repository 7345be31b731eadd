"""The CDK app: ``python infra/app.py`` (what cdk.json runs) synthesises the Punctual stack.

A thin app over the construct library (``cdk/punctual_cdk``): one stack holding
:class:`~punctual_cdk.Punctual`, configured from the CDK context (``cdk.json``, ``-c key=value``).

cdk-nag's AwsSolutions pack runs as a validation plugin on every synth, so a finding that is
not acknowledged (with its reason, on the construct it concerns) fails the synth.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == REPO_ROOT / "infra":
    sys.path[0] = str(REPO_ROOT)  # run as a script: import `infra` as a package, not its modules

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from constructs import Construct  # noqa: E402

from punctual_cdk import constants as c  # noqa: E402
from punctual_cdk.config import PunctualConfig, synth_or_exit  # noqa: E402
from punctual_cdk.scheduler import Punctual  # noqa: E402

# CloudFormation's default rules (schema, misconfigurations) fail the synth when this is true.
VALIDATE_DEFAULT_RULES_FLAG = "@aws-cdk/core:validateAgainstDefaultRules"


class PunctualStack(cdk.Stack):
    """The stack of this app: the scheduler alone.

    The construct's id is ``Default``, which CDK leaves out of logical ids and construct
    addresses: the resources are named as when the stack held the constructs itself.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.scheduler = Punctual(self, "Default", config=config)
        self.config = config

    def __getattr__(self, name: str) -> Any:
        # The scheduler's parts (storage, workers, api, ...) as the stack's, for its readers.
        if name.startswith("_") or name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)


def cdk_json_context() -> dict[str, Any]:
    """cdk.json's context, for a synth that the cdk CLI did not start (it passes it itself)."""
    if "CDK_CONTEXT_JSON" in os.environ:
        return {}
    cdk_json = REPO_ROOT / "cdk.json"
    return dict(json.loads(cdk_json.read_text()).get("context", {})) if cdk_json.is_file() else {}


def build_app(
    context: Mapping[str, Any] | None = None, outdir: str | None = None
) -> tuple[cdk.App, PunctualStack]:
    """The app with its stack and the cdk-nag plugin; ``context`` overrides cdk.json's.

    With context ``vpcId`` and no cached lookup yet, the first synth only reports the missing
    VPC to the CLI (which looks it up and synthesises again): placeholder subnets would fail
    validation, so that pass runs without it. The real synth is always validated.
    """
    merged = {**cdk_json_context(), **(context or {})}
    app, stack = _build(merged, outdir, validate=True)
    if stack.workers.vpc_lookup_pending:
        app, stack = _build({**merged, VALIDATE_DEFAULT_RULES_FLAG: False}, outdir, validate=False)
        cdk.Annotations.of(stack).add_info(
            f"VPC {stack.config.vpc_id} is not looked up yet: run `cdk synth`/`cdk deploy` (with "
            "credentials) to resolve it; validation and cdk-nag run on that synth."
        )
    return app, stack


def _build(context: dict[str, Any], outdir: str | None, *, validate: bool) -> tuple[cdk.App, PunctualStack]:
    app = cdk.App(outdir=outdir or os.environ.get("CDK_OUTDIR", c.CDK_OUTDIR), context=context)
    config = PunctualConfig.from_context(app.node.try_get_context)
    account = os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = os.environ.get("CDK_DEFAULT_REGION")
    stack = PunctualStack(
        app,
        config.stack_name,
        config=config,
        description="Punctual: serverless distributed job scheduler",
        env=cdk.Environment(account=account, region=region) if account and region else None,
    )
    cdk.Tags.of(app).add("app", c.APP_NAME)
    if validate:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def main() -> None:
    synth_or_exit(lambda: build_app()[0].synth())


if __name__ == "__main__":
    main()
