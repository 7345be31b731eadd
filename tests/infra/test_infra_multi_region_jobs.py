"""QA30: a declared job's execution role in a multi-Region deployment is trusted by every Region's
workers. Each Region sends every slot and its workers claim it; the winner assumes the job's
execution role. The role trusted only the worker roles of the Region whose scheduler the job named,
so a slot another Region's worker won failed AccessDenied (a permanent failure: the run not made).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk import aws_sqs as sqs
from cdk_helpers import CLI_CONTEXT, functions_dir

from punctual_cdk import Job, SqsTarget
from punctual_cdk.multi_region import worker_role_name
from punctual_cdk.nag import acknowledge

ACCOUNT = "123456789012"
REGIONS = ("us-east-1", "us-east-2")


def _templates(outdir: Path) -> dict[str, dict[str, Any]]:
    from infra.multi_region_app import build_multi_region_app

    context = {
        **CLI_CONTEXT,
        "account": ACCOUNT,
        "layerAssetDir": "layers/core",
        "functionsDir": functions_dir(outdir.with_name(outdir.name + "-functions")),
        "regions": ",".join(REGIONS),
        "witnessRegion": "us-west-2",
    }
    app, profile = build_multi_region_app(context, outdir=str(outdir))
    home = profile.stacks[REGIONS[0]]
    queue = sqs.Queue(home, "Orders", enforce_ssl=True)
    acknowledge(queue, "SQS3", "The test's target queue: what a run sends to, no redrive needed here.")
    Job(home, "Nightly", scheduler=home.scheduler, schedule="rate(1 hour)", target=SqsTarget(queue))
    assembly = app.synth()  # cdk-nag runs on it
    return {
        region: assembly.get_stack_artifact(s.artifact_id).template for region, s in profile.stacks.items()
    }


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_a_declared_jobs_execution_role_is_trusted_by_every_regions_workers(
    repo_root: Path, tmp_path: Path
) -> None:
    templates = _templates(tmp_path / "cdk-mr-jobs")
    names = {region: set() for region in REGIONS}
    for region, template in templates.items():
        for role in _of_type(template, "AWS::IAM::Role").values():
            name = role["Properties"].get("RoleName")
            if isinstance(name, str) and name.startswith(f"Punctual-{region}-worker-"):
                names[region].add(name)
    # Each Region's worker roles are named (the Lambda worker's and the ECS task's)
    assert all(len(found) == 2 for found in names.values()), names
    assert names[REGIONS[1]] == {worker_role_name("Punctual", REGIONS[1], i) for i in range(2)}
    # The job's execution role (in the home Region's stack) trusts the other Region's workers too
    (trust,) = [
        role["Properties"]["AssumeRolePolicyDocument"]
        for key, role in _of_type(templates[REGIONS[0]], "AWS::IAM::Role").items()
        if key.startswith("NightlyExecutionRole")
    ]
    text = json.dumps(trust)
    for name in names[REGIONS[1]]:
        assert f"arn:aws:iam::{ACCOUNT}:role/{name}" in text
    peers = [s for s in trust["Statement"] if "ArnEquals" in s.get("Condition", {})]
    assert peers and all(s["Condition"]["StringEquals"]["sts:ExternalId"] for s in peers)
    # And every Region's WorkerRoleArns output names every Region's workers
    for template in templates.values():
        listed = set(template["Outputs"]["WorkerRoleArns"]["Value"].split(","))
        every = {f"arn:aws:iam::{ACCOUNT}:role/{n}" for found in names.values() for n in found}
        assert listed == every
