"""The construct library in a user's app: examples/orders_app declares Punctual and three jobs.

The example synthesises with cdk-nag's AwsSolutions checks (any unacknowledged finding fails the
synth, and so this fixture); each job is a ``Custom::PunctualJob`` served by the stack's one
provider, whose role is the jobs' tenant; a job the API would refuse fails at synth.
"""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sqs as sqs
from cdk_helpers import REPO_ROOT, _layer_dir

import punctual_cdk
from punctual_cdk import ConfigError, HttpTarget, Job, JobSpecError, Punctual, SchedulerRef, SqsTarget

EXAMPLE = REPO_ROOT / "examples" / "orders_app" / "app.py"
REF = SchedulerRef(
    api_url="https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod",
    execute_api_arn="arn:aws:execute-api:eu-west-1:123456789012:abc123defg/prod",
    worker_role_arns=("arn:aws:iam::123456789012:role/punctual-worker",),
)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("orders_app", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outdir = tmp_path_factory.mktemp("example")
    app, stack = module.build(str(outdir), {"layer_asset_dir": _layer_dir()})
    app.synth()  # raises on any cdk-nag finding not acknowledged
    report = json.loads((outdir / "validation-report.json").read_text())
    template: dict[str, Any] = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return {"template": template, "report": report}


def _of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {key: r for key, r in template["Resources"].items() if r["Type"] == kind}


def test_the_example_app_synthesises_cdk_nag_clean(example: dict[str, Any]) -> None:
    (nag,) = [r for r in example["report"]["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []


def test_three_jobs_served_by_one_provider_whose_role_is_the_tenant(example: dict[str, Any]) -> None:
    template = example["template"]
    jobs = _of_type(template, "Custom::PunctualJob")
    assert len(jobs) == 3
    providers = {json.dumps(job["Properties"]["ServiceToken"]) for job in jobs.values()}
    assert len(providers) == 1
    (provider_fn,) = [
        k for k in _of_type(template, "AWS::Lambda::Function") if k.startswith("PunctualJobProvider")
    ]
    assert json.loads(providers.pop()) == {"Fn::GetAtt": [provider_fn, "Arn"]}
    provider_role = template["Resources"][provider_fn]["Properties"]["Role"]["Fn::GetAtt"][0]
    # Each AWS target is called as an execution role the workers assume with the tenant's id
    job_roles = [r for k, r in _of_type(template, "AWS::IAM::Role").items() if "JobExecutionRole" in k]
    assert len(job_roles) == 2  # the Lambda and the SQS job; the webhook needs none
    for role in job_roles:
        statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert len(statements) == 2  # the worker function's role and the ECS worker's task role
        for statement in statements:
            # the tenant as external id and as the session's tag, as docs/tenants.md's trust policy
            tenant = {"Fn::GetAtt": [provider_role, "RoleId"]}
            assert statement["Condition"] == {
                "StringEquals": {"sts:ExternalId": tenant, "aws:RequestTag/punctual-tenant": tenant}
            }
            assert statement["Principal"]["AWS"]["Fn::GetAtt"][0].startswith("SchedulerWorkers")
            assert set(statement["Action"]) == {"sts:AssumeRole", "sts:TagSession"}  # the session tag
        # Opted in to the scheduler (issue 31): the workers may assume only roles with the tag.
        assert {"Key": "punctual:execution-role", "Value": "true"} in role["Properties"]["Tags"]
    # And the specs carry the tokens the stack resolves (the function's ARN, the role's)
    specs = [json.dumps(job["Properties"]["Spec"]) for job in jobs.values()]
    assert sum("NightlyReport" in spec and "ExecutionRole" in spec for spec in specs) == 1
    assert any("https://partner.example.com/hooks/sync" in spec for spec in specs)


def test_a_job_the_api_would_refuse_fails_the_synth() -> None:
    stack = cdk.Stack(cdk.App(), "Refused")
    queue = sqs.Queue(stack, "Queue")
    with pytest.raises(JobSpecError, match="schedule"):
        Job(stack, "Bad", scheduler=REF, schedule="every tuesday", target=SqsTarget(queue))
    with pytest.raises(JobSpecError, match="retry"):
        Job(
            stack,
            "BadRetry",
            scheduler=REF,
            schedule="rate(5 minutes)",
            target=SqsTarget(queue),
            retry={"max_attempts": 0},
        )
    with pytest.raises(JobSpecError, match=r"target\.url"):  # the API's webhook guard
        Job(
            stack,
            "Loopback",
            scheduler=REF,
            schedule="rate(5 minutes)",
            target=HttpTarget("http://127.0.0.1/hook"),
        )
    Job(stack, "Good", scheduler=REF, schedule="rate(5 minutes)", target=SqsTarget(queue))


def test_settings_are_checked_by_name_with_the_apps_rules() -> None:
    with pytest.raises(ConfigError, match="shards"):
        Punctual(cdk.Stack(cdk.App(), "A"), "Scheduler", shards=3)
    with pytest.raises(ConfigError, match="shardCount"):
        Punctual(cdk.Stack(cdk.App(), "B"), "Scheduler", shard_count=0)
    # QA28: stack_name was taken and did nothing (the resources are named by the stack they are in)
    with pytest.raises(ConfigError, match=r"^stack_name: .*cdk\.Stack\(\.\.\., stack_name="):
        Punctual(cdk.Stack(cdk.App(), "C"), "Scheduler", stack_name="Orders")


def test_the_library_is_versioned_with_the_repository() -> None:
    def version(path: Path) -> str:
        return str(tomllib.loads(path.read_text())["project"]["version"])

    assert version(REPO_ROOT / "cdk" / "pyproject.toml") == version(REPO_ROOT / "pyproject.toml")
    assert punctual_cdk.__version__ == version(REPO_ROOT / "pyproject.toml")


def test_each_job_is_created_after_its_api_and_deleted_before_it(example: dict[str, Any]) -> None:
    # QA: on a stack's delete, the API's permission to call its function could go first, and the
    # jobs' deletes then got API Gateway's 500s until the stack was DELETE_FAILED
    template = example["template"]
    permissions = {
        key
        for key, resource in _of_type(template, "AWS::Lambda::Permission").items()
        if resource["Properties"].get("Principal") == "apigateway.amazonaws.com"
    }
    assert permissions
    for key, job in _of_type(template, "Custom::PunctualJob").items():
        assert permissions <= set(job.get("DependsOn", [])), key
