"""The ``Job`` construct at synth: what it sends, what it grants, and what it refuses (by name).

A webhook job keeps its signing secret in a Secrets Manager secret the provider alone may write;
an execution role covers every send the job makes (target, alerts, dead-letter queue, events
bus); tokens pass to the API (checked at deploy) while the rest is checked at synth; every refusal
is a :class:`JobSpecError` naming the field as the user wrote it; a job in another stack than its
scheduler's is cdk-nag clean.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from punctual.models import RetryPolicy
from punctual_cdk import (
    Alert,
    HttpTarget,
    Job,
    JobSpecError,
    LambdaTarget,
    SchedulerRef,
    SnsTarget,
    SqsTarget,
)

REF = SchedulerRef(
    api_url="https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod",
    execute_api_arn="arn:aws:execute-api:eu-west-1:123456789012:abc123defg/prod",
    worker_role_arns=("arn:aws:iam::123456789012:role/punctual-worker",),
)
OTHER = SchedulerRef(  # a second scheduler
    api_url="https://zyx987wvut.execute-api.eu-west-1.amazonaws.com/prod",
    execute_api_arn="arn:aws:execute-api:eu-west-1:123456789012:zyx987wvut/prod",
    worker_role_arns=("arn:aws:iam::123456789012:role/punctual-worker-2",),
)
DLQ = "arn:aws:sqs:eu-west-1:123456789012:orders-dlq"
HOOK = "https://hooks.example.com/run"


def _stack(name: str = "Jobs", app: cdk.App | None = None) -> cdk.Stack:
    return cdk.Stack(app or cdk.App(), name, env=cdk.Environment(account="123456789012", region="eu-west-1"))


def _function(stack: cdk.Stack) -> lambda_.Function:
    return lambda_.Function(
        stack,
        "Fn",
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
    )


def _spec(stack: cdk.Stack, job: Job) -> dict[str, Any]:
    """The job's Spec as deployed, with each reference written as ``<logical id>`` (attribute)."""
    resources = Template.from_stack(stack).find_resources("Custom::PunctualJob")
    resolved = resources[_logical(stack, job.resource)]["Properties"]["Spec"]

    def text(part: Any) -> str:
        if isinstance(part, str):
            return part
        if "Fn::GetAtt" in part:
            return "<{}.{}>".format(*part["Fn::GetAtt"])
        if "Ref" in part:
            return f"<{part['Ref']}>"
        raise AssertionError(part)

    joined = resolved if isinstance(resolved, str) else "".join(map(text, resolved["Fn::Join"][1]))
    spec: dict[str, Any] = json.loads(joined)
    return spec


def _statements(template: Template, role_id: str) -> list[dict[str, Any]]:
    found = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def _logical(stack: cdk.Stack, construct: Any) -> str:
    return str(stack.get_logical_id(construct.node.default_child))


def _nag_findings(app: cdk.App, outdir: Path) -> list[str]:
    with contextlib.suppress(RuntimeError):  # a finding fails the synth: the report says which
        app.synth()
    report = json.loads((outdir / "validation-report.json").read_text())
    return [v["ruleName"] for r in report["pluginReports"] for v in r["violations"]]


# --------------------------------------------------------------------------- finding 4


def test_a_webhook_job_with_aws_alerts_and_a_dead_letter_queue_has_a_role_for_them() -> None:
    stack = _stack()
    function = _function(stack)
    # When a webhook job alerts a function and names a dead-letter queue by ARN
    job = Job(
        stack,
        "Sync",
        scheduler=REF,
        schedule="rate(1 hour)",
        target=HttpTarget(HOOK),
        alerts=[Alert(LambdaTarget(function), on=["failed"])],
        dead_letter={"queue_arn": DLQ},
    )
    spec = _spec(stack, job)
    role = f"<{_logical(stack, job.role)}.Arn>"
    # Then the webhook has no role; the alert and the dead-letter queue are sent as the job's role
    assert spec["target"] == {"type": "http", "url": HOOK}
    assert spec["alerts"][0]["target"]["role_arn"] == role and spec["dead_letter"] == {
        "queue_arn": DLQ,
        "role_arn": role,
    }
    # And that role may invoke the function and send to the queue
    statements = _statements(Template.from_stack(stack), _logical(stack, job.role))
    assert {"Action": "sqs:SendMessage", "Effect": "Allow", "Resource": DLQ} in statements
    assert any(s["Action"] == "lambda:InvokeFunction" for s in statements)


def test_a_dead_letter_queue_named_with_its_own_role_is_sent_as_that_role() -> None:
    stack = _stack()
    own = "arn:aws:iam::123456789012:role/dlq-sender"
    job = Job(
        stack,
        "Sync",
        scheduler=REF,
        schedule="rate(1 hour)",
        target=HttpTarget(HOOK),
        dead_letter={"queue_arn": DLQ, "role_arn": own},
    )
    assert job.role is None and _spec(stack, job)["dead_letter"] == {"queue_arn": DLQ, "role_arn": own}


# --------------------------------------------------------------------------- finding 2


def test_a_webhook_job_keeps_its_signing_secret_in_a_secret_only_the_provider_writes(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = _stack(app=app)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    queue = sqs.Queue(stack, "Queue", enforce_ssl=True)
    hook = Job(stack, "Sync", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    report = Job(stack, "Report", scheduler=REF, schedule="rate(1 hour)", target=SqsTarget(queue))
    for construct, rule in (
        (queue, "SQS3"),
        (
            stack,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        ),
    ):
        cdk.Validations.of(construct).acknowledge(
            cdk.Acknowledgment(id=f"AwsSolutions::AwsSolutions-{rule}", reason="not what this test is about")
        )
    template = Template.from_stack(stack)
    # Then the webhook job has a secret, named to the provider, never its value
    assert hook.signing_secret is not None and report.signing_secret is None
    secret = _logical(stack, hook.signing_secret)
    props = template.find_resources("Custom::PunctualJob")[_logical(stack, hook.resource)]["Properties"]
    assert props["SigningSecretArn"] == {"Ref": secret}
    secret_props = template.find_resources("AWS::SecretsManager::Secret")[secret]["Properties"]
    assert "SecretString" not in secret_props and not template.to_json().get("Outputs")
    # And the provider may write that secret, and nothing else of Secrets Manager
    provider = _logical(stack, hook.provider.role)
    writes = [s for s in _statements(template, provider) if "secretsmanager" in json.dumps(s["Action"])]
    assert writes == [
        {"Action": "secretsmanager:PutSecretValue", "Effect": "Allow", "Resource": {"Ref": secret}}
    ]
    # And the stack is cdk-nag clean
    assert _nag_findings(app, tmp_path) == []


# --------------------------------------------------------------------------- finding 5


def test_tokens_pass_to_the_api_and_the_rest_is_checked() -> None:
    stack = _stack()
    queue, bus = sqs.Queue(stack, "Dlq"), events.EventBus(stack, "Bus")
    parent = Job(stack, "Parent", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    # When a dead-letter queue, an events bus and an after(...) parent are the stack's tokens
    child = Job(
        stack,
        "Child",
        scheduler=REF,
        schedule=f"after({parent.job_id})",
        target=HttpTarget(HOOK),
        dead_letter={"queue_arn": queue.queue_arn},
        events_bus=bus,
    )
    # Then the synth passes them on as CloudFormation resolves them
    spec = _spec(stack, child)
    assert spec["schedule"] == f"after(<{_logical(stack, parent.resource)}.JobId>)"
    assert spec["dead_letter"]["queue_arn"] == f"<{_logical(stack, queue)}.Arn>"
    assert spec["events_bus"]["event_bus_arn"] == f"<{_logical(stack, bus)}.Arn>"
    # And a schedule that is a parameter passes as it is
    schedule = cdk.CfnParameter(stack, "Schedule", type="String").value_as_string
    Job(stack, "Param", scheduler=REF, schedule=schedule, target=HttpTarget(HOOK))
    # While what is written out is still checked
    with pytest.raises(JobSpecError, match=r"^Job Jobs/Bad: schedule: "):
        Job(stack, "Bad", scheduler=REF, schedule=f"after({parent.job_id}) or so", target=HttpTarget(HOOK))


# --------------------------------------------------------------------------- findings 10, 11, 6


def test_a_datetime_is_an_instant_and_a_dict_is_a_raw_target() -> None:
    stack = _stack()
    raw = {
        "type": "sqs",
        "queue_arn": "arn:aws:sqs:eu-west-1:123456789012:q",
        "role_arn": "arn:aws:iam::123456789012:role/r",
    }
    job = Job(
        stack,
        "Dated",
        scheduler=REF,
        schedule="rate(1 hour)",
        target=raw,
        start_at=datetime(2030, 1, 1, 1, tzinfo=UTC),
        retry=RetryPolicy(max_attempts=5),
    )
    spec = _spec(stack, job)
    assert spec["start_at"] == "2030-01-01T01:00:00Z" and spec["target"] == raw and job.role is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"start_at": datetime(2030, 1, 1)}, r"start_at: a datetime with a time zone"),
        ({"target": 42}, r"target: a target of punctual_cdk\.targets"),
        ({"target": HttpTarget("hooks.example.com/x")}, r"target\.url: url must start with http"),
        ({"target": HttpTarget(HOOK, visibility=3)}, r"target\.visibility: Extra inputs"),
        ({"schedule": "every tuesday"}, r"schedule: unix cron"),
        (
            {"schedule": "rate(1 hour)", "payload": {"at": object()}},
            r"payload\.at: object is not a JSON value",
        ),
        ({"alerts": [Alert(HttpTarget(HOOK), on=["exploded"])]}, r"alerts\[0\]\.on\[0\]: Input should be"),
        # QA26: a NaN or infinity went to CDK's JSON, whose failure (a JSONDecodeError, then a broken
        # pipe to its process) named no field and broke the rest of the synth
        ({"payload": {"ratio": float("nan")}}, r"payload\.ratio: nan is not a JSON number"),
        (
            {"alerts": [Alert(HttpTarget(HOOK), on=["late"], late_after_seconds=float("inf"))]},
            r"alerts\[0\]\.late_after_seconds: inf is not a JSON number",
        ),
        (
            {"target": HttpTarget(HOOK, rate_budget_per_second=float("inf"))},
            r"target\.rate_budget_per_second: inf is not a JSON number",
        ),
        # QA22: a TypeError or AttributeError from inside the construct, naming no field
        (
            {"alerts": Alert(HttpTarget(HOOK), on=["failed"])},
            r"alerts: a list of punctual_cdk\.Alert, not Alert",
        ),
        (
            {"alerts": [{"on": ["failed"], "target": {"type": "http", "url": HOOK}}]},
            r"alerts\[0\]: a punctual_cdk\.Alert, not dict",
        ),
        ({"retries": {"max_attempts": 3}}, r"retries: Extra inputs are not permitted"),
        ({"state": "PAUSED"}, r"state: not a spec field here; declare a paused job with enabled=False"),
        ({"enabled": "false"}, r"enabled: True or False, not str"),
        ({"version": 3}, r"version: output only"),
        (
            {"exclude_calendars": ["holidays"]},
            r"exclude_calendars\[0\]: no punctual_cdk.Calendar of this stack",
        ),
        (
            {"role": iam.Role.from_role_arn(_stack("R"), "R", "arn:aws:iam::1:role/r")},
            r"role: this job calls",
        ),
    ],
)
def test_every_refusal_names_the_field_as_written(given: dict[str, Any], message: str) -> None:
    stack = _stack()
    declared = {"schedule": "rate(1 hour)", "target": HttpTarget(HOOK), **given}
    with pytest.raises(JobSpecError, match=rf"^Job Jobs/Job: {message}"):
        Job(stack, "Job", scheduler=REF, **declared)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            SqsTarget,
            r"^SqsTarget\(queue\): a construct \(for an ARN: sqs\.Queue\.from_queue_arn\(scope, id, arn\)\), not str$",
        ),
        (SnsTarget, r"^SnsTarget\(topic\): a construct \(for an ARN: sns\.Topic\.from_topic_arn"),
        (
            LambdaTarget,
            r"^LambdaTarget\(function\): a construct \(for an ARN: lambda_\.Function\.from_function_arn",
        ),
    ],
)
def test_a_typed_target_given_an_arn_says_what_it_takes(target: Any, message: str) -> None:
    # QA23: SqsTarget("arn:aws:sqs:...") was "AttributeError: 'str' object has no attribute 'queue_arn'"
    with pytest.raises(TypeError, match=message):
        target("arn:aws:sqs:eu-west-1:123456789012:orders")


# --------------------------------------------------------------------------- finding 7


def test_a_job_in_another_stack_than_its_scheduler_is_cdk_nag_clean(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    # Given a deployment's API and workers known by another stack's values (Fn::ImportValue)
    other = _stack("Scheduler", app)
    api = iam.Role(other, "ApiStandIn", assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"))
    ref = SchedulerRef(
        api_url=f"https://{api.role_name}.execute-api.eu-west-1.amazonaws.com/prod/",
        execute_api_arn=f"arn:aws:execute-api:eu-west-1:123456789012:{api.role_name}/prod",
        worker_role_arns=(api.role_arn,),
    )
    stack = _stack("Jobs", app)
    queue = sqs.Queue(stack, "Queue", enforce_ssl=True)
    cdk.Validations.of(queue).acknowledge(
        cdk.Acknowledgment(id="AwsSolutions::AwsSolutions-SQS3", reason="the test's queue, not the job's")
    )
    Job(stack, "Report", scheduler=ref, schedule="rate(1 hour)", target=SqsTarget(queue))
    Job(stack, "Alerting", scheduler=ref, schedule="rate(1 hour)", target=LambdaTarget(_function(stack)))
    cdk.Validations.of(stack).acknowledge(
        cdk.Acknowledgment(
            id="AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            reason="the test's function, not the job's",
        )
    )
    # Then the jobs' stack has no finding left
    assert _nag_findings(app, tmp_path) == []


def test_a_job_declared_disabled_sends_enabled_false_and_an_enabled_one_sends_nothing() -> None:
    stack = _stack()
    on = Job(stack, "On", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    off = Job(stack, "Off", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK), enabled=False)
    resources = Template.from_stack(stack).find_resources("Custom::PunctualJob")
    assert "Enabled" not in resources[_logical(stack, on.resource)]["Properties"]  # templates as they were
    assert resources[_logical(stack, off.resource)]["Properties"]["Enabled"] == "false"
    assert "state" not in _spec(stack, off)  # the provider asks for the paused create


def test_declared_parents_are_told_apart_and_twenty_fit() -> None:
    # QA: every token stood for one job id at synth, so after(a, b) of two declared jobs was
    # "listed twice"; and 256 characters held five declared parents' ids, not the 20 documented
    stack = _stack()
    parents = [
        Job(stack, f"P{i}", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
        for i in range(20)
    ]
    both = f"after({parents[0].job_id}, {parents[1].job_id})"
    Job(stack, "Two", scheduler=REF, schedule=both, target=HttpTarget(HOOK))
    every = "after(" + ", ".join(parent.job_id for parent in parents) + ")"
    Job(stack, "Twenty", scheduler=REF, schedule=every, target=HttpTarget(HOOK))
    with pytest.raises(JobSpecError, match="listed twice"):
        twice = f"after({parents[0].job_id}, {parents[0].job_id})"
        Job(stack, "Twice", scheduler=REF, schedule=twice, target=HttpTarget(HOOK))


def test_parameters_stand_for_a_time_zone_a_window_and_numbers() -> None:
    stack = _stack()
    zone = cdk.CfnParameter(stack, "Zone", default="Europe/Berlin").value_as_string
    timeout = cdk.CfnParameter(stack, "Timeout", type="Number", default=60).value_as_number
    start = cdk.CfnParameter(stack, "Start", default="2030-01-01T00:00:00Z").value_as_string
    job = Job(
        stack,
        "Params",
        scheduler=REF,
        schedule="cron(0 2 * * ? *)",
        target=HttpTarget(HOOK),
        timezone=zone,
        timeout_seconds=timeout,
        start_at=start,
    )
    resources = Template.from_stack(stack).find_resources("Custom::PunctualJob")
    spec = json.dumps(resources[_logical(stack, job.resource)]["Properties"]["Spec"])
    assert all(f'{{"Ref": "{name}"}}' in spec for name in ("Zone", "Timeout", "Start")), spec


@pytest.mark.parametrize(
    "schedule",
    ["rate({} minutes)", "cron(0 {} * * ? *)", "at({})", "RATE({} hours)"],
)
def test_a_parameter_inside_a_time_schedule_is_the_apis_to_check(schedule: str) -> None:
    # QA26: a schedule with a parameter inside (rate(${Minutes} minutes)) was refused at synth as
    # "got 'placeholder-job-1 minutes'", a text the user never wrote; docs/cdk.md: a token's value is
    # checked by the API at deploy
    stack = _stack()
    value = cdk.CfnParameter(stack, "Value", type="String").value_as_string
    job = Job(stack, "Params", scheduler=REF, schedule=schedule.format(value), target=HttpTarget(HOOK))
    assert _spec(stack, job)["schedule"] == schedule.format("<Value>")


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        # the WorkerRoleArns output as it is: read letter by letter, principals "a", "r", "n", ...
        (
            {"worker_role_arns": "arn:aws:iam::123456789012:role/punctual-worker"},
            TypeError,
            "worker_role_arns",
        ),
        # QA28: the targetAllowCidrs setting as one string: allowed blocks "1", "0", ".", ...
        ({"allow_cidrs": "10.0.0.0/8"}, TypeError, "allow_cidrs"),
        ({"allow_cidrs": ["10.0.0.1/8"]}, ValueError, "allow_cidrs"),
        ({"api_url": "abc123defg.execute-api.eu-west-1.amazonaws.com/prod"}, ValueError, "api_url"),
        ({"execute_api_arn": "abc123defg/prod"}, ValueError, "execute_api_arn"),
    ],
)
def test_a_scheduler_ref_that_could_not_work_is_refused_naming_the_field(
    given: dict[str, Any], error: type[Exception], message: str
) -> None:
    # QA26: each synthesised, and failed at deploy (IAM's "Invalid principal", the provider's ApiUrl)
    fields = {"api_url": REF.api_url, "execute_api_arn": REF.execute_api_arn, "worker_role_arns": ()}
    with pytest.raises(error, match=rf"^SchedulerRef\({message}\): "):
        SchedulerRef(**{**fields, **given})
    # and without worker roles, a job that needs an execution role says so, not CDK's principal error
    stack = _stack()
    without = SchedulerRef(**fields)
    with pytest.raises(
        JobSpecError, match=r"^Job Jobs/Job: scheduler: SchedulerRef\(worker_role_arns\) is empty"
    ):
        Job(stack, "Job", scheduler=without, schedule="rate(1 hour)", target=SqsTarget(sqs.Queue(stack, "Q")))


def test_one_provider_serves_the_jobs_of_two_schedulers() -> None:
    # QA: the stack's one provider could call the first scheduler's API only (403 for the second's)
    stack = _stack()
    first = Job(stack, "First", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    Job(stack, "Second", scheduler=OTHER, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    Job(stack, "Third", scheduler=OTHER, schedule="rate(2 hours)", target=HttpTarget(HOOK))
    template = Template.from_stack(stack)
    role = _logical(stack, first.provider.role)
    allowed = json.dumps(
        [s["Resource"] for s in _statements(template, role) if s["Action"] == "execute-api:Invoke"]
    )
    assert "abc123defg/prod/*/v1/jobs/*" in allowed and "zyx987wvut/prod/*/v1/jobs/*" in allowed
    assert allowed.count("zyx987wvut/prod/*/v1/jobs/*") == 1


def test_a_job_waits_on_and_excludes_only_what_its_own_scheduler_has() -> None:
    # QA23: with two schedulers in a stack, an after() parent or an excluded calendar declared for
    # the other one synthesised, and the deploy failed (the job's API has no such job or calendar)
    from punctual_cdk import Calendar, CalendarSpecError

    stack = _stack()
    hourly: dict[str, Any] = {"schedule": "rate(1 hour)", "target": HttpTarget(HOOK)}
    parent = Job(stack, "Parent", scheduler=REF, **hourly)
    holidays = Calendar(stack, "Holidays", scheduler=REF)
    with pytest.raises(
        JobSpecError, match=r"schedule: after\(\) names Jobs/Parent, a job of another scheduler"
    ):
        Job(stack, "Child", scheduler=OTHER, schedule=f"after({parent.job_id})", target=HttpTarget(HOOK))
    with pytest.raises(
        (JobSpecError, CalendarSpecError),
        match=r"exclude_calendars\[0\]: calendar Jobs/Holidays is declared for another scheduler",
    ):
        Job(stack, "Other", scheduler=OTHER, exclude_calendars=[holidays], **hourly)
    same = SchedulerRef(api_url=REF.api_url + "/", execute_api_arn=REF.execute_api_arn, worker_role_arns=())
    Job(
        stack,
        "Sibling",
        scheduler=same,
        exclude_calendars=[holidays],
        **{**hourly, "schedule": f"after({parent.job_id})"},
    )


def test_a_job_publishing_to_an_encrypted_topic_is_cdk_nag_clean(tmp_path: Path) -> None:
    # QA: cdk-nag makes topics encrypted (SNS2), and then refused the data-key grant on its key
    app = cdk.App(outdir=str(tmp_path))
    stack = _stack(app=app)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    topic = sns.Topic(stack, "Topic", master_key=key, enforce_ssl=True)
    Job(stack, "Notify", scheduler=REF, schedule="rate(1 hour)", target=SnsTarget(topic))
    cdk.Validations.of(stack).acknowledge(
        cdk.Acknowledgment(
            id="AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            reason="not what this test is about",
        )
    )
    assert _nag_findings(app, tmp_path) == []


def test_what_would_fail_at_deploy_fails_at_synth() -> None:
    # QA: both synthesised, then failed at deploy (the parent "does not exist" for this stack's
    # tenant; a past at() has no future slot)
    app = cdk.App()
    one, two = _stack("One", app), _stack("Two", app)
    parent = Job(one, "Parent", scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    with pytest.raises(JobSpecError, match="a job of stack One"):
        Job(two, "Child", scheduler=REF, schedule=f"after({parent.job_id})", target=HttpTarget(HOOK))
    Job(one, "Sibling", scheduler=REF, schedule=f"after({parent.job_id})", target=HttpTarget(HOOK))
    with pytest.raises(JobSpecError, match="schedule: cron: never fires"):
        Job(one, "Never", scheduler=REF, schedule="cron(0 2 30 2 ? *)", target=HttpTarget(HOOK))


@pytest.mark.parametrize("schedule", ["at(2001-01-01T00:00:00)", "cron(0 2 1 1 ? 2001)"])
def test_a_job_whose_last_slot_passed_still_synthesises_with_a_warning(schedule: str) -> None:
    # QA23: a declared one-time job (or a cron of past years) made the app fail cdk synth once its
    # last slot had passed, so no later change of the stack could be deployed; the job that ran is
    # kept (an update that declares the same spec puts nothing), and only a new one is refused
    stack = _stack()
    job = Job(stack, "Once", scheduler=REF, schedule=schedule, target=HttpTarget(HOOK))
    assert _spec(stack, job)["schedule"] == schedule
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("no slot after"))
    assert len(warnings) == 1 and "refused at deploy" in warnings[0].entry.data


def test_a_construct_id_too_long_for_a_name_says_so() -> None:
    # QA23: the construct id is the job's name when none is given; one over 128 characters failed
    # as "name: at most 128 characters", a field the user never wrote
    stack = _stack()
    long_id = "Nightly" + "X" * 130
    with pytest.raises(JobSpecError, match=r"construct id is the job's name.*give name="):
        Job(stack, long_id, scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK))
    other = _stack()
    job = Job(other, long_id, scheduler=REF, schedule="rate(1 hour)", target=HttpTarget(HOOK), name="nightly")
    assert _spec(other, job)["name"] == "nightly"


def test_a_role_given_is_trusted_by_the_workers_and_opted_in_as_a_role_the_job_makes() -> None:
    # QA28: role= was only granted the target: no trust for the worker roles (with the tenant as
    # external id and session tag) and no opt-in tag, so every run failed AccessDenied
    stack = _stack()
    queue = sqs.Queue(stack, "Queue")
    given = iam.Role(stack, "Mine", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"))
    mine = Job(stack, "Mine-job", scheduler=REF, schedule="rate(1 hour)", target=SqsTarget(queue), role=given)
    made = Job(stack, "Made-job", scheduler=REF, schedule="rate(1 hour)", target=SqsTarget(queue))
    Job(stack, "Again", scheduler=REF, schedule="rate(2 hours)", target=SqsTarget(queue), role=given)
    roles = Template.from_stack(stack).find_resources("AWS::IAM::Role")
    assert made.role is not None and mine.role is given
    expected = roles[_logical(stack, made.role)]["Properties"]
    got = roles[_logical(stack, given)]["Properties"]
    # The given role keeps its own trust and gains the workers' (once, for two jobs), as a made one has
    statements = got["AssumeRolePolicyDocument"]["Statement"]
    assert statements[0]["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statements[1:] == expected["AssumeRolePolicyDocument"]["Statement"]
    assert got["Tags"] == expected["Tags"] == [{"Key": "punctual:execution-role", "Value": "true"}]
    granted = _statements(Template.from_stack(stack), _logical(stack, given))
    assert any("sqs:SendMessage" in json.dumps(statement["Action"]) for statement in granted)


def test_an_imported_role_given_is_used_as_it_is_with_a_warning_saying_what_it_needs() -> None:
    stack = _stack()
    queue = sqs.Queue(stack, "Queue")
    imported = iam.Role.from_role_arn(stack, "Theirs", "arn:aws:iam::123456789012:role/orders-scheduler")
    job = Job(stack, "Job", scheduler=REF, schedule="rate(1 hour)", target=SqsTarget(queue), role=imported)
    assert _spec(stack, job)["target"]["role_arn"] == "arn:aws:iam::123456789012:role/orders-scheduler"
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("role: "))
    assert len(warnings) == 1
    text = warnings[0].entry.data
    assert "punctual:execution-role" in text and "sts:ExternalId" in text
