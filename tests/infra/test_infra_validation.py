"""cdk-nag and cfn-lint: no finding left unexplained, no template error, for every deployment shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cdk_helpers import Synth, functions_dir, synthesise

# Every acknowledged AwsSolutions rule, by the construct it sits on (stack name left out).
# A new acknowledgment must be added here on purpose, with its reason in the construct.
EXPECTED_ACKNOWLEDGMENTS = {
    ("Queues/Failed", "AwsSolutions-SQS3"),
    ("Workers/WorkerTask", "AwsSolutions-ECS2"),
    ("Workers/WorkerTask/ExecutionRole", "AwsSolutions-IAM5[Resource::*]"),
    ("Api/RestApi", "AwsSolutions-APIG3"),
    ("Api/RestApi", "AwsSolutions-COG4"),
    (
        "Api/RestApi",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AmazonAPIGatewayPushToCloudWatchLogs]",
    ),
    ("Dispatch/MinuteStateMachine/Role", "AwsSolutions-IAM5[Resource::*]"),
    (
        "Dispatch/MinuteStateMachine/Role",
        "AwsSolutions-IAM5[Resource::<DispatchPollerFunctionC4979BDE.Arn>:*]",
    ),
    (
        "Dispatch/MinuteStateMachine/Role",
        "AwsSolutions-IAM5[Resource::<DispatchLeanPollerFunction95C03FDA.Arn>:*]",
    ),
    ("Dispatch/Poller/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Dispatch/LeanPoller/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Dispatch/Tick/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Workers/Worker/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Api/Handler/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Storage/DispatchKey", "AwsSolutions-SMG4"),
    # Issue 16: the paging-token key is not rotated (it authenticates next_token values only);
    # the workers may assume a tenant's execution role, whose trust policy decides.
    ("PagingTokenKey/Secret", "AwsSolutions-SMG4"),
    ("Workers/Worker/Role", "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::*:role/*]"),
    ("Workers/WorkerTask/TaskRole", "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::*:role/*]"),
    ("Console/Function/Role", "AwsSolutions-IAM5[Resource::*]"),  # X-Ray, as every function
    ("ChainAudit/Auditor/Role", "AwsSolutions-IAM5[Resource::*]"),  # X-Ray, as every function
    # Issues 30 and 32: the tick and group 0's pollers (the relay) look for, start and re-plan a
    # minute's execution, whose ARN carries its minute's name (unknown at deploy).
    (
        "Dispatch/Tick/Role",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
        "execution:<DispatchMinuteStateMachineE8DA134E.Name>:*]",
    ),
    (
        "Dispatch/PollerRelayPolicy",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
        "execution:<DispatchMinuteStateMachineE8DA134E.Name>:*]",
    ),
    # The tick registers the ECS worker service's minimum (punctual.dispatch.ecs_lane): a scalable
    # target's ARN ends in an id Application Auto Scaling assigns, unknown at deploy.
    (
        "Dispatch/Tick/Role",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:application-autoscaling:<AWS::Region>:"
        "<AWS::AccountId>:scalable-target/*]",
    ),
}


def _plugin(synth: Synth) -> dict[str, Any]:
    (report,) = [r for r in synth.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    return report


def _suppressed(synth: Synth) -> set[tuple[str, str]]:
    stack = synth.stack.stack_name
    return {
        # The scheduler is the stack's construct "Default" (punctual_cdk.Punctual).
        (v["acknowledgedAt"].removeprefix(f"{stack}/").removeprefix("Default/"), v["ruleName"])
        for v in _plugin(synth)["suppressedViolations"]
    }


def test_cdk_nag_passes_with_zero_unacknowledged_findings(any_synth: Synth) -> None:
    # The synth in the fixture would have raised on any finding; the report says so too.
    report = _plugin(any_synth)

    assert report["conclusion"] == "success"
    assert report["violations"] == []


def test_default_acknowledgments_are_exactly_the_reviewed_ones(default_synth: Synth) -> None:
    assert _suppressed(default_synth) == EXPECTED_ACKNOWLEDGMENTS


def test_every_acknowledgment_names_its_resource_and_reason(any_synth: Synth) -> None:
    for violation in _plugin(any_synth)["suppressedViolations"]:
        assert len(violation["reason"]) >= 60, violation["ruleName"]
        for construct in violation["violatingConstructs"]:
            # An acknowledgment covers only the construct it sits on and what is below it.
            assert construct["constructPath"].startswith(violation["acknowledgedAt"] + "/")


def test_every_acknowledgment_is_used(any_synth: Synth) -> None:
    """A stale acknowledgment would silently hide a future finding on the same construct."""
    stack = any_synth.stack.stack_name
    declared = {
        (path.removeprefix(f"/{stack}/").removeprefix("Default/"), rule.removeprefix("AwsSolutions::"))
        for path, rules in any_synth.acknowledged.items()
        for rule in rules
        if rule.startswith("AwsSolutions::")
    }

    assert declared == _suppressed(any_synth)


def test_target_patterns_are_acknowledged_one_by_one(custom_synth: Synth) -> None:
    wildcard_patterns = {p for p in custom_synth.stack.config.target_arn_patterns if "*" in p}
    # The patterns are granted to the target role alone (the workers assume it).
    acknowledged = {
        rule.removeprefix("AwsSolutions-IAM5[Resource::").removesuffix("]")
        for path, rule in _suppressed(custom_synth)
        if path == "TargetRole/Role" and rule.startswith("AwsSolutions-IAM5[Resource::arn:")
    }
    assert acknowledged == wildcard_patterns


def test_cfn_lint_finds_no_error(any_synth: Synth, request: pytest.FixtureRequest) -> None:
    import json

    from cfnlint.api import ManualArgs, lint

    # The default stack is checked against two regions' resource specs, the variants against
    # one (each region about doubles the run).
    default = request.node.callspec.params.get("any_synth") == "default"
    matches = lint(
        json.dumps(any_synth.json),
        config=ManualArgs(regions=["us-east-1", "eu-west-1"] if default else ["us-east-1"]),
    )
    errors = [
        f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})"
        for m in matches
        if m.rule.id.startswith("E")
    ]

    assert errors == []


VPC_ID = "vpc-0123456789abcdef0"
ACCOUNT, REGION = "123456789012", "eu-west-1"
LOOKUP_KEY = (
    f"vpc-provider:account={ACCOUNT}:filter.vpc-id={VPC_ID}:region={REGION}:returnAsymmetricSubnets=true"
)


def _subnets(kind: str, prefix: str, third_octets: tuple[int, int]) -> dict[str, Any]:
    return {
        "name": kind,
        "type": kind,
        "subnets": [
            {
                "subnetId": f"subnet-0{prefix * 15}{i}",
                "cidr": f"10.20.{octet}.0/24",
                "availabilityZone": f"{REGION}{'ab'[i - 1]}",
                "routeTableId": f"rtb-0{prefix * 15}{i}",
            }
            for i, octet in enumerate(third_octets, start=1)
        ],
    }


@pytest.fixture(scope="module")
def existing_vpc_synth(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app in an existing VPC, with the lookup answered as `cdk synth` caches it."""
    lookup = {
        "vpcId": VPC_ID,
        "vpcCidrBlock": "10.20.0.0/16",
        "ownerAccountId": ACCOUNT,
        "availabilityZones": [],
        "subnetGroups": [_subnets("Private", "a", (0, 1)), _subnets("Public", "b", (64, 65))],
    }
    return synthesise(
        tmp_path_factory.mktemp("cdk-vpc"),
        {"stackName": "PunctualVpc", "vpcId": VPC_ID, LOOKUP_KEY: lookup},
        env={"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION},
    )


def test_existing_vpc_from_context_is_used_and_validated(existing_vpc_synth: Synth) -> None:
    synth = existing_vpc_synth

    assert synth.of_type("AWS::EC2::VPC") == {} and synth.of_type("AWS::EC2::VPCEndpoint") == {}
    (service,) = synth.of_type("AWS::ECS::Service").values()
    assert service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"] == [
        "subnet-0aaaaaaaaaaaaaaa1",
        "subnet-0aaaaaaaaaaaaaaa2",
    ]
    assert _plugin(synth)["conclusion"] == "success"


def test_pending_vpc_lookup_still_synthesises_so_the_cli_can_resolve_it(
    repo_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import json
    import os

    from infra.app import build_app

    # Given a vpcId that the CLI has not looked up yet (no cdk.context.json entry)
    outdir = tmp_path_factory.mktemp("cdk-vpc-pending")
    env = {"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        context = {
            "stackName": "PunctualPending",
            "vpcId": VPC_ID,
            "layerAssetDir": "layers/core",
            "functionsDir": functions_dir(outdir.with_name(outdir.name + "-functions")),
        }
        app, _ = build_app(context, str(outdir))
        # When it is synthesised, Then it does not fail on the placeholder VPC...
        app.synth()
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)

    # ...and it tells the CLI which lookup to make.
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert [m["key"] for m in manifest["missing"]] == [LOOKUP_KEY]


def test_a_vpc_id_without_the_account_and_region_names_what_is_missing(
    repo_root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA27: `make synth -c vpcId=...` without CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION (the cdk CLI
    sets them, `python infra/app.py` does not) ended in a jsii traceback,
    'StackAccountRegionNotSpecified: Cannot retrieve value from context provider vpc-provider'."""
    from infra.app import build_app
    from punctual_cdk.config import ConfigError

    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT", raising=False)
    monkeypatch.delenv("CDK_DEFAULT_REGION", raising=False)
    outdir = tmp_path_factory.mktemp("cdk-vpc-no-env")
    context = {
        "vpcId": VPC_ID,
        "layerAssetDir": "layers/core",
        "functionsDir": functions_dir(outdir.with_name(outdir.name + "-functions")),
    }
    with pytest.raises(ConfigError, match=r"^vpcId: .*CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION"):
        build_app(context, str(outdir))
