"""The provider of ``Custom::PunctualJob``: CloudFormation's create, update and delete of a declared
job, mapped onto Punctual's job API and signed (SigV4, ``execute-api``) as this function's role.

Tenancy
    The API's tenant is the caller's IAM identity (the role's unique id). This function runs in
    the stack that declares the jobs, as a role of that stack: every job a stack declares belongs
    to the stack's own provider role, never to a name the template writes. Another stack (its own
    provider role) neither sees nor changes them.

Idempotency
    * Create puts the job at an id derived from the stack, the logical id and CloudFormation's
      request id, with ``If-None-Match: *``: a repeated delivery or a retry after a crash finds the
      job it made (412) and answers it; one request, one job.
    * Update replaces the job's spec in place (its history stays). A change of ``ApiUrl`` (another
      deployment) is a replacement: the job is created anew (new physical id) and CloudFormation
      deletes the old one once the update succeeded; on a rollback it deletes the new one instead.
    * Delete removes the job; a job already gone (or a create that failed) is a success, so a
      rollback or a repeated delete never fails the stack.

Only the standard library and botocore (which the Lambda runtime has): no layer, no packaging.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

logger = logging.getLogger()
logger.setLevel(logging.INFO)

RESOURCE_TYPE = "Custom::PunctualJob"
_OURS = re.compile(r"^cfn-[0-9a-f]{40}\Z")
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?\Z")
HTTP_TIMEOUT_S = 20


class ProviderError(Exception):
    """A request the API refused: the reason CloudFormation shows."""


class Api(Protocol):
    """One deployment's API as this provider calls it: status and JSON body of a request."""

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]: ...


def job_id_for(event: dict[str, Any]) -> str:
    """The id of the job a Create (or a replacing Update) makes: the same for every delivery of
    one CloudFormation request, another for every other request."""
    key = "|".join((event["StackId"], event["LogicalResourceId"], event["RequestId"]))
    return "cfn-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def _problem(status: int, body: Any, doing: str) -> ProviderError:
    """The API's problem details as one line: its detail and each field it names."""
    if isinstance(body, dict):
        fields = [
            f"{e.get('field')}: {e.get('message')}" for e in body.get("errors") or [] if isinstance(e, dict)
        ]
        detail = "; ".join([str(body.get("detail") or body.get("title")), *fields])
    else:
        detail = str(body)
    return ProviderError(f"{doing}: the job API answered {status}: {detail}"[:1000])


def _outputs(api: Api, job_id: str) -> dict[str, Any]:
    """The attributes ``Fn::GetAtt`` reads: ``JobId`` and ``Arn`` (the job's schedule ARN)."""
    status, body = api.request("GET", f"/schedules/{quote(job_id, safe='')}")
    if status != 200:
        raise _problem(status, body, f"reading job {job_id}")
    return {"PhysicalResourceId": job_id, "Data": {"JobId": job_id, "Arn": body["Arn"]}}


def _create(api: Api, job_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    status, body = api.request("PUT", f"/v1/jobs/{job_id}", spec, {"If-None-Match": "*"})
    if status not in (201, 412):  # 412: this request made it already (a repeated delivery)
        raise _problem(status, body, "creating the job")
    return _outputs(api, job_id)


def on_event(event: dict[str, Any], api_for: Callable[[str], Api]) -> dict[str, Any]:
    """What CloudFormation is told for ``event``: ``PhysicalResourceId`` and ``Data``.

    Raises
    ------
    ProviderError
        The API refused the job (the reason names what it refused).
    """
    kind = event["RequestType"]
    props = event["ResourceProperties"]
    physical = str(event.get("PhysicalResourceId") or "")
    api = api_for(props["ApiUrl"])
    if kind == "Delete":
        if _OURS.match(physical):
            status, body = api.request("DELETE", f"/v1/jobs/{physical}")
            if status not in (204, 404):
                raise _problem(status, body, f"deleting job {physical}")
        return {"PhysicalResourceId": physical, "Data": {}}
    spec = json.loads(props["Spec"])
    if kind == "Create":
        return _create(api, job_id_for(event), spec)
    if kind != "Update":
        raise ProviderError(f"unknown RequestType {kind!r}")
    old = event.get("OldResourceProperties") or {}
    if old.get("ApiUrl") != props["ApiUrl"] or not _OURS.match(physical):
        return _create(api, job_id_for(event), spec)  # a replacement: the old one is deleted later
    status, body = api.request("PUT", f"/v1/jobs/{physical}", spec)
    if status == 404:  # deleted outside CloudFormation: declared again, as a replacement
        return _create(api, job_id_for(event), spec)
    if status != 200:
        raise _problem(status, body, f"updating job {physical}")
    return _outputs(api, physical)


class SignedApi:
    """The API at ``base_url``, every request signed with this function's credentials."""

    def __init__(self, base_url: str) -> None:
        import botocore.session

        self.base_url = base_url.rstrip("/")
        host = urlsplit(self.base_url).hostname or ""
        found = _REGION_IN_HOST.search(host)
        self.region = found.group(1) if found else os.environ.get("AWS_REGION", "us-east-1")
        self.credentials = botocore.session.get_session().get_credentials()

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        data = None if body is None else json.dumps(body).encode()
        all_headers = {**(headers or {}), **({"Content-Type": "application/json"} if data else {})}
        signed = AWSRequest(method=method, url=self.base_url + path, data=data, headers=all_headers)
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(signed)
        request = urllib.request.Request(
            signed.url, data=data, headers=dict(signed.headers.items()), method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
                return reply.status, _json(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, _json(error.read())


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")[:500]


def respond(event: dict[str, Any], status: str, outcome: dict[str, Any], reason: str = "") -> None:
    """Tell CloudFormation (PUT to the pre-signed ``ResponseURL``)."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3000] or "See the provider function's log",
            "PhysicalResourceId": outcome.get("PhysicalResourceId")
            or event.get("PhysicalResourceId")
            or f"failed-{event['RequestId']}",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": outcome.get("Data") or {},
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S):
        pass


def handler(event: dict[str, Any], context: Any) -> None:
    """Lambda entry point: do the request, then answer CloudFormation whatever happened."""
    logger.info(
        "%s %s %s", event.get("RequestType"), event.get("LogicalResourceId"), event.get("PhysicalResourceId")
    )
    try:
        outcome = on_event(event, SignedApi)
    except Exception as exc:  # every failure is an answer: CloudFormation never waits an hour
        logger.exception("request failed")
        respond(event, "FAILED", {}, f"{type(exc).__name__}: {exc}")
        return
    respond(event, "SUCCESS", outcome)
