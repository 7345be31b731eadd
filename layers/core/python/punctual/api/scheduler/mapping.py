"""A schedule is a job: how EventBridge Scheduler's members map onto :class:`~punctual.models.JobSpec`
and back.

Identity
    A schedule ``<group>/<name>`` is the job ``sch-<32 hex>`` (a digest of tenant-free group and
    name, :func:`job_id_of`): names are unique per group because the id is, and the store's
    conditional create refuses a second one. The job carries ``scheduler`` (group, name, ARN,
    ``Target.Arn`` and ``Input`` as given) and the tag ``punctual:schedule-group``; its ``name``
    is the schedule's name. A job registered through ``/v1`` is a schedule of the ``default``
    group named by its job id. GetSchedule shows what the job does: the block's copies are shown
    while they are still the job's, and a ``/v1`` replace refreshes them (:func:`refreshed_block`);
    UpdateSchedule replaces what the API has members for and keeps the rest of the job
    (:func:`keeping_unexpressed`).

What maps to what
    ``ScheduleExpression`` → ``schedule``; ``ScheduleExpressionTimezone`` → ``timezone``;
    ``StartDate``/``EndDate`` → ``start_at``/``end_at`` (an ``at()`` schedule's, which the service
    ignores, only kept in ``scheduler`` for GetSchedule to return); ``State`` DISABLED → PAUSED;
    ``Description``; ``FlexibleTimeWindow`` FLEXIBLE → ``jitter_seconds`` (the window, a stable
    pseudo-random delay inside it per slot, the catch-up window widened by as much);
    ``ActionAfterCompletion`` DELETE →
    ``delete_after_completion``; ``Target.RetryPolicy`` → ``retry.max_attempts`` (retries + 1,
    default 185 + 1) and ``retry.max_age_seconds`` (default 86400); ``Target.DeadLetterConfig``
    → ``dead_letter``; ``Target.Input`` → ``payload`` (the text as it is for SQS and SNS, parsed
    JSON for the others when it is JSON), ``<aws.scheduler.schedule-arn>`` filled in here, the
    other context attributes per run (:mod:`punctual.delivery.targets.payload`); ``Target.RoleArn`` →
    ``target.role_arn``; the target by the service of ``Target.Arn`` with its parameters.

    Refused with a ValidationException naming the member: ``KmsKeyArn`` (the table is encrypted
    with the deployment's key), targets Punctual has no adapter for (universal ``aws-sdk``
    targets, Kinesis, SageMaker, Firehose, ...), ``EventBridgePutEventsV2Parameters``,
    ``EventBridgePutRawEventsParameters``, ``KinesisParameters``, ``SageMakerPipelineParameters``,
    and the ECS parameters RunTask gets from Punctual's ECS target only (``TaskCount`` above 1,
    ``CapacityProviderStrategy``, ``PlacementConstraints``, ``PlacementStrategy``, ``Group``,
    ``PlatformVersion``, ``PropagateTags``, ``ReferenceId``, ``Tags``, ``EnableECSManagedTags``,
    ``EnableExecuteCommand``, launch type ``EXTERNAL``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from punctual.api.scheduler.errors import invalid
from punctual.api.scheduler.model import epoch, to_datetime
from punctual.models import (
    MAX_ATTEMPTS,
    CatchupPolicy,
    DeadLetterQueue,
    DstPolicy,
    EcsTarget,
    EventBridgeTarget,
    Job,
    JobSpec,
    JobState,
    KeyGivenTwice,
    LambdaTarget,
    RetryPolicy,
    SchedulerIdentity,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
    target_arn,
    unique_keys,
)
from punctual.timing.slots import ceil_second

DEFAULT_GROUP = "default"
GROUP_TAG = "punctual:schedule-group"
DEFAULT_RETRIES = 185  # the service's default MaximumRetryAttempts
DEFAULT_EVENT_AGE_S = 86400  # ... and MaximumEventAgeInSeconds
DEFAULT_CATCHUP_S = 3600  # the job model's default catch-up window
SCHEDULE_ARN_ATTRIBUTE = "<aws.scheduler.schedule-arn>"
NO_INPUT = "{}"  # what a target gets from a schedule without Target.Input
# at(...), rate(...), cron(...), after(...): a word, then its arguments in parentheses
_EXPRESSION_FORM = re.compile(r"^[A-Za-z]+\(.*\)\Z", re.DOTALL)
# The service refuses a StartDate further in the past than this (CreateSchedule and UpdateSchedule).
START_DATE_MAX_AGE = timedelta(minutes=5)
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
SUPPORTED_TARGETS = "Lambda, SQS, SNS, EventBridge (event bus), Step Functions, ECS (RunTask)"
_TARGET_PARAMETERS = {
    "SqsParameters": "sqs",
    "EventBridgeParameters": "events",
    "EcsParameters": "ecs",
}
_REFUSED_PARAMETERS = (
    "EventBridgePutEventsV2Parameters",
    "EventBridgePutRawEventsParameters",
    "KinesisParameters",
    "SageMakerPipelineParameters",
)
_REFUSED_ECS = (
    "CapacityProviderStrategy",
    "PlacementConstraints",
    "PlacementStrategy",
    "Group",
    "PlatformVersion",
    "PropagateTags",
    "ReferenceId",
    "Tags",
    "EnableECSManagedTags",
    "EnableExecuteCommand",
)


def job_id_of(group: str, name: str) -> str:
    """The job id of schedule ``group/name`` (the same in every tenant; tenants never meet)."""
    return "sch-" + hashlib.sha256(f"{group}/{name}".encode()).hexdigest()[:32]


def _own_block(job: Job) -> SchedulerIdentity | None:
    """``job``'s scheduler block when it is the schedule the block names (its id is that name's);
    a block a job holds otherwise (copied from another job's GET body before the API left such a
    block out) does not make it that schedule: it would be listed twice, and deleted with a group
    it is not in (QA21)."""
    block = job.scheduler
    if block is None or job.id != job_id_of(block.group, block.name):
        return None
    return block


def group_of(job: Job) -> str:
    block = _own_block(job)
    return block.group if block else DEFAULT_GROUP


def name_of(job: Job) -> str:
    block = _own_block(job)
    return block.name if block else job.id


def is_named(job: Job, group: str, name: str) -> bool:
    """Whether ``job`` is the schedule ``group/name`` (a ``/v1`` job: ``default/<its id>``)."""
    return group_of(job) == group and name_of(job) == name


def could_be_job_id(name: str) -> bool:
    return bool(_JOB_ID_RE.match(name))


# --------------------------------------------------------------------------- input → spec


def spec_of(
    values: dict[str, Any], group: str, arn: str, now: datetime, updated: Job | None = None
) -> JobSpec:
    """The job spec of a CreateSchedule/UpdateSchedule input (validated against the model already).

    As the service does, ``StartDate`` and ``EndDate`` keep whole seconds (the fraction is cut),
    a ``StartDate`` more than five minutes before ``now`` is refused, and so is a
    ``ScheduleExpression`` that starts or ends with whitespace. ``updated``: the schedule's job, for
    an UpdateSchedule.

    Raises
    ------
    SchedulerError
        ValidationException naming what Punctual cannot do, or what its own checks refuse.
    """
    if values.get("KmsKeyArn"):
        raise invalid(
            "KmsKeyArn is not supported: Punctual encrypts its table with the deployment's own key "
            "(leave KmsKeyArn out)"
        )
    expression: str = values["ScheduleExpression"]
    if expression != expression.strip():
        # The service refuses it; Punctual's own /v1 takes it (its schedule field is not this check).
        raise invalid(
            f"Invalid Schedule Expression {expression[:256]!r}: it must not start or end with whitespace"
        )
    if not _EXPRESSION_FORM.match(expression):
        # The service's answer (QA: "every 5 minutes" was answered about Punctual's unix cron)
        raise invalid(f"Invalid Schedule Expression {expression[:256]}.")
    target_in: dict[str, Any] = values["Target"]
    window: dict[str, Any] = values["FlexibleTimeWindow"]
    minutes = window.get("MaximumWindowInMinutes")
    if window["Mode"] == "FLEXIBLE" and minutes is None:
        raise invalid("FlexibleTimeWindow.MaximumWindowInMinutes is required when Mode is FLEXIBLE")
    if window["Mode"] == "OFF" and minutes is not None:
        raise invalid("FlexibleTimeWindow.MaximumWindowInMinutes is only allowed when Mode is FLEXIBLE")
    target, payload = _target(target_in, arn)
    jitter = (minutes or 0) * 60 if window["Mode"] == "FLEXIBLE" else 0
    start = _instant(values, "StartDate")
    # The service ignores a one-time schedule's StartDate (API reference, StartDate), so a past one
    # is no error there: a schedule read back and sent again unchanged must not fail (QA23)
    if start is not None and start < now - START_DATE_MAX_AGE and _expression_kind(values) != "at":
        raise invalid("The StartDate you specify cannot be earlier than 5 minutes ago.")
    try:
        fields = _fields(values, group, arn, target, payload, jitter)
        kind = _expression_kind(values)
        if kind == "rate" and start is None:
            # The service: "If you don't provide a StartDate for a rate-based schedule, your schedule
            # starts invoking the target immediately" (Schedule types, rate-based): its first slot is
            # the next whole second but one (never the instant its job is written), where a /v1 rate
            # job's is N after its registration.
            fields["start_at"] = ceil_second(now) + timedelta(seconds=1)
            if fields["end_at"] is not None and fields["end_at"] <= fields["start_at"]:
                if not _ended_as_it_was(updated, fields):
                    raise invalid("EndDate is not in the future: the schedule would never run")
                # An update of a rate schedule whose EndDate passed that keeps it and its expression
                # (GetSchedule's answer sent back with a new Description or State) keeps its start:
                # it stays ended, as the service takes it (QA30: refused, the schedule could not
                # even be disabled without dropping its EndDate, which would start it again).
                fields["start_at"] = updated.start_at if updated is not None else None
            fields["scheduler"] = fields["scheduler"].model_copy(update={"started_at_once": True})
        if kind == "cron":
            # The service skips a cron time a spring-forward change skips, and runs a repeated one
            # once (Schedule types, daylight saving time); a /v1 job fires it right after the gap.
            fields["dst"] = DstPolicy(gap="skip", repeat="first")
        return JobSpec(**fields)
    except ValidationError as exc:
        raise invalid(_explain(exc)) from None


# The JobSpec fields an UpdateSchedule input sets as a whole (:func:`_fields`); ``retry``, ``catchup``,
# ``tags``, ``target`` and ``dst`` it sets in part (:func:`keeping_unexpressed`).
_SCHEDULE_FIELDS = (
    "description",
    "schedule",
    "timezone",
    "start_at",
    "end_at",
    "target",
    "payload",
    "jitter_seconds",
    "dead_letter",
    "delete_after_completion",
    "dst",
    "scheduler",
)


# A target's options the Scheduler API has no member for (a /v1 job's): Lambda's RequestResponse
# invocation (the API's is Event), the ECS container given the environment, the rate budget.
_TARGET_OPTIONS = ("invocation_type", "container_name", "rate_budget_per_second")


def keeping_unexpressed(job: Job, spec: JobSpec) -> JobSpec:
    """``spec`` (an UpdateSchedule's, :func:`spec_of`) with what of ``job`` the Scheduler API has no
    member for: its name, its tags but the group's, alert rules, overlap, timeout, runtime, lateness,
    calendars, the retry backoff and the catch-up policy (QA21: an update of a /v1 job, sending back
    all GetSchedule showed, reset them all), a JSON payload whose Input is sent back unchanged (an
    SQS or SNS target's Input is text), the ClientToken of the schedule's create (QA21: a
    create retried after an update was a ConflictException, not the same ARN), the target's
    options of a target of the same type, the dead-letter queue's role, and the DST options of an
    unchanged expression (QA23: a
    /v1 Lambda job invoked RequestResponse was made Event, and a /v1 job whose DST gap shifted its
    slot skipped it, on an update that only disabled them).

    The rest is replaced, as the service replaces a whole schedule."""
    fields = {name: getattr(job, name) for name in JobSpec.model_fields}
    fields.update({name: getattr(spec, name) for name in _SCHEDULE_FIELDS})
    # What GetSchedule shows of the job rounded to the API's units and range, sent back as shown:
    # the job's own value stays (QA23: a /v1 job's 30 s jitter became a minute, its 10 s event age
    # 60 s, on an update that only disabled it)
    if job.jitter_seconds and spec.jitter_seconds == _shown_window_minutes(job.jitter_seconds) * 60:
        fields["jitter_seconds"] = job.jitter_seconds
    max_age = spec.retry.max_age_seconds
    if max_age == _shown_event_age(job.retry.max_age_seconds):
        max_age = job.retry.max_age_seconds
    if (
        isinstance(spec.payload, str)
        and not isinstance(job.payload, str)
        and input_text(job.payload) == spec.payload
    ):
        fields["payload"] = job.payload  # its Input sent back as GetSchedule showed it (SQS, SNS: as text)
    if job.payload is None and spec.scheduler is not None and spec.scheduler.input is None:
        fields["payload"] = None  # no Input shown, none sent back (QA23: a /v1 job's null became {})
    fields["retry"] = job.retry.model_copy(
        update={"max_attempts": spec.retry.max_attempts, "max_age_seconds": max_age}
    )
    if job.catchup == _catchup_of(job.jitter_seconds):  # the window a schedule's window makes
        fields["catchup"] = _catchup_of(fields["jitter_seconds"])
    else:  # the job's own, wide enough for the new window (a slot released inside it is owed)
        window = max(job.catchup.window_seconds, fields["jitter_seconds"])
        fields["catchup"] = job.catchup.model_copy(update={"window_seconds": window})
    kept = {key: value for key, value in job.tags.items() if key != GROUP_TAG}
    fields["tags"] = {**kept, **spec.tags}
    if type(spec.target) is type(job.target):  # its options the API has no member for (QA23)
        options = set(_TARGET_OPTIONS) & set(type(spec.target).model_fields)
        fields["target"] = spec.target.model_copy(
            update={name: getattr(job.target, name) for name in options}
        )
    if spec.dead_letter is not None and job.dead_letter is not None:  # (its role: the API has none)
        fields["dead_letter"] = spec.dead_letter.model_copy(update={"role_arn": job.dead_letter.role_arn})
    if (spec.schedule, spec.timezone) == (job.schedule, job.timezone):
        fields["dst"] = job.dst  # the same expression runs when it ran (QA23: a /v1 job's DST options went)
    if spec.scheduler is not None:
        token = job.scheduler.client_token if job.scheduler is not None else None
        fields["scheduler"] = spec.scheduler.model_copy(update={"client_token": token})
    try:
        return JobSpec(**fields)
    except ValidationError as exc:
        raise invalid(_explain(exc)) from None


def _shown_window_minutes(jitter_seconds: int) -> int:
    """``FlexibleTimeWindow.MaximumWindowInMinutes`` of a job's jitter: whole minutes, at least 1."""
    return max(1, math.ceil(jitter_seconds / 60))


def _shown_event_age(max_age_seconds: int) -> int:
    """``RetryPolicy.MaximumEventAgeInSeconds`` of a job's ``max_age_seconds``: the API's 60-86400."""
    return max(60, min(max_age_seconds, DEFAULT_EVENT_AGE_S))


def _catchup_of(jitter: int) -> CatchupPolicy:
    """A schedule's catch-up policy: a slot released late inside its window is still owed, never
    MISSED for its lateness."""
    return CatchupPolicy(window_seconds=max(DEFAULT_CATCHUP_S, jitter + DEFAULT_CATCHUP_S))


def _expression_kind(values: dict[str, Any]) -> str:
    """``rate``, ``cron``, ``at``, ...: the word before the schedule expression's parenthesis."""
    return _kind(str(values["ScheduleExpression"]))


def _kind(expression: str) -> str:
    return expression.strip().partition("(")[0].strip().lower()


def _fields(
    values: dict[str, Any], group: str, arn: str, target: Any, payload: Any, jitter: int
) -> dict[str, Any]:
    """The JobSpec fields of a schedule input (the models they build validate as they are made)."""
    target_in: dict[str, Any] = values["Target"]
    window: dict[str, Any] = values["FlexibleTimeWindow"]
    minutes = window.get("MaximumWindowInMinutes")
    retry_in: dict[str, Any] = target_in.get("RetryPolicy") or {}
    retries = retry_in.get("MaximumRetryAttempts", DEFAULT_RETRIES)
    dead_letter = (target_in.get("DeadLetterConfig") or {}).get("Arn")
    one_time = _expression_kind(values) == "at"
    start, end = _instant(values, "StartDate"), _instant(values, "EndDate")
    return {
        "name": values["Name"],
        "description": values.get("Description") or "",
        "schedule": values["ScheduleExpression"],
        "timezone": values.get("ScheduleExpressionTimezone") or "UTC",
        # The service ignores StartDate and EndDate for a one-time schedule (CreateSchedule), and
        # GetSchedule returns them as given: kept in the scheduler block only.
        "start_at": None if one_time else start,
        "end_at": None if one_time else end,
        "target": target,
        "payload": payload,
        "retry": RetryPolicy(
            max_attempts=min(retries + 1, MAX_ATTEMPTS),
            max_age_seconds=retry_in.get("MaximumEventAgeInSeconds", DEFAULT_EVENT_AGE_S),
        ),
        "jitter_seconds": jitter,
        "catchup": _catchup_of(jitter),
        "tags": {GROUP_TAG: group},
        "dead_letter": DeadLetterQueue(queue_arn=dead_letter) if dead_letter else None,
        "delete_after_completion": values.get("ActionAfterCompletion") == "DELETE",
        "scheduler": SchedulerIdentity(
            group=group,
            name=values["Name"],
            arn=arn,
            target_arn=target_in["Arn"],
            input=target_in.get("Input"),
            flexible_window_minutes=minutes if window["Mode"] == "FLEXIBLE" else None,
            client_token=values.get("ClientToken"),
            at_start_date=start if one_time else None,
            at_end_date=end if one_time else None,
        ),
    }


def _ended_as_it_was(updated: Job | None, fields: dict[str, Any]) -> bool:
    """Whether an update keeps the EndDate and expression of ``updated``, whose EndDate passed."""
    if updated is None or updated.end_at is None or updated.end_at != fields["end_at"]:
        return False
    start = updated.start_at
    return updated.schedule == fields["schedule"] and (start is None or start < updated.end_at)


def _instant(values: dict[str, Any], member: str) -> datetime | None:
    """``StartDate``/``EndDate`` as the service keeps them: whole seconds (the fraction cut)."""
    value = values.get(member)
    return None if value is None else to_datetime(value, member).replace(microsecond=0)


_SPEC_NAMES = {
    "schedule": "ScheduleExpression",
    "timezone": "ScheduleExpressionTimezone",
    "start_at": "StartDate",
    "end_at": "EndDate",
    "payload": "Target.Input",
    "target": "Target",
    "dead_letter": "Target.DeadLetterConfig.Arn",
    "queue_arn": "Target.DeadLetterConfig.Arn",
    "retry": "Target.RetryPolicy",
}


# Punctual's names in its own messages, as the service names them.
_MESSAGE_NAMES = (
    ("schedule: ", ""),
    ("end_at", "EndDate"),
    ("start_at", "StartDate"),
    ("timezone", "ScheduleExpressionTimezone"),
)


# A target model's fields, as the service names the members they come from.
_TARGET_NAMES = {
    **{name: "Target.Arn" for name in ("queue_arn", "topic_arn", "function_arn", "state_machine_arn")},
    "event_bus_arn": "Target.Arn",
    "cluster_arn": "Target.Arn",
    "role_arn": "Target.RoleArn",
    "message_group_id": "Target.SqsParameters.MessageGroupId",
    "detail_type": "Target.EventBridgeParameters.DetailType",
    "source": "Target.EventBridgeParameters.Source",
    "task_definition_arn": "Target.EcsParameters.TaskDefinitionArn",
    "launch_type": "Target.EcsParameters.LaunchType",
    "subnets": "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.Subnets",
    "security_groups": "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.SecurityGroups",
    "assign_public_ip": "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.AssignPublicIp",
}


# The job fields a refusal of the job's admission names first (InvalidJobError.field), as the
# service names the members they come from (QA29: "payload: ...", "target.source refused: ...").
_FIELD_MEMBERS = {
    "payload": "Target.Input",
    "target": "Target.Arn",
    "target.role_arn": "Target.RoleArn",
    "target.source": "Target.EventBridgeParameters.Source",
    "dead_letter": "Target.DeadLetterConfig.Arn",
    "dead_letter.role_arn": "Target.RoleArn",
}


def service_wording(message: str, field: str | None = None) -> str:
    """A job model's or service's refusal in the service's words: its members' names, and the
    member a schedule's refusal is about (QA: ``end_at`` was named, where the caller sent EndDate).
    ``field``: the job field the refusal names first, named as the member it comes from."""
    if field and field in _FIELD_MEMBERS and message.startswith(field):
        message = _FIELD_MEMBERS[field] + message[len(field) :]
    for ours, theirs in _MESSAGE_NAMES[1:]:
        message = message.replace(ours, theirs)
    if message.startswith("schedule has no"):
        return f"ScheduleExpression: {message}"
    return message


def _explain(exc: ValidationError, names: dict[str, str] = _SPEC_NAMES) -> str:
    first = exc.errors()[0]
    loc = [str(part) for part in first.get("loc", ())]
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    for ours, theirs in _MESSAGE_NAMES:
        message = message.replace(ours, theirs)
    if loc:
        return f"{names.get(loc[0], loc[0])}: {message}"[:1000]
    if "StartDate" in message or "EndDate" in message:
        return message[:1000]
    return f"ScheduleExpression: {message}"[:1000]


def _service_of(arn: str) -> tuple[str, str]:
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn":
        raise invalid(f"Target.Arn {arn[:200]!r} is not an ARN")
    return parts[2], parts[5]


def _target(target_in: dict[str, Any], schedule_arn: str) -> tuple[Any, Any]:
    """The Punctual target and payload of a ``Target`` member."""
    arn: str = target_in["Arn"]
    role: str = target_in["RoleArn"]
    service, resource = _service_of(arn)
    for refused in _REFUSED_PARAMETERS:
        if target_in.get(refused) is not None:
            raise invalid(f"Target.{refused} is not supported by Punctual (targets: {SUPPORTED_TARGETS})")
    for member, owner in _TARGET_PARAMETERS.items():
        if target_in.get(member) is not None and owner != service:
            raise invalid(f"Target.{member} applies to {owner} targets only, not to {arn[:200]}")
    text = target_in.get("Input")
    if text is not None:
        text = text.replace(SCHEDULE_ARN_ATTRIBUTE, schedule_arn)
    elif service != "ecs":
        # The service "delivers a default notification" (Target.Input) without saying what it
        # holds: an empty JSON object (QA: the text null was sent)
        text = NO_INPUT
    try:
        if service == "sqs":
            group_id = (target_in.get("SqsParameters") or {}).get("MessageGroupId")
            return SqsTarget(queue_arn=arn, role_arn=role, message_group_id=group_id), text
        if service == "sns":
            return SnsTarget(topic_arn=arn, role_arn=role), text
        payload = _json_or_text(text, taken=True)
        if service in ("lambda", "states") and text is not None and payload is text:
            # The service: "If you are configuring a templated Lambda, Step Functions, or EventBridge
            # target, the input must be a well-formed JSON" (Target.Input).
            kind = "Lambda" if service == "lambda" else "Step Functions"
            raise invalid(f"Target.Input must be well-formed JSON for a {kind} target")
        if service == "lambda":
            # As the service does: an asynchronous invocation (Event); /v1 offers RequestResponse too.
            return LambdaTarget(function_arn=arn, role_arn=role, invocation_type="Event"), payload
        if service == "states":
            return StepFunctionsTarget(state_machine_arn=arn, role_arn=role), payload
        if service == "events" and resource.startswith("event-bus/"):
            params = target_in.get("EventBridgeParameters") or {}
            extra = {"detail_type": params["DetailType"], "source": params["Source"]} if params else {}
            if payload is not None and not isinstance(payload, dict):
                raise invalid(
                    "Target.Input must be a JSON object for an EventBridge target (the event detail)"
                )
            return EventBridgeTarget(event_bus_arn=arn, role_arn=role, **extra), payload
        if service == "ecs" and resource.startswith("cluster/"):
            return _ecs(arn, role, target_in.get("EcsParameters")), payload
    except ValidationError as exc:
        raise invalid(_explain(exc, _TARGET_NAMES)) from None
    if service == "scheduler":
        raise invalid(
            f"Target.Arn {arn[:200]!r}: universal (aws-sdk) targets are not supported by Punctual "
            f"(targets: {SUPPORTED_TARGETS})"
        )
    raise invalid(
        f"Target.Arn {arn[:200]!r}: {service} targets are not supported by Punctual "
        f"(targets: {SUPPORTED_TARGETS})"
    )


def _json_or_text(text: str | None, taken: bool = False) -> Any:
    """``text`` as JSON, else as it is. ``taken``: a request's ``Target.Input``, in which a key given
    twice in one object is refused (QA30: the payload kept its last value without a word); a
    schedule's stored one is read as it was taken."""
    if text is None:
        return None
    try:
        return json.loads(text, object_pairs_hook=unique_keys if taken else None)
    except KeyGivenTwice as exc:
        raise invalid(f"Target.Input: {exc}") from None
    except (ValueError, RecursionError):
        return text


def _ecs(cluster_arn: str, role: str, params: dict[str, Any] | None) -> EcsTarget:
    if not params:
        raise invalid(
            "Target.EcsParameters is required for an ECS target (TaskDefinitionArn, NetworkConfiguration)"
        )
    for member in _REFUSED_ECS:
        if params.get(member) not in (None, [], False):
            raise invalid(f"Target.EcsParameters.{member} is not supported by Punctual's ECS target")
    if params.get("TaskCount", 1) != 1:
        raise invalid("Target.EcsParameters.TaskCount: Punctual runs one task per slot (TaskCount 1)")
    launch = params.get("LaunchType", "FARGATE")
    if launch == "EXTERNAL":
        raise invalid("Target.EcsParameters.LaunchType EXTERNAL is not supported (FARGATE or EC2)")
    vpc = (params.get("NetworkConfiguration") or {}).get("awsvpcConfiguration")
    if not vpc:
        raise invalid(
            "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration is required (Punctual runs tasks "
            "in awsvpc mode)"
        )
    return EcsTarget(
        cluster_arn=cluster_arn,
        task_definition_arn=params["TaskDefinitionArn"],
        role_arn=role,
        subnets=vpc["Subnets"],
        security_groups=vpc.get("SecurityGroups") or [],
        assign_public_ip=vpc.get("AssignPublicIp") == "ENABLED",
        launch_type=launch,
    )


# --------------------------------------------------------------------------- job → output


# What GetSchedule shows is what the job does: the scheduler block's copies of Target.Arn, Input and
# the window (as given, for GetSchedule to return them so) are shown only while they are still the
# job's (QA21: after a /v1 edit GetSchedule showed the old target, and a read-modify-write
# UpdateSchedule put it back). A /v1 replace refreshes them (:func:`refreshed_block`).


def target_arn_of(job: Job) -> str:
    return target_arn(job.target)  # (the same as the block's Target.Arn while that is the job's)


def _payload_of_input(block: SchedulerIdentity) -> Any:
    """The payload the block's ``Input`` makes for a target at its ``Target.Arn`` (as :func:`_target`)."""
    service = block.target_arn.split(":", 5)[2] if block.target_arn.count(":") >= 5 else ""
    text = block.input
    if text is not None:
        text = text.replace(SCHEDULE_ARN_ATTRIBUTE, block.arn)
    elif service != "ecs":
        text = NO_INPUT
    return text if service in ("sqs", "sns") else _json_or_text(text)


def input_text(payload: Any) -> str | None:
    """A payload as ``Target.Input``: an SQS or SNS target's message body as sent (compact JSON)."""
    if payload is None:
        return None
    return (
        payload
        if isinstance(payload, str)
        else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    )


def _input_of(job: Job) -> str | None:
    block = job.scheduler
    if block is not None and _payload_of_input(block) == job.payload:
        return block.input
    return input_text(job.payload)


def _window_minutes(block: SchedulerIdentity | None, jitter_seconds: int) -> int | None:
    """The block's window when it is still the job's ``jitter_seconds``."""
    minutes = block.flexible_window_minutes if block is not None else None
    return minutes if minutes is not None and minutes * 60 == jitter_seconds else None


def refreshed_block(block: SchedulerIdentity, spec: JobSpec, start_at: datetime | None) -> SchedulerIdentity:
    """``block`` for a job replaced with ``spec`` through ``/v1`` (``start_at``: the replaced job's):
    its copies of ``Target.Arn``, ``Input`` and the window follow the job where ``spec`` changed
    them, and a ``StartDate`` given (one other than the start a rate schedule was given at once)
    is shown (QA21: they contradicted the job, and an UpdateSchedule sending them back undid the edit)."""
    arn = target_arn(spec.target)
    if block.target_arn != arn:  # (first: the payload its Input makes depends on the target)
        block = block.model_copy(update={"target_arn": arn})
    updates: dict[str, Any] = {}
    if _payload_of_input(block) != spec.payload:
        updates["input"] = input_text(spec.payload)
    if block.flexible_window_minutes is not None and _window_minutes(block, spec.jitter_seconds) is None:
        updates["flexible_window_minutes"] = None
    if block.started_at_once and spec.start_at != start_at:
        updates["started_at_once"] = False
    return block.model_copy(update=updates) if updates else block


def target_of(job: Job) -> dict[str, Any]:
    target = job.target
    out: dict[str, Any] = {"Arn": target_arn_of(job)}
    role = getattr(target, "role_arn", None)
    if role:
        out["RoleArn"] = role
    text = _input_of(job)
    if text is not None:
        out["Input"] = text
    out["RetryPolicy"] = {
        "MaximumRetryAttempts": min(job.retry.max_attempts - 1, DEFAULT_RETRIES),
        "MaximumEventAgeInSeconds": _shown_event_age(job.retry.max_age_seconds),
    }
    if job.dead_letter is not None:
        out["DeadLetterConfig"] = {"Arn": job.dead_letter.queue_arn}
    if isinstance(target, SqsTarget) and target.message_group_id:
        out["SqsParameters"] = {"MessageGroupId": target.message_group_id}
    if isinstance(target, EventBridgeTarget):
        out["EventBridgeParameters"] = {"DetailType": target.detail_type, "Source": target.source}
    if isinstance(target, EcsTarget):
        vpc: dict[str, Any] = {
            "Subnets": list(target.subnets),
            "AssignPublicIp": "ENABLED" if target.assign_public_ip else "DISABLED",
        }
        if target.security_groups:
            vpc["SecurityGroups"] = list(target.security_groups)
        out["EcsParameters"] = {
            "TaskDefinitionArn": target.task_definition_arn,
            "TaskCount": 1,
            "LaunchType": target.launch_type,
            "NetworkConfiguration": {"awsvpcConfiguration": vpc},
        }
    return out


def state_of(job: Job) -> str:
    return "DISABLED" if job.state is JobState.PAUSED else "ENABLED"


def schedule_out(job: Job, arn: str) -> dict[str, Any]:
    """GetSchedule's output for ``job``."""
    window: dict[str, Any] = {"Mode": "OFF"}
    if job.jitter_seconds > 0:
        minutes = _window_minutes(job.scheduler, job.jitter_seconds)
        window = {
            "Mode": "FLEXIBLE",
            "MaximumWindowInMinutes": minutes or _shown_window_minutes(job.jitter_seconds),
        }
    out: dict[str, Any] = {
        "Arn": arn,
        "GroupName": group_of(job),
        "Name": name_of(job),
        "ScheduleExpression": job.schedule,
        "ScheduleExpressionTimezone": job.timezone,
        "State": state_of(job),
        "CreationDate": epoch(job.created_at),
        "LastModificationDate": epoch(job.updated_at),
        "Target": target_of(job),
        "FlexibleTimeWindow": window,
        "ActionAfterCompletion": "DELETE" if job.delete_after_completion else "NONE",
    }
    if job.description:  # the service leaves the member out when a schedule has none
        out["Description"] = job.description
    start, end = job.start_at, job.end_at
    if job.scheduler is not None and _kind(job.schedule) == "at":
        # An at() schedule's StartDate and EndDate, ignored, are returned as given.
        start = start or job.scheduler.at_start_date
        end = end or job.scheduler.at_end_date
    if start is not None and not (job.scheduler and job.scheduler.started_at_once):
        out["StartDate"] = epoch(start.replace(microsecond=0))
    if end is not None:
        out["EndDate"] = epoch(end.replace(microsecond=0))
    return out


def summary_out(job: Job, arn: str) -> dict[str, Any]:
    """ListSchedules' summary of ``job``."""
    return {
        "Arn": arn,
        "Name": name_of(job),
        "GroupName": group_of(job),
        "State": state_of(job),
        "CreationDate": epoch(job.created_at),
        "LastModificationDate": epoch(job.updated_at),
        "Target": {"Arn": target_arn_of(job)},
    }


def instant_ms(instant: datetime) -> datetime:
    """``instant`` cut to milliseconds (what the DynamoDB store keeps of a group's instants)."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)
