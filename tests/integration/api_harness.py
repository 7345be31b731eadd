"""The API handler in-process under moto, called with API Gateway REST (v1) proxy events.

``rest_event`` builds the event the way API Gateway sends it for an IAM-authorised
``ANY /{proxy+}`` method: both header maps, both query maps, the proxy path parameter,
and ``requestContext.identity`` with the SigV4 caller (``userArn``, ``caller``,
``accountId``). ``ApiClient.call`` asserts that no reply is ever a 5xx.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from openapi_contract import undeclared

from punctual.api import wiring
from punctual.store.dynamo import DynamoStore, table_definition

ROOT = Path(__file__).resolve().parents[2]
HANDLER = ROOT / "functions" / "api" / "handler.py"
TABLE = "punctual-api-test"
REGION = "us-east-1"
ACCOUNT = "123456789012"
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"
BOB = f"arn:aws:iam::{ACCOUNT}:user/bob"


def principal_id(arn: str) -> str:
    """What API Gateway puts in ``identity.user``/``caller`` for a principal, as IAM would.

    A user: its unique id (``AIDA`` + 17 characters); an assumed role: the role's id and the
    session (``AROA...:session``); the root: the account id. The ids are derived from the
    name here; IAM makes a new one for each created principal.
    """
    named = arn.split(":assumed-role/")[-1].split("/")[0] if ":assumed-role/" in arn else arn
    digest = hashlib.sha256(named.encode()).hexdigest()
    suffix = "".join(ch for ch in digest.upper() if ch.isalnum())[:17]
    if ":assumed-role/" in arn:
        return f"AROA{suffix}:{arn.rsplit('/', 1)[-1]}"
    if arn.endswith(":root"):
        return ACCOUNT
    return f"AIDA{suffix}"


ALICE_ID = principal_id(ALICE)  # the tenant Alice's requests act for
BOB_ID = principal_id(BOB)


def load_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("punctual_api_handler", HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class LambdaContext:
    function_name: str = "punctual-api"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:punctual-api"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


def rest_event(
    method: str,
    path_and_query: str,
    body: str | None = None,
    headers: Mapping[str, str] | None = None,
    user_arn: str | None = ALICE,
    caller: str | None = None,
) -> dict[str, Any]:
    """An API Gateway REST proxy event (``ANY /{proxy+}``, IAM authorisation, stage ``prod``)."""
    split = urlsplit(path_and_query)
    query = parse_qs(split.query, keep_blank_values=True)
    sent = {
        "Accept": "application/json",
        "Host": "abc123defg.execute-api.us-east-1.amazonaws.com",
        "User-Agent": "punctual-tests",
        "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        "X-Forwarded-For": "198.51.100.7",
        "X-Forwarded-Port": "443",
        "X-Forwarded-Proto": "https",
        **({"Content-Type": "application/json"} if body is not None else {}),
        **(headers or {}),
    }
    request_id = str(uuid.uuid4())
    return {
        "resource": "/{proxy+}",
        "path": split.path,
        "httpMethod": method,
        "headers": sent,
        "multiValueHeaders": {name: [value] for name, value in sent.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": split.path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abc123defg",
            "domainName": "abc123defg.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123defg",
            "extendedRequestId": request_id,
            "httpMethod": method,
            "identity": {
                "accessKey": "ASIAEXAMPLEKEY",
                "accountId": ACCOUNT if user_arn or caller else None,
                "caller": caller or (principal_id(user_arn) if user_arn else None),
                "cognitoAuthenticationProvider": None,
                "cognitoAuthenticationType": None,
                "cognitoIdentityId": None,
                "cognitoIdentityPoolId": None,
                "principalOrgId": None,
                "sourceIp": "198.51.100.7",
                "user": caller or (principal_id(user_arn) if user_arn else None),
                "userAgent": "punctual-tests",
                "userArn": user_arn,
            },
            "path": f"/prod{split.path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()),
            "requestTimeEpoch": int(time.time() * 1000),
            "resourceId": "abcdef",
            "resourcePath": "/{proxy+}",
            "stage": "prod",
        },
        "body": body,
        "isBase64Encoded": False,
    }


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def problem(self) -> dict[str, Any]:
        assert self.headers.get("Content-Type") == "application/problem+json", self.headers
        assert isinstance(self.body, dict)
        assert {"type", "title", "status", "detail"} <= set(self.body), self.body
        assert self.body["status"] == self.status
        return self.body

    def fields(self) -> list[str]:
        return [error["field"] for error in self.problem.get("errors", [])]


@dataclass
class ApiClient:
    handler: ModuleType
    store: DynamoStore
    sqs: Any
    queue_url: str
    dynamodb: Any

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        user: str | None = ALICE,
        raw: str | None = None,
        caller: str | None = None,
    ) -> Reply:
        text = raw if raw is not None else (json.dumps(body) if body is not None else None)
        event = rest_event(method, path, text, headers, user_arn=user, caller=caller)
        out = self.handler.handler(event, LambdaContext())
        assert out["statusCode"] < 500, out
        merged = {k: v[-1] for k, v in (out.get("multiValueHeaders") or {}).items()}
        merged.update(out.get("headers") or {})
        payload = out.get("body")
        parsed = json.loads(payload) if payload else None
        missing = undeclared(method, path, out["statusCode"], merged)
        assert not missing, f"openapi.json: {missing}"
        return Reply(out["statusCode"], merged, parsed)

    def create(
        self, spec: Mapping[str, Any] | None = None, user: str = ALICE, **extra: Any
    ) -> dict[str, Any]:
        reply = self.call("POST", "/v1/jobs", {**(spec or job_spec()), **extra}, user=user)
        assert reply.status == 201, reply
        body: dict[str, Any] = reply.body
        return body

    def queued(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return [json.loads(m["Body"]) for m in got.get("Messages", [])]


def job_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "nightly report",
        "schedule": "cron(0 2 * * ? *)",
        "timezone": "Europe/Berlin",
        "target": {"type": "sqs", "queue_arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"},
        "payload": {"report": "daily"},
        "tags": {"team": "data"},
    }
    spec.update(overrides)
    return spec


def http_spec(**overrides: Any) -> dict[str, Any]:
    return job_spec(**{"target": {"type": "http", "url": "https://hooks.example.com/run"}, **overrides})


@pytest.fixture
def api(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiClient]:
    """The API handler wired from PUNCTUAL_* variables to moto DynamoDB and SQS."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**table_definition(TABLE))
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(
        QueueName="punctual-short.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"},
    )["QueueUrl"]
    for name, value in {
        "PUNCTUAL_TABLE_NAME": TABLE,
        "PUNCTUAL_SHORT_QUEUE_URLS": queue_url,
        "PUNCTUAL_SHARD_COUNT": "4",
        "PUNCTUAL_NEAR_SHARD_COUNT": "2",
        "PUNCTUAL_MAX_JOBS_PER_TENANT": "1000",
        "PUNCTUAL_SECRET_KEY": "local-test-secret-key-0123456789",
        "PUNCTUAL_TOKEN_KEY": "paging-token-test-key",
        "PUNCTUAL_API_BATCH_CONCURRENCY": "1",  # moto's transactions are not thread-safe
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PUNCTUAL_LOCAL_MODE", raising=False)
    wiring.use_services(None)  # built on the first request, inside the mock, from the variables
    try:
        yield ApiClient(load_handler(), DynamoStore(dynamodb, TABLE), sqs, queue_url, dynamodb)
    finally:
        wiring.use_services(None)
