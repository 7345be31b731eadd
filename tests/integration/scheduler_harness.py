"""An unmodified boto3 ``scheduler`` client talking to the API handler in-process.

The client's HTTP layer is replaced by a ``before-send`` hook (registered first, so it answers
before moto's own handler): the signed request becomes the API Gateway REST proxy event
``api_harness.rest_event`` builds (IAM caller Alice unless ``user`` says otherwise), the API
handler answers it, and botocore parses the reply exactly as it parses the service's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
from api_harness import ALICE, REGION, ApiClient, LambdaContext, rest_event
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

ENDPOINT = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def scheduler_client(api: ApiClient, user: str = ALICE) -> Any:
    """A boto3 ``scheduler`` client whose requests the API handler answers (as ``user``)."""
    # No SDK retries: a throttled or failed call is seen as it is, without backoff sleeps.
    client = boto3.client(
        "scheduler",
        region_name=REGION,
        endpoint_url=ENDPOINT,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        split = urlsplit(request.url)
        path = split.path.removeprefix("/prod")
        body = request.body
        text = body.decode() if isinstance(body, bytes) else body
        headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in request.headers.items()}
        event = rest_event(
            request.method, path + (f"?{split.query}" if split.query else ""), text or None, headers, user
        )
        reply = api.handler.handler(event, LambdaContext())
        out_headers = {**(reply.get("headers") or {})}
        data = str(reply.get("body") or "").encode()
        return AWSResponse(request.url, reply["statusCode"], out_headers, _Raw(data))

    client.meta.events.register_first("before-send.scheduler", send)
    return client
