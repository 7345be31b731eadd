"""API: a REST API in front of the ``api`` function, every method authorised with IAM (SigV4).

The API and its routing live in the function (Powertools' resolver): the gateway proxies ``/``
and ``/{proxy+}`` to it, so a new route needs no infrastructure change. The gateway adds what a
gateway is for: SigV4 authorisation on every method, a request validator, JSON access logs,
execution logs of errors, X-Ray tracing, and stage throttling from context. Optionally a WAF web
ACL (context ``apiWebAclArn``) is associated with the stage.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.functions import LambdaRuntime, PunctualFunction, retention
from punctual_cdk.components.queues import SEND_ACTIONS, Queues
from punctual_cdk.components.storage import Storage
from punctual_cdk.config import PunctualConfig
from punctual_cdk.nag import acknowledge


class Api(Construct):
    """The REST API, its stage, and the api function behind it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        runtime: LambdaRuntime,
        storage: Storage,
        queues: Queues,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler: PunctualFunction = runtime.function(
            self,
            "Handler",
            name="api",
            description="Punctual API: jobs, executions and history",
            timeout_s=c.API_TIMEOUT_S,
            memory_mb=c.API_MEMORY_MB,
            environment=environment,
            # bounded: API traffic cannot take the account's concurrency from the workers (0: none)
            reserved_concurrency=config.api_reserved_concurrency or None,
        )
        storage.grant_items(self.handler.role, c.TABLE_ACTIONS_BY_COMPONENT["api"])
        storage.grant_dispatch_key(self.handler.role)  # "run now" signs the slot it sends
        Queues.grant(self.handler.role, queues.work_queues, SEND_ACTIONS)  # "run now" sends a slot
        # Webhook secrets are encrypted when a job is registered; the API never decrypts them.
        self.handler.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Encrypt"],
                resources=[storage.secrets_key.key_arn],
                # Only under the two purposes it encrypts for: webhook secrets, idempotent replies.
                conditions={
                    "StringEquals": {
                        "kms:EncryptionContext:purpose": [
                            c.WEBHOOK_SECRET_PURPOSE,
                            c.IDEMPOTENT_REPLY_PURPOSE,
                        ]
                    }
                },
            )
        )
        # Envelope encryption (punctual.security.tenant_keys): the first API process to seal a tenant's
        # secret in a key epoch makes the tenant's data key; the others unwrap the stored one.
        self.handler.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=[storage.secrets_key.key_arn],
                conditions={
                    "StringEquals": {"kms:EncryptionContext:purpose": c.TENANT_KEY_PURPOSE},
                    "ForAllValues:StringEquals": {
                        "kms:EncryptionContextKeys": list(c.TENANT_KEY_CONTEXT_KEYS)
                    },
                },
            )
        )
        # ...except its own stored idempotent replies (a retried create returns the secret it
        # showed the first time): Decrypt only under that purpose's encryption context, which
        # a job's webhook secret is never encrypted with.
        self.handler.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[storage.secrets_key.key_arn],
                conditions={"StringEquals": {"kms:EncryptionContext:purpose": c.IDEMPOTENT_REPLY_PURPOSE}},
            )
        )

        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=retention(config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.rest_api = apigateway.RestApi(
            self,
            "RestApi",
            description="Punctual scheduler API (IAM-authorised)",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            cloud_watch_role=True,  # execution logging needs the account's API Gateway logging role
            cloud_watch_role_removal_policy=cdk.RemovalPolicy.RETAIN,
            deploy_options=apigateway.StageOptions(
                stage_name=c.API_STAGE_NAME,
                access_log_destination=apigateway.LogGroupLogDestination(self.access_logs),
                access_log_format=apigateway.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # full request logs would contain job payloads
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=config.api_throttle_rate_per_s,
                throttling_burst_limit=config.api_throttle_burst,
            ),
        )
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        integration = apigateway.LambdaIntegration(self.handler.function, proxy=True)
        for resource in (self.rest_api.root, self.rest_api.root.add_resource("{proxy+}")):
            resource.add_method(
                "ANY",
                integration,
                authorization_type=apigateway.AuthorizationType.IAM,
                request_validator=validator,
            )

        # A request AWS WAF blocks is answered with a message of its own: API Gateway's default, 403
        # {"message": "Forbidden"}, is also its answer for an API id it does not have, which the job
        # provider takes as a deleted scheduler (QA28: a blocked delete left its job firing).
        self.rest_api.add_gateway_response(
            "WafFiltered",
            type=apigateway.ResponseType.WAF_FILTERED,
            status_code="403",
            templates={"application/json": '{"message": "Forbidden by the API\'s web ACL (AWS WAF)"}'},
        )
        if config.api_web_acl_arn:
            wafv2.CfnWebACLAssociation(
                self,
                "WebAcl",
                resource_arn=self.rest_api.deployment_stage.stage_arn,
                web_acl_arn=config.api_web_acl_arn,
            )
        else:
            acknowledge(
                self.rest_api,
                "APIG3",
                "No WAF web ACL by default: every method requires SigV4 (IAM) authorisation, so "
                "anonymous traffic is rejected before it reaches the function, and the stage is "
                "throttled. Set context apiWebAclArn to associate a web ACL.",
            )
        acknowledge(
            self.rest_api,
            "COG4",
            "The API is authorised with IAM (SigV4) on every method, as the design requires: "
            "callers are AWS principals, not Cognito users.",
        )
        acknowledge(
            self.rest_api,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "The account-level role API Gateway uses to write execution logs; AWS maintains this "
            "policy for exactly that purpose and it grants nothing else.",
        )

    @property
    def url(self) -> str:
        return self.rest_api.url
