"""The multi-Region profile synthesises (issue 35; docs/multi-region.md, section 8).

One stack per Region, cdk-nag clean (every synth runs AwsSolutions and fails on a finding); the
home Region's stack holds the MRSC global table (strong consistency, the other replicas, the
witness, no TTL); every role reaches only its own Region's replica and key; a plan MRSC refuses
is refused at synth with a ConfigError that says why. The single-Region app is untouched (its own
tests still hold every shape of it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_calls import component_actions
from cdk_helpers import (
    CLI_CONTEXT,
    Synth,
    actions_on,
    component_roles,
    functions_dir,
    join_parts,
    role_statements,
)

from punctual_cdk.config import ConfigError
from punctual_cdk.multi_region import RegionPlan

ACCOUNT = "123456789012"
REGIONS = ("us-east-1", "us-east-2", "us-west-2")


def _synth(outdir: Path, context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Synthesise the multi-Region app; the template of each Region's stack, by Region."""
    return {region: synth.json for region, synth in _synths(outdir, context).items()}


def _synths(outdir: Path, context: dict[str, Any]) -> dict[str, Synth]:
    """Synthesise the multi-Region app; each Region's scheduler and template, by Region."""
    from infra.multi_region_app import build_multi_region_app

    defaults = {
        **CLI_CONTEXT,
        "account": ACCOUNT,
        "layerAssetDir": "layers/core",
        "functionsDir": functions_dir(outdir.with_name(outdir.name + "-functions")),
    }
    app, profile = build_multi_region_app({**defaults, **context}, outdir=str(outdir))
    assembly = app.synth()  # raises ValidationFailed on any unacknowledged cdk-nag finding
    report = json.loads((outdir / "validation-report.json").read_text())
    assert all(plugin["conclusion"] == "success" for plugin in report["pluginReports"]), report
    return {
        region: Synth(
            stack=stack.scheduler,
            template=None,
            json=assembly.get_stack_artifact(stack.artifact_id).template,
            report=report,
            outdir=outdir,
            acknowledged={},
        )
        for region, stack in profile.stacks.items()
    }


@pytest.fixture(scope="module")
def witness_synths(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synth]:
    """Two Regions running the scheduler and a witness."""
    context = {"regions": "us-east-1,us-east-2", "witnessRegion": "us-west-2"}
    return _synths(tmp_path_factory.mktemp("cdk-mr-witness"), context)


@pytest.fixture(scope="module")
def witness_plan(witness_synths: dict[str, Synth]) -> dict[str, dict[str, Any]]:
    return {region: synth.json for region, synth in witness_synths.items()}


@pytest.fixture(scope="module")
def three_regions(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Three Regions, as a second multi-Region deployment of the account: a stack name and a
    table name of its own."""
    context = {"regions": ",".join(REGIONS), "stackName": "PunctualStaging", "tableName": "punctual-staging"}
    return _synth(tmp_path_factory.mktemp("cdk-mr-three"), context)


def _of_type(template: dict[str, Any], cfn_type: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == cfn_type]


def _policy_resources(template: dict[str, Any], effect: str | None = None) -> list[tuple[str, str]]:
    """(action, resource text) of every statement (of ``effect``, or all) of every IAM policy and
    role in the stack."""
    out: list[tuple[str, str]] = []
    documents = [p["Properties"]["PolicyDocument"] for p in _of_type(template, "AWS::IAM::Policy")]
    for role in _of_type(template, "AWS::IAM::Role"):
        documents += [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    for document in documents:
        for statement in document["Statement"]:
            if effect is not None and statement.get("Effect") != effect:
                continue
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            out += [(a, join_parts(r)) for a in actions for r in resources]
    return out


def test_one_stack_per_region_the_home_one_holding_the_mrsc_table(
    witness_plan: dict[str, dict[str, Any]],
) -> None:
    assert list(witness_plan) == ["us-east-1", "us-east-2"]
    home, other = witness_plan["us-east-1"], witness_plan["us-east-2"]
    (table,) = _of_type(home, "AWS::DynamoDB::GlobalTable")
    props = table["Properties"]
    assert props["MultiRegionConsistency"] == "STRONG"
    assert sorted(r["Region"] for r in props["Replicas"]) == ["us-east-1", "us-east-2"]
    assert props["GlobalTableWitnesses"] == [{"Region": "us-west-2"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert "TimeToLiveSpecification" not in props  # MRSC has no TTL (F9)
    assert "LocalSecondaryIndexes" not in props  # nor LSIs
    assert [i["IndexName"] for i in props["GlobalSecondaryIndexes"]] == ["audit"]  # the chain auditor's
    for replica in props["Replicas"]:
        assert replica["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert replica["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"
    # The other Region runs the whole scheduler over its replica, and makes no table of its own
    for template in (home, other):
        assert _of_type(template, "AWS::DynamoDB::Table") == []
        assert len(_of_type(template, "AWS::ApiGateway::RestApi")) == 1
        assert len(_of_type(template, "AWS::StepFunctions::StateMachine")) >= 1
        assert len(_of_type(template, "AWS::SQS::Queue")) >= 3
    assert _of_type(other, "AWS::DynamoDB::GlobalTable") == []


def test_three_replicas_without_a_witness(three_regions: dict[str, dict[str, Any]]) -> None:
    assert list(three_regions) == list(REGIONS)
    (table,) = _of_type(three_regions["us-east-1"], "AWS::DynamoDB::GlobalTable")
    assert sorted(r["Region"] for r in table["Properties"]["Replicas"]) == sorted(REGIONS)
    assert "GlobalTableWitnesses" not in table["Properties"]
    # A second deployment's table is its own (QA27: every multi-Region deployment's was named
    # punctual, so a second one in the account failed to deploy), and each Region reaches it
    assert table["Properties"]["TableName"] == "punctual-staging"
    own = f"arn:aws:dynamodb:us-west-2:{ACCOUNT}:table/punctual-staging"
    grants = {
        r for a, r in _policy_resources(three_regions["us-west-2"], "Allow") if a.startswith("dynamodb:")
    }
    assert grants == {own, f"{own}/index/audit"}, grants


def test_webhook_secrets_key_is_one_multi_region_key(witness_plan: dict[str, dict[str, Any]]) -> None:
    home, other = witness_plan["us-east-1"], witness_plan["us-east-2"]
    primaries = [k for k in _of_type(home, "AWS::KMS::Key") if k["Properties"].get("MultiRegion")]
    assert len(primaries) == 1 and primaries[0]["Properties"]["EnableKeyRotation"] is True
    (replica,) = _of_type(other, "AWS::KMS::ReplicaKey")
    # the primary's ARN, read from the home stack's output in the home Region
    reference = replica["Properties"]["PrimaryKeyArn"]
    assert reference["Fn::GetStackOutput"]["Region"] == "us-east-1", reference


def _api_function(template: dict[str, Any]) -> dict[str, Any]:
    (api,) = [
        f
        for f in _of_type(template, "AWS::Lambda::Function")
        if "PUNCTUAL_TOKEN_KEY_SECRET" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    return api


def test_a_paging_token_of_one_regions_api_pages_in_anothers(witness_plan: dict[str, dict[str, Any]]) -> None:
    # Clients fail over to another Region's API mid-listing (section 8): the next_token they hold
    # was signed by the first Region's API. QA27: each Region's stack generated a paging-token key
    # of its own, and the other Region's API refused the token (400 invalid-next-token).
    home, other = witness_plan["us-east-1"], witness_plan["us-east-2"]
    (secret,) = [
        s
        for s in _of_type(home, "AWS::SecretsManager::Secret")
        if "paging tokens" in s["Properties"].get("Description", "")
    ]
    name = secret["Properties"]["Name"]
    assert secret["Properties"]["ReplicaRegions"] == [{"Region": "us-east-2"}]
    # The other Region makes no key of its own: its API reads the home key's replica, by name
    assert not [s for s in _of_type(other, "AWS::SecretsManager::Secret") if "paging" in json.dumps(s)]
    variable = join_parts(
        _api_function(other)["Properties"]["Environment"]["Variables"]["PUNCTUAL_TOKEN_KEY_SECRET"]
    )
    assert variable.endswith(f":secret:{name}") and "us-east-1" not in variable, variable
    readable = [r for a, r in _policy_resources(other, "Allow") if a == "secretsmanager:GetSecretValue"]
    assert f"{variable}-??????" in readable, readable


@pytest.mark.parametrize("region", ["us-east-1", "us-east-2"])
def test_every_role_reaches_only_its_own_regions_table_and_key(
    witness_plan: dict[str, dict[str, Any]], region: str
) -> None:
    template = witness_plan[region]
    others = [r for r in REGIONS if r != region]
    statements = _policy_resources(template)
    # (the target role's Deny of the scheduler's own resources names them too: left out here)
    table_grants = [(a, r) for a, r in _policy_resources(template, "Allow") if a.startswith("dynamodb:")]
    assert table_grants, "no role reaches the table"
    for action, resource in table_grants:
        if region == "us-east-1":  # the global table's own ARN: its replica in this Region
            assert resource.startswith("<") and "Table" in resource, (action, resource)
        else:
            own = f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/punctual"
            assert resource in (own, f"{own}/index/audit"), (action, resource)
    for action, resource in statements:
        assert not any(other in resource for other in others), (action, resource)
    kms = [r for a, r in _policy_resources(template, "Allow") if a in ("kms:Encrypt", "kms:Decrypt")]
    assert kms and all(re.fullmatch(r"<StorageSecretsKey\w+\.Arn>", r) for r in kms), kms


@pytest.mark.parametrize(
    ("regions", "witness", "why"),
    [
        (("us-east-1", "us-east-2"), None, "three Regions"),
        (("us-east-1", "us-east-2", "us-west-2"), "us-east-1", "appears twice"),
        (("us-east-1", "eu-west-1"), "us-west-2", "one MRSC Region set"),
        (("us-east-1",), "us-east-2", "three Regions"),
        (("us-east-1", "us-east-2", "us-west-2"), "eu-west-1", "three Regions"),
    ],
)
def test_a_plan_mrsc_refuses_is_refused_with_the_reason(
    regions: tuple[str, ...], witness: str | None, why: str
) -> None:
    with pytest.raises(ConfigError, match=why):
        RegionPlan(regions=regions, witness=witness)


@pytest.mark.parametrize(
    ("context", "line"),
    [
        ({"regions": "us-east-1"}, "regions: MRSC needs three Regions"),
        ({"regions": ["us-east-1", 5]}, r"regions: \['us-east-1', 5\] is not a list of Region names"),
        ({"regions": 5}, "regions: 5 is not a list of Region names"),
        (
            {"regions": "us-east-1,us-east-2", "witnessRegion": "us-east-2"},
            "witnessRegion: us-east-2 is also in",
        ),
        (
            {"regions": "us-east-1,us-east-2", "witnessRegion": ["us-west-2"]},
            r"witnessRegion: \['us-west-2'\] is not",
        ),
        (
            {"regions": "us-east-1,eu-west-1", "witnessRegion": "us-west-2"},
            "regions, witnessRegion: .* one MRSC",
        ),
        (
            {"regions": "us-east-1,us-east-2,us-west-2", "tableName": "a b"},
            "tableName: 'a b' is not a DynamoDB",
        ),
        ({"regions": "us-east-1,us-east-2,us-west-2", "tableName": 7}, "tableName: 7 is not a DynamoDB"),
    ],
)
def test_a_bad_region_context_is_refused_naming_its_key(context: dict[str, Any], line: str) -> None:
    """QA22: a list of regions holding a number, or a number, was a traceback (TypeError,
    AttributeError); the plan's refusals named no key ('multi-Region: ...'), and a witness also
    listed in regions read 'a Region appears twice'."""
    from infra.multi_region_app import plan_from

    with pytest.raises(ConfigError, match=f"^{line}"):
        plan_from(context.get)


@pytest.mark.parametrize(
    "given", ['["us-east-1", "us-east-2"]', " us-east-1 , us-east-2 ", ["us-east-1", "us-east-2"]]
)
def test_regions_may_be_a_json_list_as_every_context_list(given: Any) -> None:
    """QA28: -c regions='["us-east-1","us-east-2"]' (infra/README.md: context lists are JSON or
    comma-separated) was split at its commas, and refused as Regions '["us-east-1"' and '"us-east-2"]'."""
    from infra.multi_region_app import plan_from

    context = {"regions": given, "witnessRegion": "us-west-2"}
    assert plan_from(context.get).regions == ("us-east-1", "us-east-2")
    with pytest.raises(ConfigError, match=r"^regions: '\[us-east-1' is not a JSON list$"):
        plan_from({"regions": "[us-east-1"}.get)


@pytest.mark.parametrize("account", ["abc", "12345678901", "1234567890123", 123456789012.5])
def test_an_account_that_is_no_account_id_is_refused_naming_it(account: Any) -> None:
    """QA28: -c account=abc synthesised every Region's stack (a validation warning only), for a
    deploy that could never happen."""
    from infra.multi_region_app import build_multi_region_app

    context = {"regions": ",".join(REGIONS), "account": account, "layerAssetDir": "layers/core"}
    with pytest.raises(ConfigError, match=r"^account: .* is not an AWS account id \(12 digits\)$"):
        build_multi_region_app(context, outdir="/nonexistent/unused")


def test_options_the_profile_does_not_offer_are_refused(repo_root: Path, tmp_path: Path) -> None:
    context = {"regions": ",".join(REGIONS), "tableEncryption": "cmk"}
    with pytest.raises(ConfigError, match="cmk"):
        _synth(tmp_path / "cmk", context)
    with pytest.raises(ConfigError, match="on-demand"):
        _synth(tmp_path / "prov", {"regions": ",".join(REGIONS), "tableBillingMode": "provisioned"})
    # QA22: these were dropped silently (no warm throughput, the table retained all the same)
    for key, value in (
        ("tableWarmWriteUnitsPerSecond", 40_000),
        ("tableWarmReadUnitsPerSecond", 12_000),
        ("tableRemovalPolicy", "destroy"),
    ):
        given = {"regions": ",".join(REGIONS), key: value, "tableDeletionProtection": False}
        with pytest.raises(ConfigError, match=f"^{key}: not offered by the multi-Region profile"):
            _synth(tmp_path / key, given)


@pytest.mark.parametrize("region", ["us-east-1", "us-east-2"])
def test_every_process_writes_without_transactions_and_keeps_its_regions_marks(
    witness_plan: dict[str, dict[str, Any]], region: str
) -> None:
    template = witness_plan[region]
    functions = [
        f
        for f in _of_type(template, "AWS::Lambda::Function")
        if "PUNCTUAL_TABLE_NAME" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(functions) >= 6  # api, pollers, tick, worker, console, auditor
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["PUNCTUAL_TABLE_TRANSACTIONS"] == "false"
        # and each Region's processes keep watermarks and progress marks of their own Region
        assert variables["PUNCTUAL_MARKS_SCOPE"] == region
        # and every Region's API names ARNs in the home Region (the same ARN from every API)
        assert variables["PUNCTUAL_ARN_REGION"] == "us-east-1"
    for task in _of_type(template, "AWS::ECS::TaskDefinition"):
        for container in task["Properties"]["ContainerDefinitions"]:
            names = {e["Name"]: e["Value"] for e in container.get("Environment", [])}
            if "PUNCTUAL_TABLE_NAME" in names:
                assert names["PUNCTUAL_TABLE_TRANSACTIONS"] == "false", container["Name"]
                assert names["PUNCTUAL_MARKS_SCOPE"] == region, container["Name"]


@pytest.mark.parametrize("region", ["us-east-1", "us-east-2"])
def test_each_role_holds_the_table_actions_its_code_calls_without_transactions(
    witness_synths: dict[str, Synth], region: str
) -> None:
    """Least privilege per Region on a table without transactions: exactly what the code calls
    when the store writes each transaction item by item (the poller's DeleteItem, which the
    single-Region poller never holds, undoes a job write whose later condition failed)."""
    synth = witness_synths[region]
    for name, (component, role) in component_roles(synth.stack).items():
        granted = {a for a in actions_on(role_statements(synth, role)) if a.startswith("dynamodb:")}
        called = {a for a in component_actions(component, transactions=False) if a.startswith("dynamodb:")}
        assert granted == called, (name, sorted(granted - called), sorted(called - granted))
        assert "dynamodb:ConditionCheckItem" not in granted, name
    poller = actions_on(role_statements(synth, synth.stack.dispatch.poller.role))
    assert "dynamodb:DeleteItem" in poller
