"""Jobs declared as infrastructure: :class:`Job`, registered by the ``Custom::PunctualJob`` resource.

``Job(stack, "NightlyReport", scheduler=punctual, schedule="cron(0 2 * * ? *)",
target=LambdaTarget(report_fn), retry=RetryPolicy(max_attempts=5), overlap="skip")``

* The spec is checked at synth with the API's own model (``punctual.api.schemas.JobInput``)
  and webhook guard: a job the API would refuse fails ``cdk synth``, naming the field.
* Each stack gets one provider function (:class:`JobProvider`) whose role calls the API
  (SigV4). That role's unique id is the tenant of every job the stack declares: the identity of
  the declaring stack, never a name the template chooses.
* An AWS target is called as an execution role the job makes (or ``role=`` gives): trusted by
  the scheduler's worker roles with the provider role's id as ``sts:ExternalId`` (and the
  session tag the workers send), opted in to the scheduler (its ``executionRoleTag`` = ``true``,
  under its ``executionRolePrefix`` when it has one), and granted that one target only.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from pydantic import BaseModel, ValidationError

from punctual.models.base import MAX_NAME_CHARS
from punctual_cdk.calendars import Calendar, CalendarSpecError, calendar_names, field_error
from punctual_cdk.nag import acknowledge, nag_text
from punctual_cdk.provider_construct import (
    PROVIDER_DIR,
    PROVIDER_ID,
    PROVIDER_TIMEOUT_S,
    JobProvider,
    SchedulerRef,
    after_its_api,
    other_deployments,
)
from punctual_cdk.scheduler import Punctual
from punctual_cdk.targets import PLACEHOLDERS, JobTarget, RawTarget

__all__ = [
    "PROVIDER_DIR",
    "PROVIDER_ID",
    "PROVIDER_TIMEOUT_S",
    "Alert",
    "Job",
    "JobProvider",
    "JobSpecError",
    "SchedulerRef",
]

# What a token stands for in the synth-time check where its key does not say (PLACEHOLDERS does).
_TOKEN = re.compile(r"\$\{Token\[[^\]]*\]\}")
_TOKEN_STANDS_FOR = {"schedule": "placeholder-job", "exclude_calendars": "placeholder"}
_WHOLE_SCHEDULE = "rate(1 day)"  # a schedule that is all token (a parameter): checked at deploy
# Other fields that are all token, by the shape the check needs (QA: a time zone from a parameter
# was refused as "unknown time zone 'placeholder'")
_WHOLE_TOKEN_STANDS_FOR = {
    "timezone": "UTC",
    "start_at": "2099-01-01T00:00:00Z",
    "end_at": "2100-01-01T00:00:00Z",
}


class JobSpecError(ValueError):
    """A declared job the API would refuse (raised at synth)."""


class Alert:
    """An alert rule of a job, sent to a typed target (``on``: the conditions, ``options``:
    ``late_after_seconds``, ``min_interval_seconds``, ``format``)."""

    def __init__(self, target: JobTarget | dict[str, Any], *, on: list[str], **options: Any) -> None:
        self.target = as_target(target, "alerts[].target")
        self.fields = {"on": on, **options}


def _check_alerts(alerts: Any, where: str) -> None:
    """``alerts`` is a list of :class:`Alert` (the API's alert objects are built with it)."""
    if not isinstance(alerts, list | tuple):
        raise JobSpecError(f"Job {where}: alerts: a list of punctual_cdk.Alert, not {type(alerts).__name__}")
    for index, alert in enumerate(alerts):
        if not isinstance(alert, Alert):
            raise JobSpecError(
                f"Job {where}: alerts[{index}]: a punctual_cdk.Alert, not {type(alert).__name__}"
            )


def as_target(target: Any, field: str) -> JobTarget:
    """A typed target, or a dict sent as the API's target object as it is (:class:`RawTarget`)."""
    if isinstance(target, JobTarget):
        return target
    if isinstance(target, dict):
        return RawTarget(target)
    raise JobSpecError(
        f"{field}: a target of punctual_cdk.targets (LambdaTarget, SqsTarget, HttpTarget, ...) or the"
        f" API's target object as a dict, not {type(target).__name__}"
    )


def _plain(value: Any, field: str) -> Any:
    """A spec value as JSON: the core's models dumped, enums by value, datetimes as ISO-8601 UTC,
    lists and dicts walked; anything else that is not JSON is a :class:`JobSpecError` naming ``field``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise JobSpecError(
                f"{field}: a datetime with a time zone (datetime(..., tzinfo=UTC)), not a naive one"
            )
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        raise JobSpecError(f"{field}: an instant (a datetime with a time zone), not a date")
    if isinstance(value, dict):
        return {key: _plain(item, f"{field}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, f"{field}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):  # (QA26: CDK's JSON failed on it, unnamed)
        raise JobSpecError(f"{field}: {value} is not a JSON number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise JobSpecError(f"{field}: {type(value).__name__} is not a JSON value")


def _sample(value: Any, key: str = "", names: dict[str, str] | None = None) -> Any:
    """``value`` with each unresolved token replaced by a stand-in of its shape (what the synth-time
    check validates; the API checks the real value at deploy). Each distinct token gets a stand-in
    of its own (``names``), so that two parents' ids, or two calendars' names, are two names (QA:
    one stand-in for all made ``after(a.job_id, b.job_id)`` "listed twice")."""
    names = {} if names is None else names
    if isinstance(value, dict):
        return {name: _sample(item, name, names) for name, item in value.items()}
    if isinstance(value, list):
        return [_sample(item, key, names) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and cdk.Token.is_unresolved(value):
        return 1  # a number from a parameter (timeout_seconds, retry, ...): checked at deploy
    if not isinstance(value, str) or not cdk.Token.is_unresolved(value):
        return value
    if key in PLACEHOLDERS:
        return PLACEHOLDERS[key]
    if not _TOKEN.sub("", value).strip():  # all token (a parameter, a reference)
        if key == "schedule":
            return _WHOLE_SCHEDULE
        if key in _WHOLE_TOKEN_STANDS_FOR:
            return _WHOLE_TOKEN_STANDS_FOR[key]
    if key == "schedule" and value.strip()[:6].lower() != "after(":
        # a token inside a time schedule (rate(${Minutes} minutes), cron(0 ${Hour} * * ? *)): no
        # stand-in has the shape of every place it may take, so the API checks it at deploy (QA26:
        # refused at synth as "got 'placeholder-job-1 minutes'", a text the user never wrote)
        return _WHOLE_SCHEDULE
    base = _TOKEN_STANDS_FOR.get(key, "placeholder")
    return _TOKEN.sub(lambda token: names.setdefault(token.group(0), f"{base}-{len(names) + 1}"), value)


class Job(Construct):
    """A job in Punctual, declared in the stack (``Custom::PunctualJob``).

    Parameters
    ----------
    scheduler
        The :class:`~punctual_cdk.Punctual` construct, or a :class:`SchedulerRef` to one
        deployed elsewhere.
    schedule, target
        As the API takes them; ``target`` is typed (:mod:`punctual_cdk.targets`), or the API's
        target object as a dict (sent as it is: its ``role_arn`` is yours to give and grant).
    role
        The execution role for an AWS target (default: one made for this job). A role of the
        job's stack is given the made role's trust and opt-in tag; another is used as it is.
    alerts
        :class:`Alert` rules.
    dead_letter, events_bus
        A queue (``sqs.IQueue``) or bus (``events.IEventBus``), or the API's object as a dict; sent
        as the execution role (granted the send) unless the dict names a ``role_arn``.
    signing_secret
        A webhook job's (http target or alert): the Secrets Manager secret the provider stores its
        signing secret in (default: one made for this job).
    enabled
        False declares the job paused (property ``Enabled: false``): created paused, nothing
        fires; turning it to True in an update resumes it, back to False pauses it (EventBridge
        Scheduler's ``State``).
    **spec
        Any other field of the job spec (``payload``, ``retry``, ``overlap``, ``catchup``,
        ``timezone``, ``timeout_seconds``, ``start_at`` (a datetime), ...), as values or the core's
        models.

    Attributes
    ----------
    job_id, arn
        The job's id and ARN (``Fn::GetAtt`` of the resource).
    signing_secret
        A webhook job's secret (``None`` for other jobs): grant its readers ``grant_read``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        scheduler: Punctual | SchedulerRef,
        schedule: str,
        target: JobTarget | dict[str, Any],
        role: iam.IRole | None = None,
        alerts: list[Alert] | None = None,
        dead_letter: sqs.IQueue | dict[str, Any] | None = None,
        events_bus: events.IEventBus | dict[str, Any] | None = None,
        signing_secret: secretsmanager.ISecret | None = None,
        enabled: bool = True,
        **spec: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        if not isinstance(enabled, bool):
            raise JobSpecError(f"Job {self.node.path}: enabled: True or False, not {type(enabled).__name__}")
        self.enabled = enabled
        try:
            self._declare(
                construct_id,
                scheduler,
                schedule,
                target,
                role,
                alerts or [],
                dead_letter,
                events_bus,
                signing_secret,
                spec,
            )
        except JobSpecError as exc:  # every refusal names the job, once
            if str(exc).startswith(f"Job {self.node.path}: "):
                raise
            raise JobSpecError(f"Job {self.node.path}: {exc}") from None

    def _declare(
        self,
        construct_id: str,
        scheduler: Punctual | SchedulerRef,
        schedule: str,
        target: JobTarget | dict[str, Any],
        role: iam.IRole | None,
        alerts: list[Alert],
        dead_letter: Any,
        events_bus: Any,
        signing_secret: secretsmanager.ISecret | None,
        spec: dict[str, Any],
    ) -> None:
        where = self.node.path
        ref = SchedulerRef.of(scheduler)
        self.scheduler = scheduler
        self.provider = JobProvider.of(self, ref)
        target = as_target(target, "target")
        _check_alerts(alerts, where)
        refuse_undeployable(spec, where)
        calendars: list[Calendar] = []
        if "exclude_calendars" in spec:
            try:
                given = spec["exclude_calendars"]
                spec["exclude_calendars"], calendars = calendar_names(self, given, scheduler)
            except CalendarSpecError as exc:
                raise JobSpecError(f"Job {where}: {exc}") from None
        rest = {key: _plain(value, key) for key, value in spec.items()}
        if "name" not in rest and len(construct_id) > MAX_NAME_CHARS:  # (QA23: "name: at most ...")
            raise JobSpecError(
                f"Job {where}: the construct id is the job's name when name= is not given, and a name"
                f" is at most {MAX_NAME_CHARS} characters ({len(construct_id)} here): give name="
            )
        rest.setdefault("name", construct_id)
        if not isinstance(schedule, str):
            raise JobSpecError(f"Job {where}: schedule: a string (cron(...), rate(...), after(...), ...)")
        _refuse_other_stacks_parents(self, schedule, where)
        sends = _Sends(dead_letter, events_bus, where)
        targets = (target, *(alert.target for alert in alerts))

        def document(real: bool, role_arn: str | None) -> dict[str, Any]:
            def shown(each: JobTarget, field: str) -> dict[str, Any]:
                with_role = {"role_arn": role_arn} if role_arn and each.needs_role else {}
                given = {**(each.render() if real else each.sample()), **with_role}
                plain: dict[str, Any] = _plain(given, field)
                return plain

            out = {**rest, **sends.fields(role_arn), "schedule": schedule, "target": shown(target, "target")}
            if alerts:
                out["alerts"] = [
                    {
                        **_plain(alert.fields, f"alerts[{i}]"),
                        "target": shown(alert.target, f"alerts[{i}].target"),
                    }
                    for i, alert in enumerate(alerts)
                ]
            return out

        needs_role = any(each.needs_role for each in targets) or sends.need_role
        check(_sample(document(False, PLACEHOLDERS["role_arn"] if needs_role else None)), ref, where, self)
        if role is not None and not needs_role:
            raise JobSpecError(
                f"Job {where}: role: this job calls nothing as a role (a webhook target; no AWS alert"
                " target, dead_letter or events_bus sent as the execution role)"
            )
        self.role: iam.IRole | None = None
        if needs_role:
            self.role = self._execution_role(ref) if role is None else self._opted_in(role, ref)
            for each in targets:
                each.grant(self.role)
            sends.grant(self.role)
        self.signing_secret: secretsmanager.ISecret | None = None
        properties: dict[str, Any] = {"ApiUrl": ref.api_url}
        if not self.enabled:  # left out when enabled: an enabled job's template is as it was
            properties["Enabled"] = "false"
        if any(each.is_webhook for each in targets):
            self.signing_secret = signing_secret or self._new_secret()
            properties["SigningSecretArn"] = self._let_provider_write(self.signing_secret)
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.function.function_arn,
            resource_type="Custom::PunctualJob",
            properties={
                **properties,
                "Spec": cdk.Stack.of(self).to_json_string(
                    document(True, self.role.role_arn if self.role else None)
                ),
            },
        )
        for calendar in calendars:  # created before the job, deleted after it
            self.resource.node.add_dependency(calendar.resource)
        after_its_api(self.resource, scheduler)
        self.job_id = self.resource.get_att_string("JobId")
        _DECLARED[self.job_id] = self
        self.arn = self.resource.get_att_string("Arn")

    def _new_secret(self) -> secretsmanager.Secret:
        secret = secretsmanager.Secret(
            self,
            "SigningSecret",
            description=f"Punctual job {self.node.path}: its webhook signing secret (Standard Webhooks)",
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        acknowledge(
            secret,
            "SMG4",
            "The job's webhook signing secret is made by the scheduler, not Secrets Manager: the provider "
            "stores it here at create, and a new one from the job API's rotate-secret.",
        )
        return secret

    def _let_provider_write(self, secret: secretsmanager.ISecret) -> str:
        """Allow the provider to store the job's signing secret in ``secret`` (that one only);
        its ARN (as ``SigningSecretArn``)."""
        arn = secret.secret_full_arn or f"{secret.secret_arn}-??????"  # a partial ARN: its suffix
        self.provider.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["secretsmanager:PutSecretValue"], resources=[arn])
        )
        if secret.secret_full_arn is None:
            acknowledge(
                self.provider.role,
                f"IAM5[Resource::{nag_text(self, arn)}]",
                "A secret named by a partial ARN: the six characters Secrets Manager appends to its name.",
            )
        if secret.encryption_key is not None:
            secret.encryption_key.grant_encrypt(self.provider.role)
            for action in ("kms:ReEncrypt*", "kms:GenerateDataKey*"):
                acknowledge(
                    self.provider.role,
                    f"IAM5[Action::{action}]",
                    "Writing a secret encrypted with its own KMS key: the data-key actions Secrets Manager "
                    "asks for, on that key only (what grant_encrypt grants).",
                )
        return secret.secret_arn

    def _execution_role(self, ref: SchedulerRef) -> iam.Role:
        """The job's execution role: trusted by the workers (the tenant's id as external id, the
        session tag they send) and opted in to the scheduler (its tag; its path or name prefix)."""
        if not ref.worker_role_arns:  # (QA26: CDK's "CompositePrincipals must be constructed with ...")
            raise JobSpecError(
                f"Job {self.node.path}: scheduler: SchedulerRef(worker_role_arns) is empty, and an AWS target"
                " is called as an execution role those worker roles assume: give them"
            )
        prefix = ref.execution_role_prefix
        placement: dict[str, str] = {}
        if prefix.endswith("/"):
            placement["path"] = "/" + prefix
        elif prefix:
            placement["role_name"] = (prefix + cdk.Names.unique_id(self))[:64]
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.CompositePrincipal(*self._workers(ref)),
            description=f"Punctual job {self.node.path}: what its workers may call",
            **placement,  # type: ignore[arg-type]
        )
        cdk.Tags.of(role).add(ref.execution_role_tag, "true")
        return role

    def _workers(self, ref: SchedulerRef) -> list[iam.IPrincipal]:
        """The trust docs/tenants.md gives: each worker role, with the tenant as external id and as
        the session's punctual-tenant tag (QA: the tag's condition was left out)."""
        tenant = self.provider.tenant
        condition = {"StringEquals": {"aws:RequestTag/punctual-tenant": tenant, "sts:ExternalId": tenant}}
        arns = ref.worker_role_arns
        workers: list[iam.IPrincipal] = [
            iam.ArnPrincipal(arn).with_conditions(condition).with_session_tags() for arn in arns
        ]
        peers = ref.peer_worker_role_arns  # the other Regions' (QA30: every run they claimed AccessDenied)
        for account in sorted({arn.split(":")[4] for arn in peers}):
            named = {
                **condition,
                "ArnEquals": {"aws:PrincipalArn": [a for a in peers if f":{account}:" in a]},
            }
            workers.append(iam.AccountPrincipal(account).with_conditions(named).with_session_tags())
        return workers

    def _opted_in(self, role: iam.IRole, ref: SchedulerRef) -> iam.IRole:
        """``role=``, trusted by the workers and opted in as a role the job makes is (QA28: it was
        only granted the target, and every run failed AccessDenied). A role of another stack, or an
        imported one, is left as it is, with a warning saying what it needs."""
        trust = role.assume_role_policy if isinstance(role, iam.Role) else None
        if trust is not None and cdk.Stack.of(role) is cdk.Stack.of(self) and ref.worker_role_arns:
            iam.CompositePrincipal(*self._workers(ref)).add_to_assume_role_policy(trust)
            cdk.Tags.of(role).add(ref.execution_role_tag, "true")
            return role
        cdk.Annotations.of(self).add_warning_v2(
            "punctual:role-given",
            f"role: {role.node.path} is used as it is (not a role of this stack, or no worker roles given):"
            f" the workers assume it only if it is tagged {ref.execution_role_tag}=true and trusts the"
            " WorkerRoleArns for sts:AssumeRole"
            " and sts:TagSession with sts:ExternalId and aws:RequestTag/punctual-tenant equal to this"
            " stack's tenant (the provider role's RoleId): docs/tenants.md, Execution roles",
        )
        return role


class _Sends:
    """A job's ``dead_letter`` queue and ``events_bus``: as the API takes them (sent as the job's
    execution role unless they name a role of their own), and what that role is granted for them."""

    def __init__(self, dead_letter: Any, events_bus: Any, where: str) -> None:
        self.queue = dead_letter if hasattr(dead_letter, "queue_arn") else None
        self.bus = events_bus if hasattr(events_bus, "event_bus_arn") else None
        self.dead_letter = (
            {"queue_arn": dead_letter.queue_arn} if self.queue else _plain(dead_letter, "dead_letter")
        )
        self.events_bus = (
            {"event_bus_arn": events_bus.event_bus_arn} if self.bus else _plain(events_bus, "events_bus")
        )
        for field, value in (("dead_letter", self.dead_letter), ("events_bus", self.events_bus)):
            if value is not None and not isinstance(value, dict):
                raise JobSpecError(f"Job {where}: {field}: a construct or the API's object as a dict")
        self.need_role = self._ours(self.dead_letter) or self._ours(self.events_bus)

    @staticmethod
    def _ours(value: dict[str, Any] | None) -> bool:
        """Whether it is sent as the job's execution role (it names none of its own)."""
        return value is not None and not value.get("role_arn")

    def fields(self, role_arn: str | None) -> dict[str, Any]:
        out = {}
        for field, value in (("dead_letter", self.dead_letter), ("events_bus", self.events_bus)):
            if value is not None:
                out[field] = {**value, "role_arn": role_arn} if role_arn and self._ours(value) else value
        return out

    def grant(self, role: iam.IRole) -> None:
        """Grant ``role`` the sends it makes: to the dead-letter queue, to the events bus."""
        from punctual_cdk.targets import EventBusTarget, SqsTarget

        if self._ours(self.dead_letter):
            if self.queue is not None:
                SqsTarget(self.queue).grant(role)
            else:
                role.add_to_principal_policy(
                    iam.PolicyStatement(
                        actions=["sqs:SendMessage"], resources=[self.dead_letter["queue_arn"]]
                    )
                )
        if self._ours(self.events_bus):
            if self.bus is not None:
                EventBusTarget(self.bus).grant(role)
            else:
                arn = self.events_bus["event_bus_arn"]
                role.add_to_principal_policy(
                    iam.PolicyStatement(actions=["events:PutEvents"], resources=[arn])
                )


def refuse_undeployable(spec: dict[str, Any], where: str) -> None:
    """Raise :class:`JobSpecError` for a field the API would take but the job could never have."""
    from punctual.api.schemas import OUTPUT_ONLY_FIELDS

    if "state" in spec:
        raise JobSpecError(
            f"Job {where}: state: not a spec field here; declare a paused job with enabled=False"
        )
    for field in spec:
        if field in OUTPUT_ONLY_FIELDS:
            raise JobSpecError(f"Job {where}: {field}: output only (the API ignores it); leave it out")


# Declared jobs by their JobId token: what an after() of declared jobs names.
_DECLARED: weakref.WeakValueDictionary[str, Job] = weakref.WeakValueDictionary()


def _refuse_other_stacks_parents(job: Job, schedule: str, where: str) -> None:
    """An after() parent declared in another stack, or for another scheduler, is refused at synth
    (QA: it deployed, then the API answered that the parent does not exist): each stack's provider
    is a tenant of its own, and a tenant's jobs can wait only on its own jobs of their API."""
    for token in _TOKEN.findall(schedule):
        parent = _DECLARED.get(token)
        if parent is not None and cdk.Stack.of(parent) is not cdk.Stack.of(job):
            raise JobSpecError(
                f"Job {where}: schedule: after() names {parent.node.path}, a job of stack"
                f" {cdk.Stack.of(parent).stack_name}: each stack's jobs are a tenant of their own"
                " (its provider's role), and wait only on jobs of their own stack"
            )
        if parent is not None and other_deployments(parent.scheduler, job.scheduler):  # (QA23)
            raise JobSpecError(
                f"Job {where}: schedule: after() names {parent.node.path}, a job of another scheduler:"
                " a job waits only on jobs of its own scheduler"
            )


def _warn_past(job: Construct | None, spec: Any, where: str) -> None:
    """A schedule that can never fire is refused at synth; one whose slots are all past (a past
    at(), a cron of past years) is a warning: a new job with it is refused at deploy (QA: it
    synthesised without a word), while a declared job that ran with it is kept (an update that
    declares the same spec puts nothing): refusing it failed every later synth of the app (QA23)."""
    from punctual.timing.schedules import ScheduleError, parse_schedule

    now = datetime.now(UTC)
    try:
        parsed = parse_schedule(spec.schedule, spec.timezone, spec.dst.options() if spec.dst else None)
    except ScheduleError as exc:
        raise JobSpecError(f"Job {where}: schedule: {exc}") from None
    if job is not None and parsed.kind in ("at", "cron", "unix") and parsed.next_after(now) is None:
        cdk.Annotations.of(job).add_warning_v2(
            "punctual:schedule-past",
            f"schedule: {spec.schedule} has no slot after {now:%Y-%m-%dT%H:%M:%SZ}: a new job with it is"
            " refused at deploy (a declared job that already ran is kept as it is)",
        )


def check(document: dict[str, Any], ref: SchedulerRef, where: str, job: Construct | None = None) -> None:
    """Validate a job as the API would (model, schedule, webhook guard); raise :class:`JobSpecError`.
    A schedule whose slots are all past is a warning on ``job`` (when given)."""
    from punctual.api.schemas import JobInput
    from punctual.delivery.targets.webhooks.guard import BlockedTargetError, guard_url
    from punctual.models import HttpTarget as HttpTargetModel

    try:
        text = json.dumps(document)
    except (TypeError, ValueError) as exc:
        raise JobSpecError(f"Job {where}: target: not JSON ({exc})") from None
    try:
        spec = JobInput.model_validate_json(text).spec()
    except ValidationError as exc:
        raise JobSpecError(f"Job {where}: {field_error(document, exc.errors()[0])}") from None
    _warn_past(job, spec, where)
    if isinstance(spec.target, HttpTargetModel) and not cdk.Token.is_unresolved(spec.target.url):
        try:
            guard_url(spec.target.url, list(ref.allow_cidrs), resolve=False)
        except (BlockedTargetError, ValueError) as exc:
            raise JobSpecError(f"Job {where}: target.url: {exc}") from None
