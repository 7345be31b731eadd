"""EventBridge Scheduler's SDK against Punctual: a boto3 ``scheduler`` client whose requests are
signed for API Gateway.

Punctual serves the service's API (``/schedules``, ``/schedule-groups``, ``/tags``) beside
``/v1``. Behind API Gateway with IAM authorisation a request must be signed for the service
``execute-api``, while the SDK signs for ``scheduler``; :func:`client` returns the SDK's own
client with one ``before-sign`` hook that changes the signing name (nothing else: shapes,
paginators and errors are botocore's)::

    from punctual_cli import scheduler
    client = scheduler.client("https://abc123.execute-api.eu-west-1.amazonaws.com/prod")
    client.create_schedule(Name="nightly", ScheduleExpression="cron(0 2 * * ? *)", ...)

:func:`sign_for_api_gateway` adds the hook to a client made elsewhere. Local mode
(``http://127.0.0.1:8080``) checks no signature: a plain ``boto3.client("scheduler",
endpoint_url=...)`` works, its access key id naming the tenant.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

EXECUTE_API = "execute-api"
_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?\Z")


def _sign_as_execute_api(request: Any, **_: Any) -> None:
    request.context.setdefault("signing", {})["signing_name"] = EXECUTE_API


def sign_for_api_gateway(scheduler_client: Any) -> Any:
    """Make ``scheduler_client`` (a botocore ``scheduler`` client) sign for ``execute-api``."""
    scheduler_client.meta.events.register("before-sign.scheduler", _sign_as_execute_api)
    return scheduler_client


def client(endpoint_url: str, *, session: Any = None, region_name: str | None = None, **kwargs: Any) -> Any:
    """A boto3 ``scheduler`` client for the Punctual API at ``endpoint_url`` (stage included).

    Parameters
    ----------
    endpoint_url
        The API's base URL: ``https://<id>.execute-api.<region>.amazonaws.com/<stage>``, a custom
        domain, or local mode's ``http://127.0.0.1:8080``.
    session
        A ``boto3.session.Session`` (default: a new one, with the standard credential chain).
    region_name
        The API's region (default: from an execute-api host, else the session's).
    kwargs
        Passed to ``session.client`` (``config``, ``aws_access_key_id``, ...).
    """
    if session is None:
        import boto3

        session = boto3.session.Session()
    match = _EXECUTE_API_HOST.match(urlsplit(endpoint_url).hostname or "")
    region = region_name or (match["region"] if match else None) or session.region_name or "us-east-1"
    made = session.client("scheduler", endpoint_url=endpoint_url, region_name=region, **kwargs)
    return sign_for_api_gateway(made)
