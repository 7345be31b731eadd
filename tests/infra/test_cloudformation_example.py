"""examples/cloudformation/template.yaml: Punctual jobs declared in plain CloudFormation (or SAM).

The template declares its own ``Custom::PunctualJob`` provider (the provider function of
``punctual_cdk``, its source folder packaged) and two jobs. Checked here: the jobs' specs pass the
rule the construct applies at synth (the API's model and webhook guard); the properties each job
gives are exactly those the provider reads, and the provider, run on them, sends the declared
spec (and stores a webhook job's signing secret where ``SigningSecretArn`` says); the provider's
role may call what the construct's provider may, on the API the ApiUrl parameter names; the tenant is the provider's role, never a template field; cfn-lint is clean.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from cdk_helpers import REPO_ROOT
from cfnlint.decode import cfn_yaml

from punctual_cdk import JobSpecError, SchedulerRef
from punctual_cdk.jobs import PROVIDER_DIR, PROVIDER_TIMEOUT_S, JobProvider, check
from punctual_cdk.provider import handler as provider

TEMPLATE_PATH = REPO_ROOT / "examples" / "cloudformation" / "template.yaml"
ACCOUNT, REGION = "123456789012", "eu-west-1"
API_ID, STAGE = "abc123defg", "prod"
PARAMETERS = {
    "PunctualApiUrl": f"https://{API_ID}.execute-api.{REGION}.amazonaws.com/{STAGE}/",
    "PunctualWorkerRoleArns": [f"arn:aws:iam::{ACCOUNT}:role/Punctual-WorkerRole"],
    "ExecutionRoleTag": "punctual:execution-role",
    "ExecutionRolePath": "/",
}
REF = SchedulerRef(
    api_url=PARAMETERS["PunctualApiUrl"],  # type: ignore[arg-type]
    execute_api_arn=f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}/{STAGE}",
    worker_role_arns=tuple(PARAMETERS["PunctualWorkerRoleArns"]),
)
PROVIDER_ROLE_ID = "AROAEXAMPLEPROVIDER01"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = cfn_yaml.load(str(TEMPLATE_PATH))
    return loaded


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def attribute(template: dict[str, Any], name: str, attr: str) -> str:
    """What CloudFormation would give ``Fn::GetAtt [name, attr]`` in the sample account."""
    kind = template["Resources"][name]["Type"]
    samples = {
        ("AWS::SQS::Queue", "Arn"): f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders-{name}",
        ("AWS::IAM::Role", "Arn"): f"arn:aws:iam::{ACCOUNT}:role/orders-{name}",
        ("AWS::IAM::Role", "RoleId"): PROVIDER_ROLE_ID
        if name == "JobProviderRole"
        else "AROAEXAMPLEOTHER0001",
        ("AWS::Lambda::Function", "Arn"): f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:orders-{name}",
        ("AWS::Logs::LogGroup", "Arn"): f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:orders-{name}:*",
        ("Custom::PunctualCalendar", "Name"): "partner-holidays",
    }
    return samples[(kind, attr)]  # a reference this test does not know fails it: teach it


def resolve(value: Any, template: dict[str, Any], local: dict[str, str] | None = None) -> Any:
    """Evaluate the intrinsic functions the template uses, with the sample parameters."""
    pseudo = {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION}
    if isinstance(value, list):
        return [resolve(item, template, local) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1 or not next(iter(value)).startswith(("Fn::", "Ref")):
        return {key: resolve(item, template, local) for key, item in value.items()}
    ((function, argument),) = value.items()
    if function == "Ref":
        if argument in template["Resources"]:
            assert template["Resources"][argument]["Type"] == "AWS::SecretsManager::Secret"  # (teach it)
            return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:orders-{argument}-AbCdEf"
        return {**pseudo, **PARAMETERS}[argument]
    if function == "Fn::GetAtt":
        return attribute(template, *argument)
    if function == "Fn::Select":
        return resolve(argument[1], template, local)[int(argument[0])]
    if function == "Fn::Split":
        return str(resolve(argument[1], template, local)).split(argument[0])
    if function == "Fn::Sub":
        text, names = (argument, {}) if isinstance(argument, str) else argument
        bound = {key: resolve(item, template, local) for key, item in names.items()}

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in bound:
                return str(bound[name])
            if "." in name:
                return attribute(template, *name.split(".", 1))
            return str(resolve({"Ref": name}, template))

        return re.sub(r"\$\{([^}!]+)\}", substitute, text)
    raise AssertionError(f"the test does not evaluate {function}")


def jobs(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources_of(template, "Custom::PunctualJob")


def test_the_template_declares_two_jobs_served_by_its_own_provider(template: dict[str, Any]) -> None:
    declared = jobs(template)
    assert len(declared) == 2
    (function_name,) = resources_of(template, "AWS::Lambda::Function")
    for properties in (job["Properties"] for job in declared.values()):
        assert properties["ServiceToken"] == {"Fn::GetAtt": [function_name, "Arn"]}
        assert properties["ApiUrl"] == {"Ref": "PunctualApiUrl"}


def test_each_job_spec_passes_the_rule_the_construct_applies(template: dict[str, Any]) -> None:
    for name, job in jobs(template).items():
        spec = json.loads(resolve(job["Properties"]["Spec"], template))
        check(spec, REF, name)  # raises JobSpecError naming the field, as `cdk synth` does
        assert "tenant" not in json.dumps(spec).lower()  # the tenant is never a template field


def test_the_check_refuses_what_the_api_would_refuse(template: dict[str, Any]) -> None:
    # Given the first job's spec with one mistake at a time, then each is refused naming it
    spec = json.loads(resolve(next(iter(jobs(template).values()))["Properties"]["Spec"], template))
    for field, broken in (
        ("schedule", {**spec, "schedule": "cron(0 2 * *)"}),
        ("overlap", {**spec, "overlap": "sometimes"}),
        ("target", {**spec, "target": {"type": "http", "url": "http://169.254.169.254/latest"}}),
        ("tenant", {**spec, "tenant": "another-stack"}),  # a template cannot choose its tenant
    ):
        with pytest.raises(JobSpecError, match=field):
            check(broken, REF, "Broken")


class RecordingProperties(dict[str, Any]):
    """ResourceProperties that remember which keys the provider read."""

    def __init__(self, values: dict[str, Any], read: set[str]) -> None:
        super().__init__(values)
        self.read = read

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


class FakeApi:
    """The job API as the provider calls it: every request kept, answered as a healthy API."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, url: str) -> FakeApi:  # the provider asks for the API at a URL
        return self

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        self.calls.append((method, path, body))
        if method == "GET":
            return 200, {"Arn": f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/x"}
        created = headers and method == "PUT"
        reply = {"signing_secret": "whsec_c2VjcmV0"} if created and provider.signs_webhooks(body) else {}
        return {"PUT": 201 if headers else 200, "DELETE": 204}[method], reply


class FakeSecrets:
    """Secrets Manager as the provider calls it: every secret stored, kept."""

    def __init__(self) -> None:
        self.stored: list[tuple[str, str]] = []

    def put(self, secret_arn: str, value: str) -> None:
        self.stored.append((secret_arn, value))


@pytest.mark.parametrize("name", sorted(jobs(cfn_yaml.load(str(TEMPLATE_PATH)))))
def test_the_provider_reads_exactly_the_properties_each_job_gives(
    template: dict[str, Any], name: str
) -> None:
    job = jobs(template)[name]
    given = {key: resolve(value, template) for key, value in job["Properties"].items()}
    read: set[str] = set()
    api = FakeApi()
    secrets = FakeSecrets()
    base = {
        "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/orders-jobs/1",
        "LogicalResourceId": name,
        "ResourceType": job["Type"],
    }
    # When CloudFormation creates, updates and deletes the job with the template's properties
    created = provider.on_event(
        {
            **base,
            "RequestType": "Create",
            "RequestId": "r1",
            "ResourceProperties": RecordingProperties(given, read),
        },
        api,
        secrets=secrets,
    )
    provider.on_event(
        {
            **base,
            "RequestType": "Update",
            "RequestId": "r2",
            "PhysicalResourceId": created["PhysicalResourceId"],
            "ResourceProperties": RecordingProperties(given, read),
            "OldResourceProperties": RecordingProperties(given, read),
        },
        api,
        secrets=secrets,
    )
    provider.on_event(
        {
            **base,
            "RequestType": "Delete",
            "RequestId": "r3",
            "PhysicalResourceId": created["PhysicalResourceId"],
            "ResourceProperties": RecordingProperties(given, read),
        },
        api,
        secrets=secrets,
    )
    # Then it read every property but the ServiceToken, and nothing else (but the optional Enabled,
    # true when left out)
    assert read - {"Enabled"} == set(given) - {"ServiceToken", "Enabled"}
    # ...and put the declared spec, as declared, at the id it answered
    job_id = created["PhysicalResourceId"]
    puts = [(path, body) for method, path, body in api.calls if method == "PUT"]
    # (the update declares the same spec: read, not put again, as a one-time job that ran would refuse it)
    assert puts == [(f"/v1/jobs/{job_id}", json.loads(given["Spec"]))]
    assert ("GET", f"/v1/jobs/{job_id}", None) in api.calls
    assert ("DELETE", f"/v1/jobs/{job_id}", None) in api.calls
    # ...and stored a webhook job's signing secret, once, where the template says
    if "SigningSecretArn" in given:
        assert secrets.stored == [(given["SigningSecretArn"], "whsec_c2VjcmV0")]
    else:
        assert secrets.stored == []
    # ...and answered every attribute the template's outputs read of a job
    outputs = [o["Value"].get("Fn::GetAtt") for o in template["Outputs"].values()]
    read_of_jobs = {at[1] for at in outputs if at and at[0] in jobs(template)}
    assert read_of_jobs and read_of_jobs <= set(created["Data"])


def test_the_provider_function_is_the_constructs_provider(template: dict[str, Any]) -> None:
    (function,) = resources_of(template, "AWS::Lambda::Function").values()
    properties = function["Properties"]
    code = (TEMPLATE_PATH.parent / properties["Code"]).resolve()
    assert code == PROVIDER_DIR
    module, entry = properties["Handler"].split(".")
    assert (code / f"{module}.py").is_file() and entry == provider.handler.__name__
    assert properties["Runtime"] == lambda_.Runtime.PYTHON_3_14.name
    assert properties["Timeout"] == PROVIDER_TIMEOUT_S
    assert properties["Role"] == {"Fn::GetAtt": ["JobProviderRole", "Arn"]}


def construct_provider_api_resources() -> set[str]:
    """The execute-api resources the construct's provider role may invoke, for :data:`REF`."""
    stack = cdk.Stack(cdk.App(), "Orders", env=cdk.Environment(account=ACCOUNT, region=REGION))
    JobProvider.of(stack, REF)
    found: set[str] = set()
    for policy in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Action"] == "execute-api:Invoke":
                found |= set(statement["Resource"])
    return found


def test_the_provider_role_may_call_what_the_constructs_provider_may(template: dict[str, Any]) -> None:
    role = template["Resources"]["JobProviderRole"]["Properties"]
    statements = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    invoke = {
        arn
        for s in statements
        if s["Action"] == "execute-api:Invoke"
        for arn in resolve(s["Resource"], template)
    }
    assert invoke == construct_provider_api_resources()
    secrets = [s for s in statements if s["Action"] == "secretsmanager:PutSecretValue"]
    assert [s["Resource"] for s in secrets] == [
        job["Properties"]["SigningSecretArn"]
        for job in jobs(template).values()
        if "SigningSecretArn" in job["Properties"]
    ]
    assert all(
        s["Action"] == "execute-api:Invoke" or "logs:" in str(s["Action"]) or s in secrets for s in statements
    )


def test_the_tenant_is_the_provider_role(template: dict[str, Any]) -> None:
    # The role that calls the API is the provider's; execution roles trust the workers only with
    # that role's id as external id (and session tag), the tenant the workers send.
    tenant = {"Fn::GetAtt": ["JobProviderRole", "RoleId"]}
    for name, role in resources_of(template, "AWS::IAM::Role").items():
        if name == "JobProviderRole":
            continue
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"AWS": {"Ref": "PunctualWorkerRoleArns"}}
        assert statement["Condition"]["StringEquals"] == {
            "sts:ExternalId": tenant,
            "aws:RequestTag/punctual-tenant": tenant,
        }
        assert {"Key": {"Ref": "ExecutionRoleTag"}, "Value": "true"} in role["Properties"]["Tags"]
    assert template["Outputs"]["JobTenant"]["Value"] == tenant


def test_cfn_lint_finds_nothing(template: dict[str, Any]) -> None:
    from cfnlint.api import ManualArgs, lint

    matches = lint(Path(TEMPLATE_PATH).read_text(encoding="utf-8"), config=ManualArgs(regions=[REGION]))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []
