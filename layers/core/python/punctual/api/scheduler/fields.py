"""What Punctual does with every input member of the service: the table the conformance suite
checks against botocore's model (every member of every input shape is listed here) and the
README's migration section repeats.

``supported``: honoured; ``accepted``: taken and answered back, with no further effect;
``refused``: a request that sets it gets a ValidationException naming it.
"""

from __future__ import annotations

SUPPORTED = "supported"
ACCEPTED = "accepted"
REFUSED = "refused"

_SCHEDULE_INPUT: dict[str, tuple[str, str]] = {
    "Name": (SUPPORTED, "unique per group (the job id is a digest of group and name)"),
    "GroupName": (SUPPORTED, "schedule groups per tenant; `default` always exists"),
    "ScheduleExpression": (
        SUPPORTED,
        "at(), rate(), 6-field cron(); Punctual's own forms too (seconds); whitespace around it refused",
    ),
    "StartDate": (SUPPORTED, "start_at (at(): ignored, returned as given)"),
    "EndDate": (SUPPORTED, "end_at (at(): ignored, returned as given)"),
    "Description": (SUPPORTED, "description"),
    "ScheduleExpressionTimezone": (SUPPORTED, "timezone (IANA)"),
    "State": (SUPPORTED, "DISABLED = paused (created paused in one write)"),
    "KmsKeyArn": (REFUSED, "the table is encrypted with the deployment's own key"),
    "Target": (SUPPORTED, "the job's target"),
    "Target.Arn": (
        SUPPORTED,
        "Lambda, SQS, SNS, EventBridge bus, Step Functions, ECS cluster; others refused",
    ),
    "Target.RoleArn": (SUPPORTED, "target.role_arn: the role the workers assume (external id: tenant)"),
    "Target.DeadLetterConfig": (SUPPORTED, "dead_letter"),
    "Target.DeadLetterConfig.Arn": (
        SUPPORTED,
        "SQS queue; the event and its attributes after the last attempt",
    ),
    "Target.RetryPolicy": (SUPPORTED, "retry"),
    "Target.RetryPolicy.MaximumEventAgeInSeconds": (SUPPORTED, "retry.max_age_seconds"),
    "Target.RetryPolicy.MaximumRetryAttempts": (SUPPORTED, "retry.max_attempts - 1"),
    "Target.Input": (SUPPORTED, "payload; context attributes substituted"),
    "Target.EcsParameters": (SUPPORTED, "ECS target"),
    "Target.EcsParameters.TaskDefinitionArn": (SUPPORTED, "task_definition_arn"),
    "Target.EcsParameters.TaskCount": (SUPPORTED, "1 only (one task per slot); more is refused"),
    "Target.EcsParameters.LaunchType": (SUPPORTED, "FARGATE or EC2; EXTERNAL refused"),
    "Target.EcsParameters.NetworkConfiguration": (SUPPORTED, "required: awsvpc"),
    "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration": (SUPPORTED, "required"),
    "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.Subnets": (SUPPORTED, "subnets"),
    "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.SecurityGroups": (
        SUPPORTED,
        "security_groups",
    ),
    "Target.EcsParameters.NetworkConfiguration.awsvpcConfiguration.AssignPublicIp": (
        SUPPORTED,
        "assign_public_ip",
    ),
    "Target.EcsParameters.PlatformVersion": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.Group": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.CapacityProviderStrategy": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.CapacityProviderStrategy.capacityProvider": (REFUSED, "with its list"),
    "Target.EcsParameters.CapacityProviderStrategy.weight": (REFUSED, "with its list"),
    "Target.EcsParameters.CapacityProviderStrategy.base": (REFUSED, "with its list"),
    "Target.EcsParameters.EnableECSManagedTags": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.EnableExecuteCommand": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.PlacementConstraints": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.PlacementConstraints.type": (REFUSED, "with its list"),
    "Target.EcsParameters.PlacementConstraints.expression": (REFUSED, "with its list"),
    "Target.EcsParameters.PlacementStrategy": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.PlacementStrategy.type": (REFUSED, "with its list"),
    "Target.EcsParameters.PlacementStrategy.field": (REFUSED, "with its list"),
    "Target.EcsParameters.PropagateTags": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.ReferenceId": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EcsParameters.Tags": (REFUSED, "not an option of Punctual's ECS target"),
    "Target.EventBridgeParameters": (SUPPORTED, "EventBridge target"),
    "Target.EventBridgeParameters.DetailType": (SUPPORTED, "detail_type"),
    "Target.EventBridgeParameters.Source": (SUPPORTED, "source"),
    "Target.EventBridgePutEventsV2Parameters": (REFUSED, "no such target in Punctual"),
    "Target.EventBridgePutEventsV2Parameters.DetailType": (REFUSED, "with its structure"),
    "Target.EventBridgePutEventsV2Parameters.Source": (REFUSED, "with its structure"),
    "Target.EventBridgePutRawEventsParameters": (REFUSED, "no such target in Punctual"),
    "Target.EventBridgePutRawEventsParameters.Metadata": (REFUSED, "with its structure"),
    "Target.KinesisParameters": (REFUSED, "no Kinesis target in Punctual"),
    "Target.KinesisParameters.PartitionKey": (REFUSED, "with its structure"),
    "Target.SageMakerPipelineParameters": (REFUSED, "no SageMaker target in Punctual"),
    "Target.SageMakerPipelineParameters.PipelineParameterList": (REFUSED, "with its structure"),
    "Target.SageMakerPipelineParameters.PipelineParameterList.Name": (REFUSED, "with its structure"),
    "Target.SageMakerPipelineParameters.PipelineParameterList.Value": (REFUSED, "with its structure"),
    "Target.SqsParameters": (SUPPORTED, "SQS target"),
    "Target.SqsParameters.MessageGroupId": (SUPPORTED, "message_group_id (FIFO)"),
    "FlexibleTimeWindow": (SUPPORTED, "OFF, or FLEXIBLE"),
    "FlexibleTimeWindow.Mode": (SUPPORTED, "OFF / FLEXIBLE"),
    "FlexibleTimeWindow.MaximumWindowInMinutes": (SUPPORTED, "jitter_seconds = minutes x 60"),
    "ClientToken": (
        SUPPORTED,
        "CreateSchedule: a retry with the same token answers the same ARN; else accepted",
    ),
    "ActionAfterCompletion": (SUPPORTED, "DELETE: delete_after_completion"),
}

INPUT_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "CreateSchedule": _SCHEDULE_INPUT,
    "UpdateSchedule": _SCHEDULE_INPUT,
    "GetSchedule": {"Name": (SUPPORTED, ""), "GroupName": (SUPPORTED, "")},
    "DeleteSchedule": {
        "Name": (SUPPORTED, ""),
        "GroupName": (SUPPORTED, ""),
        "ClientToken": (
            ACCEPTED,
            "deleting is idempotent in effect; a repeat answers ResourceNotFoundException",
        ),
    },
    "ListSchedules": {
        "GroupName": (SUPPORTED, ""),
        "NamePrefix": (SUPPORTED, ""),
        "State": (SUPPORTED, ""),
        "NextToken": (SUPPORTED, "opaque, signed, bound to the filters"),
        "MaxResults": (SUPPORTED, "1-100"),
    },
    "CreateScheduleGroup": {
        "Name": (SUPPORTED, ""),
        "Tags": (SUPPORTED, ""),
        "Tags.Key": (SUPPORTED, "the reserved prefix aws: (any letter case) is refused"),
        "Tags.Value": (SUPPORTED, ""),
        "ClientToken": (SUPPORTED, "a retry with the same token answers the same ARN"),
    },
    "GetScheduleGroup": {"Name": (SUPPORTED, "")},
    "DeleteScheduleGroup": {
        "Name": (SUPPORTED, "deletes its schedules, then the group"),
        "ClientToken": (ACCEPTED, ""),
    },
    "ListScheduleGroups": {
        "NamePrefix": (SUPPORTED, ""),
        "NextToken": (SUPPORTED, ""),
        "MaxResults": (SUPPORTED, ""),
    },
    "TagResource": {
        "ResourceArn": (SUPPORTED, "schedule groups (not `default`)"),
        "Tags": (SUPPORTED, ""),
        "Tags.Key": (SUPPORTED, "the reserved prefix aws: (any letter case) is refused"),
        "Tags.Value": (SUPPORTED, ""),
    },
    "UntagResource": {"ResourceArn": (SUPPORTED, ""), "TagKeys": (SUPPORTED, "")},
    "ListTagsForResource": {"ResourceArn": (SUPPORTED, "")},
}
